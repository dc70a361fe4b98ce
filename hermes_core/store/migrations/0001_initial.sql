-- Schema version 1 of state.db (docs/behaviour.md §3). SQLite is canonical; sessions.json is a mirror of `routes`.

-- One row per session id (one incarnation of a conversation).
CREATE TABLE IF NOT EXISTS sessions (
    session_id          TEXT PRIMARY KEY,
    session_key         TEXT NOT NULL,
    origin              TEXT,              -- SessionSource.to_dict() as JSON
    platform            TEXT,
    chat_id             TEXT,
    participant_id      TEXT,              -- origin.user_id_alt or origin.user_id (owner scoping)
    chat_type           TEXT,
    display_name        TEXT,
    created_at          TEXT NOT NULL,     -- ISO-8601 UTC
    updated_at          TEXT NOT NULL,
    ended_at            TEXT,
    end_reason          TEXT,
    parent_session_id   TEXT,
    input_tokens        INTEGER NOT NULL DEFAULT 0,
    output_tokens       INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens   INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens  INTEGER NOT NULL DEFAULT 0,
    total_tokens        INTEGER NOT NULL DEFAULT 0,
    estimated_cost_usd  REAL NOT NULL DEFAULT 0,
    cost_status         TEXT NOT NULL DEFAULT 'unknown'
);
CREATE INDEX IF NOT EXISTS sessions_by_key ON sessions(session_key);

-- Transcript rows. `active = 0` is a soft delete (rewind / rewrite keep rows for audit).
CREATE TABLE IF NOT EXISTS messages (
    id                  INTEGER PRIMARY KEY,
    session_id          TEXT NOT NULL,
    role                TEXT NOT NULL,
    content             TEXT,
    tool_call_id        TEXT,
    tool_name           TEXT,
    tool_calls          TEXT,              -- JSON list
    platform_message_id TEXT,
    timestamp           TEXT NOT NULL,     -- ISO-8601 UTC
    active              INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX IF NOT EXISTS messages_by_session ON messages(session_id, active, id);

-- The routing index: session key -> current entry (SessionEntry.to_dict() as JSON) + turn marker.
CREATE TABLE IF NOT EXISTS routes (
    session_key         TEXT PRIMARY KEY,
    session_id          TEXT NOT NULL,
    entry               TEXT NOT NULL,
    updated_ts          REAL NOT NULL,     -- epoch seconds of entry.updated_at (ordering, pruning)
    suspended           INTEGER NOT NULL DEFAULT 0,
    turn_session_id     TEXT,              -- turn marker (docs/behaviour.md §6): set with the user message
    turn_message_id     INTEGER,
    turn_started_ts     REAL               -- epoch seconds, UTC
);
CREATE INDEX IF NOT EXISTS routes_by_session_id ON routes(session_id);
CREATE INDEX IF NOT EXISTS routes_by_updated ON routes(updated_ts);
CREATE INDEX IF NOT EXISTS routes_with_turn ON routes(turn_started_ts) WHERE turn_started_ts IS NOT NULL;

-- Durable intake and dedupe of inbound platform messages (docs/behaviour.md §5).
CREATE TABLE IF NOT EXISTS inbound (
    platform            TEXT NOT NULL,
    chat_id             TEXT NOT NULL,
    message_id          TEXT NOT NULL,
    accepted_at         TEXT NOT NULL,
    session_key         TEXT,
    payload             TEXT,
    state               TEXT,
    PRIMARY KEY (platform, chat_id, message_id)
);

-- Delivery ledger (docs/behaviour.md §6): pending -> attempting -> delivered | failed | abandoned.
CREATE TABLE IF NOT EXISTS delivery_obligations (
    id                  INTEGER PRIMARY KEY,
    session_key         TEXT,
    session_id          TEXT,
    origin              TEXT,
    content             TEXT NOT NULL,
    state               TEXT NOT NULL DEFAULT 'pending',
    attempts            INTEGER NOT NULL DEFAULT 0,
    internal            INTEGER NOT NULL DEFAULT 0,
    last_error          TEXT,
    created_at          TEXT NOT NULL,
    updated_at          TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS delivery_by_state ON delivery_obligations(state);

-- Full-text index: external content over messages, kept in sync by triggers that pass the old
-- values (sqlite-utils shape), so a delete/update removes exactly the tokens that were indexed.
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(
    content, content='messages', content_rowid='id'
);
CREATE TRIGGER IF NOT EXISTS messages_ai AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER IF NOT EXISTS messages_ad AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
END;
CREATE TRIGGER IF NOT EXISTS messages_au AFTER UPDATE OF content ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
