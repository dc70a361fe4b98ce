"""Raw Slack event envelope → (SessionSource, MessageEvent): docs/adapters.md §3.0, seed §1, docs/behaviour.md §4.

Pure functions over the JSON dict Slack sends (the HTTP Events API `event_callback` body, or the
`payload` of a Socket Mode `events_api` frame — the same envelope). Everything that needs the
network (user names, channel kinds and names, the threads the bot takes part in) is looked up by
the adapter beforehand and passed in as `Facts`, so every sample of docs/adapters.md §3.1 is a
deterministic fixture test.

Outcomes of `classify` (and of `map_event`, which returns the pair only):
- a `Classified` message: a user turn; `ignore_reason` says why the bot should stay silent on it
  (a channel message that does not mention the bot, …), None when it is addressed to the bot;
- `None`: a well-formed event that is not a user turn (the bot's own message, a service subtype
  such as `channel_join`, an edit while `edits_as_turns` is off, a deletion, a non-message event
  kind); the reason is logged at DEBUG. With `changes=True` an edit (`message_changed` of the
  text) and a deletion (`message_deleted`) of a user's message are a `Classified` whose `change`
  says which, so the adapter can offer them to the gateway's queue (docs/behaviour.md §5
  "Edits and deletions");
- `MalformedPayload`: the payload is broken (missing field, wrong type, unknown event kind); the
  message names the dotted field. The adapter logs it and acknowledges the event (a redelivery
  would be just as broken).

Rules (docs/adapters.md §3.0): `channel_type` im → dm, channel/group → channel, mpim → group
(`app_mention` has no channel_type: the looked-up kind decides); `thread_id` is `thread_ts` when it
differs from `ts`, else — for a channel message answered in a new thread (`reply_in_thread`) — the
message's own `ts` (synthetic root, §0.3 item 7); `ts` stays a string (S-T10).
"""

from __future__ import annotations

import html
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Collection, Mapping, NamedTuple

from hermes_core.sdk import MalformedPayload, MessageEvent, SessionSource

from .settings import SlackSettings

log = logging.getLogger(__name__)

PLATFORM = "slack"

# conversations.info kinds → chat_type (docs/adapters.md §0.2, §0.3 item 2).
CHAT_TYPES = {"im": "dm", "mpim": "group", "channel": "channel", "group": "channel"}

MESSAGE_EVENTS = ("message", "app_mention")
# Event kinds an app may be subscribed to that are well-formed but carry no user turn.
OTHER_EVENTS = frozenset({
    "app_home_opened", "app_uninstalled", "tokens_revoked", "member_joined_channel",
    "member_left_channel", "reaction_added", "reaction_removed", "channel_created", "channel_rename",
    "channel_archive", "channel_unarchive", "channel_deleted", "group_rename", "group_archive",
    "user_change", "team_join", "pin_added", "pin_removed", "file_shared", "file_created",
    "link_shared", "assistant_thread_started", "assistant_thread_context_changed",
})
# Message subtypes that are user turns (S-T7): everything else is a service message.
TURN_SUBTYPES = frozenset({None, "thread_broadcast", "file_share", "bot_message", "me_message"})
EDIT_SUBTYPE = "message_changed"
DELETE_SUBTYPE = "message_deleted"
EDIT, DELETION = "edit", "deletion"  # `Classified.change`

_TS = re.compile(r"^[0-9]{1,12}\.[0-9]{1,9}$")
_ID = re.compile(r"^[A-Za-z0-9]{1,64}$")
# <@U…> / <@U…|name> mentions, <#C…|name> channel links, <!here> specials, <url|label> links.
_USER_MENTION = re.compile(r"<@([A-Z0-9]+)(?:\|[^>]*)?>")
_CHANNEL_LINK = re.compile(r"<#([A-Z0-9]+)(?:\|([^>]*))?>")
_SPECIAL = re.compile(r"<!(here|channel|everyone)(?:\|[^>]*)?>")
_SUBTEAM = re.compile(r"<!subteam\^[A-Z0-9]+(?:\|([^>]*))?>")
_LINK = re.compile(r"<((?:https?|mailto):[^>|]+)(?:\|([^>]*))?>")
_BANG = re.compile(r"^!([A-Za-z_]+)(?=\s|$)")


@dataclass(frozen=True, slots=True)
class ChannelFacts:
    """What `conversations.info` says about a channel (cached by the adapter).

    Attributes:
        kind: `"im"`, `"mpim"`, `"channel"` (public) or `"group"` (private channel); None unknown.
        name: the channel's name (None for DMs, which have none).
        topic: the purpose (else the topic) text, None when empty.
    """

    kind: str | None = None
    name: str | None = None
    topic: str | None = None


@dataclass(frozen=True, slots=True)
class Facts:
    """Looked-up facts `classify` needs besides the payload (all optional).

    Attributes:
        bot_user_id / bot_id: this app's bot user (`U…`) and bot (`B…`) ids, from `auth.test`;
            messages from either are the bot's own.
        channels: `{channel id: ChannelFacts}`.
        users: `{user id: display name}` (`profile.display_name`, else `real_name`).
        bot_threads: `(channel id, thread ts)` pairs of threads the bot takes part in: their
            replies are answered without a mention.
    """

    bot_user_id: str | None = None
    bot_id: str | None = None
    channels: Mapping[str, ChannelFacts] = field(default_factory=dict)
    users: Mapping[str, str] = field(default_factory=dict)
    bot_threads: Collection[tuple[str, str]] = ()


@dataclass(frozen=True, slots=True)
class Classified:
    """One user turn read from an envelope (or, with `classify(changes=True)`, an edit or a
    deletion of one).

    Attributes:
        source / event: what the gateway gets. For an edit or a deletion `source` is the one the
            original message produced (same chat, thread and user: the same session key) and
            `source.message_id` the original's `ts`; for an edit `event` is the new turn
            `edits_as_turns` would make (id `<ts>@<edit ts>`, the new text); for a deletion it
            is the deleted message as it was, never to be emitted.
        ignore_reason: why the bot stays silent on it (not addressed to the bot), or None.
        in_thread: the message is inside a real Slack thread (`thread_ts` ≠ `ts`).
        change: None for a new message; `"edit"` or `"deletion"` (docs/behaviour.md §5).
    """

    source: SessionSource
    event: MessageEvent
    ignore_reason: str | None
    in_thread: bool
    change: str | None = None


def _type_name(value: Any) -> str:
    return type(value).__name__


def _get(data: Mapping, key: str, path: str, kind: type, *, required: bool) -> Any:
    value = data.get(key)
    if value is None:
        if required:
            raise MalformedPayload(f"{path}.{key}", "is missing")
        return None
    if not isinstance(value, kind):
        raise MalformedPayload(f"{path}.{key}", f"must be {_kind_name(kind)}, got {_type_name(value)}")
    return value


def _kind_name(kind: type) -> str:
    return {dict: "an object", str: "a string", list: "a list"}.get(kind, kind.__name__)


def _id(data: Mapping, key: str, path: str, *, required: bool = False) -> str | None:
    value = _get(data, key, path, str, required=required)
    if value is not None and not _ID.match(value):
        raise MalformedPayload(f"{path}.{key}", "is not a Slack id (letters and digits only)")
    return value


def _ts(data: Mapping, key: str, path: str, *, required: bool = False) -> str | None:
    # S-T10: a ts is a string id; a JSON number would already have lost its precision.
    value = _get(data, key, path, str, required=required)
    if value is not None and not _TS.match(value):
        raise MalformedPayload(f"{path}.{key}", "is not a Slack timestamp ('<seconds>.<micro>')")
    return value


def clean_text(text: str, bot_user_id: str | None = None, bang_commands: Collection[str] = ()) -> str:
    """Turn Slack's encoded message text (S-T8) into the plain text the agent gets.

    The bot's own mention is removed (and the text trimmed), other user mentions stay as
    `<@U…>` (the agent can mention people back the same way), `<#C…|name>` → `#name`,
    `<!here>` → `@here`, `<url|label>` → `label (url)`, `<url>` → `url`, and the `&amp;`,
    `&lt;`, `&gt;` escapes are decoded. A leading `!name` is read as `/name` when `name` is in
    `bang_commands` (Slack's client keeps `/…` for its own slash commands).
    """
    if bot_user_id:
        text = re.sub(r"\s*<@" + re.escape(bot_user_id) + r"(?:\|[^>]*)?>\s*", " ", text)
    text = _CHANNEL_LINK.sub(lambda m: "#" + (m.group(2) or m.group(1)), text)
    text = _SPECIAL.sub(lambda m: "@" + m.group(1), text)
    text = _SUBTEAM.sub(lambda m: m.group(1) or "@group", text)
    text = _LINK.sub(lambda m: f"{m.group(2)} ({m.group(1)})" if m.group(2) else m.group(1), text)
    # Mentions of other users stay encoded; only &amp; &lt; &gt; are Slack escapes.
    text = html.unescape(text) if "&" in text else text
    text = text.strip()
    match = _BANG.match(text)
    if match and match.group(1).lower() in {c.lower() for c in bang_commands}:
        text = "/" + text[1:]
    return text


def _mentions(text: str, bot_user_id: str | None) -> bool:
    return bool(bot_user_id) and any(m.group(1) == bot_user_id for m in _USER_MENTION.finditer(text))


def _files(event: Mapping, path: str) -> list[dict[str, Any]]:
    files = _get(event, "files", path, list, required=False) or []
    media = []
    for index, item in enumerate(files):
        if not isinstance(item, dict):
            raise MalformedPayload(f"{path}.files[{index}]", f"must be an object, got {_type_name(item)}")
        entry = {"kind": "file", "id": _id(item, "id", f"{path}.files[{index}]", required=True)}
        for key in ("name", "mimetype", "url_private"):
            value = item.get(key)
            if isinstance(value, str):
                entry[key] = value
        if isinstance(item.get("size"), int) and not isinstance(item.get("size"), bool):
            entry["size"] = item["size"]
        media.append(entry)
    return media


def _is_tombstone(event: dict) -> bool:
    """True for a message_changed whose message became a thread's tombstone (docs/adapters.md S-T11)."""
    message = event.get("message")
    return isinstance(message, dict) and message.get("subtype") == "tombstone"


def classify(envelope: Any, facts: Facts | None = None,
             settings: SlackSettings | None = None, *, changes: bool = False) -> Classified | None:
    """Read one Slack event envelope.

    Args:
        envelope: the `event_callback` JSON object (HTTP body or Socket Mode `payload`).
        facts: looked-up facts (bot ids, channel kinds and names, user names, bot threads).
        settings: the plugin settings (`reply_in_thread`, `require_mention`, `channels`,
            `edits_as_turns`, `bang_commands`); defaults when None.
        changes: also read edits and deletions of user messages (`Classified.change`), whatever
            `edits_as_turns` says: an edit or a deletion may change a message still queued in
            the gateway (docs/behaviour.md §5); the caller decides what else they are.

    Returns:
        A `Classified` user turn (or edit, or deletion), or None for an event that is not one
        (reason logged at DEBUG).

    Raises:
        MalformedPayload: missing field, wrong type or unknown event kind (the field is named).
    """
    facts = facts or Facts()
    settings = settings or SlackSettings()
    if not isinstance(envelope, dict):
        raise MalformedPayload("envelope", f"must be an object, got {_type_name(envelope)}")
    kind = _get(envelope, "type", "envelope", str, required=True)
    if kind != "event_callback":
        raise MalformedPayload("envelope.type", f"has unknown value {kind!r}")
    event = _get(envelope, "event", "envelope", dict, required=True)
    team_id = _id(envelope, "team_id", "envelope")
    event_id = _get(envelope, "event_id", "envelope", str, required=False)
    event_type = _get(event, "type", "event", str, required=True)
    if event_type in OTHER_EVENTS:
        log.debug("slack event %s skipped: kind %r is not a message", event_id, event_type)
        return None
    if event_type not in MESSAGE_EVENTS:
        raise MalformedPayload("event.type", f"has unknown kind {event_type!r}")

    channel = _id(event, "channel", "event", required=True)
    assert channel is not None
    channel_type = _get(event, "channel_type", "event", str, required=False)
    if channel_type is not None and channel_type not in CHAT_TYPES:
        raise MalformedPayload("event.channel_type", f"has unknown value {channel_type!r}")
    subtype = _get(event, "subtype", "event", str, required=False)
    if subtype is not None and event_type == "app_mention":
        raise MalformedPayload("event.subtype", "is not expected on an app_mention")

    body, path, edit_ts, change = event, "event", None, None
    if subtype == EDIT_SUBTYPE and changes and _is_tombstone(event):
        # A thread's parent deleted while it has replies: Slack leaves a tombstone in its place,
        # sent as a message_changed, and no message_deleted. It is the parent's deletion.
        subtype = DELETE_SUBTYPE
        event = {**event, "deleted_ts": event["message"].get("ts")}
    if subtype == EDIT_SUBTYPE:
        if not (changes or settings.edits_as_turns):
            log.debug("slack event %s skipped: edit in %s (edits_as_turns is off)", event_id, channel)
            return None
        body = _get(event, "message", "event", dict, required=True)
        path = "event.message"
        previous = _get(event, "previous_message", "event", dict, required=False) or {}
        edited = _get(body, "edited", path, dict, required=False)
        if edited is None or previous.get("text") == body.get("text"):
            # Slack also sends message_changed when it attaches link previews: not an edit.
            log.debug("slack event %s skipped: message_changed without a text edit", event_id)
            return None
        edit_ts = _ts(edited, "ts", f"{path}.edited", required=True)
        inner_subtype = _get(body, "subtype", path, str, required=False)
        if inner_subtype not in TURN_SUBTYPES:
            log.debug("slack event %s skipped: edit of a %r message", event_id, inner_subtype)
            return None
        subtype, change = inner_subtype, EDIT
    elif subtype == DELETE_SUBTYPE and changes:
        # The deleted message as it was: its author and thread give the session it was queued in.
        deleted_ts = _ts(event, "deleted_ts", "event", required=True)
        if not isinstance(event.get("previous_message"), dict) or not event["previous_message"]:
            # Slack's own reference shows the event without it, and sends `[]` for a message of a
            # thread whose parent is a tombstone: nothing says whose session the message was in.
            log.debug("slack event %s skipped: deletion of %s without the message as it was", event_id,
                      deleted_ts)
            return None
        body = _get(event, "previous_message", "event", dict, required=True)
        path = "event.previous_message"
        if _ts(body, "ts", path) not in (None, deleted_ts):
            raise MalformedPayload("event.deleted_ts", "is not the ts of event.previous_message")
        body = {**body, "ts": deleted_ts}
        inner_subtype = _get(body, "subtype", path, str, required=False)
        if inner_subtype not in TURN_SUBTYPES:
            log.debug("slack event %s skipped: deletion of a %r message", event_id, inner_subtype)
            return None
        subtype, change = inner_subtype, DELETION
    elif subtype not in TURN_SUBTYPES:
        log.debug("slack event %s skipped: %s message in %s is not a user turn", event_id, subtype, channel)
        return None

    ts = _ts(body, "ts", path, required=True)
    assert ts is not None
    thread_ts = _ts(body, "thread_ts", path)
    user = _id(body, "user", path)
    bot_id = _id(body, "bot_id", path)
    text = _get(body, "text", path, str, required=False) or ""
    media = _files(body, path)
    # An edit that becomes a turn gets its own id, or the core's inbound dedupe on
    # (chat, message id) would take it for a redelivery of the original.
    message_id = f"{ts}@{edit_ts}" if edit_ts else ts

    if (user and user == facts.bot_user_id) or (bot_id and bot_id == facts.bot_id):
        log.debug("slack event %s skipped: the bot's own message %s", event_id, ts)
        return None
    is_bot = bool(bot_id) or subtype == "bot_message"
    sender = user or bot_id
    if sender is None:
        raise MalformedPayload(f"{path}.user", "is missing (and there is no bot_id)")
    if not text.strip() and not media:
        log.debug("slack event %s skipped: empty message %s in %s", event_id, ts, channel)
        return None

    known = facts.channels.get(channel) or ChannelFacts()
    kind_name = channel_type or known.kind
    if kind_name is None:
        # S-T4: app_mention has no channel_type and the lookup failed. Only the D prefix is
        # reliable; every other id is read as a channel (the adapter logs the failed lookup).
        kind_name = "im" if channel.startswith("D") else "channel"
    chat_type = CHAT_TYPES[kind_name]

    real_thread = thread_ts if thread_ts and thread_ts != ts else None  # S-T2
    if real_thread is not None:
        thread_id: str | None = real_thread
    elif chat_type == "channel" and settings.replies_in_thread(channel):
        thread_id = ts  # synthetic root (S-T3): keyed like the thread the reply opens
    else:
        thread_id = None

    if is_bot and not user:
        profile = body.get("bot_profile") if isinstance(body.get("bot_profile"), dict) else {}
        user_name = body.get("username") if isinstance(body.get("username"), str) else profile.get("name")
    else:
        user_name = facts.users.get(sender)
        if user_name is None and is_bot and isinstance(body.get("username"), str):
            user_name = body["username"]

    source = SessionSource(
        platform=PLATFORM,
        chat_id=channel,
        chat_name=known.name or channel,
        chat_type=chat_type,
        user_id=sender,
        user_name=user_name or None,
        thread_id=thread_id,
        chat_topic=known.topic if chat_type != "dm" else None,
        is_bot=is_bot,
        guild_id=team_id,
        message_id=ts,
    )
    cleaned = clean_text(text, facts.bot_user_id, settings.bang_commands)
    parent = body.get("parent_user_id") if isinstance(body.get("parent_user_id"), str) else None
    message = MessageEvent(source=source, text=cleaned, message_id=message_id, media=media, raw=envelope,
                           platform_update_id=event_id,
                           # A thread reply answers the thread's first message.
                           reply_to_message_id=real_thread,
                           reply_to_author_id=parent if real_thread and parent and _ID.match(parent) else None,
                           reply_to_author_name=facts.users.get(parent) if real_thread and parent else None)
    if not cleaned and not media:
        log.debug("slack event %s skipped: message %s holds only the bot's mention", event_id, ts)
        return None

    reason = _ignore_reason(event_type, text, channel, chat_type, real_thread, facts, settings)
    return Classified(source=source, event=message, ignore_reason=reason, in_thread=real_thread is not None,
                      change=change)


def _ignore_reason(event_type: str, raw_text: str, channel: str, chat_type: str, real_thread: str | None,
                   facts: Facts, settings: SlackSettings) -> str | None:
    """Why the bot stays silent on a message, or None when it is addressed to the bot."""
    if chat_type == "dm" or not settings.require_mention:
        return None
    if event_type == "app_mention" or _mentions(raw_text, facts.bot_user_id):
        return None
    if settings.channel(channel).free_response:
        return None
    if real_thread is not None and (channel, real_thread) in facts.bot_threads:
        return None
    where = "thread the bot is not in" if real_thread else "channel message"
    return f"{where} without a mention of the bot"


def map_event(envelope: Any, facts: Facts | None = None,
              settings: SlackSettings | None = None) -> tuple[SessionSource, MessageEvent] | None:
    """`classify` reduced to the pair: `(SessionSource, MessageEvent)` of a user turn, or None.

    Raises:
        MalformedPayload: as `classify`.
    """
    result = classify(envelope, facts, settings)
    return None if result is None else (result.source, result.event)


class LookupKeys(NamedTuple):
    """Ids to look up before `classify` (see `lookup_keys`)."""

    channel: str | None
    user: str | None
    thread_ts: str | None
    channel_type: str | None


def lookup_keys(envelope: Any) -> LookupKeys:
    """What the adapter looks up before `classify`: the channel (kind, name and topic; DMs need
    none), the sender (display name), the thread (does the bot take part in it) and the
    `channel_type` the event carries (None on `app_mention`, S-T4).

    Never raises: anything unreadable is None (then `classify` names the broken field).
    """
    event = envelope.get("event") if isinstance(envelope, dict) else None
    if not isinstance(event, dict):
        return LookupKeys(None, None, None, None)
    # An edit's message is nested in `message`; a deletion's (a tombstone's too) in `previous_message`.
    nested = "previous_message" if event.get("subtype") == DELETE_SUBTYPE or _is_tombstone(event) else "message"
    body = event.get(nested) if isinstance(event.get(nested), dict) else event

    def read(data: Mapping, key: str, pattern: re.Pattern) -> str | None:
        value = data.get(key)
        return value if isinstance(value, str) and pattern.match(value) else None

    channel_type = event.get("channel_type")
    return LookupKeys(read(event, "channel", _ID), read(body, "user", _ID), read(body, "thread_ts", _TS),
                      channel_type if channel_type in CHAT_TYPES else None)
