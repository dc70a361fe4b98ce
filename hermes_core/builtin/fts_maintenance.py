"""FTS index maintenance as a builtin housekeeping pass ("State DB and FTS recovery"; docs/behaviour.md §3).

`messages_fts` is derived from `messages`: every `[storage] fts_check_interval_s` seconds a
watcher tick runs the index's integrity check (rank=1 form) and rebuilds a damaged index from
`messages`, losing no message. A separate builtin from route pruning so that one failing pass
never hides the other (broadcast hooks are isolated per plugin).
"""

from __future__ import annotations

import logging

from ..markers import hookimpl

log = logging.getLogger(__name__)

_CHECK = "core.fts_maintenance.check"


async def check_index(ctx) -> bool | None:
    """Check (and if needed rebuild) the FTS index when due.

    Returns True when a rebuild was needed, False when the index was healthy, None when not due.
    """
    if not ctx.is_due(_CHECK, ctx.config.storage.fts_check_interval_s):
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
