"""Core housekeeping builtin (seed §10, docs/behaviour.md §2): a watcher tick prunes routes older than
`session_store_max_age_days`, at most hourly, keeping transcripts; 0 disables it."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from pipeline_helpers import Clock

from hermes_core.model import SessionSource
from hermes_core.plugin_system import create_plugin_manager
from hermes_core.scheduler import Watcher
from hermes_core.settings import GatewayConfig
from hermes_core.store import SessionStore

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)


OLD = SessionSource("telegram", "1", chat_type="dm", user_id="1")
FRESH = SessionSource("telegram", "2", chat_type="dm", user_id="2")


async def _setup(tmp_path, days):
    clock = Clock(T0)
    config = GatewayConfig(home=tmp_path, session_store_max_age_days=days)
    store = SessionStore(config.sessions_dir, config, clock=clock)
    await store.open()
    old = await store.get_or_create_session(OLD)
    await store.append_to_transcript(old.session_id, {"role": "user", "content": "keep me"})
    clock.now = T0 + timedelta(days=2)
    await store.get_or_create_session(FRESH)
    pm, _ = create_plugin_manager(None)
    return clock, store, Watcher(pm, config, store, clock=clock), old


async def test_tick_prunes_old_routes_hourly_and_keeps_transcripts(tmp_path):
    clock, store, watcher, old = await _setup(tmp_path, days=1)
    try:
        results = dict(await watcher.tick())
        assert results["builtin:housekeeping"] == 1
        assert await store.get_entry("agent:main:telegram:dm:1") is None
        assert (await store.get_entry("agent:main:telegram:dm:2")) is not None
        assert [m["content"] for m in await store.load_transcript(old.session_id)] == ["keep me"]
        # Within the hour nothing runs again; after an hour it does.
        clock.now += timedelta(minutes=59)
        assert dict(await watcher.tick())["builtin:housekeeping"] is None
        clock.now += timedelta(minutes=2)
        assert dict(await watcher.tick())["builtin:housekeeping"] == 0
    finally:
        await store.close()


async def test_zero_days_disables_pruning(tmp_path):
    clock, store, watcher, _old = await _setup(tmp_path, days=0)
    try:
        assert dict(await watcher.tick())["builtin:housekeeping"] is None
        assert await store.get_entry("agent:main:telegram:dm:1") is not None
    finally:
        await store.close()


async def test_tick_rebuilds_a_damaged_fts_index_without_losing_messages(tmp_path):
    """State DB and FTS recovery: the watcher's FTS pass detects damage (rank=1 integrity check),
    rebuilds from `messages`, and runs again only after `fts_check_interval_s`; the first check
    runs one interval after start, never at start (docs/behaviour.md §3)."""
    clock, store, watcher, old = await _setup(tmp_path, days=0)
    try:
        assert dict(await watcher.tick())["builtin:fts_maintenance"] is None  # deferred at start
        clock.now += timedelta(seconds=3600)
        assert dict(await watcher.tick())["builtin:fts_maintenance"] is False  # healthy
        db = store._b().db
        await db.execute("DELETE FROM messages_fts_data WHERE id > 10")
        clock.now += timedelta(seconds=3599)
        assert dict(await watcher.tick())["builtin:fts_maintenance"] is None  # not due yet
        clock.now += timedelta(seconds=2)
        assert dict(await watcher.tick())["builtin:fts_maintenance"] is True  # rebuilt
        hits = await store.search_transcripts("keep", limit=5)
        assert [h["session_id"] for h in hits] == [old.session_id]
        assert [m["content"] for m in await store.load_transcript(old.session_id)] == ["keep me"]
    finally:
        await store.close()


async def test_the_fts_check_is_put_off_while_turns_are_queued_or_running(tmp_path):
    from types import SimpleNamespace

    clock, store, _watcher, _old = await _setup(tmp_path, days=0)
    busy = {"jobs": 2}
    app = SimpleNamespace(runner=SimpleNamespace(pending=lambda: busy["jobs"]))
    pm, _ = create_plugin_manager(None)
    watcher = Watcher(pm, store.config, store, clock=clock, app=app)
    try:
        assert dict(await watcher.tick())["builtin:fts_maintenance"] is None  # deferred at start
        clock.now += timedelta(seconds=3600)
        assert dict(await watcher.tick())["builtin:fts_maintenance"] is None  # busy: put off
        busy["jobs"] = 0
        assert dict(await watcher.tick())["builtin:fts_maintenance"] is False  # idle: checked
    finally:
        await store.close()
