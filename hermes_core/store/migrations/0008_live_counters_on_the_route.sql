-- Schema version 8: two pages fewer per commit on the message path (docs/behaviour.md §3, §12).
--
-- A live session's counters and `updated_at` are read from its route's entry instead of being
-- copied into its `sessions` row at every write of the entry (the schema-2 triggers rewrote that
-- row, a page of its own, at the end of every turn). The row takes the entry's final values when
-- the route leaves the session: it moves to another session id, or it is removed (pruning).
-- Readers go through the view `sessions_now`, which lays a route's values over its session's
-- row, so nothing reads a stale counter.
DROP TRIGGER routes_sync_ai;
DROP TRIGGER routes_sync_au;
-- `updated_at`: the later of the row's (an ending writes its own time) and the entry's. An entry
-- an outside edit leaves unreadable counts as leaving too (the store writes only whole entries;
-- the schema-2 triggers refused such an edit): `sessions_now` reads valid entries only, so the
-- row takes the last readable values first. The cheap test comes first: at the end of every
-- turn this trigger parses one entry and writes nothing.
CREATE TRIGGER routes_leave_au AFTER UPDATE OF session_id, entry ON routes
WHEN (old.session_id IS NOT new.session_id OR NOT json_valid(new.entry)) AND json_valid(old.entry) BEGIN
    UPDATE sessions SET
        input_tokens = coalesce(json_extract(old.entry, '$.input_tokens'), input_tokens),
        output_tokens = coalesce(json_extract(old.entry, '$.output_tokens'), output_tokens),
        cache_read_tokens = coalesce(json_extract(old.entry, '$.cache_read_tokens'), cache_read_tokens),
        cache_write_tokens = coalesce(json_extract(old.entry, '$.cache_write_tokens'), cache_write_tokens),
        total_tokens = coalesce(json_extract(old.entry, '$.total_tokens'), total_tokens),
        estimated_cost_usd = coalesce(json_extract(old.entry, '$.estimated_cost_usd'), estimated_cost_usd),
        cost_status = coalesce(json_extract(old.entry, '$.cost_status'), cost_status),
        updated_at = max(updated_at, coalesce(json_extract(old.entry, '$.updated_at'), updated_at))
    WHERE session_id = old.session_id;
END;
-- Pruning: the same body as `routes_leave_au` (SQLite triggers share no body, and one trigger
-- cannot fire on both UPDATE and DELETE): a change to one goes to the other.
CREATE TRIGGER routes_leave_ad AFTER DELETE ON routes
WHEN json_valid(old.entry) BEGIN
    UPDATE sessions SET
        input_tokens = coalesce(json_extract(old.entry, '$.input_tokens'), input_tokens),
        output_tokens = coalesce(json_extract(old.entry, '$.output_tokens'), output_tokens),
        cache_read_tokens = coalesce(json_extract(old.entry, '$.cache_read_tokens'), cache_read_tokens),
        cache_write_tokens = coalesce(json_extract(old.entry, '$.cache_write_tokens'), cache_write_tokens),
        total_tokens = coalesce(json_extract(old.entry, '$.total_tokens'), total_tokens),
        estimated_cost_usd = coalesce(json_extract(old.entry, '$.estimated_cost_usd'), estimated_cost_usd),
        cost_status = coalesce(json_extract(old.entry, '$.cost_status'), cost_status),
        updated_at = max(updated_at, coalesce(json_extract(old.entry, '$.updated_at'), updated_at))
    WHERE session_id = old.session_id;
END;
-- Every column of `sessions`, in its order. The route laid over a row is the newest one pointing
-- at its session (one row per session even if two chats resumed it) whose entry is valid JSON and
-- no older than the row: when one of two routes leaves, the row holds the values it left with,
-- newer than the other route's until that one writes again (the last writer's, as before).
CREATE VIEW sessions_now AS
SELECT s.session_id, s.session_key, s.origin, s.platform, s.chat_id, s.participant_id, s.chat_type,
       s.display_name, s.created_at,
       max(s.updated_at, coalesce(json_extract(r.entry, '$.updated_at'), s.updated_at)) AS updated_at,
       s.ended_at, s.end_reason, s.parent_session_id,
       coalesce(json_extract(r.entry, '$.input_tokens'), s.input_tokens) AS input_tokens,
       coalesce(json_extract(r.entry, '$.output_tokens'), s.output_tokens) AS output_tokens,
       coalesce(json_extract(r.entry, '$.cache_read_tokens'), s.cache_read_tokens) AS cache_read_tokens,
       coalesce(json_extract(r.entry, '$.cache_write_tokens'), s.cache_write_tokens) AS cache_write_tokens,
       coalesce(json_extract(r.entry, '$.total_tokens'), s.total_tokens) AS total_tokens,
       coalesce(CAST(json_extract(r.entry, '$.estimated_cost_usd') AS REAL), s.estimated_cost_usd) AS estimated_cost_usd,
       coalesce(json_extract(r.entry, '$.cost_status'), s.cost_status) AS cost_status,
       s.title, s.rewind_count
FROM sessions AS s
LEFT JOIN routes AS r ON r.rowid = (
    SELECT rowid FROM routes WHERE session_id = s.session_id
        AND CASE WHEN json_valid(entry) THEN json_extract(entry, '$.updated_at') >= s.updated_at END
    ORDER BY updated_ts DESC LIMIT 1);

-- Turn markers are read once, at start (crash recovery), by a scan of `routes`; their partial
-- index was written twice per message (the marker is set with the user message, cleared with
-- the reply).
DROP INDEX routes_with_turn;
