"""Core housekeeping as a builtin plugin (seed §10; CONVENTIONS.md §2 "Housekeeping").

Route pruning: at most once an hour (seed §10 "every hour"), `store.prune_old_entries(days)` with
`session_store_max_age_days`; `<= 0` disables it (SPEC.md §2). Only routes go; transcripts stay.
Nothing here ends a transcript for idleness or the time of day.
"""

from __future__ import annotations

import logging

from ..markers import hookimpl

log = logging.getLogger(__name__)

PRUNE_INTERVAL_S = 3600.0
_PRUNE = "core.housekeeping.prune"


async def prune_routes(ctx) -> int | None:
    """Prune old routes if due. Returns the number removed, or None when disabled or not due."""
    days = ctx.config.session_store_max_age_days
    if days <= 0:
        return None
    if not ctx.is_due(_PRUNE, PRUNE_INTERVAL_S):
        return None
    removed = await ctx.store.prune_old_entries(days)
    ctx.mark_done(_PRUNE)
    if removed:
        log.info("housekeeping pruned %s route(s) older than %d days", removed, days)
    return removed


@hookimpl
async def hermes_housekeeping(ctx):
    """Core pass: prune old routes (hourly)."""
    return await prune_routes(ctx)
