"""signal-cli envelope → (SessionSource, MessageEvent): docs/adapters.md §5.1, seed §1, docs/behaviour.md §4.

Pure functions over the JSON signal-cli writes (no network), so every sample of
docs/adapters.md §5.2 is a deterministic fixture test. Three wire wrappers carry the same
`{"envelope": …, "account": …}` object and are all accepted:

* a JSON-RPC notification `{"jsonrpc": "2.0", "method": "receive", "params": {"envelope", "account"}}`
  (`daemon --socket/--tcp`, `jsonRpc`), also in its `--receive-mode=manual` form
  `params: {"subscription": 0, "result": {"envelope", "account"}}`;
* the bare object, which is the `data:` of an SSE `receive` event (`daemon --http`).

Outcomes of `map_payload`:
- a `(SessionSource, MessageEvent)` pair: a message for the agent;
- a `QueuedChange` (the SDK's): an edit (`editMessage`) or a remote delete
  (`dataMessage.remoteDelete`) of an earlier message, described with the SessionSource that
  message produced (its `message_id` the original's timestamp) and the original's event id
  `"<timestamp>:<author>"`; an edit's `event` is the edit as a turn of its own (id = the edit's
  timestamp), None when it has no text or attachments. The adapter offers it to the gateway's
  queue and applies `edits_as_turns` (`offer_change`, docs/behaviour.md §5 "Edits and deletions");
- `None`: a well-formed payload that is not a turn (typing indicators, receipts, calls, stories,
  syncs of what the owner sent to others, group updates, reactions, empty envelopes, the
  account's own messages and echoes); the reason is logged at DEBUG/INFO;
- `MalformedPayload`: missing field, wrong type, out-of-range timestamp, invalid Unicode in an
  id; the message names the field. The adapter logs it and skips the payload.

Identity (docs/adapters.md §0.1, §0.3 items 6, 8, 12): a DM's `chat_id` is the sender's UUID
(`sourceUuid`), so its session key does not change when the phone number appears or disappears;
`user_id` is the number when known, else the UUID; `user_id_alt` is the UUID. An envelope that
carries only a number is resolved through the injected `uuid_for_number` lookup (the number ↔
UUID aliases learned so far); unresolved, the number stands in and the core's alias store
folds it into the UUID in the key. A group's `chat_id` is `"group:" + groupId` with the id
byte-exact, and `chat_id_alt` is the raw id.

A quote fills the event's `reply_to_*` fields; every number ↔ UUID pair the payload reveals is
attached as an `IdentityAlias` (number → UUID: the UUID is canonical), which the core records
before it builds the session key.

Event message ids are `"<timestamp>:<author>"` (author = UUID, else number): Signal timestamps
are unique per author only (docs/adapters.md G-T2), so the core's inbound dedupe on
(chat, message id) needs the author, and a reply quote needs both (`quote_of`). The
SessionSource's `message_id` is the bare timestamp, as docs/adapters.md §5.1 states.
"""

from __future__ import annotations

import base64
import binascii
import logging
from dataclasses import dataclass, replace
from typing import Any, Callable, Container, Mapping

from hermes_core.sdk import (IdentityAlias, MalformedPayload, MessageEvent, QueuedChange, SessionSource, field_id,
                             field_int, field_list, field_object, field_text, type_name)

log = logging.getLogger(__name__)

PLATFORM = "signal"
GROUP_PREFIX = "group:"            # our chat_id form (docs/adapters.md §0.3 item 12)
REST_GROUP_PREFIX = "group."       # signal-cli-rest-api's form: "group." + base64(id) (G-T4)
MENTION_PLACEHOLDER = "\ufffc"     # each mention is one U+FFFC in `message` (G-T5)
MAX_TIMESTAMP = 2 ** 63 - 1        # signal-cli timestamps are Java longs (milliseconds)

# Envelope payloads that are never turns (docs/adapters.md §5.1 "skip").
NOT_TURNS = ("typingMessage", "receiptMessage", "callMessage")


@dataclass(frozen=True, slots=True)
class Sender:
    """Who sent an envelope: `uuid` (ACI), `number` (E.164, None when hidden), profile `name`."""

    uuid: str | None
    number: str | None
    name: str | None

    @property
    def stable_id(self) -> str:
        """The UUID when known, else the number (never empty for a valid envelope)."""
        return self.uuid or self.number or ""


# ---- typed field access ---------------------------------------------------------------------

# The readers are the SDK's (`hermes_core.sdk.payload`); numbers default to `0..MAX_TIMESTAMP`.
_obj, _list = field_object, field_list


def _int(data: Mapping, key: str, path: str, *, required: bool = False, low: int = 0,
         high: int = MAX_TIMESTAMP) -> int | None:
    return field_int(data, key, path, required=required, low=low, high=high)


def _str(data: Mapping, key: str, path: str, *, required: bool = False, ident: bool = False) -> str | None:
    """A string field; `ident=True` for ids, which must be valid Unicode (they become keys,
    database rows and send targets: `field_id`). Free text (names) has lone surrogates replaced
    instead (`field_text`)."""
    return (field_id if ident else field_text)(data, key, path, required=required)


# ---- wrappers -------------------------------------------------------------------------------

def unwrap(payload: Any) -> dict | None:
    """Return the `{"envelope", "account", "exception"?}` object inside any accepted wrapper,
    or None for a JSON-RPC notification that is not a `receive`.

    Raises:
        MalformedPayload: not an object, or a `receive` notification without its object.
    """
    if not isinstance(payload, dict):
        raise MalformedPayload("payload", f"must be an object, got {type_name(payload)}")
    if "jsonrpc" not in payload and "method" not in payload:
        return payload
    method = payload.get("method")
    if method != "receive":
        log.debug("signal notification %r skipped: not a receive", method)
        return None
    params = _obj(payload, "params", "payload", required=True)
    assert params is not None
    if "subscription" in params:  # --receive-mode=manual + subscribeReceive
        params = _obj(params, "result", "params", required=True)
        assert params is not None
    return params


def sender_of(envelope: Mapping, path: str = "envelope") -> Sender:
    """The envelope's sender. `source` (deprecated: number if known, else UUID) fills a missing
    `sourceNumber`/`sourceUuid` (older signal-cli versions).

    Raises:
        MalformedPayload: no usable sender id at all, or an id of the wrong type.
    """
    uuid = _str(envelope, "sourceUuid", path, ident=True)
    number = _str(envelope, "sourceNumber", path, ident=True)
    legacy = _str(envelope, "source", path, ident=True)
    if legacy and not uuid and not number:
        if legacy.startswith("+"):
            number = legacy
        else:
            uuid = legacy
    if not uuid and not number:
        raise MalformedPayload(f"{path}.sourceUuid", "is missing (and so are sourceNumber and source)")
    name = _str(envelope, "sourceName", path)
    return Sender(uuid=uuid, number=number, name=name or None)


def raw_group_id(group_id: str, path: str) -> str:
    """signal-cli's group id from any of its spellings (G-T4): the raw base64 id is returned
    unchanged, byte-exact; our `"group:<id>"` chat id and signal-cli-rest-api's
    `"group." + base64(<id>)` are turned back into it.

    Raises:
        MalformedPayload: a `group.` id whose payload is not base64 of an ASCII id.
    """
    if group_id.startswith(GROUP_PREFIX):
        return group_id[len(GROUP_PREFIX):]
    if group_id.startswith(REST_GROUP_PREFIX):
        try:
            return base64.b64decode(group_id[len(REST_GROUP_PREFIX):], validate=True).decode("ascii")
        except (binascii.Error, UnicodeDecodeError):
            raise MalformedPayload(path, "is a 'group.' id that is not base64 of a group id") from None
    return group_id


# ---- text -----------------------------------------------------------------------------------

def _utf16_index(text: str, offset: int) -> int | None:
    """Python index of UTF-16 code-unit `offset` in `text`, or None when it falls inside a
    character or past the end."""
    units = 0
    for index, char in enumerate(text):
        if units == offset:
            return index
        units += 2 if ord(char) > 0xFFFF else 1
    return len(text) if units == offset else None


def render_mentions(text: str, mentions: list, path: str) -> str:
    """Replace each mention's U+FFFC placeholder with `@<name>` (docs/adapters.md §5.1 text).

    `mentions` are `{name, number, uuid, start, length}` with offsets in UTF-16 units (G-T5);
    `name` is signal-cli's identifier of the mentioned account (number or UUID). A mention whose
    offsets do not point at a placeholder is left as is and logged (the message is kept).

    Raises:
        MalformedPayload: a mention that is not an object or has non-integer offsets.
    """
    spans = []
    for i, mention in enumerate(mentions):
        where = f"{path}[{i}]"
        if not isinstance(mention, dict):
            raise MalformedPayload(where, f"must be an object, got {type_name(mention)}")
        start = _int(mention, "start", where, required=True, high=2 ** 31)
        length = _int(mention, "length", where, required=True, high=2 ** 31)
        label = (_str(mention, "name", where, ident=True) or _str(mention, "number", where, ident=True)
                 or _str(mention, "uuid", where, ident=True) or "unknown")
        begin = _utf16_index(text, start)
        end = _utf16_index(text, start + length)
        if begin is None or end is None or MENTION_PLACEHOLDER not in text[begin:end]:
            log.warning("signal mention %s does not point at a placeholder; left unrendered", where)
            continue
        spans.append((begin, end, "@" + label))
    for begin, end, label in sorted(spans, reverse=True):
        text = text[:begin] + label + text[end:]
    return text


# ---- mapping --------------------------------------------------------------------------------

def is_own(sender: Sender, account: str | None, account_uuid: str | None) -> bool:
    """True when `sender` is the bot's own account."""
    return bool((account and sender.number == account) or (account_uuid and sender.uuid == account_uuid))


def _media(data: Mapping, path: str) -> list[dict[str, Any]]:
    media: list[dict[str, Any]] = []
    for i, item in enumerate(_list(data, "attachments", path)):
        where = f"{path}.attachments[{i}]"
        if not isinstance(item, dict):
            raise MalformedPayload(where, f"must be an object, got {type_name(item)}")
        entry = {"kind": "attachment", "id": _str(item, "id", where, ident=True),
                 "content_type": _str(item, "contentType", where), "filename": _str(item, "filename", where),
                 "size": _int(item, "size", where), "caption": _str(item, "caption", where)}
        media.append({k: v for k, v in entry.items() if v is not None})
    sticker = _obj(data, "sticker", path)
    if sticker is not None:
        media.append({"kind": "sticker", **{k: v for k, v in sticker.items() if isinstance(v, (str, int))}})
    return media


def _skip(reason: str, *args: Any, level: int = logging.DEBUG) -> None:
    log.log(level, "signal envelope skipped: " + reason, *args)


def map_payload(payload: Any, *, account: str | None = None, account_uuid: str | None = None,
                ignore_stories: bool = True, uuid_for_number: Callable[[str], str | None] | None = None,
                own_sent: Container[int] = ()) -> tuple[SessionSource, MessageEvent] | QueuedChange | None:
    """Map one signal-cli payload to the gateway's `(SessionSource, MessageEvent)`, or to the
    `QueuedChange` an edit or a remote delete makes to an earlier message.

    Args:
        payload: one decoded JSON value: a `receive` notification or the bare
            `{"envelope", "account"}` object (an SSE event's data). A JSON-RPC batch is a list:
            map its items one by one.
        account: the bot's number (E.164); payloads for another account and the account's own
            messages are not turns.
        account_uuid: the bot's own UUID, when known (recognises its own messages).
        ignore_stories: story messages are not turns.
        uuid_for_number: resolves a number to its known UUID (an envelope without `sourceUuid`).
        own_sent: timestamps of messages the bot sent; their Note-to-Self sync echoes are dropped
            (G-T3).

    Returns:
        The pair; a `QueuedChange` for an `editMessage` (whatever `edits_as_turns` says: the adapter
        decides) or a `remoteDelete`; or None for a payload that is not a turn (reason logged).

    Raises:
        MalformedPayload: the payload is broken (the field is named).
    """
    inner = unwrap(payload)
    if inner is None:
        return None
    exception = inner.get("exception")
    envelope = _obj(inner, "envelope", "payload", required=exception is None)
    if envelope is None:
        kind = exception.get("type") if isinstance(exception, dict) else None
        _skip("signal-cli reported a receive error (%s) without an envelope", kind, level=logging.WARNING)
        return None
    payload_account = _str(inner, "account", "payload", ident=True)
    if account and payload_account and payload_account != account:
        _skip("it is for another account of the daemon", level=logging.INFO)
        return None
    sender = sender_of(envelope)
    _int(envelope, "timestamp", "envelope", required=True)

    for kind in NOT_TURNS:
        if kind in envelope:
            _skip("%s", kind)
            return None
    if "storyMessage" in envelope and ignore_stories:
        _skip("storyMessage (ignore_stories is on)")
        return None

    sync = _obj(envelope, "syncMessage", "envelope")
    edit = _obj(envelope, "editMessage", "envelope")
    edit_path = "envelope.editMessage"
    data = _obj(envelope, "dataMessage", "envelope")
    path = "envelope.dataMessage"
    note_to_self = False
    if sync is not None:
        sent_path = "envelope.syncMessage.sentMessage"
        sent = _obj(sync, "sentMessage", "envelope.syncMessage")
        if sent is None:
            _skip("sync message without sentMessage (read/contacts/blocked sync)")
            return None
        destination = Sender(uuid=_str(sent, "destinationUuid", sent_path, ident=True),
                             number=_str(sent, "destinationNumber", sent_path, ident=True), name=None)
        # A sync comes from one of the account's own devices: it is Note to Self exactly when the
        # destination is that same account (docs/adapters.md G3); anything else is the owner
        # talking to someone else (G4) or to a group, which is not a turn.
        to_self = ((destination.uuid is not None and destination.uuid == sender.uuid)
                   or (destination.number is not None and destination.number == sender.number))
        if not to_self or "groupInfo" in sent:
            _skip("sync of a message the account sent to someone else")
            return None
        note_to_self = True
        edit, edit_path = _obj(sent, "editMessage", sent_path), f"{sent_path}.editMessage"
        data, path = (None, path) if edit is not None else (sent, sent_path)
    elif is_own(sender, account, account_uuid):
        _skip("the account's own message")
        return None

    target = None
    if edit is not None:
        target = _int(edit, "targetSentTimestamp", edit_path, required=True)
        data, path = _obj(edit, "dataMessage", edit_path, required=True), f"{edit_path}.dataMessage"
    if data is None:
        if "storyMessage" in envelope:
            _skip("storyMessage (stories are not mapped to turns)")
        else:
            _skip("envelope without a message (profile key, decryption or unknown content)")
        return None
    assert data is not None

    timestamp = _int(data, "timestamp", path, required=True)
    assert timestamp is not None
    if note_to_self and timestamp in own_sent:
        _skip("echo of the bot's own Note-to-Self reply %s", timestamp)
        return None
    group = _obj(data, "groupInfo", path)
    group_id = None
    group_name = None
    if group is not None:
        group_id = _str(group, "groupId", f"{path}.groupInfo", required=True, ident=True)
        group_name = _str(group, "groupName", f"{path}.groupInfo")
        if _str(group, "type", f"{path}.groupInfo") == "UPDATE":
            _skip("group update (revision %s)", group.get("revision"))
            return None
        assert group_id is not None
        group_id = raw_group_id(group_id, f"{path}.groupInfo.groupId")
    if _obj(data, "reaction", path) is not None:
        _skip("reaction")
        return None
    deleted = _obj(data, "remoteDelete", path) if target is None else None
    if deleted is not None:
        # Never a turn: it withdraws the original if that is still queued (docs/behaviour.md §5).
        target = _int(deleted, "timestamp", f"{path}.remoteDelete", required=True)
        assert target is not None
        source = _source(sender, group_id, group_name, target, uuid_for_number)
        return QueuedChange(source, _event_id(target, source), None)
    body = _str(data, "message", path)
    media = _media(data, path)
    text = render_mentions(body, _list(data, "mentions", path), f"{path}.mentions") if body else ""
    source = _source(sender, group_id, group_name, timestamp, uuid_for_number)
    if target is None and not text.strip() and not media:
        _skip("message %s without text or attachments (profile key or timer update)", timestamp)
        return None
    event = MessageEvent(source=source, text=text, message_id=_event_id(timestamp, source),
                         media=media, raw=payload, **_reply_context(data, path),
                         aliases=[IdentityAlias(PLATFORM, number, known_uuid, "signal envelope")
                                  for number, known_uuid in identity_pairs(payload)])
    if target is not None:
        # An edit: the original's chat and user are the edit's (only its author can edit it).
        original = replace(source, message_id=str(target))
        return QueuedChange(original, _event_id(target, original), text,
                      event if text.strip() or media else None)
    return source, event


def _source(sender: Sender, group_id: str | None, group_name: str | None, timestamp: int,
            uuid_for_number: Callable[[str], str | None] | None) -> SessionSource:
    """The SessionSource of a message from `sender` (in group `group_id`, or a DM) sent at
    `timestamp` (docs/adapters.md §5.1)."""
    uuid = sender.uuid
    if uuid is None and sender.number and uuid_for_number is not None:
        uuid = uuid_for_number(sender.number)
    if group_id is not None:
        chat_id, chat_id_alt, chat_type, chat_name = GROUP_PREFIX + group_id, group_id, "group", group_name
    else:
        chat_id, chat_id_alt, chat_type = uuid or sender.number or "", None, "dm"
        chat_name = sender.name or sender.number
    return SessionSource(
        platform=PLATFORM,
        chat_id=chat_id,
        chat_id_alt=chat_id_alt,
        chat_name=chat_name,
        chat_type=chat_type,
        user_id=sender.number or uuid,
        user_name=sender.name or sender.number,
        user_id_alt=uuid,
        message_id=str(timestamp),
    )


def _event_id(timestamp: int, source: SessionSource) -> str:
    """The event message id of the message `source`'s user sent at `timestamp`:
    `"<timestamp>:<author>"`, the author being the UUID, else the number (module docstring)."""
    return f"{timestamp}:{source.user_id_alt or source.user_id}"


def event_ids(source: SessionSource) -> list[str]:
    """Every event message id the message `source` names (its author, its timestamp in
    `source.message_id`) may have been emitted with: `"<timestamp>:<uuid>"` and
    `"<timestamp>:<number>"`, the UUID's first. An envelope that carried only a number, before its
    UUID was known, was emitted under the number (module docstring); its edit or remote delete
    may carry both. Empty when `source` has no message id."""
    if not source.message_id:
        return []
    authors = dict.fromkeys(a for a in (source.user_id_alt, source.user_id) if a)
    return [f"{source.message_id}:{author}" for author in authors]


def _reply_context(data: Mapping, path: str) -> dict[str, Any]:
    """The `reply_to_*` fields of a message that quotes another (`dataMessage.quote`: `id` is
    the quoted message's timestamp, the author its UUID or number)."""
    quote = _obj(data, "quote", path)
    if quote is None:
        return {}
    where = f"{path}.quote"
    quoted = _int(quote, "id", where, required=True)
    author = (_str(quote, "authorUuid", where, ident=True) or _str(quote, "authorNumber", where, ident=True)
              or _str(quote, "author", where, ident=True))
    text = _str(quote, "text", where)
    if text:
        text = render_mentions(text, _list(quote, "mentions", where), f"{where}.mentions")
    return {"reply_to_message_id": f"{quoted}:{author}" if author else str(quoted),
            "reply_to_text": text or None, "reply_to_author_id": author}


def quote_of(message_id: str | None) -> tuple[int, str] | None:
    """`(quoteTimestamp, quoteAuthor)` for a reply to event message id `"<timestamp>:<author>"`;
    None when `message_id` is not in that form."""
    if not message_id:
        return None
    stamp, sep, author = str(message_id).partition(":")
    if not sep or not author or not stamp.isdigit():
        return None
    return int(stamp), author


def identity_pairs(payload: Any) -> list[tuple[str, str]]:
    """Every `(number, uuid)` pair a payload reveals (sender, sync destination, quote author,
    mentions), for the number ↔ UUID alias store. Never raises: a malformed payload yields what
    could be read."""
    found: list[tuple[str, str]] = []

    def add(number: Any, uuid: Any) -> None:
        if isinstance(number, str) and isinstance(uuid, str) and number and uuid and (number, uuid) not in found:
            try:
                number.encode("utf-8")
                uuid.encode("utf-8")
            except UnicodeEncodeError:
                return
            found.append((number, uuid))

    try:
        inner = unwrap(payload)
    except MalformedPayload:
        return found
    envelope = inner.get("envelope") if isinstance(inner, dict) else None
    if not isinstance(envelope, dict):
        return found
    add(envelope.get("sourceNumber"), envelope.get("sourceUuid"))
    messages = [envelope.get("dataMessage")]
    sync = envelope.get("syncMessage")
    if isinstance(sync, dict) and isinstance(sync.get("sentMessage"), dict):
        sent = sync["sentMessage"]
        add(sent.get("destinationNumber"), sent.get("destinationUuid"))
        messages.append(sent)
    edit = envelope.get("editMessage")
    if isinstance(edit, dict):
        messages.append(edit.get("dataMessage"))
    for data in messages:
        if not isinstance(data, dict):
            continue
        quote = data.get("quote")
        if isinstance(quote, dict):
            add(quote.get("authorNumber"), quote.get("authorUuid"))
        mentions = data.get("mentions")
        for mention in mentions if isinstance(mentions, list) else ():
            if isinstance(mention, dict):
                add(mention.get("number"), mention.get("uuid"))
    return found
