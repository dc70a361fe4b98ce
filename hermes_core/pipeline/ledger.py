"""Sending what the delivery ledger owes (docs/behaviour.md §6; seed §7).

`send_obligation` is the one path from a recorded obligation to the chat: 'attempting' before
the send (recorded with the reply on the live path), 'delivered' / 'failed' after. `redeliver`
is the start-up sweep's step for one obligation left open by a previous run: give up after
`MAX_ATTEMPTS` attempts or `MAX_AGE_S`, re-send an 'attempting' one (the chat may have it
already) with `RECOVERED_PREFIX`, a 'pending' or 'failed' one plainly.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Coroutine

from ..model.source import SessionSource
from ..store.ledger import MAX_AGE_S, MAX_ATTEMPTS, recovered_text
from .deps import PipelineDeps

log = logging.getLogger(__name__)


async def send_obligation(deps: PipelineDeps, obligation_id: int, target: SessionSource, text: str, *,
                          session_key: str, session_id: str | None, reply_to: str | None,
                          kind: str = "reply", attempting: bool = False,
                          detach: Callable[[Coroutine[Any, Any, None]], None] | None = None) -> bool:
    """Send obligation `obligation_id` (`text` to `target`) and record the outcome.

    Args:
        attempting: the obligation was recorded 'attempting' with this attempt counted (the
            live path, `store.record_reply(sending=True)`): no write before the send.
        detach: runs a coroutine as a tracked background task (`GatewayRunner`): the outcome is
            then recorded there and this returns once the send is done, so the session's next
            write need not wait for that commit (docs/behaviour.md §12). A crash before it
            commits is a crash during the send (re-sent once, labelled, §6); a failure to record
            it is logged. None: recorded before this returns.

    Returns:
        True when delivered. A missing adapter or a failed send leaves it 'failed' (retried at
        the next start, up to MAX_ATTEMPTS).
    """
    store = deps.store
    adapter = deps.adapters.get(target.platform)
    if adapter is None:
        log.error("no running adapter for %s: obligation %s stays owed", target.platform, obligation_id)
        return False
    if not attempting:
        await store.start_delivery(obligation_id)
    outcome = await deps.deliverer.deliver(adapter, target, text, session_key=session_key,
                                           session_id=session_id, reply_to=reply_to, kind=kind)
    record = store.finish_delivery(obligation_id, outcome.delivered, outcome.error, sent_ids=outcome.message_ids)
    if detach is None:
        await record
    else:
        detach(_logged(record, obligation_id, session_key))
    return outcome.delivered


async def _logged(record: Coroutine[Any, Any, None], obligation_id: int, session_key: str) -> None:
    try:
        await record
    except Exception as exc:
        log.error("obligation %s of %s was sent but its outcome could not be recorded (%s); the next start "
                  "sends it again, labelled as a possible duplicate", obligation_id, session_key,
                  " ".join(str(exc).split()))


async def redeliver(deps: PipelineDeps, ob: dict[str, Any]) -> str:
    """Start-up sweep step for one open obligation (a dict of `store.open_obligations()`).

    Returns:
        What happened: `"abandoned"`, `"delivered"`, `"failed"` or `"no_adapter"`.
    """
    store = deps.store
    ob_id, key = ob["id"], ob["session_key"]
    age = deps.clock().timestamp() - float(ob.get("created_ts") or 0)
    if int(ob.get("attempts") or 0) >= MAX_ATTEMPTS or age > MAX_AGE_S:
        reason = (f"gave up after {ob.get('attempts')} attempts" if int(ob.get("attempts") or 0) >= MAX_ATTEMPTS
                  else f"older than {MAX_AGE_S // 3600} h")
        log.warning("delivery obligation %s of %s abandoned: %s", ob_id, key, reason)
        await store.abandon_delivery(ob_id, reason)
        return "abandoned"
    target = ob.get("origin")
    if target is None:
        await store.abandon_delivery(ob_id, "no origin to deliver to")
        return "abandoned"
    if target.platform not in deps.adapters:
        log.error("obligation %s of %s: platform %s is not running; kept for a later start",
                  ob_id, key, target.platform)
        return "no_adapter"
    text = recovered_text(ob["content"]) if ob["state"] == "attempting" else ob["content"]
    ok = await send_obligation(deps, ob_id, target, text, session_key=key, session_id=ob.get("session_id"),
                               reply_to=ob.get("reply_to"), kind="recovered")
    return "delivered" if ok else "failed"
