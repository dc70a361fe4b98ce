-- Schema version 7: fewer pages written per commit on the message path (docs/behaviour.md §3, §12).
--
-- `delivery_by_state` indexed every obligation by state: each reply wrote it twice ('attempting',
-- then 'delivered' moves the entry). The open states are read through the partial index
-- `delivery_open`; pruning old obligations goes by `delivery_by_updated`.
DROP INDEX delivery_by_state;
-- `delivery_open` again, its condition spelt as comparisons: SQLite evaluates a three-value IN
-- list through a temporary table built at every insert or state change of an obligation (about
-- 40 µs each); the same condition as equalities costs nothing measurable. Queries must name the
-- condition word for word (`sqlite_backend._OPEN_OBLIGATION`) for SQLite to use the index.
DROP INDEX delivery_open;
CREATE INDEX delivery_open ON delivery_obligations(id)
    WHERE (state = 'pending' OR state = 'attempting' OR state = 'failed');

-- The full-text index is brought up to date in batches of 64 messages instead of one message per
-- transaction: a transaction that indexes one message writes a new FTS5 segment, its structure
-- record and the merge work, about five pages, twice per message. `fts_progress.indexed_through`:
-- every message with an id up to it is indexed, none above it. The insert that is 64 ids past it
-- indexes the waiting messages with it and moves it; searches and checks first index what is
-- waiting (`store/fts.py`), so they answer exactly as if every message were indexed at once.
CREATE TABLE fts_progress (
    id                  INTEGER PRIMARY KEY CHECK (id = 1),
    indexed_through     INTEGER NOT NULL   -- messages.id
);
INSERT INTO fts_progress (id, indexed_through) VALUES (1, coalesce((SELECT max(id) FROM messages), 0));

DROP TRIGGER messages_ai;
DROP TRIGGER messages_ad;
DROP TRIGGER messages_au;
-- One trigger, its statements in this order: a message at or below the mark (an id used again
-- after the newest rows were deleted, a merged row) is indexed at once; the 64th above it indexes
-- all that wait (never twice: the first statement skips every id the second indexes). The WHEN
-- spares the 63 inserts in between running the body at all.
CREATE TRIGGER messages_ai AFTER INSERT ON messages
WHEN new.id <= (SELECT indexed_through FROM fts_progress)
  OR new.id >= (SELECT indexed_through FROM fts_progress) + 64 BEGIN
    INSERT INTO messages_fts(rowid, content) SELECT new.id, new.content
        WHERE new.id <= (SELECT indexed_through FROM fts_progress);
    INSERT INTO messages_fts(rowid, content) SELECT id, content FROM messages
        WHERE new.id >= (SELECT indexed_through FROM fts_progress) + 64
          AND id > (SELECT indexed_through FROM fts_progress) ORDER BY id;
    UPDATE fts_progress SET indexed_through = (SELECT max(id) FROM messages)
        WHERE new.id >= indexed_through + 64;
END;
-- Deletes and updates pass the old values, as before, for indexed messages only.
CREATE TRIGGER messages_ad AFTER DELETE ON messages
WHEN old.id <= (SELECT indexed_through FROM fts_progress) BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
END;
CREATE TRIGGER messages_au AFTER UPDATE OF content ON messages
WHEN old.id <= (SELECT indexed_through FROM fts_progress) BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
