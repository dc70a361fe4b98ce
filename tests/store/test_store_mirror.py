"""docs/behaviour.md §0/§3 and seed §3: sessions.json is an atomic, lenient mirror rebuilt from SQLite."""

from __future__ import annotations

import asyncio
import json
import os
import stat

import pytest

from hermes_core.store import SessionStore


async def test_mirror_layout_mode_and_readme(config, clock, dm):
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        entry = await store.get_or_create_session(dm)
    path = config.sessions_dir / "sessions.json"
    data = json.loads(path.read_text())
    assert list(data)[0] == "_README"
    assert list(data)[1:] == ["agent:main:telegram:dm:12345"]
    assert data["agent:main:telegram:dm:12345"]["session_id"] == entry.session_id
    assert data["agent:main:telegram:dm:12345"]["origin"]["chat_id"] == "12345"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert [p.name for p in config.sessions_dir.iterdir() if p.name.endswith(".tmp")] == []


async def _restart_continues(config, clock, dm, damage):
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        entry = await store.get_or_create_session(dm)
        await store.append_to_transcript(entry.session_id, {"role": "user", "content": "before"})
    damage(config.sessions_dir / "sessions.json")
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        again = await store.get_or_create_session(dm)
        assert again.session_id == entry.session_id
        assert [m["content"] for m in await store.load_transcript(again.session_id)] == ["before"]
    data = json.loads((config.sessions_dir / "sessions.json").read_text())
    assert data["agent:main:telegram:dm:12345"]["session_id"] == entry.session_id


async def test_deleted_mirror_is_rebuilt_and_chat_continues(config, clock, dm):
    await _restart_continues(config, clock, dm, lambda p: p.unlink())


async def test_corrupt_mirror_is_rebuilt_and_chat_continues(config, clock, dm):
    await _restart_continues(config, clock, dm, lambda p: p.write_text('{"_README": "x", "agent:ma'))


async def test_mirror_is_debounced_not_written_per_message(config, clock, dm):
    config.storage.mirror_debounce_s = 3600
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        entry = await store.get_or_create_session(dm)
        for i in range(20):
            await store.append_to_transcript(entry.session_id, {"role": "user", "content": str(i)})
            await store.update_session(entry.session_key, i)
        writes_before_close = store._mirror.writes
    assert writes_before_close == 0
    data = json.loads((config.sessions_dir / "sessions.json").read_text())
    assert data["agent:main:telegram:dm:12345"]["last_prompt_tokens"] == 19


async def test_intact_mirror_is_not_rewritten_at_open_but_a_touched_one_is(config, clock, dm):
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        await store.get_or_create_session(dm)
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        await store.flush_mirror()
        assert store._mirror.writes == 0  # open stays O(1): no rewrite of an intact file
    path = config.sessions_dir / "sessions.json"
    # changed while a store was open and idle: that run must not vouch for the foreign file
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        path.write_text('{"_README": "edited by hand"}')
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        await store.flush_mirror()
        assert store._mirror.writes == 1
    assert list(json.loads(path.read_text())) == ["_README", "agent:main:telegram:dm:12345"]


async def test_damaged_route_row_is_skipped_not_fatal(store, dm, clock, caplog):
    from hermes_core import SessionSource
    good = await store.get_or_create_session(SessionSource(platform="slack", chat_id="C1", chat_type="channel"))
    bad = await store.get_or_create_session(dm)
    await store.append_to_transcript(bad.session_id, {"role": "user", "content": "kept"})
    db = store._b().db
    # damage from outside
    await db.execute("UPDATE routes SET entry = '{not json' WHERE session_key = ?", (bad.session_key,))
    store._cache.clear()
    assert [e.session_key for e in await store.list_sessions()] == [good.session_key]
    assert await store.resume_pending_entries() == []  # read at every start: the start goes on
    fresh = await store.get_or_create_session(dm)  # the chat goes on, in a new session
    assert fresh.session_id != bad.session_id
    assert [m["content"] for m in await store.load_transcript(bad.session_id)] == ["kept"]
    assert any("damaged entry" in r.message for r in caplog.records)


async def test_a_route_entry_damaged_from_outside_leaves_its_counters_on_the_session_row(store, dm, clock):
    """`sessions_now` reads only a valid entry: one an outside edit leaves unreadable hands its
    last counters to the session's row first, so the session keeps them, through the next
    message (a new session) too (docs/behaviour.md §3)."""
    from hermes_core.model import TokenUsage
    entry = await store.get_or_create_session(dm)
    clock.advance(60)
    await store.update_session(entry.session_key, usage=TokenUsage(input_tokens=10, output_tokens=5))
    await store._b().db.execute("UPDATE routes SET entry = '{not json' WHERE session_key = ?", (entry.session_key,))
    store._cache.clear()
    expected = (10, 5, 15, "2026-03-01T12:01:00+00:00")
    info = await store.session_info(entry.session_id)
    assert (info["input_tokens"], info["output_tokens"], info["total_tokens"], info["updated_at"]) == expected
    clock.advance(60)
    assert (await store.get_or_create_session(dm)).session_id != entry.session_id
    info = await store.session_info(entry.session_id)
    assert (info["input_tokens"], info["output_tokens"], info["total_tokens"], info["updated_at"]) == expected


def test_flush_gap_bounds_the_mirror_cost():
    from hermes_core.store.mirror import COST_FACTOR, flush_gap
    assert COST_FACTOR == 10.0
    assert flush_gap(0.25, 0.008) == 0.25        # 1k sessions: the debounce rules
    assert flush_gap(0.25, 0.8) == 8.0           # 100k sessions: 10 × the last rewrite's CPU
    assert flush_gap(0.25, 0.8, cost_factor=20) == 16.0
    assert flush_gap(2.0, -1.0) == 2.0


async def test_next_rewrite_waits_for_the_gap_measured_from_the_last_end(tmp_path):
    from hermes_core.store.mirror import MirrorWriter

    async def render() -> str:
        return '{"_README": "x"}\n'
    writer = MirrorWriter(tmp_path / "sessions.json", render, debounce_s=0.25)
    assert writer._delay(now=100.0) == 0.25      # never written: the debounce only
    writer._last_end, writer.last_cpu = 100.0, 0.8
    assert writer._delay(now=101.0) == 7.0       # gap 8 s from the end, 1 s already passed
    assert writer._delay(now=107.9) == 0.25      # never shorter than the debounce
    assert writer._delay(now=130.0) == 0.25      # idle long enough: just the debounce


async def test_close_writes_the_final_state_even_inside_the_gap(tmp_path):
    from hermes_core.store.mirror import MirrorWriter

    state = {"text": '{"_README": "first"}\n'}

    async def render() -> str:
        return state["text"]
    path = tmp_path / "sessions.json"
    writer = MirrorWriter(path, render, debounce_s=0.0)
    writer.start()
    writer.mark_dirty()
    await writer.flush()
    assert (writer.writes, path.read_text()) == (1, '{"_README": "first"}\n')
    writer.last_cpu = 3600.0                     # as if the last rewrite cost an hour of CPU: gap 10 h
    state["text"] = '{"_README": "last"}\n'
    writer.mark_dirty()
    await writer.close()
    assert (writer.writes, path.read_text()) == (2, '{"_README": "last"}\n')
    assert oct(path.stat().st_mode & 0o777) == "0o600"


async def test_the_gap_grows_with_cpu_spent_not_with_time_spent_waiting(tmp_path):
    # docs/behaviour.md §3: a rewrite that mostly waited (a busy machine, the interpreter lock)
    # must not defer the next one; a rewrite that computed must.
    import time

    from hermes_core.store import cpu
    from hermes_core.store.mirror import MirrorWriter

    def wait() -> str:
        time.sleep(0.3)  # wall time, no CPU
        return '{"_README": "waited"}\n'

    def compute() -> str:
        started = time.thread_time()
        while time.thread_time() - started < 0.05:  # 50 ms of this thread's own CPU
            pass
        return '{"_README": "computed"}\n'

    chosen = {"fn": wait}

    async def render() -> str:
        return await cpu.in_thread(chosen["fn"])
    writer = MirrorWriter(tmp_path / "sessions.json", render, debounce_s=0.25)
    writer.mark_dirty()
    await writer.flush()
    assert writer.last_duration >= 0.3 and writer.last_cpu < 0.05
    assert writer._delay(now=writer._last_end) == 0.25  # just the debounce
    chosen["fn"] = compute
    writer.mark_dirty()
    await writer.flush()
    assert writer.last_cpu >= 0.05
    assert writer._delay(now=writer._last_end) >= 0.5  # 10 × the CPU spent


async def test_a_failed_rewrite_keeps_to_the_cost_bound_too(tmp_path, monkeypatch):
    # docs/behaviour.md §3: on a full disk every rewrite fails after rendering the whole file;
    # the retry waits for the same gap (10 × the CPU spent) as after a rewrite that succeeded,
    # where it used to come every second whatever the render cost.
    import errno
    import time

    from hermes_core.store import cpu, mirror

    def compute() -> str:
        started = time.thread_time()
        while time.thread_time() - started < 0.05:  # 50 ms of this thread's own CPU
            pass
        return '{"_README": "computed"}\n'

    async def render() -> str:
        return await cpu.in_thread(compute)

    def full_disk(path, text, mode=0o600):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(mirror, "write_atomic", full_disk)
    writer = mirror.MirrorWriter(tmp_path / "sessions.json", render, debounce_s=0.25)
    writer.mark_dirty()
    with pytest.raises(OSError) as raised:
        await writer.flush()
    assert raised.value.errno == errno.ENOSPC
    assert writer.last_cpu >= 0.05
    assert writer._delay(now=writer._last_end) >= 0.5  # 10 × the CPU spent, not the debounce


async def test_a_touch_its_turn_saves_costs_no_write_and_an_old_one_is_written_by_a_scheduled_rewrite(
        config, clock, dm, monkeypatch):
    """docs/behaviour.md §3 `sessions.json`: the `updated_at` bump of a message that its turn's
    own save carries is never written on its own; one still pending after TOUCH_WRITE_BEHIND_S
    is written by the rewrite scheduled for then."""
    from hermes_core.store import session_store

    monkeypatch.setattr(session_store, "TOUCH_WRITE_BEHIND_S", 0.05)  # 30 s in production
    config.storage.mirror_debounce_s = 3600  # no debounced rewrite: the test drives them
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        entry = await store.get_or_create_session(dm)  # created at 12:00
        db = store._b().db

        async def stored_updated_at():
            return await db.fetchval("SELECT json_extract(entry, '$.updated_at') FROM routes WHERE session_key = ?",
                                     (entry.session_key,))
        clock.advance(60)
        writes = db.writes
        await store.get_or_create_session(dm)  # the bump of a message at 12:01
        await store.flush_mirror()
        assert await stored_updated_at() == "2026-03-01T12:00:00+00:00"  # left for its turn
        await store.update_session(entry.session_key, 7)  # its turn saves the whole entry
        await store.flush_mirror()
        assert db.writes - writes == 1  # the save only: no touch statement
        assert await stored_updated_at() == "2026-03-01T12:01:00+00:00"

        clock.advance(60)
        await store.get_or_create_session(dm)  # a bump no save follows (12:02:00.00)
        await store.flush_mirror()
        assert await stored_updated_at() == "2026-03-01T12:01:00+00:00"
        clock.advance(0.03)
        await store.get_or_create_session(dm)  # renewed: the key has been pending since 12:02:00.00
        clock.advance(0.03)  # pending 60 ms, its newest bump 30 ms old
        await asyncio.sleep(0.2)  # the scheduled rewrite comes due
        await store.flush_mirror()
        assert await stored_updated_at() == "2026-03-01T12:02:00.030000+00:00"
        assert db.writes - writes == 2
    data = json.loads((config.sessions_dir / "sessions.json").read_text())
    assert data["agent:main:telegram:dm:12345"]["updated_at"] == "2026-03-01T12:02:00.030000+00:00"


async def test_a_full_disk_is_one_warning_per_run_of_failures_and_the_mirror_catches_up(tmp_path, caplog,
                                                                                     monkeypatch):
    # docs/behaviour.md §3 and docs/operations.md §4: the mirror stays dirty and is retried until
    # it is written (then it holds the latest state); the retries are said once, not per attempt.
    import errno
    import logging

    from hermes_core.store import mirror

    full = {"on": True, "attempts": 0}
    real_write = mirror.write_atomic

    def write(path, text):
        full["attempts"] += 1
        if full["on"]:
            raise OSError(errno.ENOSPC, "No space left on device", f"{path.parent}/.sessions.json.x.tmp")
        real_write(path, text)
    monkeypatch.setattr(mirror, "write_atomic", write)
    state = {"text": '{"_README": "first"}\n'}

    async def render() -> str:
        return state["text"]
    path = tmp_path / "sessions.json"
    writer = mirror.MirrorWriter(path, render, debounce_s=0.0)
    caplog.set_level(logging.INFO, logger="hermes_core.store.mirror")
    writer.start()
    try:
        writer.mark_dirty()
        while full["attempts"] < 3:  # three failed rewrites (one a second)
            await asyncio.sleep(0.05)
        state["text"] = '{"_README": "latest"}\n'  # changed while the disk was full
        full["on"] = False
        while writer.writes < 1:
            await asyncio.sleep(0.05)
        assert path.read_text() == '{"_README": "latest"}\n'
        full["on"] = True  # full again: a new run of failures is said again
        writer.mark_dirty()
        while full["attempts"] < 5:
            await asyncio.sleep(0.05)
    finally:
        full["on"] = False
        await writer.close()
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", f"sessions.json mirror {path} cannot be written (No space left on device): "
                    "retrying; state.db has every change"),
        ("INFO", f"sessions.json mirror {path} written again after 3 failed attempt(s)"),
        ("WARNING", f"sessions.json mirror {path} cannot be written (No space left on device): "
                    "retrying; state.db has every change"),
        ("INFO", f"sessions.json mirror {path} written again after 1 failed attempt(s)"),
    ]


async def test_a_mirror_no_write_of_a_run_reached_is_rebuilt_at_the_next_start(config, clock, dm, monkeypatch,
                                                                               caplog):
    # docs/behaviour.md §3: a file left behind by a run whose rewrites all failed (full disk, at
    # close too) is stale, though its size and mtime are those of the last clean close; the next
    # healthy start rewrites it, so a later degraded start reads every route.
    import errno
    import logging

    from hermes_core import SessionSource
    from hermes_core.store import mirror

    path = config.sessions_dir / "sessions.json"
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        await store.get_or_create_session(dm)
    assert list(json.loads(path.read_text())) == ["_README", "agent:main:telegram:dm:12345"]

    real_write = mirror.write_atomic

    def full_disk(target, text):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(mirror, "write_atomic", full_disk)
    other = SessionSource(platform="telegram", chat_id="777", chat_type="dm", user_id="7", user_name="Bob")
    with caplog.at_level(logging.WARNING, logger="hermes_core.store.session_store"):
        async with SessionStore(config.sessions_dir, config, clock=clock) as store:
            await store.get_or_create_session(other)
    assert [r.getMessage() for r in caplog.records if r.name == "hermes_core.store.session_store"] == [
        "sessions.json not written at close: [Errno 28] No space left on device"]
    assert list(json.loads(path.read_text())) == ["_README", "agent:main:telegram:dm:12345"]

    monkeypatch.setattr(mirror, "write_atomic", real_write)
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        await store.flush_mirror()
        assert store._mirror.writes == 1
    assert list(json.loads(path.read_text())) == [
        "_README", "agent:main:telegram:dm:12345", "agent:main:telegram:dm:777"]
    # written and vouched for at that clean close: the next start leaves it alone
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        await store.flush_mirror()
        assert store._mirror.writes == 0


async def test_a_mirror_left_by_a_crashed_run_is_rebuilt_at_the_next_start(config, clock, dm):
    # docs/behaviour.md §3: a run that ended without a clean close (killed before its debounced
    # rewrite) vouches for nothing, so the next start rewrites the file.
    from hermes_core import SessionSource

    path = config.sessions_dir / "sessions.json"
    config.storage.mirror_debounce_s = 3600
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        await store.get_or_create_session(dm)
    store = SessionStore(config.sessions_dir, config, clock=clock)
    await store.open()
    other = SessionSource(platform="telegram", chat_id="777", chat_type="dm", user_id="7", user_name="Bob")
    await store.get_or_create_session(other)
    # a crash: the process dies before the rewrite; nothing of close() runs (the test only
    # releases what the process held)
    store._mirror._task.cancel()
    await store._backend.close()
    store._home_lock.release()
    assert list(json.loads(path.read_text())) == ["_README", "agent:main:telegram:dm:12345"]
    config.storage.mirror_debounce_s = 0.0
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        await store.flush_mirror()
    assert list(json.loads(path.read_text())) == [
        "_README", "agent:main:telegram:dm:12345", "agent:main:telegram:dm:777"]
