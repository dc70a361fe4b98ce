"""MessageEvent ⇄ the JSON data kept in the durable intake (SPEC.md §0, §5).

The store keeps plain data and never imports the pipeline; these two functions are the only
place that knows how an event is written down. `raw` (the platform payload) is never persisted.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..model.events import MessageEvent
from ..model.source import SessionSource
from ..model.timeutil import format_timestamp, parse_timestamp


def event_to_dict(event: MessageEvent) -> dict[str, Any]:
    """`{"source", "text", "message_id", "media", "kind", "received_at"}` as JSON data."""
    return {"source": event.source.to_dict(), "text": event.text or "", "message_id": event.message_id,
            "media": list(event.media or []), "kind": event.kind,
            "received_at": format_timestamp(event.received_at)}


def event_from_dict(data: Mapping[str, Any]) -> MessageEvent:
    """Rebuild the event written by `event_to_dict`.

    Raises:
        SourceError / ValueError: the source or the timestamp is malformed (the message names it).
    """
    received = parse_timestamp(data.get("received_at")) if data.get("received_at") else None
    kwargs: dict[str, Any] = {}
    if received is not None:
        kwargs["received_at"] = received
    return MessageEvent(source=SessionSource.from_dict(data["source"]), text=data.get("text") or "",
                        message_id=data.get("message_id"), media=list(data.get("media") or []),
                        kind=data.get("kind") or "user", **kwargs)
