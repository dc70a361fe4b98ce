-- Schema version 1 of the PostgreSQL store: the tables of state.db (docs/behaviour.md §3, §5, §6)
-- plus the per-session leases several gateway replicas share (docs/architecture.md §7).

CREATE TABLE sessions (
    session_id          TEXT PRIMARY KEY,
    session_key         TEXT NOT NULL,
    origin              TEXT,
    platform            TEXT,
    chat_id             TEXT,
    participant_id      TEXT,
    chat_type           TEXT,
    display_name        TEXT,
    created_at          TEXT NOT NULL,
    updated_at          TEXT NOT NULL,
    ended_at            TEXT,
    end_reason          TEXT,
    parent_session_id   TEXT,
    input_tokens        BIGINT NOT NULL DEFAULT 0,
    output_tokens       BIGINT NOT NULL DEFAULT 0,
    cache_read_tokens   BIGINT NOT NULL DEFAULT 0,
    cache_write_tokens  BIGINT NOT NULL DEFAULT 0,
    total_tokens        BIGINT NOT NULL DEFAULT 0,
    estimated_cost_usd  DOUBLE PRECISION NOT NULL DEFAULT 0,
    cost_status         TEXT NOT NULL DEFAULT 'unknown'
);
CREATE INDEX sessions_by_key ON sessions(session_key);

-- Transcript rows; `active = false` is the soft delete of rewind / rewrite. `search` is the
-- generated full-text vector ('simple': no stemming, no stop words, like FTS5's unicode61).
CREATE TABLE messages (
    id                  BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id          TEXT NOT NULL,
    role                TEXT NOT NULL,
    content             TEXT,
    tool_call_id        TEXT,
    tool_name           TEXT,
    tool_calls          TEXT,
    platform_message_id TEXT,
    timestamp           TEXT NOT NULL,
    active              BOOLEAN NOT NULL DEFAULT true,
    search              tsvector GENERATED ALWAYS AS (to_tsvector('simple', coalesce(content, ''))) STORED
);
CREATE INDEX messages_by_session ON messages(session_id, active, id);
CREATE INDEX messages_search ON messages USING GIN (search);

-- Routing index (session key -> entry JSON) and the key's turn marker.
CREATE TABLE routes (
    session_key         TEXT PRIMARY KEY,
    session_id          TEXT NOT NULL,
    entry               TEXT NOT NULL,
    updated_ts          DOUBLE PRECISION NOT NULL,
    suspended           BOOLEAN NOT NULL DEFAULT false,
    resume_pending      BOOLEAN NOT NULL DEFAULT false,
    turn_session_id     TEXT,
    turn_message_id     BIGINT,
    turn_started_ts     DOUBLE PRECISION
);
CREATE INDEX routes_by_session_id ON routes(session_id);
CREATE INDEX routes_by_updated ON routes(updated_ts);
CREATE INDEX routes_with_turn ON routes(turn_started_ts) WHERE turn_started_ts IS NOT NULL;

-- Durable intake; the unique key dedupes across every replica.
CREATE TABLE inbound (
    id                  BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    platform            TEXT NOT NULL,
    chat_id             TEXT NOT NULL,
    message_id          TEXT NOT NULL,
    accepted_at         TEXT NOT NULL,
    accepted_ts         DOUBLE PRECISION NOT NULL,
    session_key         TEXT,
    payload             TEXT,
    state               TEXT NOT NULL DEFAULT 'pending',
    finished_ts         DOUBLE PRECISION,
    UNIQUE (platform, chat_id, message_id)
);
CREATE INDEX inbound_open ON inbound(id) WHERE state <> 'done';
CREATE INDEX inbound_by_accepted ON inbound(accepted_ts);

CREATE TABLE delivery_obligations (
    id                  BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_key         TEXT,
    session_id          TEXT,
    origin              TEXT,
    content             TEXT NOT NULL,
    state               TEXT NOT NULL DEFAULT 'pending',
    attempts            INTEGER NOT NULL DEFAULT 0,
    internal            BOOLEAN NOT NULL DEFAULT false,
    last_error          TEXT,
    message_id          BIGINT,
    reply_to            TEXT,
    created_at          TEXT NOT NULL,
    updated_at          TEXT NOT NULL,
    created_ts          DOUBLE PRECISION,
    updated_ts          DOUBLE PRECISION
);
CREATE INDEX delivery_by_message ON delivery_obligations(message_id);
CREATE INDEX delivery_open ON delivery_obligations(id) WHERE state IN ('pending', 'attempting', 'failed');

CREATE TABLE meta (
    key                 TEXT PRIMARY KEY,
    value               TEXT NOT NULL
);

CREATE TABLE identity_aliases (
    platform            TEXT NOT NULL,
    alias_id            TEXT NOT NULL,
    canonical_id        TEXT NOT NULL,
    source              TEXT NOT NULL DEFAULT '',
    first_seen          TEXT NOT NULL,
    last_seen           TEXT NOT NULL,
    PRIMARY KEY (platform, alias_id)
);
CREATE INDEX identity_aliases_by_canonical ON identity_aliases(platform, canonical_id);

-- Per-session leases (fencing). `token` only grows: every new grant of a key takes the next
-- value, so a write carrying an older token is recognisably stale. `holder` is NULL once
-- released; `expires_at` is on the database's clock, never a replica's.
CREATE TABLE session_leases (
    session_key         TEXT PRIMARY KEY,
    holder              TEXT,
    token               BIGINT NOT NULL,
    expires_at          TIMESTAMPTZ NOT NULL
);
CREATE INDEX session_leases_by_holder ON session_leases(holder);
