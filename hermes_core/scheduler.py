"""The housekeeping watcher (seed §10; docs/architecture.md §6) under APScheduler 3's AsyncIOScheduler.

This is the only module that imports apscheduler. Every tick broadcasts
`hermes_housekeeping(ctx)` (isolated and time-limited per plugin); the core's own housekeeping
(route pruning, …) is the builtin plugin `hermes_core.builtin.housekeeping`.

Job defaults: `coalesce=True` (a backlog of missed runs collapses into one), `max_instances=1`
(ticks never overlap), `misfire_grace_time` ≈ the interval (a late tick still runs, the APScheduler
default of 1 s would drop it). A hung tick is bounded by `[scheduler] tick_timeout_s`.
Stop order: pause → await the in-flight tick (up to `drain_timeout_s`) → `shutdown(wait=False)`
→ `await asyncio.sleep(0)` (shutdown is deferred to the loop).
Two gateway processes on one database would run two watchers; one gateway per home is enforced
by the store's home lock.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_MAX_INSTANCES, EVENT_JOB_MISSED
from apscheduler.schedulers.asyncio import AsyncIOScheduler

from .model.timeutil import Clock, utc_now
from .plugin_system.dispatch import call_broadcast

log = logging.getLogger(__name__)

JOB_ID = "hermes.watcher"


@dataclass
class HousekeepingContext:
    """What `hermes_housekeeping(ctx)` implementations receive.

    Attributes:
        store: the open SessionStore.
        config: the GatewayConfig.
        clock: aware-UTC clock; use `ctx.now` rather than the wall clock.
        now: the tick's time (from `clock`).
        app: the GatewayApp, or None in unit tests.
        state: a dict kept across ticks of one watcher (e.g. when a pass last ran), keyed by
            the plugin's own names.
    """

    store: Any
    config: Any
    clock: Clock
    now: datetime
    app: Any = None
    state: dict[str, Any] = field(default_factory=dict)

    def is_due(self, name: str, interval_s: float) -> bool:
        """True when the pass `name` has never completed or last completed `interval_s`
        seconds or more before `now` (see `mark_done`)."""
        last = self.state.get(name)
        return last is None or (self.now - last).total_seconds() >= interval_s

    def mark_done(self, name: str) -> None:
        """Record that the pass `name` completed at `now`; a pass that raised is not marked,
        so the next tick retries it."""
        self.state[name] = self.now


class Watcher:
    """Runs housekeeping ticks on an interval.

    Args:
        pm: the plugin manager.
        config: GatewayConfig (`[scheduler] interval_s`, `jitter_s`, `tick_timeout_s`,
            `drain_timeout_s`, all seconds; `[plugins] hook_timeout_s`).
        store: the open store, passed to housekeeping.
        clock: injectable aware-UTC clock.
        app: passed through to `ctx.app`.
    """

    def __init__(self, pm: Any, config: Any, store: Any, *, clock: Clock = utc_now, app: Any = None):
        self.pm = pm
        self.config = config
        self.store = store
        self.clock = clock
        self.app = app
        self.state: dict[str, Any] = {}
        self.ticks = 0
        self.tick_errors = 0
        self.scheduler_events: dict[str, int] = {"error": 0, "missed": 0, "max_instances": 0}
        self._scheduler: AsyncIOScheduler | None = None
        self._idle = asyncio.Event()
        self._idle.set()

    async def tick(self) -> list[tuple[str, Any]]:
        """Run one housekeeping pass now; never raises (errors are logged and counted).

        Returns:
            The `(plugin name, result or exception)` list of the broadcast, `[]` on timeout.
        """
        self._idle.clear()
        try:
            ctx = HousekeepingContext(store=self.store, config=self.config, clock=self.clock,
                                      now=self.clock(), app=self.app, state=self.state)
            async with asyncio.timeout(self.config.scheduler.tick_timeout_s):
                results = await call_broadcast(self.pm, "hermes_housekeeping",
                                               timeout=self.config.plugins.hook_timeout_s, ctx=ctx)
            self.tick_errors += sum(1 for _name, r in results if isinstance(r, Exception))
            return results
        except TimeoutError:
            self.tick_errors += 1
            log.error("housekeeping tick exceeded %ss and was stopped", self.config.scheduler.tick_timeout_s)
            return []
        except Exception:  # never let a tick error reach APScheduler's executor
            self.tick_errors += 1
            log.exception("housekeeping tick failed")
            return []
        finally:
            self.ticks += 1
            self._idle.set()

    def _on_event(self, event: Any) -> None:
        if event.code == EVENT_JOB_ERROR:
            self.scheduler_events["error"] += 1
            log.error("watcher job error: %s", getattr(event, "exception", None))
        elif event.code == EVENT_JOB_MISSED:
            self.scheduler_events["missed"] += 1
            log.warning("watcher tick missed its run time")
        elif event.code == EVENT_JOB_MAX_INSTANCES:
            self.scheduler_events["max_instances"] += 1
            log.warning("watcher tick skipped: the previous tick is still running")

    @property
    def running(self) -> bool:
        return self._scheduler is not None

    def start(self) -> None:
        """Create and start the scheduler inside the running loop; the first tick runs now.
        Idempotent."""
        if self._scheduler is not None:
            return
        interval = self.config.scheduler.interval_s
        scheduler = AsyncIOScheduler(timezone="UTC", job_defaults={
            "coalesce": True, "max_instances": 1, "misfire_grace_time": max(1, int(interval) or 1)})
        scheduler.add_job(self.tick, "interval", seconds=interval,
                          jitter=self.config.scheduler.jitter_s or None, id=JOB_ID,
                          replace_existing=True, next_run_time=datetime.now(timezone.utc))
        scheduler.add_listener(self._on_event, EVENT_JOB_ERROR | EVENT_JOB_MISSED | EVENT_JOB_MAX_INSTANCES)
        scheduler.start()
        self._scheduler = scheduler

    async def stop(self) -> None:
        """Pause, wait for the in-flight tick (up to `drain_timeout_s`), shut down. Idempotent."""
        scheduler, self._scheduler = self._scheduler, None
        if scheduler is None:
            return
        scheduler.pause()
        try:
            async with asyncio.timeout(self.config.scheduler.drain_timeout_s):
                await self._idle.wait()
        except TimeoutError:
            log.warning("housekeeping tick still running at shutdown; it will be cancelled")
        scheduler.shutdown(wait=False)
        await asyncio.sleep(0)  # APScheduler defers the shutdown to the loop
