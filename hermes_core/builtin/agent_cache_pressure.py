"""Agent-cache housekeeping as a builtin pass (seed §10, §11; docs/behaviour.md §8).

Every watcher tick: release cached transcripts idle for `agent.agent_cache.idle_ttl_secs`, then
run memory-pressure sweeps while memory is within 2 % of the budget
(`AgentCache.relieve_pressure`, each pass capped as `AgentCache.sweep_under_pressure`:
anonymous memory against `memory_high_mb`, LRU evictions that spare the `protect_recent` most
recent, mid-turn and not-yet-persisted sessions, then `malloc_trim`). Both are soft releases: transcripts stay in
the store and the next turn rebuilds them. Nothing here ends a transcript or a session.
A separate builtin so a failure here never hides route pruning or the FTS check.
"""

from __future__ import annotations

import logging
from typing import Any

from ..markers import hookimpl

log = logging.getLogger(__name__)


def find_agent_cache(app: Any) -> Any:
    """The running gateway's AgentCache (`app.agent_cache`, else the runner's pipeline deps),
    or None (no app, e.g. a unit-test watcher, or not started)."""
    if app is None:
        return None
    cache = getattr(app, "agent_cache", None)
    if cache is None:
        deps = getattr(getattr(app, "runner", None), "deps", None)
        cache = getattr(deps, "agent_cache", None)
    return cache


def run_cache_passes(cache: Any) -> dict[str, Any]:
    """Idle TTL then pressure sweep on `cache`.

    Returns:
        `{"idle": [released keys], "pressure": [released keys], "skipped": [mid-turn or
        unsaved keys the sweep passed over], "trimmed": bool}`.
    """
    idle = cache.evict_idle()
    report = cache.relieve_pressure()
    return {"idle": idle, "pressure": list(report.evicted), "skipped": list(report.skipped),
            "trimmed": report.trimmed}


@hookimpl
def hermes_housekeeping(ctx):
    """Core pass: agent-cache idle TTL and memory-pressure eviction, every tick. Returns the
    `run_cache_passes` dict, or None when the gateway has no agent cache."""
    cache = find_agent_cache(ctx.app)
    if cache is None:
        return None
    return run_cache_passes(cache)
