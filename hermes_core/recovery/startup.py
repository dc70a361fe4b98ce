"""Start-up recovery of a gateway (seed §7 "startup recovery sequence"; docs/behaviour.md §6).

Runs after the store is open and the unclean-shutdown check promoted marked turns, before any
adapter starts; it only queues work on the (paused) runner, so per session the order is:
re-sends owed by the ledger → auto-continue of an interrupted turn → replay of accepted
messages never processed → new input.

1. Stuck loops (`restart_counts.json` in HERMES_HOME): a session counted in 3 or more
   consecutive interrupted runs is suspended (plan `hermes_recovery_plan(failure="stuck_loop")`),
   the user starts afresh. The file is consumed at start and written again at once with the
   counts still open — a session auto-continued after a crash counts one more — so that a crash
   during the resumed turn still counts (the seed's file is only written at shutdown, which a
   crash loop never reaches). At shutdown it becomes `{key: old + 1}` for the sessions the
   drain interrupted (others dropped), and a completed turn removes its key.
2. Ledger sweep: every open delivery obligation is queued for re-sending (`ledger.redeliver`);
   its session's `resume_pending` is cleared (delivered, not answered a second time).
3. Auto-continue: for each entry still `resume_pending` with a seed auto-resume reason whose
   interruption is younger than `[agent] gateway_auto_continue_freshness` seconds (`<= 0`: any
   age), the plan
   comes from `hermes_recovery_plan(session=entry, failure=reason)`: `resume` / `retry` /
   `backoff` queue one auto-continue turn; `reset` starts a new session; `give_up` clears the
   flag. Every applied plan is broadcast through `hermes_on_session_recovered`. Older ones keep
   their flag: the next user message continues the same session (seed §7 "auto-resume on next
   access").
4. Intake replay: accepted messages never started are queued in arrival order.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..builtin.recovery import default_recovery_plan
from ..model.entry import AUTO_RESUME_REASONS
from ..plugin_system.dispatch import call_broadcast
from ..store.files import read_json_object, write_atomic
from ..types import RecoveryPlan

log = logging.getLogger(__name__)

RESTART_COUNTS_FILE = "restart_counts.json"
STUCK_LOOP_THRESHOLD = 3


def load_restart_counts(home: Path) -> dict[str, int]:
    """`{session_key: count}` from `restart_counts.json`; missing or corrupt → `{}` (logged)."""
    path = Path(home) / RESTART_COUNTS_FILE
    data = read_json_object(path)  # missing or corrupt: stuck-loop counts start from zero
    out = {}
    for key, value in data.items():
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            out[str(key)] = value
        else:
            log.warning("%s: count of %r is not a positive integer; skipped", path, key)
    return out


def save_restart_counts(home: Path, counts: dict[str, int]) -> None:
    """Write `counts` atomically, or delete the file when empty. Failures are logged."""
    path = Path(home) / RESTART_COUNTS_FILE
    try:
        if counts:
            write_atomic(path, json.dumps(counts, ensure_ascii=False, sort_keys=True))
        elif path.exists():
            os.unlink(path)
    except OSError as exc:
        log.error("could not write %s: %s", path, exc)


@dataclass
class RecoveryReport:
    """What start-up recovery queued or changed (for logs and tests)."""

    suspended: list[str] = field(default_factory=list)
    redeliveries: list[int] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    reset: list[str] = field(default_factory=list)
    given_up: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    replayed: int = 0

    def counts(self) -> dict[str, int]:
        """`{kind: how many}` for the recovery metrics (`hermes_recoveries_total{outcome=kind}`)."""
        return {"suspended": len(self.suspended), "redelivered": len(self.redeliveries),
                "resumed": len(self.resumed), "reset": len(self.reset), "given_up": len(self.given_up),
                "stale": len(self.stale), "replayed": self.replayed}


def _plan(pm: Any, entry: Any, failure: str) -> RecoveryPlan:
    try:
        plan = pm.hook.hermes_recovery_plan(session=entry, failure=failure)
    except Exception:  # a broken plugin must not stop recovery: fall back to the core rule
        log.exception("hermes_recovery_plan failed for %s; using the core default", entry.session_key)
        plan = None
    return plan if isinstance(plan, RecoveryPlan) else default_recovery_plan(failure)


async def _broadcast(pm: Any, timeout: float, entry: Any, plan: RecoveryPlan) -> None:
    await call_broadcast(pm, "hermes_on_session_recovered", timeout=timeout, session=entry, plan=plan)


async def restore_at_startup(*, store: Any, runner: Any, pm: Any, config: Any, home: Path, now_ts: float,
                             counts: dict[str, int], crash_interrupted: dict[str, float]) -> RecoveryReport:
    """Queue the start-up recovery work on the paused `runner` (module docstring).

    Args:
        store: the open SessionStore. runner: a paused GatewayRunner. pm: the plugin manager.
        config: GatewayConfig. home: HERMES_HOME. now_ts: the current time, epoch seconds.
        counts: the stuck-loop counts loaded from `restart_counts.json` (updated in place: keys
            suspended are dropped, crash-resumed keys incremented).
        crash_interrupted: `{session_key: turn start, epoch s}` of the turns crash recovery
            marked `resume_pending` at this start (empty after a clean shutdown).
    Returns:
        A RecoveryReport.
    """
    report = RecoveryReport()
    timeout = config.plugins.hook_timeout_s

    async def suspend(key: str) -> None:
        entry = await store.get_entry(key)
        counts.pop(key, None)
        if entry is None or not await store.suspend_session(key, reason="stuck_loop"):
            return
        plan = _plan(pm, entry, "stuck_loop")
        # The core's reason says what this line says; a plugin's own reason is added to it.
        own = "" if plan.reason == default_recovery_plan("stuck_loop").reason else f" ({plan.reason})"
        log.warning("session %s was active across %d+ restarts; suspended%s", key, STUCK_LOOP_THRESHOLD, own)
        report.suspended.append(key)
        await _broadcast(pm, timeout, entry, plan)

    # 1. stuck loops
    for key, count in list(counts.items()):
        if count >= STUCK_LOOP_THRESHOLD:
            await suspend(key)

    # 2. ledger sweep
    swept: set[str] = set()
    for ob in await store.open_obligations():
        runner.enqueue_redelivery(ob)
        report.redeliveries.append(ob["id"])
        swept.add(ob["session_key"])
    for key in swept:
        await store.clear_resume_pending(key)

    # 3. auto-continue
    freshness = config.agent.gateway_auto_continue_freshness
    for entry in await store.resume_pending_entries():
        key, reason = entry.session_key, entry.resume_reason or ""
        if entry.suspended or reason not in AUTO_RESUME_REASONS or entry.origin is None:
            continue
        since = crash_interrupted.get(key)
        if since is None:
            since = entry.last_resume_marked_at.timestamp() if entry.last_resume_marked_at else now_ts
        if freshness > 0 and now_ts - since > freshness:  # <= 0: no limit, as upstream
            log.info("session %s was interrupted %.0f s ago (more than %d s): not continued automatically",
                     key, now_ts - since, freshness)
            report.stale.append(key)
            continue
        if key in crash_interrupted:
            counts[key] = counts.get(key, 0) + 1
            if counts[key] >= STUCK_LOOP_THRESHOLD:
                await suspend(key)
                continue
        plan = _plan(pm, entry, reason)
        if plan.action in ("resume", "retry", "backoff"):
            runner.enqueue_resume(key, entry)
            report.resumed.append(key)
        elif plan.action == "reset":
            await store.reset_session(key)
            report.reset.append(key)
        else:
            await store.clear_resume_pending(key)
            report.given_up.append(key)
        log.info("session %s recovered after %s: %s", key, reason, plan.action)
        await _broadcast(pm, timeout, entry, plan)
    save_restart_counts(home, counts)

    # 4. intake replay
    report.replayed = await runner.restore_intake(await store.pending_inbound())
    return report
