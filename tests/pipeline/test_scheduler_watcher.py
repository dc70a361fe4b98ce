"""The housekeeping watcher (docs/architecture.md §6): tick with a fake clock, isolation, tick timeout,
and one real APScheduler run with a 50 ms interval."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timezone

from hermes_core import hookimpl
from hermes_core.plugin_system import create_plugin_manager
from hermes_core.scheduler import Watcher
from hermes_core.settings import GatewayConfig

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)


class Recorder:
    def __init__(self):
        self.contexts = []

    @hookimpl
    async def hermes_housekeeping(self, ctx):
        self.contexts.append(ctx)
        return "recorded"


class Broken:
    @hookimpl
    def hermes_housekeeping(self, ctx):
        raise RuntimeError("plugin bug")


class Hanging:
    @hookimpl
    async def hermes_housekeeping(self, ctx):
        await asyncio.Event().wait()


def _pm(*plugins):
    pm, _ = create_plugin_manager(None)
    # These tests use a stand-in store; the core's own passes are tested on a real store in
    # test_housekeeping_prune.py.
    for name in ("builtin:housekeeping", "builtin:fts_maintenance"):
        pm.unregister(name=name)
    for index, plugin in enumerate(plugins):
        pm.register(plugin, name=f"test{index}")
    return pm


async def test_tick_broadcasts_with_fake_clock_and_shared_state(tmp_path):
    recorder = Recorder()
    store = object()
    watcher = Watcher(_pm(recorder), GatewayConfig(home=tmp_path), store, clock=lambda: T0)
    results = await watcher.tick()
    assert ("test0", "recorded") in results
    ctx = recorder.contexts[0]
    assert ctx.now == T0 and ctx.store is store and ctx.app is None
    ctx.state["mark"] = 1
    await watcher.tick()
    assert recorder.contexts[1].state == {"mark": 1}
    assert watcher.ticks == 2 and watcher.tick_errors == 0


async def test_failing_plugin_does_not_stop_others(tmp_path):
    recorder = Recorder()
    watcher = Watcher(_pm(recorder, Broken()), GatewayConfig(home=tmp_path), None, clock=lambda: T0)
    results = dict(await watcher.tick())
    assert results["test0"] == "recorded"
    assert isinstance(results["test1"], RuntimeError)
    assert watcher.tick_errors == 1


async def test_hung_tick_is_bounded_by_tick_timeout(tmp_path):
    config = GatewayConfig(home=tmp_path, scheduler={"tick_timeout_s": 0.05})
    watcher = Watcher(_pm(Hanging()), config, None, clock=lambda: T0)
    assert await watcher.tick() == []
    assert watcher.tick_errors == 1 and watcher.ticks == 1


async def test_scheduler_runs_ticks_and_stops_cleanly(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    recorder = Recorder()
    config = GatewayConfig(home=tmp_path, scheduler={"interval_s": 0.05, "drain_timeout_s": 5})
    watcher = Watcher(_pm(recorder), config, None)
    watcher.start()
    assert watcher.running is True
    async with asyncio.timeout(10):
        while watcher.ticks < 1:
            await asyncio.sleep(0.01)
    await watcher.stop()
    assert watcher.running is False
    assert watcher.scheduler_events == {"error": 0, "missed": 0, "max_instances": 0}
    text = caplog.text.lower()
    assert "missed" not in text and "cancelled" not in text
    assert recorder.contexts, "the hook ran"
    await watcher.stop()  # idempotent
