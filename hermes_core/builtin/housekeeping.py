"""Core housekeeping as a builtin plugin (seed §10; docs/architecture.md §2 "Housekeeping").

Route pruning: at most once an hour (seed §10 "every hour"), `store.prune_old_entries(days)` with
`session_store_max_age_days`; `<= 0` disables it (docs/behaviour.md §2). Only routes go; transcripts stay.
Nothing here ends a transcript for idleness or the time of day.

Intake and ledger retention (docs/behaviour.md §5, §6): hourly too, finished inbound rows older than
`store.intake.INBOUND_RETENTION_DAYS` (7 days: dedupe ids outlive any platform's redelivery
window) and delivered/abandoned delivery obligations older than
`store.ledger.LEDGER_RETENTION_DAYS` (7 days) are deleted. Rows still owed or still queued are
never pruned. The hook's result stays the route count (the retention counts are logged).
"""

from __future__ import annotations

import logging

from ..markers import hookimpl

log = logging.getLogger(__name__)

PRUNE_INTERVAL_S = 3600.0
_PRUNE = "core.housekeeping.prune"
_RETENTION = "core.housekeeping.intake_retention"


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


async def prune_intake_and_ledger(ctx) -> tuple[int, int] | None:
    """Forget finished inbound rows and settled obligations past retention, if due (hourly).

    Returns `(inbound rows removed, obligations removed)`, or None when not due or the store has
    no intake (a store without these operations)."""
    store = ctx.store
    if not hasattr(store, "prune_inbound") or not ctx.is_due(_RETENTION, PRUNE_INTERVAL_S):
        return None
    inbound = await store.prune_inbound()
    obligations = await store.prune_obligations()
    ctx.mark_done(_RETENTION)
    if inbound or obligations:
        log.info("housekeeping forgot %d inbound id(s) and %d settled delivery obligation(s) past retention",
                 inbound, obligations)
    return inbound, obligations


@hookimpl
async def hermes_housekeeping(ctx):
    """Core passes: prune old routes and intake/ledger rows past retention (hourly). Returns the
    number of routes removed (None when route pruning is disabled or not due)."""
    try:
        await prune_intake_and_ledger(ctx)
    except Exception:  # one failed pass must not stop route pruning; retried next tick
        log.exception("intake/ledger retention pass failed")
    return await prune_routes(ctx)
