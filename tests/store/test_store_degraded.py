"""docs/behaviour.md §0 / seed §3: degraded mode (sessions.json index + {session_id}.jsonl) when SQLite
cannot be opened; same API; a failed transcript read raises."""

from __future__ import annotations

import json
import logging

import pytest

from hermes_core import SessionSource
from hermes_core.store import SessionStore, TranscriptReadError


@pytest.fixture
def broken_db(config):
    config.home.mkdir(parents=True, exist_ok=True)
    config.db_path.mkdir()  # a directory where state.db should be: SQLite cannot open it
    return config


async def test_degraded_mode_full_flow_and_restart(broken_db, clock, dm, caplog):
    config = broken_db
    caplog.set_level(logging.ERROR, logger="hermes_core.store.session_store")
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        assert store.degraded is True
        assert [r.message for r in caplog.records if "DEGRADED" in r.message] != []
        entry = await store.get_or_create_session(dm)
        await store.begin_turn(entry.session_key, entry.session_id, {"role": "user", "content": "u1"})
        await store.append_to_transcript(entry.session_id, {"role": "assistant", "content": "a1"})
        await store.end_turn(entry.session_key)
        for text in ("u2", "a2", "u3", "a3"):
            await store.append_to_transcript(entry.session_id, {"role": "user" if text[0] == "u" else "assistant",
                                                                "content": text})
        assert await store.count_turns(entry.session_id) == 3
        assert await store.rewind_session(entry.session_id, 2) == {
            "rewound_count": 4, "turns_undone": 2, "target_text": "u2"}
        assert await store.accept_inbound("telegram", "12345", "m1") is True
        assert await store.accept_inbound("telegram", "12345", "m1") is False
        assert [r["session_id"] for r in await store.search_transcripts("u1")] == [entry.session_id]
    assert (config.sessions_dir / f"{entry.session_id}.jsonl").exists()
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        assert store.degraded is True
        again = await store.get_or_create_session(dm)
        assert again.session_id == entry.session_id
        assert [m["content"] for m in await store.load_transcript(entry.session_id)] == ["u1", "a1"]
        assert await store.accept_inbound("telegram", "12345", "m1") is False
        new = await store.reset_session(again.session_key)
        assert new.is_fresh_reset is True and new.session_id != entry.session_id


async def test_degraded_state_machine_and_markers(broken_db, clock, dm):
    async with SessionStore(broken_db.sessions_dir, broken_db, clock=clock) as store:
        entry = await store.get_or_create_session(dm)
        await store.append_to_transcript(entry.session_id, {"role": "user", "content": "hi"})
        await store.suspend_session(entry.session_key)
        assert await store.mark_resume_pending(entry.session_key, "restart_timeout") is False
        new = await store.get_or_create_session(dm)
        assert (new.was_auto_reset, new.auto_reset_reason, new.reset_had_activity) == (True, "suspended", True)
        await store.begin_turn(new.session_key, new.session_id, {"role": "user", "content": "q"})
    async with SessionStore(broken_db.sessions_dir, broken_db, clock=clock) as store:
        assert await store.recover_interrupted_turns(3600) == [new.session_key]
        got = await store.get_entry(new.session_key)
        assert (got.resume_pending, got.resume_reason) == (True, "restart_interrupted")


async def test_degraded_failed_read_raises(broken_db, clock, dm):
    async with SessionStore(broken_db.sessions_dir, broken_db, clock=clock) as store:
        entry = await store.get_or_create_session(dm)
        assert await store.load_transcript(entry.session_id) == []
        await store.append_to_transcript(entry.session_id, {"role": "user", "content": "hi"})
    path = broken_db.sessions_dir / f"{entry.session_id}.jsonl"
    path.unlink()
    path.mkdir()  # exists but cannot be read as a file
    async with SessionStore(broken_db.sessions_dir, broken_db, clock=clock) as store:
        with pytest.raises(TranscriptReadError):
            await store.load_transcript(entry.session_id)
        other = await store.get_or_create_session(SessionSource(platform="telegram", chat_id="999"))
        assert await store.load_transcript(other.session_id) == []  # the other sessions go on


async def test_degraded_loader_skips_bad_entries_one_at_a_time(broken_db, clock, caplog):
    good = {"session_key": "agent:main:telegram:dm:1", "session_id": "20260101_000000_aaaaaaaa",
            "created_at": "2026-01-01T00:00:00+00:00", "updated_at": "2026-01-01T00:00:00+00:00",
            "origin": {"platform": "telegram", "chat_id": "1", "chat_type": "dm"}}
    data = {"_README": "x", "agent:main:telegram:dm:1": good, "not-a-dict": [1, 2],
            "agent:main:telegram:dm:2": {"created_at": "2026-01-01T00:00:00+00:00"},  # no session_id
            "agent:main:telegram:dm:3": dict(good, session_id="../../etc/passwd")}
    broken_db.sessions_dir.mkdir(parents=True)
    (broken_db.sessions_dir / "sessions.json").write_text(json.dumps(data))
    async with SessionStore(broken_db.sessions_dir, broken_db, clock=clock) as store:
        assert [e.session_key for e in await store.list_sessions()] == ["agent:main:telegram:dm:1"]
        src = SessionSource(platform="telegram", chat_id="1")
        assert (await store.get_or_create_session(src)).session_id == "20260101_000000_aaaaaaaa"
    skipped = [r.message for r in caplog.records if ": entry " in r.message and "skipped" in r.message]
    assert len(skipped) == 3


def test_the_one_engine_implements_the_backend_protocol_with_typed_records():
    import inspect
    import typing

    from hermes_core.store.backend import StoreBackend
    from hermes_core.store.sqlite_backend import SqliteBackend

    methods = sorted(n for n, v in vars(StoreBackend).items() if inspect.iscoroutinefunction(v))
    # obligation_by_sent_id: delivery reports (docs/behaviour.md §6); adoptable_session: pruning
    # keeps sessions (§2); set_title, recent_sessions: conversation commands (§11);
    # obligations_finished: the outcomes of sends recorded together (§12)
    assert len(methods) == 46
    assert [n for n in methods if not inspect.iscoroutinefunction(getattr(SqliteBackend, n, None))] == []
    for name in methods:
        assert list(inspect.signature(getattr(SqliteBackend, name)).parameters) == list(
            inspect.signature(getattr(StoreBackend, name)).parameters), name
    # no untyped dict crosses the interface except the load_transcript rows and the rewind summary
    dict_returns = sorted(n for n in methods
                          if "dict" in str(typing.get_type_hints(getattr(StoreBackend, n)).get("return")))
    assert dict_returns == ["load_messages", "rewind"]
