"""Bridge event → (SessionSource, MessageEvent) or `QueuedChange` (the SDK's): docs/adapters.md
§4.1, §4.2 (W1–W4), seed §1.

Pure functions over the JSON a bridge hands over (no network), so every sample is a
deterministic fixture test. Two event shapes are read:

* Baileys ≥ 7 `messages.upsert`: `{"type": "notify" | "append", "messages": [WAMessage, …]}`;
  `key.remoteJid` / `key.remoteJidAlt`, `key.participant` / `key.participantAlt`, `key.fromMe`,
  `key.id`, `pushName`, `message` (Baileys 6.x `senderPn` / `participantPn` / `senderLid` are
  read as alternate ids too);
* whatsmeow `events.Message`: `{"type": "message", "Info": {Chat, Sender, SenderAlt, IsFromMe,
  IsGroup, ID, PushName}, "Message": {…}}`.

Rules: a group (`…@g.us`) is `chat_type="group"` with the sender in `user_id`; anything else is a
DM whose `chat_id` and `user_id` are the remote JID. Ids are kept raw (delivery addresses the raw
JID, W-T6); the key builder canonicalises them. Every LID ↔ phone pair the event reveals
(`…Alt` fields) goes on `MessageEvent.aliases`, which the core records before it builds the key,
so W1 and W2 share one session from the first message (W-T1).

Edits (`editedMessage`, `protocolMessage` type 14 MESSAGE_EDIT) and deletions for everyone
(`protocolMessage` type 0 REVOKE) become a `QueuedChange` naming the original
(`protocolMessage.key.id`), routed as the original was, with the same pairs on
`QueuedChange.aliases`; the adapter records them, then offers it to the gateway's queue
(`offer_change`, docs/behaviour.md §5).

Not turns (None, reason logged at DEBUG): the bot's own messages (`fromMe`, W-T3), Status
updates, broadcast lists and channels (W-T4), `append` history syncs, other protocol messages
(ephemeral settings, history syncs), reactions, receipts, messages without text or media.
A broken event raises `MalformedPayload` naming the field (an edit or a revoke without the
original's `key.id` included).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping

from hermes_core.sdk import (IdentityAlias, MalformedPayload, MessageEvent, QueuedChange, SessionSource,
                             normalize_whatsapp_id)

from . import fields
from .jid import PLATFORM, alias_pair, is_group, never_a_chat

log = logging.getLogger(__name__)

GroupNames = Callable[[str], "str | None"]

# Wrappers that hide the real message one level deeper (W-T5).
WRAPPERS = ("ephemeralMessage", "viewOnceMessage", "viewOnceMessageV2", "viewOnceMessageV2Extension",
            "documentWithCaptionMessage")
# Message kinds that carry a caption and a file.
MEDIA_KINDS = {"imageMessage": "image", "videoMessage": "video", "documentMessage": "document",
               "audioMessage": "audio", "stickerMessage": "sticker"}
# Message kinds that are never turns.
NOT_TURNS = ("protocolMessage", "reactionMessage", "senderKeyDistributionMessage", "pollUpdateMessage",
             "keepInChatMessage", "pinInChatMessage")


def _skip(reason: str, *args: Any) -> None:
    log.debug("whatsapp bridge message skipped: " + reason, *args)


def unwrap_message(message: Mapping, path: str) -> tuple[dict, str]:
    """The innermost message object under the wrappers (W-T5), with its path."""
    current: Mapping = message
    for _ in range(4):  # wrappers nest at most a couple of levels; never loop on a cycle
        for wrapper in WRAPPERS:
            inner = fields.obj(current, wrapper, path)
            if inner is not None:
                current = fields.obj(inner, "message", f"{path}.{wrapper}") or {}
                path = f"{path}.{wrapper}.message"
                break
        else:
            break
    return dict(current), path


def message_content(message: Mapping, path: str) -> tuple[str, list[dict[str, Any]], dict | None]:
    """`(text, media, contextInfo)` of a (wrapped) WhatsApp message object.

    Text is `conversation`, `extendedTextMessage.text` or a media caption; media entries are
    `{"kind", "mimetype"?, "file_name"?}` (the bridge downloads files; here only what they are).
    """
    inner, path = unwrap_message(message, path)
    text = fields.text(inner, "conversation", path) or ""
    context = None
    extended = fields.obj(inner, "extendedTextMessage", path)
    if extended is not None:
        text = text or fields.text(extended, "text", f"{path}.extendedTextMessage") or ""
        context = fields.obj(extended, "contextInfo", f"{path}.extendedTextMessage")
    media: list[dict[str, Any]] = []
    for kind, label in MEDIA_KINDS.items():
        part = fields.obj(inner, kind, path)
        if part is None:
            continue
        where = f"{path}.{kind}"
        text = text or fields.text(part, "caption", where) or ""
        entry = {"kind": label, "mimetype": fields.text(part, "mimetype", where),
                 "file_name": fields.text(part, "fileName", where)}
        media.append({k: v for k, v in entry.items() if v})
        context = context or fields.obj(part, "contextInfo", where)
    return text, media, context


# `protocolMessage.type` values (WAProto `ProtocolMessage.Type`): numbers from Baileys, names from
# whatsmeow's protojson.
REVOKE, MESSAGE_EDIT = "REVOKE", "MESSAGE_EDIT"
PROTOCOL_TYPES = {0: REVOKE, 14: MESSAGE_EDIT, REVOKE: REVOKE, MESSAGE_EDIT: MESSAGE_EDIT}


def _original_key(protocol: Mapping, path: str) -> tuple[str, str | None]:
    """`(id, participant)` of the message an edit or a revoke names (`protocolMessage.key`:
    Baileys spells the id `id`, whatsmeow `ID`)."""
    key = fields.obj(protocol, "key", path, required=True)
    assert key is not None
    kpath = f"{path}.key"
    original_id = fields.ident(key, "id", kpath) or fields.ident(key, "ID", kpath)
    if original_id is None:
        raise MalformedPayload(f"{kpath}.id", "is missing")
    return original_id, fields.ident(key, "participant", kpath)


def protocol_change(inner: Mapping, path: str) -> tuple[str, str | None, dict | None, str] | None:
    """What an edit or a revoke says, or None when `inner` is neither (docs/behaviour.md §5).

    Baileys delivers an edit as `editedMessage: {message: {protocolMessage: {key, type: 14,
    editedMessage: {...}}}}` or as a bare `protocolMessage` of type 14 (MESSAGE_EDIT), and a
    deletion for everyone as a `protocolMessage` of type 0 (REVOKE); `key.id` names the original.

    Returns:
        `(original id, original sender or None, new content or None for a revoke, its path)`.

    Raises:
        MalformedPayload: an edit or a revoke that does not name its original (`key.id`).
    """
    outer = fields.obj(inner, "editedMessage", path)
    if outer is not None:
        inner = fields.obj(outer, "message", f"{path}.editedMessage") or {}
        path = f"{path}.editedMessage.message"
        if "protocolMessage" not in inner:
            raise MalformedPayload(f"{path}.protocolMessage", "is missing (an edit names its original there)")
    protocol = fields.obj(inner, "protocolMessage", path)
    if protocol is None:
        return None
    ppath = f"{path}.protocolMessage"
    kind = protocol.get("type")
    kind = None if isinstance(kind, bool) or not isinstance(kind, (int, str)) else PROTOCOL_TYPES.get(kind)
    edited = fields.obj(protocol, "editedMessage", ppath)
    if kind == REVOKE and outer is None:
        return (*_original_key(protocol, ppath), None, ppath)
    if edited is None and kind != MESSAGE_EDIT and outer is None:
        return None  # another protocol message (ephemeral setting, history sync, …): not a turn
    return (*_original_key(protocol, ppath), edited or {}, f"{ppath}.editedMessage")


def _reply_context(context: Mapping | None, path: str) -> dict[str, Any]:
    """`reply_to_*` of a message quoting another (`contextInfo.stanzaId/participant/quotedMessage`)."""
    if not context:
        return {}
    quoted_id = fields.ident(context, "stanzaId", path)
    if quoted_id is None:
        return {}
    quoted = fields.obj(context, "quotedMessage", path)
    quoted_text = message_content(quoted, f"{path}.quotedMessage")[0] if quoted else ""
    return {"reply_to_message_id": quoted_id, "reply_to_text": quoted_text or None,
            "reply_to_author_id": fields.ident(context, "participant", path)}


def _aliases(pairs: list[tuple[str | None, str | None, str]]) -> list[IdentityAlias]:
    found: list[IdentityAlias] = []
    for one, other, source in pairs:
        alias = alias_pair(one, other, source)
        if alias is not None and alias not in found:
            found.append(alias)
    return found


def _source(chat: str, sender: str | None, push_name: str | None, message_id: str,
            group_names: GroupNames | None) -> SessionSource:
    if is_group(chat):
        return SessionSource(platform=PLATFORM, chat_id=chat, chat_type="group",
                             chat_name=group_names(chat) if group_names else None,
                             user_id=sender, user_name=push_name, message_id=message_id)
    return SessionSource(platform=PLATFORM, chat_id=chat, chat_type="dm", chat_name=push_name,
                         user_id=chat, user_name=push_name, message_id=message_id)


# What one message maps to: a turn, or a change of an earlier message.
Mapped = tuple[SessionSource, MessageEvent] | QueuedChange


def _content(message: Mapping, message_id: str, root: str, *, chat: str, sender: str | None,
             push_name: str | None, group_names: GroupNames | None, raw: dict,
             aliases: list[IdentityAlias]) -> Mapped | None:
    """The turn, or the `QueuedChange` (an edit or a revoke), one message object carries."""
    inner, inner_path = unwrap_message(message, root)
    change = protocol_change(inner, inner_path)
    if change is None:
        for kind in NOT_TURNS:
            if kind in inner:
                _skip("%s is a %s", message_id, kind)
                return None
        content, content_path = message, root
    else:
        original_id, original_sender, content, content_path = change
        # Routed as the original message was: same chat, same sender. In a group a revoke names
        # the original's author in `protocolMessage.key.participant`: a group admin's deletion
        # of someone else's message is tried under the author too. An edit never is: only its
        # author can edit a message, so an edit naming another author is not taken for theirs.
        original = _source(chat, sender, push_name, original_id, group_names)
        if content is None:
            alternates = ()
            if is_group(chat) and original_sender and \
                    normalize_whatsapp_id(original_sender) != normalize_whatsapp_id(sender or ""):
                alternates = (_source(chat, original_sender, None, original_id, group_names),)
            return QueuedChange(original, original_id, None, alternates=alternates, aliases=tuple(aliases))
    text, media, context = message_content(content, content_path)
    if not text.strip() and not media:
        _skip("%s has neither text nor media", message_id)
        return None
    source = _source(chat, sender, push_name, message_id, group_names)
    event = MessageEvent(source=source, text=text, message_id=message_id, media=media, raw=raw,
                         aliases=aliases, **_reply_context(context, f"{content_path}.contextInfo"))
    if change is None:
        return source, event
    # An edit: offered to the queue first; `event` (its own id) is the turn `edits_as_turns` gives.
    return QueuedChange(original, original_id, text, event, aliases=tuple(aliases))


def map_baileys_message(item: Any, path: str, *, group_names: GroupNames | None = None) -> Mapped | None:
    """Map one WAMessage of a Baileys `messages.upsert` (W1, W2, W4): a turn, a `QueuedChange`
    (an edit or a deletion of an earlier message), or None when it is neither."""
    if not isinstance(item, dict):
        raise MalformedPayload(path, f"must be an object, got {fields.type_name(item)}")
    key = fields.obj(item, "key", path, required=True)
    assert key is not None
    kpath = f"{path}.key"
    chat = fields.ident(key, "remoteJid", kpath, required=True)
    message_id = fields.ident(key, "id", kpath, required=True)
    assert chat is not None and message_id is not None
    if fields.flag(key, "fromMe", kpath):
        _skip("%s is the bot's own message (fromMe)", message_id)
        return None
    if never_a_chat(chat):
        _skip("%s is a Status update, broadcast list or channel post", message_id)
        return None
    message = fields.obj(item, "message", path)
    if message is None:
        _skip("%s has no message (a receipt, a stub or an undecryptable message)", message_id)
        return None
    chat_alt = fields.ident(key, "remoteJidAlt", kpath) or fields.ident(key, "senderPn", kpath) \
        or fields.ident(key, "senderLid", kpath)
    participant = fields.ident(key, "participant", kpath)
    participant_alt = fields.ident(key, "participantAlt", kpath) or fields.ident(key, "participantPn", kpath)
    sender = (participant or participant_alt) if is_group(chat) else chat
    fields.timestamp(item, "messageTimestamp", path)
    aliases = _aliases([(chat, chat_alt, "remoteJidAlt"), (participant, participant_alt, "participantAlt")])
    return _content(message, message_id, f"{path}.message", chat=chat, sender=sender,
                    push_name=fields.text(item, "pushName", path) or None, group_names=group_names, raw=item,
                    aliases=aliases)


def map_whatsmeow_event(payload: Mapping, *, group_names: GroupNames | None = None) -> Mapped | None:
    """Map one whatsmeow `events.Message` (W3); edits and revokes as in `map_baileys_message`."""
    info = fields.obj(payload, "Info", "event", required=True)
    assert info is not None
    chat = fields.ident(info, "Chat", "event.Info", required=True)
    sender = fields.ident(info, "Sender", "event.Info", required=True)
    message_id = fields.ident(info, "ID", "event.Info", required=True)
    assert chat is not None and sender is not None and message_id is not None
    if fields.flag(info, "IsFromMe", "event.Info"):
        _skip("%s is the bot's own message (IsFromMe)", message_id)
        return None
    if never_a_chat(chat):
        _skip("%s is a Status update, broadcast list or channel post", message_id)
        return None
    message = fields.obj(payload, "Message", "event")
    if message is None:
        _skip("%s has no message", message_id)
        return None
    aliases = _aliases([(sender, fields.ident(info, "SenderAlt", "event.Info"), "SenderAlt")])
    return _content(message, message_id, "event.Message", chat=chat, sender=sender,
                    push_name=fields.text(info, "PushName", "event.Info") or None, group_names=group_names,
                    raw=dict(payload), aliases=aliases)


def map_bridge_event(payload: Any, *, group_names: GroupNames | None = None) -> list[Mapped]:
    """Map one bridge event to the turns and changes in it, in order.

    Args:
        payload: a decoded bridge event (Baileys `messages.upsert` or whatsmeow `message`).
        group_names: `group JID -> subject or None` from the adapter's cache (never a fetch).

    Returns:
        `(SessionSource, MessageEvent)` pairs for the agent and `QueuedChange`s (edits and
        deletions of earlier messages, for the adapter to offer to the gateway's queue:
        docs/behaviour.md §5); `[]` when nothing in the event is either (the reason is logged at DEBUG).

    Raises:
        MalformedPayload: the event itself is broken (the field is named). A broken message
            inside a `messages.upsert` is logged and skipped; the others are kept.
    """
    if not isinstance(payload, dict):
        raise MalformedPayload("event", f"must be an object, got {fields.type_name(payload)}")
    kind = fields.text(payload, "type", "event")
    if "Info" in payload:
        mapped = map_whatsmeow_event(payload, group_names=group_names)
        return [mapped] if mapped else []
    if "messages" not in payload:
        log.debug("whatsapp bridge event of type %r skipped: not a message event", kind)
        return []
    if kind != "notify":
        # `append` is history the phone synced (our own sends and old chats), not new input.
        log.debug("whatsapp bridge messages.upsert of type %r skipped: not new messages", kind)
        return []
    out: list[Mapped] = []
    for index, item in enumerate(fields.items(payload, "messages", "event")):
        try:
            mapped = map_baileys_message(item, f"event.messages[{index}]", group_names=group_names)
        except MalformedPayload as exc:
            log.warning("skipping malformed whatsapp bridge message: %s", exc)
            continue
        if mapped is not None:
            out.append(mapped)
    return out


def mapping_update(payload: Any) -> IdentityAlias | None:
    """The alias of a `lid-mapping.update` event (`{"type": "lid-mapping.update", "lid", "pn"}`,
    Baileys' event of that name), else None."""
    if not isinstance(payload, dict) or payload.get("type") != "lid-mapping.update":
        return None
    lid = fields.ident(payload, "lid", "event")
    pn = fields.ident(payload, "pn", "event")
    return alias_pair(lid, pn, "lid-mapping.update")


def group_subjects(payload: Any) -> dict[str, str]:
    """`{group JID: subject}` of a `groups.upsert` / `groups.update` event (`{"type", "groups":
    [{"id", "subject"}]}`), else `{}`. Never raises: a broken entry is skipped."""
    if not isinstance(payload, dict) or payload.get("type") not in ("groups.upsert", "groups.update"):
        return {}
    found: dict[str, str] = {}
    groups = payload.get("groups")
    for group in groups if isinstance(groups, list) else ():
        if isinstance(group, dict) and isinstance(group.get("id"), str) and isinstance(group.get("subject"), str):
            found[group["id"]] = group["subject"]
    return found
