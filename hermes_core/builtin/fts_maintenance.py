"""FTS index maintenance as a builtin housekeeping pass ("State DB and FTS recovery"; docs/behaviour.md §3).

`messages_fts` is derived from `messages`: every `[storage] fts_check_interval_s` seconds a
watcher tick runs the index's integrity check (rank=1 form) and rebuilds a damaged index from
`messages`, losing no message. A separate builtin from route pruning so that one failing pass
never hides the other (broadcast hooks are isolated per plugin).

The check is deferred: the first one runs one interval after the watcher started, not at start,
and only on a tick when the gateway has no turn running or queued. Why: FTS5's integrity check
is an `INSERT` command, so it holds the write lock for as long as it reads the whole index (4–5 s
on a 300 MB home, `benchmarks/bench_restart.py`); at start it delayed the first replies, and a
read-only connection cannot run it (SQLite before 3.44 has no read-only FTS5 check). Damage
found by a write or a search is repaired at once anyway (`SqliteBackend`), so deferring the
periodic check loses nothing.
"""

from __future__ import annotations

import logging

from ..markers import hookimpl

log = logging.getLogger(__name__)

_CHECK = "core.fts_maintenance.check"


async def check_index(ctx) -> bool | None:
    """Check (and if needed rebuild) the FTS index when due.

    Returns True when a rebuild was needed, False when the index was healthy, None when not due
    (the first tick only starts the interval; a busy gateway puts the check off to a later tick).
    """
    if _CHECK not in ctx.state:
        ctx.mark_done(_CHECK)  # deferred: the first check runs one interval after start
        return None
    if not ctx.is_due(_CHECK, ctx.config.storage.fts_check_interval_s):
        return None
    runner = getattr(ctx.app, "runner", None)
    if runner is not None and runner.pending():
        log.debug("FTS integrity check put off: %d job(s) queued or running", runner.pending())
        return None
    rebuilt = await ctx.store.check_fts()
    ctx.mark_done(_CHECK)
    if rebuilt:
        log.warning("housekeeping found the transcript search index damaged and rebuilt it")
    return rebuilt


@hookimpl
async def hermes_housekeeping(ctx):
    """Core pass: FTS integrity check and rebuild, every `fts_check_interval_s` seconds."""
    return await check_index(ctx)
