-- Schema version 3: durable intake (docs/behaviour.md §0, §5) and the delivery ledger (docs/behaviour.md §6).
--
-- `inbound` gets an explicit INTEGER PRIMARY KEY: the arrival order of the durable queue must not
-- depend on implicit rowids (VACUUM may renumber those). The dedupe key stays unique. `state` is
-- 'pending' (accepted, not started), 'running' (its turn began: the user message is in the
-- transcript and the turn marker is set) or 'done'; legacy dedupe-only rows get 'done'.
CREATE TABLE inbound_v3 (
    id                  INTEGER PRIMARY KEY,
    platform            TEXT NOT NULL,
    chat_id             TEXT NOT NULL,
    message_id          TEXT NOT NULL,
    accepted_at         TEXT NOT NULL,     -- ISO-8601 UTC
    accepted_ts         REAL NOT NULL,     -- epoch seconds (retention pruning)
    session_key         TEXT,
    payload             TEXT,              -- the MessageEvent as JSON while not done
    state               TEXT NOT NULL DEFAULT 'pending',
    finished_ts         REAL,
    UNIQUE (platform, chat_id, message_id)
);
INSERT INTO inbound_v3 (platform, chat_id, message_id, accepted_at, accepted_ts, session_key, payload, state)
    SELECT platform, chat_id, message_id, accepted_at,
           coalesce(round((julianday(accepted_at) - 2440587.5) * 86400.0, 3), 0), session_key, NULL, 'done'
    FROM inbound ORDER BY rowid;
DROP TABLE inbound;
ALTER TABLE inbound_v3 RENAME TO inbound;
CREATE INDEX inbound_open ON inbound(id) WHERE state != 'done';
CREATE INDEX inbound_by_accepted ON inbound(accepted_ts);

-- Delivery ledger: which transcript row an obligation carries, what it replies to, and epoch
-- times for the 24 h give-up rule.
ALTER TABLE delivery_obligations ADD COLUMN message_id INTEGER;
ALTER TABLE delivery_obligations ADD COLUMN reply_to TEXT;
ALTER TABLE delivery_obligations ADD COLUMN created_ts REAL;
ALTER TABLE delivery_obligations ADD COLUMN updated_ts REAL;
CREATE INDEX delivery_by_message ON delivery_obligations(message_id);
CREATE INDEX delivery_open ON delivery_obligations(id) WHERE state IN ('pending', 'attempting', 'failed');
