"""Delivery of replies and notices: plan through the hook, send through the adapter
(docs/architecture.md §2 "plan synchronously in hooks, execute asynchronously in the core").

The plan comes from the `hermes_plan_delivery` hook chain (builtin default chunks to the
adapter's limit; plugins and deployments may wrap it to re-format, redact or veto). The chunks
go out in order through `sdk.sending.deliver_plan` (per-chat ordering, retry-after). Observers
hear about it through the `hermes_after_deliver` / `hermes_on_delivery_error` broadcasts.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

from ..model.source import SessionSource
from ..ops.metrics import NULL_METRICS, NullMetrics
from ..plugin_system.dispatch import call_broadcast
from ..sdk.chunking import chunk_text
from ..sdk.errors import SendError
from ..sdk.sending import ChatSendQueue, deliver_plan
from ..types import DeliveryOutcome, DeliveryPlan, OutboundDelivery

log = logging.getLogger(__name__)


class Deliverer:
    """Sends texts owed to chats.

    Args:
        pm: the application's plugin manager.
        hook_timeout_s: time limit of each observer hook, in seconds.
        metrics: counts each delivery by platform and outcome, with its latency.
    """

    def __init__(self, pm: Any, *, hook_timeout_s: float = 10.0, metrics: NullMetrics = NULL_METRICS) -> None:
        self.pm = pm
        self.hook_timeout_s = hook_timeout_s
        self.metrics = metrics
        self.queue = ChatSendQueue()

    def plan(self, delivery: OutboundDelivery) -> DeliveryPlan:
        """The DeliveryPlan for `delivery`: the hook's, else plain chunking (every impl deferred)."""
        plan = self.pm.hook.hermes_plan_delivery(delivery=delivery)
        if plan is None:
            spec = delivery.spec
            plan = DeliveryPlan(chunks=chunk_text(delivery.text, spec.max_message_length, spec.length_unit),
                                reply_to_message_id=delivery.reply_to_message_id)
        return plan

    async def deliver(self, adapter: Any, target: SessionSource, text: str, *, session_key: str,
                      session_id: str | None, reply_to: str | None = None,
                      kind: str = "reply", on_sent: Callable[[Any], None] | None = None) -> DeliveryOutcome:
        """Plan and send `text` to `target` through `adapter`; never raises for send failures.

        Args:
            adapter: the platform's BaseAdapter (its `spec` gives the limit and unit).
            target: the chat to send to (raw ids; the stored origin).
            text: the full text; empty text sends nothing and counts as delivered.
            session_key / session_id: the session the text belongs to.
            reply_to: platform id of the triggering message, or None.
            kind: `"reply"`, `"notice"` or `"recovered"`.
            on_sent: called with each chunk's `SendResult` as it is sent (`sdk.sending.send_chunks`).

        Returns:
            DeliveryOutcome (delivered or not, message ids, error text).
        """
        delivery = OutboundDelivery(session_key=session_key, session_id=session_id, target=target,
                                    text=text, spec=adapter.spec, reply_to_message_id=reply_to, kind=kind)
        if not text:
            return DeliveryOutcome(delivered=True)
        started = time.monotonic()
        try:
            plan = self.plan(delivery)
            outcome = await deliver_plan(adapter, target, plan, queue=self.queue, policy=adapter.retry_policy,
                                         on_sent=on_sent)
        except Exception as exc:  # a broken planning plugin must not kill the session worker
            log.error("delivery planning failed for %s: %s: %s", session_key, type(exc).__name__, exc)
            outcome = DeliveryOutcome(delivered=False, error=f"{type(exc).__name__}: {exc}")
        self.metrics.delivery(target.platform, "delivered" if outcome.delivered else "failed",
                              time.monotonic() - started)
        if outcome.delivered:
            await call_broadcast(self.pm, "hermes_after_deliver", timeout=self.hook_timeout_s,
                                 delivery=delivery, outcome=outcome)
        else:
            log.warning("delivery to %s failed: %s", session_key, outcome.error)
            await call_broadcast(self.pm, "hermes_on_delivery_error", timeout=self.hook_timeout_s,
                                 delivery=delivery, error=SendError(outcome.error or "not delivered"))
        return outcome
