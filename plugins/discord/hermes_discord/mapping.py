"""Gateway MESSAGE_CREATE / MESSAGE_UPDATE → (SessionSource, MessageEvent): docs/adapters.md §2.0,
seed §1, docs/behaviour.md §4.

A pure function of the dispatch's `d` object plus injected lookups (the bot's own user id, the
resolved `ChannelInfo` of the channel and of a thread's parent, the guild's name, the role
allow-list), so every sample of docs/adapters.md §2.1 is a deterministic fixture test.

Three outcomes:
- a `(SessionSource, MessageEvent)` pair: a message for the agent;
- `None`: a well-formed message that is not for the agent (the bot's own, a system message, an
  empty one, an update that is no edit of the text); the reason is logged at DEBUG;
- `MalformedPayload`: the payload is broken; the message names the field.

Rules (docs/adapters.md §2.0): DM (1) → `dm` keyed on the DM *channel* id; group DM (3) →
`group`; guild channels → `group`; threads (10/11/12, forum posts included) → `group` with
`chat_id` = the parent channel, `thread_id` = the thread, `parent_chat_id` = the parent (replies
go to the thread). `user_name` = member nick → global_name → username; webhook and bot authors
are `is_bot`; the bot's own `<@id>` mention is removed from the text (D-T7).
"""

from __future__ import annotations

import logging
import re
from typing import Any, Collection

from hermes_core.sdk import MessageEvent, SessionSource

from . import payload as p
from .channels import DM, FORUM_TYPES, GROUP_DM, ChannelInfo
from .payload import MalformedPayload

log = logging.getLogger(__name__)

PLATFORM = "discord"

# Message types that start a turn (D-T5): DEFAULT and REPLY. Thread-created (18), thread
# starter (21), pins, joins, boosts … share MESSAGE_CREATE and are not for the agent.
DEFAULT, REPLY = 0, 19
TURN_TYPES = frozenset({DEFAULT, REPLY})

__all__ = ["MalformedPayload", "PLATFORM", "TURN_TYPES", "channel_source", "map_message", "strip_bot_mention"]


def strip_bot_mention(content: str, bot_id: str | None) -> str:
    """Remove the bot's own `<@id>` / `<@!id>` tokens and trim (D1: "<@1200…> what changed
    today?" → "what changed today?"); every other mention token stays as written."""
    if not bot_id:
        return content.strip()
    return re.sub(rf"\s*<@!?{re.escape(bot_id)}>\s*", " ", content).strip()


def _display_name(author: dict, member: dict | None, path: str) -> str:
    # Every name field is read (and so checked), whichever one wins.
    nick = p.string(member, "nick", f"{path}.member") if member is not None else None
    global_name = p.string(author, "global_name", f"{path}.author")
    username = p.string(author, "username", f"{path}.author", required=True)
    return nick or global_name or username


def _media(data: dict, path: str) -> list[dict[str, Any]]:
    media = []
    for index, item in enumerate(p.array(data, "attachments", path)):
        where = f"{path}.attachments[{index}]"
        if not isinstance(item, dict):
            raise MalformedPayload(where, f"must be an object, got {type(item).__name__}")
        media.append({"kind": "attachment", "id": p.snowflake(item, "id", where),
                      "url": p.string(item, "url", where), "filename": p.string(item, "filename", where),
                      "content_type": p.string(item, "content_type", where),
                      "size": p.integer(item, "size", where, required=False)})
    return media


def _reply(data: dict, path: str) -> dict[str, str | None]:
    """The reply context of a REPLY (type 19) message: the referenced message's id, and its
    text and author when Discord resolved it (`referenced_message`; null when it was deleted)."""
    reference = p.obj(data, "message_reference", path, required=False)
    referenced = p.obj(data, "referenced_message", path, required=False)
    reply: dict[str, str | None] = {
        "reply_to_message_id": p.snowflake(reference, "message_id", f"{path}.message_reference", required=False)
        if reference is not None else None}
    if referenced is not None:
        where = f"{path}.referenced_message"
        author = p.obj(referenced, "author", where, required=False)
        reply["reply_to_message_id"] = reply["reply_to_message_id"] or p.snowflake(referenced, "id", where)
        reply["reply_to_text"] = p.string(referenced, "content", where)
        if author is not None:
            reply["reply_to_author_id"] = p.snowflake(author, "id", f"{where}.author")
            reply["reply_to_author_name"] = (p.string(author, "global_name", f"{where}.author")
                                             or p.string(author, "username", f"{where}.author"))
    return reply


def _where(channel_id: str, guild_id: str | None, channel: ChannelInfo | None, parent: ChannelInfo | None,
           guild_name: str | None, author: dict, bot_id: str | None, path: str) -> dict[str, Any]:
    """chat_type, chat_id, thread_id, parent_chat_id, chat_name, chat_topic of the message."""
    guild_prefix = f"{guild_name} / " if guild_name else ""
    if channel is None:
        # Unresolvable channel (REST refused): keep the message, file it by the payload alone.
        if guild_id is None:
            return {"chat_type": "dm", "chat_id": channel_id,
                    "chat_name": p.string(author, "username", f"{path}.author")}
        return {"chat_type": "group", "chat_id": channel_id}
    if channel.is_thread:
        if channel.parent_id is None:
            raise MalformedPayload("channel.parent_id", "is missing (a thread always has a parent)")
        parent_name = parent.name if parent is not None else None
        names = [n for n in (f"#{parent_name}" if parent_name else None, channel.name) if n]
        return {"chat_type": "group", "chat_id": channel.parent_id, "thread_id": channel_id,
                "parent_chat_id": channel.parent_id,
                "chat_name": (guild_prefix + " / ".join(names)) if names else None,
                # Forum/media posts take the forum's topic (its posting guidelines); threads of
                # text channels have none.
                "chat_topic": parent.topic if parent is not None and parent.type in FORUM_TYPES else None}
    if channel.type == DM:
        others = [name for uid, name in channel.recipients if uid != bot_id]
        name = others[0] if others else p.string(author, "username", f"{path}.author")
        return {"chat_type": "dm", "chat_id": channel_id, "chat_name": name}
    if channel.type == GROUP_DM:
        name = channel.name or ", ".join(n for uid, n in channel.recipients if uid != bot_id) or None
        return {"chat_type": "group", "chat_id": channel_id, "chat_name": name}
    return {"chat_type": "group", "chat_id": channel_id,
            "chat_name": f"{guild_prefix}#{channel.name}" if channel.name else None,
            "chat_topic": channel.topic}


def channel_source(message_id: str, channel_id: str, guild_id: str | None, *, channel: ChannelInfo | None,
                   parent: ChannelInfo | None = None, bot_id: str | None = None) -> SessionSource:
    """The SessionSource a message of this channel produces, short of its author: what a
    MESSAGE_DELETE (`id`, `channel_id`, `guild_id`, no author) still tells (docs/adapters.md
    D-T12). Its session key is the message's own for a DM, a thread (unless
    `thread_sessions_per_user`) and a channel with `group_sessions_per_user = false`; a per-user
    key needs the author, which only the message itself carried, so the gateway looks for a
    change without one in every queue of the channel.

    Raises:
        MalformedPayload: a thread without a parent.
    """
    where = _where(channel_id, guild_id, channel, parent, None, {}, bot_id, "d")
    return SessionSource(platform=PLATFORM, guild_id=guild_id, message_id=message_id, **where)


def map_message(data: Any, *, bot_id: str | None, channel: ChannelInfo | None,
                parent: ChannelInfo | None = None, guild_name: str | None = None,
                allowed_roles: Collection[str] = (), edit: bool = False,
                path: str = "d") -> tuple[SessionSource, MessageEvent] | None:
    """Map one MESSAGE_CREATE (or, with `edit=True`, MESSAGE_UPDATE) `d` object.

    Args:
        data: the dispatch's `d` object (a Discord message).
        bot_id: the bot's own user id (READY `user.id`); its messages are dropped (D5, D-T2).
        channel: the resolved channel the message was posted in, or None when it could not be
            resolved (then a message with a `guild_id` is filed as a plain channel message and
            one without as a DM: nothing is lost, and replies still reach `channel_id`).
        parent: for a thread, its parent channel (name for `chat_name`, forum topic).
        guild_name: the guild's name for `chat_name` (`"Hermes Lab / #general"`).
        allowed_roles: role ids of `[platforms.discord] allowed_roles`; a guild member holding
            one gets `role_authorized=True` (docs/behaviour.md §9). `@everyone` (id = guild id)
            is implicit, and roles count only in the guild the message came from (D-T6).
        edit: map an edit: the event's `message_id` becomes `"<id>@<edited_timestamp>"` so the
            core's inbound dedupe does not take it for a redelivery of the original. Updates
            without `content` or `edited_timestamp` (embed unfurls) are not edits of the text.
        path: root of field paths in errors.

    Returns:
        The pair, or None for a message that is not for the agent (reason logged at DEBUG).

    Raises:
        MalformedPayload: a missing/mistyped field, a snowflake that is not a 64-bit number, a
            lone surrogate (the field is named).
    """
    if not isinstance(data, dict):
        raise MalformedPayload(path, f"must be an object, got {type(data).__name__}")
    message_id = p.snowflake(data, "id", path)
    channel_id = p.snowflake(data, "channel_id", path)
    if edit and (data.get("content") is None or data.get("edited_timestamp") is None):
        log.debug("discord update of message %s skipped: not an edit of its text", message_id)
        return None
    kind = p.integer(data, "type", path)
    author = p.obj(data, "author", path)
    author_id = p.snowflake(author, "id", f"{path}.author")
    content = p.string(data, "content", path, required=True)
    guild_id = p.snowflake(data, "guild_id", path, required=False)
    webhook_id = p.snowflake(data, "webhook_id", path, required=False)
    member = p.obj(data, "member", path, required=False)
    roles = [p.snowflake_value(r, f"{path}.member.roles[{i}]")
             for i, r in enumerate(p.array(member, "roles", f"{path}.member"))] if member else []
    edited_at = p.string(data, "edited_timestamp", path) if edit else None

    if bot_id is not None and author_id == bot_id:
        log.debug("discord message %s skipped: the bot's own message", message_id)
        return None
    if kind not in TURN_TYPES:
        log.debug("discord message %s skipped: system message type %d", message_id, kind)
        return None
    text = strip_bot_mention(content, bot_id)
    media = _media(data, path)
    if not text and not media:
        log.debug("discord message %s in channel %s skipped: no text (without the Message Content "
                  "intent guild messages that do not mention the bot arrive empty)", message_id, channel_id)
        return None

    where = _where(channel_id, guild_id, channel, parent, guild_name, author, bot_id, path)
    allowed = set(allowed_roles)
    # @everyone is every member's implicit role and its id is the guild id (D-T6); a member's
    # roles exist only in the guild the message came from, so no cross-guild grant is possible.
    role_authorized = bool(guild_id and member is not None and allowed & (set(roles) | {guild_id}))
    source = SessionSource(
        platform=PLATFORM,
        user_id=author_id,
        user_name=_display_name(author, member, path),
        is_bot=p.boolean(author, "bot", f"{path}.author") or webhook_id is not None,
        guild_id=guild_id,
        message_id=message_id,
        role_authorized=role_authorized,
        **where,
    )
    # Type 0 messages may carry a message_reference too (forwards, crossposts): not replies.
    reply = _reply(data, path) if kind == REPLY else {}
    event_id = f"{message_id}@{edited_at}" if edit else message_id
    event = MessageEvent(source=source, text=text, message_id=event_id, media=media, raw=data, **reply)
    return source, event
