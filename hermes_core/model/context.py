"""SessionContext: what the agent is told about the current session (seed §9, docs/behaviour.md §7)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from .source import SessionSource
from .text import UNTRUSTED_MAX_CHARS, quote_untrusted



@dataclass(frozen=True, slots=True)
class HomeChannel:
    """A platform's home channel (seed §9): where scheduled output goes by default.

    Attributes:
        chat_id: the raw chat id (`[platforms.<id>] home_channel`).
        name: its display name (`home_channel_name`), or None when not configured.
    """

    chat_id: str
    name: str | None = None


@dataclass(frozen=True, slots=True)
class SessionContext:
    """The facts injected into the agent's system prompt (seed §9).

    Attributes:
        source: where the current message came from (raw ids).
        connected_platforms: names of the enabled platforms, sorted.
        home_channels: platform → its HomeChannel, where scheduled output can be delivered.
        shared_multi_user_session: True when several users share this conversation (seed §5).
        session_key / session_id / created_at / updated_at: from the entry, when known.
        hermes_home: the gateway's HERMES_HOME (scheduled output is saved under
            `<hermes_home>/cron/output/`), or None when unknown.
    """

    source: SessionSource
    connected_platforms: tuple[str, ...] = ()
    home_channels: dict[str, HomeChannel] = field(default_factory=dict)
    shared_multi_user_session: bool = False
    session_key: str | None = None
    session_id: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    hermes_home: str | None = None


def neutralize_untrusted(text: str | None, max_chars: int = UNTRUSTED_MAX_CHARS) -> str:
    """Make peer-controlled metadata (display names, chat names, topics) safe for a prompt
    (docs/behaviour.md §7): `text.quote_untrusted` — control and invisible format characters and
    newlines removed or collapsed, lone surrogates replaced, length capped at `max_chars`
    characters (an ellipsis marks the cut), then JSON-quoted."""
    return quote_untrusted(text, max_chars)
