"""SessionContext: what the agent is told about the current session (seed §9, docs/behaviour.md §7)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from .entry import SessionEntry
from .source import SessionSource

UNTRUSTED_MAX_CHARS = 240


@dataclass(frozen=True, slots=True)
class SessionContext:
    """The facts injected into the agent's system prompt (seed §9).

    Attributes:
        source: where the current message came from (raw ids).
        connected_platforms: names of the enabled platforms, sorted.
        home_channels: platform → home chat id, where scheduled output can be delivered.
        shared_multi_user_session: True when several users share this conversation (seed §5).
        session_key / session_id / created_at / updated_at: from the entry, when known.
    """

    source: SessionSource
    connected_platforms: tuple[str, ...] = ()
    home_channels: dict[str, str] = field(default_factory=dict)
    shared_multi_user_session: bool = False
    session_key: str | None = None
    session_id: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None


def neutralize_untrusted(text: str | None, max_chars: int = UNTRUSTED_MAX_CHARS) -> str:
    """Make peer-controlled metadata (display names, chat names, topics) safe for a prompt
    (docs/behaviour.md §7): control characters and newlines collapse to one space, the length is capped
    at `max_chars` characters (an ellipsis marks the cut), and the result is double-quoted."""
    if text is None:
        return '""'
    cleaned = "".join(" " if (ord(ch) < 32 or ord(ch) == 127 or ch in "\u2028\u2029") else ch
                      for ch in str(text))
    cleaned = " ".join(cleaned.split())
    if len(cleaned) > max_chars:
        cleaned = cleaned[: max_chars - 1] + "…"
    return '"' + cleaned.replace('"', "'") + '"'


def attach_entry(context: SessionContext, entry: SessionEntry | None) -> SessionContext:
    """Return `context` with the entry's key, id and times filled in (seed §9 step 4)."""
    if entry is None:
        return context
    return SessionContext(
        source=context.source,
        connected_platforms=context.connected_platforms,
        home_channels=context.home_channels,
        shared_multi_user_session=context.shared_multi_user_session,
        session_key=entry.session_key,
        session_id=entry.session_id,
        created_at=entry.created_at,
        updated_at=entry.updated_at,
    )
