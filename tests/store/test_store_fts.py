"""Seed "State DB and FTS recovery", docs/behaviour.md §3: the derived FTS5 index, its check and rebuild."""

from __future__ import annotations

import sqlite3

import pytest

from hermes_core import SessionSource
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


async def test_append_on_damaged_index_rebuilds_and_keeps_the_message(store, dm):
    await _fill(store, 20)
    db = store._b().db
    await db.execute("DELETE FROM messages_fts_data WHERE id = 1")  # the index structure record
    # a plain insert now fails inside the FTS trigger ...
    with pytest.raises(sqlite3.DatabaseError):
        await db.execute("INSERT INTO messages (session_id, role, content, timestamp) "
                         "VALUES ('x', 'user', 'probe', '2026-01-01T00:00:00+00:00')")
    # ... the store rebuilds the derived index and retries: nothing is lost
    await store.append_to_transcript(SID, {"role": "user", "content": "kept despite damage capybara"})
    assert len(await store.load_transcript(SID)) == 21
    assert [r["message_id"] for r in await store.search_transcripts("capybara")] == [21]
    entry = await store.get_or_create_session(dm)
    await db.execute("DELETE FROM messages_fts_data WHERE id = 1")
    await store.begin_turn(entry.session_key, entry.session_id, {"role": "user", "content": "turn wombat"})
    assert [m["content"] for m in await store.load_transcript(entry.session_id)] == ["turn wombat"]
    assert len(await store.turn_markers()) == 1
    assert await integrity_ok(db) is True
