"""The status a running gateway publishes (docs/operations.md §2): `$HERMES_HOME/status.json`.

`StatusPublisher` collects one snapshot (pid, start time, platforms and their health, busy
sessions, queue depth, ledger backlog, cache, memory, degraded flag, readiness) when the gateway
starts, every `[status] interval_s` seconds on the gateway's own event loop, and once more as it
stops. Each snapshot is written atomically (0600) and handed to the metrics gauges: one
collection serves `hermes-gateway status` and `/metrics`.

`read_status(home)` is the reader's side: it never opens `state.db` and never takes the home
lock (it probes it with a shared lock, released at once), so asking disturbs nothing. A file
whose pid does not hold the lock is the last word of a gateway that is gone; whether that one
stopped cleanly is what its `.clean_shutdown` marker says, the same file the next start reads.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from ..model.timeutil import format_timestamp, parse_timestamp, utc_now
from ..sdk.errors import describe_failure
from ..store.files import CLEAN_SHUTDOWN, WriteFailures, says_clean, write_atomic
from ..store.home_lock import home_is_locked

log = logging.getLogger(__name__)

STATUS_FILE_NAME = "status.json"
# How long one adapter's `health()` may take inside a snapshot.
HEALTH_TIMEOUT_S = 2.0


async def _platform_health(adapters: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, adapter in sorted(adapters.items()):
        try:
            health = await asyncio.wait_for(adapter.health(), HEALTH_TIMEOUT_S)
            out[name] = dict(health) if isinstance(health, dict) else {"ok": bool(health)}
        except Exception as exc:  # a failing probe is the finding, not a failure of the snapshot
            out[name] = {"ok": False, "error": f"health check failed: {describe_failure(exc)}"}
        out[name]["ok"] = bool(out[name].get("ok"))
    return out


async def collect(app: Any, *, state: str) -> dict[str, Any]:
    """One snapshot of `app` (a GatewayApp) as a JSON-ready dict; `state` is `running`,
    `stopping` (a stop began: the drain runs, nothing new is taken) or `stopped`. Counts only:
    no session key, id or text. Platform health is asked only while running: a stopping
    gateway's adapters are going away, and the stop must not wait for their probes."""
    runner, store = app.runner, app.store
    snapshot: dict[str, Any] = {
        "state": state, "pid": os.getpid(), "home": str(app.home),
        "started_at": format_timestamp(app.started_at), "updated_at": format_timestamp(utc_now()),
        "uptime_s": round(time.monotonic() - app.started_monotonic, 3),
        "ready": bool(app.ready and state == "running"),
        # Whether a planned restart (SIGUSR1, `hermes-gateway restart`) is something this
        # gateway can do: `run` restarts through its supervisor; a terminal `chat` has none.
        "restartable": app.on_restart is not None,
        "platforms": await _platform_health(app.adapters) if state == "running" else {},
        "busy_sessions": len(runner.busy_sessions()) if runner is not None else 0,
        "queue_depth": runner.pending() if runner is not None else 0,
        "store_degraded": bool(store is not None and store.is_open and store.degraded),
        "ledger_backlog": None, "replica_ledger_backlog": None, "cache_entries": None, "cache_evictions": {},
        "anon_memory_bytes": None,
    }
    if store is not None and store.is_open:
        try:
            owed = await store.open_obligations()
            snapshot["ledger_backlog"] = len(owed)
            if store.leased:
                # One ledger for every replica of the store: this replica delivers the replies owed
                # in the sessions it holds (docs/operations.md §2, docs/architecture.md §7).
                snapshot["replica_ledger_backlog"] = sum(1 for ob in owed if store.holds_session(ob["session_key"]))
        except Exception as exc:  # the snapshot still says everything else
            log.warning("status: the delivery ledger could not be counted (%s)", describe_failure(exc))
    cache = runner.deps.agent_cache if runner is not None else None
    if cache is not None:
        snapshot["cache_entries"] = len(cache)
        snapshot["cache_evictions"] = dict(cache.stats.evictions)
        snapshot["anon_memory_bytes"] = cache.probe.process_anon()
    return snapshot


class StatusPublisher:
    """Writes `status.json` and feeds the metrics gauges (module docstring).

    Args:
        app: the GatewayApp (its runner, store, adapters, `ready`, `metrics`).
        interval_s: seconds between refreshes.
    """

    def __init__(self, app: Any, interval_s: float) -> None:
        self.app = app
        self.interval_s = interval_s
        self.path = Path(app.home) / STATUS_FILE_NAME
        self._task: asyncio.Task | None = None
        self._refreshes_end = asyncio.Event()
        self._stopping_snapshot: asyncio.Task | None = None  # writes the `stopping` snapshot
        # A full disk fails every refresh: one warning per run of failures, one INFO line when a
        # snapshot is written again (docs/operations.md §2, §4).
        self.failures = WriteFailures(log, "status:", self.path,
                                      "'hermes-gateway status' shows the last snapshot written until it can be")

    async def publish(self, state: str) -> dict[str, Any]:
        """Collect, write and publish one snapshot now; returns it. Never raises for a write
        failure (logged once per run of failures, `self.failures`)."""
        snapshot = await collect(self.app, state=state)
        self.app.metrics.publish(snapshot)
        try:
            await asyncio.to_thread(write_atomic, self.path, json.dumps(snapshot, indent=2) + "\n")
        except OSError as exc:
            self.failures.failed(exc)
        else:
            self.failures.succeeded()
        return snapshot

    def start(self) -> None:
        """Refresh every `interval_s` seconds until `stop()`."""
        if self._task is None:
            self._refreshes_end = asyncio.Event()
            self._task = asyncio.create_task(self._loop(), name="hermes-status")

    async def _loop(self) -> None:
        while not self._refreshes_end.is_set():
            try:
                await self.publish("running")
            except Exception:  # the next refresh tries again
                log.exception("status: snapshot failed")
            try:
                await asyncio.wait_for(self._refreshes_end.wait(), self.interval_s)
            except TimeoutError:
                pass

    def stopping(self) -> None:
        """A stop began: stop refreshing and write a `stopping` snapshot (not ready) in the
        background, so `status` does not show a draining gateway as running and ready until the
        next refresh, and the stop itself (closing the intake, the drain) does not wait for it."""
        if self._stopping_snapshot is None:
            self._stopping_snapshot = asyncio.create_task(self._publish_stopping(), name="hermes-status-stopping")

    async def _publish_stopping(self) -> None:
        await self._end_refreshes()
        try:
            await self.publish("stopping")
        except Exception:
            log.exception("status: snapshot failed")

    async def stop(self) -> None:
        """Stop refreshing and write the final `stopped` snapshot (after the `stopping` one)."""
        if self._stopping_snapshot is not None:
            await asyncio.gather(self._stopping_snapshot, return_exceptions=True)
        await self._end_refreshes()
        try:
            await self.publish("stopped")
        except Exception:
            log.exception("status: final snapshot failed")

    async def _end_refreshes(self) -> None:
        # A refresh under way is let finish rather than cancelled: cancelling it inside a store
        # read would leave that read to the closing store.
        task, self._task = self._task, None
        if task is not None:
            self._refreshes_end.set()
            await asyncio.gather(task, return_exceptions=True)


class SnapshotShape(BaseModel):
    """The fields of a `collect` snapshot that readers rely on, with their types: a status.json
    that does not have them (edited by hand, damaged) is read as no snapshot at all, never
    half-shown (`read_status`)."""

    model_config = ConfigDict(extra="allow", strict=True)

    state: str
    pid: int
    home: str
    started_at: str | None = None
    updated_at: str | None = None
    uptime_s: float | None = None
    ready: bool = False
    restartable: bool = False
    platforms: dict[str, dict[str, Any]] = {}
    busy_sessions: int = 0
    queue_depth: int = 0
    store_degraded: bool = False
    ledger_backlog: int | None = None
    replica_ledger_backlog: int | None = None
    cache_entries: int | None = None
    cache_evictions: dict[str, int] = {}
    anon_memory_bytes: int | None = None


def _read_snapshot(path: Path) -> dict[str, Any] | None:
    """The snapshot in `path` as written, or None when it is missing, not JSON, or not of
    `SnapshotShape`."""
    try:
        snapshot = json.loads(path.read_text(encoding="utf-8"))
        SnapshotShape.model_validate(snapshot)
    except (OSError, UnicodeDecodeError, ValueError):  # ValidationError is a ValueError
        return None
    return snapshot


def read_status(home: Path | str) -> dict[str, Any]:
    """What `hermes-gateway status` reports for `home` without disturbing a gateway there.

    Returns:
        `{"running": bool, "pid": int | None, ...}`: with a gateway holding the lock, its last
        snapshot (`stale: true` when the file is missing, unreadable, not of `SnapshotShape`,
        or belongs to another pid);
        without one, `running: false`, the last snapshot as `last` (or None) and `clean_stop`:
        True when the last gateway wrote its `.clean_shutdown` marker, False when it did not
        (killed, crashed, or a stop that could not mark a cut-off turn: the next start runs
        crash recovery), None on a home no gateway has run on.
    """
    home = Path(home)
    pid = home_is_locked(home) if home.is_dir() else None
    snapshot = _read_snapshot(home / STATUS_FILE_NAME)
    if pid is None:
        return {"running": False, "pid": None, "home": str(home), "last": snapshot,
                "clean_stop": _clean_stop(home, ran=snapshot is not None)}
    if snapshot is None or (pid and snapshot.get("pid") != pid):
        return {"running": True, "pid": pid or None, "home": str(home), "stale": True}
    return {"running": True, "stale": False, **snapshot, "uptime_s": _uptime_now(snapshot), "pid": pid}


def _uptime_now(snapshot: dict[str, Any]) -> float | None:
    """The running gateway's uptime in seconds now: the snapshot's (read on the gateway's
    monotonic clock when it was written) plus the time since it was written (`updated_at`), so
    `status` does not show an uptime up to `[status] interval_s` old. The snapshot's own when
    `updated_at` is missing, unreadable or in the future (the wall clock was set back)."""
    uptime = snapshot.get("uptime_s")
    try:
        since = (utc_now() - parse_timestamp(snapshot.get("updated_at"))).total_seconds()
    except (TypeError, ValueError):  # None (no updated_at) or not ISO-8601
        return uptime
    return round(uptime + since, 3) if uptime is not None and since >= 0 else uptime


def _clean_stop(home: Path, *, ran: bool) -> bool | None:
    """`read_status`'s `clean_stop` for a home no gateway holds (`ran`: a gateway left a snapshot)."""
    if not home.is_dir():
        return None  # no gateway can have run there (it may be a file in the way)
    try:
        clean = says_clean((home / CLEAN_SHUTDOWN).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return False if ran else None
    except (OSError, UnicodeDecodeError):
        return False  # the next start reads it as unclean too
    if clean and not ran:
        # A clean marker without a snapshot is the one `sessions import` leaves on the home it
        # fills first: no gateway ran there, so there is no stop to speak of.
        return None
    return clean
