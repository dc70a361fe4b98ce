-- Schema version 2: the route's entry is the live record of its session's counters; triggers copy
-- them (and updated_at) into the `sessions` row in the same statement, so a per-message
-- update_session is ONE write (the route upsert) and `sessions` is never stale.
CREATE TRIGGER IF NOT EXISTS routes_sync_ai AFTER INSERT ON routes BEGIN
    UPDATE sessions SET
        input_tokens = coalesce(json_extract(new.entry, '$.input_tokens'), input_tokens),
        output_tokens = coalesce(json_extract(new.entry, '$.output_tokens'), output_tokens),
        cache_read_tokens = coalesce(json_extract(new.entry, '$.cache_read_tokens'), cache_read_tokens),
        cache_write_tokens = coalesce(json_extract(new.entry, '$.cache_write_tokens'), cache_write_tokens),
        total_tokens = coalesce(json_extract(new.entry, '$.total_tokens'), total_tokens),
        estimated_cost_usd = coalesce(json_extract(new.entry, '$.estimated_cost_usd'), estimated_cost_usd),
        cost_status = coalesce(json_extract(new.entry, '$.cost_status'), cost_status),
        updated_at = coalesce(json_extract(new.entry, '$.updated_at'), updated_at)
    WHERE session_id = new.session_id;
END;
CREATE TRIGGER IF NOT EXISTS routes_sync_au AFTER UPDATE OF entry ON routes BEGIN
    UPDATE sessions SET
        input_tokens = coalesce(json_extract(new.entry, '$.input_tokens'), input_tokens),
        output_tokens = coalesce(json_extract(new.entry, '$.output_tokens'), output_tokens),
        cache_read_tokens = coalesce(json_extract(new.entry, '$.cache_read_tokens'), cache_read_tokens),
        cache_write_tokens = coalesce(json_extract(new.entry, '$.cache_write_tokens'), cache_write_tokens),
        total_tokens = coalesce(json_extract(new.entry, '$.total_tokens'), total_tokens),
        estimated_cost_usd = coalesce(json_extract(new.entry, '$.estimated_cost_usd'), estimated_cost_usd),
        cost_status = coalesce(json_extract(new.entry, '$.cost_status'), cost_status),
        updated_at = coalesce(json_extract(new.entry, '$.updated_at'), updated_at)
    WHERE session_id = new.session_id;
END;

-- Small key/value facts about the store itself, e.g. `mirror_signature`: size and mtime of the
-- sessions.json written at the last clean close (so an intact mirror is not rewritten at start).
CREATE TABLE IF NOT EXISTS meta (
    key                 TEXT PRIMARY KEY,
    value               TEXT NOT NULL
);
