"""Raw Bot API `Update` → (SessionSource, MessageEvent): docs/adapters.md §1.0, seed §1, docs/behaviour.md §4.

Pure functions over the JSON dict Telegram sends (no network, no library objects), so every
sample of docs/adapters.md §1.1 is a deterministic fixture test. The adapter feeds both polling and
webhook updates through `map_update`.

Three outcomes:
- a `(SessionSource, MessageEvent)` pair: a message for the agent;
- `None`: a well-formed update that is not for the agent (the bot's own message, a service
  message, an edit while `edits_as_turns` is off, a non-message update kind); the reason is
  logged at INFO/DEBUG;
- `MalformedUpdate`: the payload is broken (missing field, wrong type, unknown update kind);
  the message names the field. The adapter logs it and skips the update.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from hermes_core.sdk import MalformedPayload, MessageEvent, SessionSource

log = logging.getLogger(__name__)

PLATFORM = "telegram"

# Update fields that carry a Message (docs/adapters.md §1.0 "Updates to handle", TG-T4, TG-T10).
MESSAGE_KINDS = ("message", "channel_post")
EDIT_KINDS = ("edited_message", "edited_channel_post")
# Every other update kind of the Bot API: well-formed, but not a message for the agent.
OTHER_KINDS = frozenset({
    "business_connection", "business_message", "edited_business_message",
    "deleted_business_messages", "message_reaction", "message_reaction_count", "inline_query",
    "chosen_inline_result", "callback_query", "shipping_query", "pre_checkout_query",
    "purchased_paid_media", "poll", "poll_answer", "my_chat_member", "chat_member",
    "chat_join_request", "chat_boost", "removed_chat_boost", "guest_message",
})

INT64_LIMIT = 2 ** 63

CHAT_TYPES = {"private": "dm", "group": "group", "supergroup": "group", "channel": "channel"}

# The General topic of a forum (docs/adapters.md §0.3 item 9, TG-T8).
GENERAL_TOPIC_ID = "1"

# Message fields that make a message with no text/caption still worth a turn.
MEDIA_KINDS = ("photo", "document", "audio", "video", "voice", "video_note", "sticker",
               "animation", "location", "venue", "contact", "poll", "dice")


class MalformedUpdate(MalformedPayload):
    """A Telegram update is not a well-formed Bot API payload (the SDK's `MalformedPayload`).

    Attributes:
        field: dotted path of the offending field (`"message.chat.id"`), or `"update"`.
        problem: what is wrong with it.
        update_id: the update's id when it could be read, else None.
    """

    def __init__(self, field: str, problem: str, update_id: int | None = None):
        super().__init__(field, problem)
        self.update_id = update_id
        # The update id makes the log line findable in Telegram's own records.
        self.args = (f"telegram update {update_id if update_id is not None else '?'}: field {field!r} {problem}",)


def _type_name(value: Any) -> str:
    return type(value).__name__


class _Reader:
    """Typed field access that raises `MalformedUpdate` naming the dotted field path."""

    def __init__(self, update_id: int | None):
        self.update_id = update_id

    def fail(self, field: str, problem: str) -> MalformedUpdate:
        return MalformedUpdate(field, problem, self.update_id)

    def absent(self, data: Mapping, key: str, path: str) -> MalformedUpdate:
        """A required field that is not there, or is there as null: the log line says which."""
        return self.fail(f"{path}.{key}", "is missing" if key not in data else "is null")

    def obj(self, data: Mapping, key: str, path: str, *, required: bool = True) -> dict | None:
        value = data.get(key)
        if value is None:
            if required:
                raise self.absent(data, key, path)
            return None
        if not isinstance(value, dict):
            raise self.fail(f"{path}.{key}", f"must be an object, got {_type_name(value)}")
        return value

    def int_(self, data: Mapping, key: str, path: str, *, required: bool = True) -> int | None:
        value = data.get(key)
        if value is None:
            if required:
                raise self.absent(data, key, path)
            return None
        # bool is an int subclass; Telegram never sends a bool where it means an id.
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(f"{path}.{key}", f"must be an integer, got {_type_name(value)}")
        # Bot API integers fit in a signed 64-bit int (ids have at most 52 significant bits); a
        # bigger one is not Telegram's, and past Python's int-to-str digit limit `str()` of it
        # would raise a plain ValueError later.
        if not -INT64_LIMIT <= value < INT64_LIMIT:
            raise self.fail(f"{path}.{key}", "is out of range for a 64-bit integer")
        return value

    def str_(self, data: Mapping, key: str, path: str, *, required: bool = False) -> str | None:
        value = data.get(key)
        if value is None:
            if required:
                raise self.absent(data, key, path)
            return None
        if not isinstance(value, str):
            raise self.fail(f"{path}.{key}", f"must be a string, got {_type_name(value)}")
        return value

    def bool_(self, data: Mapping, key: str, path: str) -> bool:
        value = data.get(key)
        if value is None:
            return False
        if not isinstance(value, bool):
            raise self.fail(f"{path}.{key}", f"must be a boolean, got {_type_name(value)}")
        return value


def _full_name(first: str | None, last: str | None) -> str | None:
    name = " ".join(p for p in (first, last) if p)
    return name or None


def update_kind(update: Mapping[str, Any]) -> str | None:
    """Return the update kind (`"message"`, `"channel_post"`, `"callback_query"`, …) of a raw
    update dict, or None when it carries no known kind."""
    for kind in MESSAGE_KINDS + EDIT_KINDS:
        if kind in update:
            return kind
    for key in update:
        if key in OTHER_KINDS:
            return key
    return None


def _read_update_id(update: Any) -> int:
    if not isinstance(update, dict):
        raise MalformedUpdate("update", f"must be an object, got {_type_name(update)}")
    return _Reader(None).int_(update, "update_id", "update")  # type: ignore[return-value]


def migration_of(update: Mapping[str, Any]) -> tuple[str, str] | None:
    """Return `(old_chat_id, new_chat_id)` when `update` is a group → supergroup migration
    service message (docs/adapters.md TG-T6), else None. Never raises.

    Telegram sends two service messages: `migrate_to_chat_id` in the old group (chat.id = old)
    and `migrate_from_chat_id` in the new supergroup (chat.id = new); either one suffices.
    """
    if not isinstance(update, dict):
        return None
    message = update.get("message")
    if not isinstance(message, dict):
        return None
    chat = message.get("chat")
    chat_id = chat.get("id") if isinstance(chat, dict) else None
    if isinstance(chat_id, bool) or not isinstance(chat_id, int):
        return None
    to_id = message.get("migrate_to_chat_id")
    if isinstance(to_id, int) and not isinstance(to_id, bool):
        return str(chat_id), str(to_id)
    from_id = message.get("migrate_from_chat_id")
    if isinstance(from_id, int) and not isinstance(from_id, bool):
        return str(from_id), str(chat_id)
    return None


def map_update(update: dict, *, bot_id: int | None = None,
               topic_names: Mapping[str, Mapping[str, str]] | None = None,
               edits_as_turns: bool = False) -> tuple[SessionSource, MessageEvent] | None:
    """Map one raw Bot API update to the gateway's `(SessionSource, MessageEvent)`.

    Args:
        update: the JSON object of one `Update` (as received from getUpdates or a webhook POST).
        bot_id: this bot's user id (from getMe); its own messages are not for the agent.
        topic_names: forum topic names from config, `{str(chat_id): {thread_id: name}}`.
        edits_as_turns: treat `edited_message` / `edited_channel_post` as new turns (TG-T10).
            The event's `message_id` is then `"<message_id>@<edit_date>"` so the core's inbound
            dedupe (on `(chat_id, message_id)`) does not swallow the edit as a redelivery.

    Returns:
        The pair, or None for an update that is not for the agent (reason logged).

    Raises:
        MalformedUpdate: missing field, wrong type or unknown update kind (the field is named).

    Rules (docs/adapters.md §1.0): `chat.type` private → dm, group/supergroup → group,
    channel → channel; `chat_id = str(chat.id)`; the sender comes from `sender_chat` when present
    (is_bot False), else from `from`, else (no sender given) the channel for a channel post and
nobody (`user_id` None) otherwise; `message_thread_id` is a thread only with
    `is_topic_message`, a forum message outside a topic is in General (`"1"`); reply-chain roots
    in non-forum groups are ignored; text is `text`, else `caption`. The event carries
    `platform_update_id = str(update_id)` and, for a reply (not a topic's creation message),
    `reply_to_message_id` / `reply_to_text` / `reply_to_author_id` / `reply_to_author_name`.
    """
    update_id = _read_update_id(update)
    r = _Reader(update_id)
    kind = update_kind(update)
    if kind is None:
        keys = sorted(k for k in update if k != "update_id")
        raise r.fail("update", f"has no known update kind (keys: {keys})")
    if kind in OTHER_KINDS:
        log.debug("telegram update %s skipped: kind %r is not a message", update_id, kind)
        return None

    message = r.obj(update, kind, "update")
    assert message is not None
    path = kind
    message_id = r.int_(message, "message_id", path)
    chat = r.obj(message, "chat", path)
    assert chat is not None
    chat_id = r.int_(chat, "id", f"{path}.chat")
    chat_type_raw = r.str_(chat, "type", f"{path}.chat", required=True)
    if chat_type_raw not in CHAT_TYPES:
        raise r.fail(f"{path}.chat.type", f"has unknown value {chat_type_raw!r}")
    chat_type = CHAT_TYPES[chat_type_raw]
    sender = r.obj(message, "from", path, required=False)
    sender_chat = r.obj(message, "sender_chat", path, required=False)
    text = r.str_(message, "text", path)
    caption = r.str_(message, "caption", path)
    thread_raw = r.int_(message, "message_thread_id", path, required=False)
    is_topic = r.bool_(message, "is_topic_message", path)
    is_forum = r.bool_(chat, "is_forum", f"{path}.chat")

    if kind in EDIT_KINDS and not edits_as_turns:
        log.info("telegram update %s skipped: %s of message %s in chat %s (edits_as_turns is off)",
                 update_id, kind, message_id, chat_id)
        return None

    # Sender identity (docs/adapters.md §0.3 item 3, TG-T3): sender_chat wins over the placeholder user.
    if sender_chat is not None:
        sc_id = r.int_(sender_chat, "id", f"{path}.sender_chat")
        user_id = str(sc_id)
        user_name = (r.str_(sender_chat, "title", f"{path}.sender_chat")
                     or _full_name(r.str_(sender_chat, "first_name", f"{path}.sender_chat"),
                                   r.str_(sender_chat, "last_name", f"{path}.sender_chat"))
                     or r.str_(sender_chat, "username", f"{path}.sender_chat"))
        is_bot = False
    elif sender is not None:
        from_id = r.int_(sender, "id", f"{path}.from")
        if bot_id is not None and from_id == bot_id:
            log.debug("telegram update %s skipped: the bot's own message %s", update_id, message_id)
            return None
        user_id = str(from_id)
        user_name = _full_name(r.str_(sender, "first_name", f"{path}.from", required=True),
                               r.str_(sender, "last_name", f"{path}.from"))
        is_bot = r.bool_(sender, "is_bot", f"{path}.from")
    elif chat_type == "channel":
        # Channel posts without sender_chat (older clients): the channel itself is the author.
        user_id, user_name, is_bot = str(chat_id), r.str_(chat, "title", f"{path}.chat"), False
    else:
        # `from` is optional in the Bot API (some service updates, messages sent on behalf of a
        # chat): the message still maps, with an unknown sender (docs/behaviour.md §4).
        log.debug("telegram update %s: message %s has no sender", update_id, message_id)
        user_id, user_name, is_bot = None, None, False

    body = text if text is not None else caption
    media = [{"kind": m, "payload": message[m]} for m in MEDIA_KINDS if m in message]
    if body is None and not media:
        service = sorted(k for k in message if k not in _ENVELOPE_FIELDS)
        log.info("telegram update %s skipped: service or empty message %s in chat %s (fields: %s)",
                 update_id, message_id, chat_id, service)
        return None

    if chat_type == "dm":
        chat_name = _full_name(r.str_(chat, "first_name", f"{path}.chat"),
                               r.str_(chat, "last_name", f"{path}.chat"))
    else:
        chat_name = r.str_(chat, "title", f"{path}.chat")

    # Topics (TG-T1, TG-T8): only is_topic_message makes message_thread_id a topic.
    if is_topic and thread_raw is not None:
        thread_id: str | None = str(thread_raw)
    elif is_forum and chat_type == "group":
        thread_id = GENERAL_TOPIC_ID
    else:
        thread_id = None

    chat_topic = None
    reply = message.get("reply_to_message")
    if reply is not None and not isinstance(reply, dict):
        log.warning("reply context of %s left out: field '%s.reply_to_message' must be an object, got %s",
                    update_id, path, _type_name(reply))
        reply = None
    # TG-T2: topic messages carry the topic's creation service message as reply_to_message; it
    # names the topic and is not a reply.
    topic_root = is_topic and reply is not None and reply.get("message_id") == thread_raw
    if thread_id is not None:
        if topic_root:
            created = r.obj(reply, "forum_topic_created", f"{path}.reply_to_message", required=False)
            if created is not None:
                chat_topic = r.str_(created, "name", f"{path}.reply_to_message.forum_topic_created")
        if chat_topic is None and topic_names:
            chat_topic = (topic_names.get(str(chat_id)) or {}).get(thread_id)

    source = SessionSource(
        platform=PLATFORM,
        chat_id=str(chat_id),
        chat_name=chat_name,
        chat_type=chat_type,
        user_id=user_id,
        user_name=user_name,
        thread_id=thread_id,
        chat_topic=chat_topic,
        is_bot=is_bot,
        message_id=str(message_id),
    )
    event_message_id = str(message_id)
    if kind in EDIT_KINDS:
        edit_date = r.int_(message, "edit_date", path)
        event_message_id = f"{message_id}@{edit_date}"
    event = MessageEvent(source=source, text=body or "", message_id=event_message_id,
                         media=media, raw=update, platform_update_id=str(update_id),
                         # An album's photos share it: the core runs them as one turn (docs/behaviour.md §5).
                         media_group_id=r.str_(message, "media_group_id", path) if media else None,
                         **(_reply_context(reply, r, f"{path}.reply_to_message") if reply and not topic_root else {}))
    return source, event


def _reply_context(reply: Mapping[str, Any], r: _Reader, path: str) -> dict[str, str | None]:
    """The `reply_to_*` fields of a MessageEvent from the replied-to message (docs/adapters.md
    §1.1 T3: the quoted text belongs in the event). The reply context is an extra: a malformed
    one is logged (naming the field) and left out, the message itself still goes through."""
    try:
        message_id = r.int_(reply, "message_id", path)
        text = r.str_(reply, "text", path)
        if text is None:
            text = r.str_(reply, "caption", path)
        author = r.obj(reply, "sender_chat", path, required=False)
        if author is not None:
            author_id = r.int_(author, "id", f"{path}.sender_chat")
            name = r.str_(author, "title", f"{path}.sender_chat") or r.str_(author, "username", f"{path}.sender_chat")
        else:
            author = r.obj(reply, "from", path, required=False)
            author_id = r.int_(author, "id", f"{path}.from") if author is not None else None
            name = _full_name(r.str_(author, "first_name", f"{path}.from"),
                              r.str_(author, "last_name", f"{path}.from")) if author is not None else None
    except MalformedUpdate as exc:
        log.warning("reply context of %s left out: %s", r.update_id, exc)
        return {}
    return {"reply_to_message_id": str(message_id), "reply_to_text": text,
            "reply_to_author_id": None if author_id is None else str(author_id), "reply_to_author_name": name}


def reply_anchor(message_id: str | None) -> int | None:
    """Telegram message id to reply to, from an event's `message_id` (`"42"` or the edit form
    `"42@1767225600"`); None when it is not a Telegram id."""
    if not message_id:
        return None
    head = str(message_id).split("@", 1)[0]
    try:
        return int(head)
    except ValueError:
        return None


# Fields every Message has; anything else on a message with no text/caption/media is what makes
# it a service message (new_chat_members, pinned_message, forum_topic_created, migrate_*, …).
_ENVELOPE_FIELDS = frozenset({
    "message_id", "message_thread_id", "date", "chat", "from", "sender_chat", "is_topic_message",
    "reply_to_message", "edit_date", "author_signature", "is_automatic_forward", "has_protected_content",
    "entities", "caption_entities", "sender_boost_count", "sender_business_bot", "business_connection_id",
    "via_bot", "media_group_id", "link_preview_options", "reply_markup",
})
