"""MessageEvent: one inbound message (or internal wake-up) for the pipeline (seed §1, §8)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping

from .source import SessionSource
from .timeutil import format_timestamp, parse_timestamp, utc_now

# Event kinds. "user" is a human message; "internal" is a wake-up the gateway made itself
# (background-task completion, scheduled notify+wake, recovery auto-continue). Internal wake-ups
# survive /new, /reset and /stop (seed §8 "clearing").
USER = "user"
INTERNAL = "internal"


def clean_text(text: str | None) -> str:
    """Return `text` as valid Unicode: undecodable input bytes that Python smuggled in as lone
    surrogates (`surrogateescape`, e.g. Latin-1 typed into a UTF-8 terminal) become U+FFFD, so
    the message can be stored and sent instead of failing at the first UTF-8 encode."""
    if not text:
        return ""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        try:
            return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        except UnicodeEncodeError:  # other lone surrogates (e.g. from a broken UTF-16 source)
            return text.encode("utf-8", "replace").decode("utf-8")


@dataclass(slots=True)
class MessageEvent:
    """One message to process.

    Attributes:
        source: where it came from (carries the raw ids used for routing and delivery).
        text: the message text (may be empty when `media` is set).
        message_id: the platform's message id, used for dedupe and reply-in-place.
        media: attachment descriptors (platform-defined dicts: url/path, mime type, size in bytes).
        kind: `"user"` or `"internal"`.
        received_at: aware UTC time the gateway accepted it.
        raw: the platform payload, kept only in memory for adapters (never persisted).
    """

    source: SessionSource
    text: str = ""
    message_id: str | None = None
    media: list[dict[str, Any]] = field(default_factory=list)
    kind: str = USER
    received_at: datetime = field(default_factory=utc_now)
    raw: Any = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.text = clean_text(self.text)

    @property
    def is_internal(self) -> bool:
        """True for gateway-made wake-ups (they survive /new, /reset and /stop)."""
        return self.kind == INTERNAL

    @property
    def is_command(self) -> bool:
        """True when the text is a slash command (`/new`, `/status`, …)."""
        return self.text.startswith("/") and not self.text.startswith("//")

    def command(self) -> tuple[str, str]:
        """Split a slash command into `(name, argument)`: `"/queue hi"` → `("queue", "hi")`.

        A Telegram-style `/cmd@botname` suffix is dropped. Returns `("", text)` for non-commands.
        """
        if not self.is_command:
            return "", self.text
        head, _, rest = self.text[1:].partition(" ")
        return head.split("@", 1)[0].lower(), rest.strip()


def event_to_dict(event: MessageEvent) -> dict[str, Any]:
    """The JSON data the durable intake keeps for `event` (docs/behaviour.md §0, §5):
    `{"source", "text", "message_id", "media", "kind", "received_at"}`. `raw` (the platform
    payload) is never persisted."""
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
                        kind=data.get("kind") or USER, **kwargs)
