"""Seed §3 transcripts; docs/behaviour.md §2 rewind values, load_transcript and rewrite atomicity."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timezone

import pytest

from hermes_core.store.rows import messages_from_values

SID = "20260301_120000_0000abcd"


async def _rows(store, sid=SID):
    for text in ("u1", "a1", "u2", "a2", "u3", "a3"):
        role = "user" if text.startswith("u") else "assistant"
        await store.append_to_transcript(sid, {"role": role, "content": text})


@pytest.mark.parametrize("n, expected", [
    (1, {"rewound_count": 2, "turns_undone": 1, "target_text": "u3"}),
    (2, {"rewound_count": 4, "turns_undone": 2, "target_text": "u2"}),
    (9, {"rewound_count": 6, "turns_undone": 3, "target_text": "u1"}),
    (0, {"rewound_count": 2, "turns_undone": 1, "target_text": "u3"}),
    (-3, {"rewound_count": 2, "turns_undone": 1, "target_text": "u3"}),
])
async def test_rewind_values(store, n, expected):
    await _rows(store)
    assert await store.rewind_session(SID, n) == expected


async def test_rewind_soft_deletes_and_keeps_rows(store):
    await _rows(store)
    await store.rewind_session(SID, 2)
    assert [m["content"] for m in await store.load_transcript(SID)] == ["u1", "a1"]
    assert await store.count_turns(SID) == 1
    total = await store._b().db.fetchval("SELECT COUNT(*) FROM messages WHERE session_id = ?", (SID,))
    assert total == 6


async def test_rewind_without_user_turn_is_none(store):
    assert await store.rewind_session(SID) is None
    await store.append_to_transcript(SID, {"role": "system", "content": "sys"})
    assert await store.rewind_session(SID) is None


async def test_load_roundtrip_with_optional_fields(store):
    await store.append_to_transcript(SID, {"role": "user", "content": "hi", "platform_message_id": 77,
                                           "timestamp": "2026-03-01T13:00:00+01:00"})
    await store.append_to_transcript(SID, {
        "role": "assistant", "content": None,
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        "timestamp": datetime(2026, 3, 1, 12, 0, 1, tzinfo=timezone.utc)})
    await store.append_to_transcript(SID, {"role": "tool", "content": "42", "tool_call_id": "call_1",
                                           "tool_name": "f"})
    assert await store.load_transcript(SID) == [
        {"role": "user", "content": "hi", "timestamp": "2026-03-01T12:00:00+00:00", "platform_message_id": "77"},
        {"role": "assistant", "content": None, "timestamp": "2026-03-01T12:00:01+00:00",
         "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "content": "42", "timestamp": "2026-03-01T12:00:00+00:00", "tool_call_id": "call_1",
         "tool_name": "f"},
    ]


async def test_unknown_session_loads_empty(store):
    assert await store.load_transcript("20200101_000000_00000000") == []


@pytest.mark.parametrize("bad", ["../etc", "a/b", "a\\b", "", "x..y"])
async def test_path_unsafe_session_ids_are_refused(store, bad):
    with pytest.raises(ValueError):
        await store.append_to_transcript(bad, {"role": "user", "content": "x"})
    with pytest.raises(ValueError):
        await store.load_transcript(bad)
    with pytest.raises(ValueError):
        await store.rewind_session(bad)


@pytest.mark.parametrize("message, field", [
    ({"role": "robot", "content": "x"}, "role"),
    ({"role": "user", "content": 5}, "content"),
    ({"role": "user", "content": "x", "timestamp": "yesterday"}, "timestamp"),
    ({"role": "assistant", "content": "x", "tool_calls": "nope"}, "tool_calls"),
])
async def test_bad_messages_name_the_field(store, message, field):
    with pytest.raises(ValueError, match=field):
        await store.append_to_transcript(SID, message)
    assert await store.load_transcript(SID) == []


async def test_skip_db_does_not_write(store):
    await store.append_to_transcript(SID, {"role": "user", "content": "x"}, skip_db=True)
    assert await store.load_transcript(SID) == []


async def test_rewrite_transcript_replaces_active_rows(store):
    await _rows(store)
    await store.rewrite_transcript(SID, [{"role": "system", "content": "summary"},
                                         {"role": "user", "content": "u9"}])
    assert [m["content"] for m in await store.load_transcript(SID)] == ["summary", "u9"]
    assert await store.count_turns(SID) == 1


async def test_rewrite_transcript_is_atomic(store):
    await _rows(store)
    # A real failure inside SQLite, in the middle of the rewrite transaction.
    await store._b().db.execute(
        "CREATE TEMP TRIGGER boom BEFORE INSERT ON messages WHEN new.content = 'boom' "
        "BEGIN SELECT RAISE(ABORT, 'boom'); END")
    with pytest.raises(sqlite3.IntegrityError):
        await store.rewrite_transcript(SID, [{"role": "user", "content": "fine"},
                                             {"role": "user", "content": "boom"}])
    assert [m["content"] for m in await store.load_transcript(SID)] == ["u1", "a1", "u2", "a2", "u3", "a3"]


async def test_rewrite_with_bad_message_changes_nothing(store):
    await _rows(store)
    with pytest.raises(ValueError, match="role"):
        await store.rewrite_transcript(SID, [{"role": "user", "content": "ok"}, {"role": "?", "content": "x"}])
    assert len(await store.load_transcript(SID)) == 6


async def test_failed_read_raises(store):
    from hermes_core.store import TranscriptReadError
    await _rows(store)
    await store._b().db.execute("UPDATE messages SET tool_calls = '{broken' WHERE content = 'a1'")
    with pytest.raises(TranscriptReadError):
        await store.load_transcript(SID)


async def test_a_failed_read_leaves_the_connection_usable(store):
    from hermes_core.store import TranscriptReadError
    await _rows(store)
    db = store._b().db
    await db.execute("UPDATE messages SET reasoning = '{broken' WHERE content = 'u2'")
    with pytest.raises(TranscriptReadError, match="reasoning") as raised:
        await store.load_transcript(SID)
    # While the error is still held, the read is over: no statement left running keeps a table
    # locked, so a checkpoint runs through (busy 0, WAL truncated to 0 frames, 0 left to copy).
    assert raised.value is not None
    assert tuple(await db.fetchone("PRAGMA wal_checkpoint(TRUNCATE)")) == (0, 0, 0)
    await store.append_to_transcript(SID, {"role": "user", "content": "u4"})
    assert await store.count_turns(SID) == 4


async def test_a_reload_is_one_call_to_the_sqlite_thread(store, thread_calls):
    # docs/behaviour.md §8: a cache miss reads and converts the transcript in one thread call
    await _rows(store)
    calls = thread_calls(store._b().db)
    assert [m["content"] for m in await store.load_transcript(SID)] == ["u1", "a1", "u2", "a2", "u3", "a3"]
    assert calls == ["_call_in_thread"]


def test_stored_values_become_transcript_dicts():
    rows = [
        ("user", "hi", "2026-03-01T12:00:00+00:00", "77", None, None, None, None),
        ("assistant", None, "2026-03-01T12:00:01+00:00", None, None, None, '[{"id": "call_1"}]',
         '{"codex_reasoning_items": [1], "reasoning_content": "why", "unknown": 2}'),
        ("tool", "42", "2026-03-01T12:00:02+00:00", None, "call_1", "f", None, None),
    ]
    assert messages_from_values(rows) == [
        {"role": "user", "content": "hi", "timestamp": "2026-03-01T12:00:00+00:00", "platform_message_id": "77"},
        {"role": "assistant", "content": None, "timestamp": "2026-03-01T12:00:01+00:00",
         "tool_calls": [{"id": "call_1"}], "reasoning_content": "why", "codex_reasoning_items": [1]},
        {"role": "tool", "content": "42", "timestamp": "2026-03-01T12:00:02+00:00", "tool_call_id": "call_1",
         "tool_name": "f"},
    ]
    # key order too: the optional keys, then the reasoning fields in REASONING_KEYS order
    assert list(messages_from_values(rows[1:2])[0]) == ["role", "content", "timestamp", "tool_calls",
                                                       "reasoning_content", "codex_reasoning_items"]


async def test_a_reload_during_a_group_commit_sees_the_whole_group_and_after_close_fails_clearly(store):
    # docs/architecture.md §7: reads share the connection between groups, never inside one
    import asyncio
    import threading

    from hermes_core.store import StoreError
    await _rows(store)
    db = store._b().db
    inside, release = threading.Event(), threading.Event()

    def group_member(conn):  # runs on the SQLite thread, in the open group transaction
        conn.execute("UPDATE messages SET content = 'u1 edited' WHERE content = 'u1'")
        inside.set()
        release.wait(30)
        conn.execute("UPDATE messages SET content = 'a3 edited' WHERE content = 'a3'")

    write = asyncio.create_task(db.run(group_member))
    await asyncio.to_thread(inside.wait, 30)
    read = asyncio.create_task(store.load_transcript(SID))
    for _ in range(10):
        await asyncio.sleep(0)
    assert not read.done()  # waits for the group rather than seeing it half done
    release.set()
    await write
    assert [m["content"] for m in await read] == ["u1 edited", "a1", "u2", "a2", "u3", "a3 edited"]
    await store.close()
    with pytest.raises(StoreError, match="the session store is not open"):
        await store.load_transcript(SID)
