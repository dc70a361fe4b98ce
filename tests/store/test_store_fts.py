"""Seed "State DB and FTS recovery", docs/behaviour.md §3: the derived FTS5 index, its check and rebuild."""

from __future__ import annotations

import sqlite3
from contextlib import closing

import pytest

from hermes_core import SessionSource
from hermes_core.store import SessionStore
from hermes_core.store.fts import integrity_ok, is_fts_damage, match_expression

SID = "20260301_120000_000000aa"


async def _fill(store, n=60):
    for i in range(n):
        await store.append_to_transcript(SID, {"role": "user" if i % 2 == 0 else "assistant",
                                               "content": f"message number{i} about giraffes"})


async def test_search_returns_session_message_and_snippet(store):
    await store.append_to_transcript(SID, {"role": "user", "content": "the quick brown fox"})
    await store.append_to_transcript(SID, {"role": "assistant", "content": "lazy dogs sleep"})
    assert await store.search_transcripts("brown fox") == [
        {"session_id": SID, "message_id": 1, "snippet": "the quick [brown] [fox]"}]
    assert await store.search_transcripts('fox"*') == [
        {"session_id": SID, "message_id": 1, "snippet": "the quick brown [fox]"}]
    assert await store.search_transcripts("   ") == []


async def test_search_skips_rewound_messages(store):
    await store.append_to_transcript(SID, {"role": "user", "content": "zebra one"})
    await store.append_to_transcript(SID, {"role": "user", "content": "zebra two"})
    await store.rewind_session(SID, 1)
    assert [r["message_id"] for r in await store.search_transcripts("zebra")] == [1]


async def test_search_scoped_to_owner(store):
    alice = SessionSource(platform="telegram", chat_id="1", user_id="alice")
    bob = SessionSource(platform="telegram", chat_id="2", user_id="bob")
    a = await store.get_or_create_session(alice)
    b = await store.get_or_create_session(bob)
    await store.append_to_transcript(a.session_id, {"role": "user", "content": "secret pelican"})
    await store.append_to_transcript(b.session_id, {"role": "user", "content": "public pelican"})
    assert [r["session_id"] for r in await store.search_transcripts("pelican", owner=alice)] == [a.session_id]
    assert [r["session_id"] for r in await store.search_transcripts("pelican", owner=bob)] == [b.session_id]
    assert len(await store.search_transcripts("pelican")) == 2


async def test_deleted_shadow_rows_are_detected_and_rebuilt(store):
    await _fill(store)
    db = store._b().db
    assert await integrity_ok(db) is True
    await db.execute("DELETE FROM messages_fts_data WHERE id > 10")
    assert await integrity_ok(db) is False
    assert await store.check_fts() is True
    assert await integrity_ok(db) is True
    assert await store.check_fts() is False
    assert len(await store.search_transcripts("giraffes", limit=100)) == 60
    assert len(await store.load_transcript(SID)) == 60


async def test_index_missing_rows_is_detected_by_rank_form(store):
    await _fill(store, 10)
    db = store._b().db
    assert await store.check_fts() is False  # healthy; the 10 waiting messages are indexed now
    # Remove one row from the index only (the content row stays): plain integrity-check passes,
    # the rank=1 form compares with the content table and fails.
    await db.execute("INSERT INTO messages_fts(messages_fts, rowid, content) "
                     "SELECT 'delete', id, content FROM messages WHERE id = 3")
    await db.execute("INSERT INTO messages_fts(messages_fts) VALUES ('integrity-check')")
    assert await store.check_fts() is True
    assert [r["message_id"] for r in await store.search_transcripts("number2")] == [3]


async def test_search_on_damaged_index_rebuilds_and_answers(store):
    await _fill(store)
    await store._b().db.execute("DELETE FROM messages_fts_data WHERE id > 10")
    results = await store.search_transcripts("giraffes", limit=100)
    assert len(results) == 60
    await store.append_to_transcript(SID, {"role": "user", "content": "after repair okapi"})
    assert [r["message_id"] for r in await store.search_transcripts("okapi")] == [61]


async def test_bare_malformed_is_fts_damage_only_when_the_index_check_confirms(store):
    from hermes_core.store.fts import confirm_damage
    await _fill(store, 20)
    db = store._b().db
    bare = sqlite3.DatabaseError("database disk image is malformed")
    bare.sqlite_errorname = "SQLITE_CORRUPT"
    assert await confirm_damage(db, bare) is False  # healthy index: not FTS damage
    await db.execute("DELETE FROM messages_fts_data WHERE id > 10")
    assert await confirm_damage(db, bare) is True


def test_bare_malformed_is_not_fts_damage():
    assert is_fts_damage(sqlite3.DatabaseError("database disk image is malformed")) is False
    assert is_fts_damage(sqlite3.DatabaseError("fts5: corruption in messages_fts")) is True
    assert is_fts_damage(sqlite3.OperationalError("no such table: messages_fts")) is True
    assert is_fts_damage(ValueError("messages_fts")) is False


async def test_real_vtab_corruption_is_fts_damage(store):
    await _fill(store, 20)
    db = store._b().db
    await db.execute("DELETE FROM messages_fts_data WHERE id > 10")
    try:
        await db.execute("INSERT INTO messages_fts(messages_fts, rank) VALUES ('integrity-check', 1)")
    except sqlite3.DatabaseError as exc:
        assert str(exc) == "database disk image is malformed"
        assert exc.sqlite_errorname == "SQLITE_CORRUPT_VTAB"
        assert is_fts_damage(exc) is True
    else:
        raise AssertionError("integrity-check passed on a damaged index")


def test_match_expression_quotes_every_word():
    assert match_expression('fox" OR *') == '"fox" "OR"'
    assert match_expression("") is None


async def test_append_on_damaged_index_rebuilds_and_keeps_the_message(store, dm, caplog):
    await _fill(store, 20)
    db = store._b().db
    assert await integrity_ok(db) is True  # the 20 messages are indexed: the mark is at id 20
    await db.execute("DELETE FROM messages_fts_data WHERE id = 1")  # the index's averages record
    # Messages wait to be indexed in batches of 64 (docs/behaviour.md §3): ids 21-83 are stored
    # without touching the index ...
    await _fill(store, 63)
    assert not any("damaged full-text index" in r.message for r in caplog.records)
    # ... and the insert of id 84 indexes the batch, fails inside the FTS trigger, and the store
    # rebuilds the derived index and retries: nothing is lost
    await store.append_to_transcript(SID, {"role": "user", "content": "kept despite damage capybara"})
    assert any("write hit a damaged full-text index" in r.message for r in caplog.records)
    assert len(await store.load_transcript(SID)) == 84
    assert [r["message_id"] for r in await store.search_transcripts("capybara")] == [84]
    entry = await store.get_or_create_session(dm)
    await db.execute("DELETE FROM messages_fts_data WHERE id = 1")
    caplog.clear()
    await _fill(store, 63)
    await store.begin_turn(entry.session_key, entry.session_id, {"role": "user", "content": "turn wombat"})
    assert any("write hit a damaged full-text index" in r.message for r in caplog.records)
    assert [m["content"] for m in await store.load_transcript(entry.session_id)] == ["turn wombat"]
    assert len(await store.turn_markers()) == 1
    assert await integrity_ok(db) is True


async def test_messages_are_indexed_in_batches_of_64_and_found_before(store):
    db = store._b().db
    await _fill(store, 63)
    assert await db.fetchval("SELECT indexed_through FROM fts_progress") == 0
    assert await db.fetchval("SELECT count(*) FROM messages_fts_docsize") == 0
    await _fill(store, 1)  # the 64th indexes the batch with it
    assert (await db.fetchval("SELECT indexed_through FROM fts_progress"),
            await db.fetchval("SELECT count(*) FROM messages_fts_docsize")) == (64, 64)
    await store.append_to_transcript(SID, {"role": "user", "content": "waiting okapi"})
    # a search indexes what waits first: the 65th message is found
    assert [r["message_id"] for r in await store.search_transcripts("okapi")] == [65]
    assert await db.fetchval("SELECT indexed_through FROM fts_progress") == 65


async def test_a_deleted_message_leaves_the_index_whether_indexed_or_waiting(store):
    db = store._b().db
    await _fill(store, 64)  # ids 1-64 indexed
    await _fill(store, 2)  # ids 65, 66 waiting
    await db.execute("DELETE FROM messages WHERE id IN (3, 65)")
    assert await integrity_ok(db) is True  # indexed id 3 left the index, waiting id 65 never entered it
    assert len(await store.search_transcripts("giraffes", limit=100)) == 64
    # The newest id is used again after a delete: at or below the mark it is indexed at once.
    await db.execute("DELETE FROM messages WHERE id = 66")
    assert await db.fetchval("SELECT indexed_through FROM fts_progress") == 66
    await store.append_to_transcript(SID, {"role": "user", "content": "reused id tapir"})
    assert await db.fetchval("SELECT count(*) FROM messages_fts_docsize WHERE id = 65") == 1
    assert await integrity_ok(db) is True
    assert [r["message_id"] for r in await store.search_transcripts("tapir")] == [65]


_FTS_SCHEMA = "SELECT name, sql FROM sqlite_master WHERE name IN ('messages_fts', 'fts_progress') ORDER BY name"


async def test_a_dropped_index_is_re_created_and_the_write_that_met_it_is_kept(store, dm, caplog):
    await _fill(store, 20)
    db = store._b().db
    schema = await db.fetchall(_FTS_SCHEMA)
    await db.execute("DROP TABLE messages_fts")  # the triggers on `messages` stay and now fail
    entry = await store.get_or_create_session(dm)
    await store.begin_turn(entry.session_key, entry.session_id, {"role": "user", "content": "after the drop quokka"})
    assert any("write hit a damaged full-text index" in r.message for r in caplog.records)
    assert any("re-creating it" in r.message for r in caplog.records)
    assert [m["content"] for m in await store.load_transcript(entry.session_id)] == ["after the drop quokka"]
    assert len(await store.turn_markers()) == 1
    assert [r["session_id"] for r in await store.search_transcripts("quokka")] == [entry.session_id]
    assert len(await store.search_transcripts("giraffes", limit=100)) == 20
    # the definition of the migrations (0001, 0007), the mark at the newest message
    assert [tuple(r) for r in await db.fetchall(_FTS_SCHEMA)] == [tuple(r) for r in schema]
    assert await db.fetchval("SELECT indexed_through FROM fts_progress") == 21
    assert await integrity_ok(db) is True and await store.check_fts() is False


async def test_a_search_or_check_on_a_dropped_index_or_mark_re_creates_it(store):
    await _fill(store, 20)
    db = store._b().db
    await db.execute("DROP TABLE messages_fts")
    assert len(await store.search_transcripts("giraffes", limit=100)) == 20
    await db.execute("DROP TABLE messages_fts")
    assert await store.check_fts() is True
    await db.execute("DROP TABLE fts_progress")
    assert await store.check_fts() is True
    assert await db.fetchval("SELECT indexed_through FROM fts_progress") == 20
    await store.append_to_transcript(SID, {"role": "user", "content": "mark restored numbat"})
    assert [r["message_id"] for r in await store.search_transcripts("numbat")] == [21]
    assert await store.check_fts() is False


@pytest.mark.parametrize("shadow", ["messages_fts_idx", "messages_fts_docsize"])
async def test_a_message_appended_after_a_shadow_table_is_dropped_is_stored_and_found(store, caplog, shadow):
    """docs/behaviour.md §3: without its `_idx` or `_docsize` shadow table every statement on the
    index fails with a bare "SQL logic error"; the missing table makes it index damage, so the
    write that indexes the next batch of 64 rebuilds the index and keeps its message."""
    await _fill(store, 64)  # the 64th message indexes the batch
    db = store._b().db
    await db.execute(f"DROP TABLE {shadow}")
    await _fill(store, 63)  # ids 65-127 wait for the next batch
    await store.append_to_transcript(SID, {"role": "user", "content": "after the shadow drop pangolin"})
    assert "write hit a damaged full-text index (SQL logic error); rebuilding it" in caplog.messages
    assert f"full-text index messages_fts lacks its table(s) {shadow}" in caplog.messages
    assert len(await store.load_transcript(SID)) == 128
    assert [r["message_id"] for r in await store.search_transcripts("pangolin")] == [128]
    assert len(await store.search_transcripts("giraffes", limit=200)) == 127
    assert await integrity_ok(db) is True


async def test_an_index_too_damaged_to_open_is_removed_from_the_schema_and_re_created(config, clock, caplog):
    # docs/behaviour.md §3: without its structure record (id 10 of `_data`) FTS5 cannot open the
    # table on a new connection, so neither 'rebuild' nor DROP TABLE can run ("vtable
    # constructor failed"); the index is then taken out of the schema and re-created, and every
    # message is found again.
    import logging

    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        await _fill(store, 20)
    with closing(sqlite3.connect(config.db_path)) as conn, conn:
        conn.execute("DELETE FROM messages_fts_data WHERE id = 10")
    caplog.set_level(logging.WARNING, logger="hermes_core.store.fts")
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        assert await store.check_fts() is True
        assert [r.getMessage() for r in caplog.records if r.name == "hermes_core.store.fts"] == [
            "full-text index messages_fts is damaged: vtable constructor failed: messages_fts",
            "full-text index messages_fts cannot be rebuilt (vtable constructor failed: messages_fts); re-creating it",
            "full-text index messages_fts cannot be dropped (vtable constructor failed: messages_fts); removing it "
            "from the schema",
            "full-text index messages_fts rebuilt from messages"]
        assert len(await store.search_transcripts("giraffes", limit=100)) == 20
        assert await store._b().db.fetchval("PRAGMA integrity_check") == "ok"
        assert await store.check_fts() is False


async def test_a_read_only_store_searches_indexed_and_waiting_messages_alike(config, clock):
    """docs/operations.md §5: a read-only search cannot index the messages waiting for the next
    batch of 64 in state.db; it finds them all the same, ranked with the indexed ones, and
    leaves the index as it was."""

    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        await _fill(store, 70)  # 64 indexed, 6 waiting
    reader = SessionStore(config.sessions_dir, config, clock=clock, lock_home=False, degraded_fallback=False,
                          read_only=True)
    async with reader:
        assert await reader.search_transcripts("number66") == [
            {"session_id": SID, "message_id": 67, "snippet": "message [number66] about giraffes"}]
        found = await reader.search_transcripts("giraffes", limit=100)
        assert sorted(h["message_id"] for h in found) == list(range(1, 71))
    conn = sqlite3.connect(config.db_path)
    assert conn.execute("SELECT indexed_through FROM fts_progress").fetchone()[0] == 64
    conn.close()
