"""Default delivery planning: chunk the text to the adapter's limit (innermost, trylast)."""

from __future__ import annotations

from ..markers import hookimpl
from ..sdk.chunking import chunk_text
from ..types import DeliveryPlan


@hookimpl(trylast=True)
def hermes_plan_delivery(delivery):
    """Core default: one plan whose chunks fit `delivery.spec.max_message_length`."""
    spec = delivery.spec
    return DeliveryPlan(
        chunks=chunk_text(delivery.text, spec.max_message_length, spec.length_unit),
        reply_to_message_id=delivery.reply_to_message_id,
    )
