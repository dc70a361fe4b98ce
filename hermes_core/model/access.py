"""AccessRequest: what the core knows about a sender when it decides whether to answer them
(docs/behaviour.md §9)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .source import SessionSource


@dataclass(frozen=True, slots=True)
class AccessRequest:
    """One inbound message's sender, as the access decision sees it.

    Attributes:
        source: the message's SessionSource (raw ids; `is_bot` and `role_authorized` set by the
            platform plugin).
        settings: the platform table's common settings (`sdk.PlatformSettings`: `allowed_users`,
            `allowed_chats`, `allow_all`, `allow_bots`, …).
        sender_ids: every id the sender is known by — the raw `user_id` / `user_id_alt`, their
            canonical ids and the aliases the message itself carries (docs/behaviour.md §4).
        chat_ids: the same for the chat (`chat_id`, its canonical id, its aliases).
        allowed_user_ids: `settings.allowed_users`, each with its canonical id.
        allowed_chat_ids: `settings.allowed_chats`, each with its canonical id.
    """

    source: SessionSource
    settings: Any
    sender_ids: frozenset[str]
    chat_ids: frozenset[str]
    allowed_user_ids: frozenset[str]
    allowed_chat_ids: frozenset[str]
