"""MessageEvent: one inbound message (or internal wake-up) for the pipeline (seed §1, §8)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .identity import IdentityAlias
from .source import SessionSource
from .text import clean_data, clean_optional, clean_text, skip_invisible, strip_invisible
from .timeutil import format_timestamp, parse_timestamp, utc_now

# Event kinds. "user" is a human message; "internal" is a wake-up the gateway made itself
# (background-task completion, scheduled notify+wake, recovery auto-continue). Internal wake-ups
# survive /new, /reset and /stop (seed §8 "clearing").
USER = "user"
INTERNAL = "internal"

# The message a message replies to (docs/behaviour.md §7).
REPLY_FIELDS = ("reply_to_message_id", "reply_to_text", "reply_to_author_id", "reply_to_author_name")
# Optional string facts a platform may know about a message beyond its text.
_OPTIONAL_IDS = REPLY_FIELDS + ("platform_update_id", "media_group_id", "bound_session_id")
# A command's name (everything up to the first whitespace) and the rest of its text.
_COMMAND_NAME = re.compile(r"(\S*)(.*)", re.DOTALL)


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
        reply_to_message_id / reply_to_text / reply_to_author_id / reply_to_author_name: the
            message this one replies to (platform id, its text, its author's id and display
            name), when the platform says so. Untrusted: it reaches the agent only as a
            neutralised quoted prefix of the user message, never the system prompt.
        platform_update_id: the platform's own id of the delivery that carried the message
            (Telegram `update_id`, Slack `event_id`), for logs and redelivery diagnosis.
        channel_context: recent messages of the channel, `[{"author": str, "text": str}]`, that a
            platform backfills for the first turn in a busy channel (oldest first).
        media_group_id: the platform's id of the album a media message belongs to (Telegram
            `media_group_id`): the messages of one album from one sender are one turn
            (docs/behaviour.md §5).
        bound_session_id: internal wake-ups only: the session id the wake-up belongs to; it runs
            only while its session key still points at that session (docs/behaviour.md §10).
        aliases: identity aliases the mapping learned from the payload; the core records them in
            the store before it builds the session key (docs/behaviour.md §4). Not persisted
            with the event: they are recorded when it is accepted.
    """

    source: SessionSource
    text: str = ""
    message_id: str | None = None
    media: list[dict[str, Any]] = field(default_factory=list)
    kind: str = USER
    received_at: datetime = field(default_factory=utc_now)
    raw: Any = field(default=None, repr=False, compare=False)
    reply_to_message_id: str | None = None
    reply_to_text: str | None = None
    reply_to_author_id: str | None = None
    reply_to_author_name: str | None = None
    platform_update_id: str | None = None
    media_group_id: str | None = None
    bound_session_id: str | None = None
    channel_context: list[dict[str, Any]] = field(default_factory=list)
    aliases: list[IdentityAlias] = field(default_factory=list, compare=False)

    def __post_init__(self) -> None:
        # Valid Unicode only (docs/behaviour.md §7): a lone surrogate in the text, a file name
        # or an id must not make the message impossible to store or send.
        self.text = clean_text(self.text)
        for name in _OPTIONAL_IDS:
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                value = str(value)
            setattr(self, name, clean_optional(value))
        self.message_id = clean_optional(self.message_id)
        self.media = clean_data(list(self.media or []))
        self.channel_context = clean_data(list(self.channel_context or []))

    @property
    def is_internal(self) -> bool:
        """True for gateway-made wake-ups (they survive /new, /reset and /stop)."""
        return self.kind == INTERNAL

    @property
    def is_command(self) -> bool:
        """True when the text is a slash command (`/new`, `/status`, …): it starts with `/`, not
        `//` (docs/behaviour.md §11). Invisible format characters before either slash do not
        count (`\u200b/undo` is a command, `/\u200b/undo` is not): they are unseen, as in a
        command's name. Visible whitespace does: ` /undo` is text."""
        return self._name_start() is not None

    def _name_start(self) -> int | None:
        """The index just after a command's slash, or None when the text is not a command."""
        slash = skip_invisible(self.text)
        if not self.text.startswith("/", slash) or self.text.startswith("/", skip_invisible(self.text, slash + 1)):
            return None
        return slash + 1

    def command(self) -> tuple[str, str]:
        """Split a slash command into `(name, argument)`: `"/queue hi"` → `("queue", "hi")`.

        The name ends at the first whitespace of any kind (docs/behaviour.md §11): chat apps send
        `/queue`, a line break and a message of several lines as one text. Invisible format
        characters (zero-width space and joiners, word joiner, BOM, bidi controls:
        `text.strip_invisible`) are no part of the name: a keyboard or a copy-paste adds them
        unseen, and `/undo\u200b` is the `/undo` the user sees. A Telegram-style `/cmd@botname`
        suffix is dropped. Returns `("", text)` for non-commands.
        """
        split = self._command_head()
        if split is None:
            return "", self.text
        head, rest = split
        return head.partition("@")[0].lower(), rest.strip()

    def command_addressee(self) -> str | None:
        """The bot a slash command names in a Telegram-style `/cmd@botname` suffix, as written
        (invisible characters dropped, case kept): `"/undo@Other_Bot"` → `"Other_Bot"`. None
        for a non-command and for a command without a suffix (or an empty one, `"/undo@"`).
        `BaseAdapter.emit` compares it with the adapter's `bot_username` (docs/behaviour.md §11)."""
        split = self._command_head()
        if split is None:
            return None
        return split[0].partition("@")[2] or None

    def _command_head(self) -> tuple[str, str] | None:
        """A command's text split once, for `command` and `command_addressee` alike: its head
        (`name@bot`, from its slash up to the first whitespace, invisible characters dropped)
        and the rest; None when the text is not a command (`is_command`)."""
        start = self._name_start()
        if start is None:
            return None
        head, rest = _COMMAND_NAME.match(self.text, start).groups()
        return strip_invisible(head), rest


def event_to_dict(event: MessageEvent) -> dict[str, Any]:
    """The JSON data the durable intake keeps for `event` (docs/behaviour.md §0, §5):
    `{"source", "text", "message_id", "media", "kind", "received_at"}` plus, when set, the
    reply context, `platform_update_id` and `channel_context`. `raw` (the platform payload) and
    `aliases` (recorded at acceptance) are never persisted."""
    data: dict[str, Any] = {"source": event.source.to_dict(), "text": event.text or "",
                            "message_id": event.message_id, "media": list(event.media or []),
                            "kind": event.kind, "received_at": format_timestamp(event.received_at)}
    for name in _OPTIONAL_IDS:
        value = getattr(event, name)
        if value is not None:
            data[name] = value
    if event.channel_context:
        data["channel_context"] = [dict(item) for item in event.channel_context]
    return data


def event_from_dict(data: Mapping[str, Any]) -> MessageEvent:
    """Rebuild the event written by `event_to_dict`.

    Raises:
        SourceError / ValueError: the source or the timestamp is malformed (the message names it).
    """
    received = parse_timestamp(data.get("received_at")) if data.get("received_at") else None
    kwargs: dict[str, Any] = {}
    if received is not None:
        kwargs["received_at"] = received
    for name in _OPTIONAL_IDS:
        if data.get(name) is not None:
            kwargs[name] = data[name]
    context = data.get("channel_context")
    if isinstance(context, list):
        kwargs["channel_context"] = [dict(item) for item in context if isinstance(item, Mapping)]
    return MessageEvent(source=SessionSource.from_dict(data["source"]), text=data.get("text") or "",
                        message_id=data.get("message_id"), media=list(data.get("media") or []),
                        kind=data.get("kind") or USER, **kwargs)
