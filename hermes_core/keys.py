"""Session keys and the multi-user isolation rule (seed §4, §5; docs/behaviour.md §4).

One rule drives both `build_session_key` and `is_shared_multi_user_session`; the builtin
`hermes_session_key` / `hermes_session_shared` hookimpls call these functions, and the rest of the
gateway only ever asks the hooks. Keys are opaque: never split one to route (docs/behaviour.md §0).
"""

from __future__ import annotations

import re
from typing import Callable, Iterable

from .model.source import Platform, SessionSource

KEY_PREFIX = "agent:main"

# (platform, kind, raw value) -> canonical value. kind is "chat" or "user".
Canonicalizer = Callable[[str, str, str], str]

_WHATSAPP_SAFE = re.compile(r"^[A-Za-z0-9@.+-]+$")


def normalize_whatsapp_id(value: str) -> str:
    """Normalise one WhatsApp id: trim, drop the first `+`, cut at the first `:` (device) and at
    the first `@` (domain). `"15551234567:12@s.whatsapp.net"` → `"15551234567"`; None → `""`."""
    text = "" if value is None else str(value).strip()
    if text.startswith("+"):
        text = text[1:]
    return text.split(":", 1)[0].split("@", 1)[0]


def canonical_whatsapp_identifier(value: str | None, aliases: Iterable[str] = ()) -> str:
    """Canonical WhatsApp id for keys and pseudonyms (seed §4 "special case", docs/behaviour.md §4).

    Args:
        value: a raw JID, phone number or LID (`"+1 555…"`, `"123:4@s.whatsapp.net"`, `"…@lid"`).
        aliases: other known forms of the same person (LID ↔ phone), raw or normalised.

    Returns:
        The shortest normalised alias (ties: lexicographically smaller); `""` for None or `""`
        (never the string "None"). An id with characters outside `[A-Za-z0-9@.+-]` falls back
        to its normalised form. Never raises.
    """
    if value is None:
        return ""
    raw = str(value).strip()
    normal = normalize_whatsapp_id(raw)
    if not _WHATSAPP_SAFE.match(raw):
        return normal
    candidates = {normal}
    candidates.update(normalize_whatsapp_id(a) for a in aliases if a and _WHATSAPP_SAFE.match(str(a).strip()))
    candidates.discard("")
    return min(candidates, key=lambda c: (len(c), c)) if candidates else normal


def default_canonical_identity(platform: str, kind: str, value: str) -> str:
    """The core's identity canonicalisation (no alias store): WhatsApp ids are normalised,
    every other platform's ids are returned unchanged."""
    if platform == Platform.WHATSAPP:
        return canonical_whatsapp_identifier(value)
    return value


def canonical_with_aliases(platform: str, kind: str, value: str,
                           resolve: Callable[[str, str], str] | None) -> str:
    """`value` folded by stored identity aliases, then normalised (docs/behaviour.md §4).

    Args:
        platform / kind / value: as for `hermes_canonical_identity`.
        resolve: `(platform, id) -> canonical id` following stored aliases (the store's
            `resolve_identity`), or None when no store is attached.

    The raw id is looked up first, then its normalised form (a WhatsApp JID and its bare number
    are one id); the result is normalised again, so an alias may point at any form.
    """
    if resolve is not None and value:
        resolved = resolve(platform, value)
        if resolved == value:
            resolved = resolve(platform, default_canonical_identity(platform, kind, value))
        value = resolved
    return default_canonical_identity(platform, kind, value)


def _participant(source: SessionSource, canonicalize: Canonicalizer) -> str | None:
    pid = source.participant_id
    return canonicalize(source.platform, "user", pid) if pid else None


def _per_user(source: SessionSource, group_sessions_per_user: bool,
              thread_sessions_per_user: bool) -> bool:
    """The one isolation rule for non-DM chats: threads follow `thread_sessions_per_user`,
    everything else follows `group_sessions_per_user`."""
    if source.thread_id:
        return thread_sessions_per_user
    return group_sessions_per_user


def is_shared_multi_user_session(source: SessionSource, *, group_sessions_per_user: bool,
                                 thread_sessions_per_user: bool) -> bool:
    """True when several users share one conversation in this chat (seed §5).

    DMs are never shared; a non-DM chat is shared unless the applicable per-user flag is set.
    """
    if source.chat_type == "dm":
        return False
    return not _per_user(source, group_sessions_per_user, thread_sessions_per_user)


def build_session_key(source: SessionSource, group_sessions_per_user: bool = True,
                      thread_sessions_per_user: bool = False,
                      canonicalize: Canonicalizer | None = None) -> str:
    """Build the session key `agent:main:{platform}:{chat_type}[:{chat_id}][:{thread_id}][:{participant}]`
    (seed §4; docs/behaviour.md §4 table).

    Args:
        source: the message's origin (raw ids).
        group_sessions_per_user: isolate non-thread group/channel chats per user (default True).
        thread_sessions_per_user: isolate threads per user (default False: threads are shared).
        canonicalize: `(platform, kind, value) -> str` folding id aliases before keying
            (default: `default_canonical_identity`, WhatsApp normalisation only).

    Returns:
        The key; ids verbatim, empty parts skipped (never `::`).
    """
    canon = canonicalize or default_canonical_identity
    parts = [KEY_PREFIX, source.platform, source.chat_type]
    chat_id = canon(source.platform, "chat", source.chat_id) if source.chat_id else None
    participant = _participant(source, canon)
    if source.chat_type == "dm":
        # DMs are never shared: the chat id isolates them; without one the participant does.
        parts += [chat_id or participant, source.thread_id]
    else:
        parts += [chat_id, source.thread_id]
        if _per_user(source, group_sessions_per_user, thread_sessions_per_user):
            parts.append(participant)
    return ":".join(p for p in parts if p)
