"""Cloud API webhook → (SessionSource, MessageEvent) and status reports: docs/adapters.md §4.3
(W5–W7), seed §1.

Pure functions over the webhook body (no network). A body is
`{"object": "whatsapp_business_account", "entry": [{"changes": [{"field": "messages",
"value": {...}}]}]}`; each `value` has `metadata.phone_number_id` (which business number it is
for), `contacts[]` (profile name, `wa_id` = phone, `user_id` = business-scoped user id, BSUID),
`messages[]`, `statuses[]` and `errors[]`.

Rules (platform `whatsapp_cloud`, docs/adapters.md §0.3 item 13):
- `messages[].group_id` present → `group` with `chat_id` = the group id; else `dm` with `chat_id`
  = the BSUID (`contacts[].user_id`, authoritative; else the message's `from_user_id`), falling
  back to the phone (`from`) for payloads without one. The BSUID, because the phone disappears
  for users who adopt a username (W7, W-T7).
- `user_id` = the phone when present, else the BSUID; `user_id_alt` = the BSUID; `user_name` =
  the profile name; `chat_name` = the profile name in a DM (a group's name needs the Groups API).
- The phone is an alias of the BSUID (the BSUID is canonical): a later payload that carries only
  the phone keys the same session.

Edits and deletions (`type` `edit` / `revoke`, which Meta documents only for WhatsApp Business
app numbers onboarded to the Cloud API, "Coexistence") become a `QueuedChange` (the SDK's)
naming `original_message_id`, routed by the sender as the original was (docs/behaviour.md §5).

Not turns: statuses (they become `StatusReport`s for the delivery ledger), `errors[]` (logged),
reactions, `unsupported` and `system` messages, changes other than `messages` (message echoes of
the business app included), and anything for another business number. A broken message raises
`MalformedPayload` naming the field; the others of the body are kept.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from hermes_core.sdk import IdentityAlias, MalformedPayload, MessageEvent, QueuedChange, SessionSource

from . import fields

log = logging.getLogger(__name__)

PLATFORM = "whatsapp_cloud"
OBJECT = "whatsapp_business_account"
# Message types that are never turns (docs/adapters.md §4.3 "skip").
NOT_TURNS = ("reaction", "unsupported", "system", "ephemeral", "request_welcome")
MEDIA_TYPES = ("image", "video", "document", "audio", "sticker")
# Status values that are delivery reports ("sent" only means the platform accepted it).
REPORTS = {"delivered": "delivered", "read": "delivered", "played": "delivered", "failed": "failed"}


@dataclass(frozen=True, slots=True)
class StatusReport:
    """What a status callback says about a message the business sent.

    Attributes:
        message_id: the sent message's `wamid.…`.
        status: `"delivered"` (delivered, read, played) or `"failed"`.
        error: for a failure, `"<code>: <title>"` of its first error (no user data), else None.
        code: the error code (131047: the 24-hour customer-service window is closed), or None.
    """

    message_id: str
    status: str
    error: str | None = None
    code: int | None = None


@dataclass(slots=True)
class CloudBatch:
    """Everything one webhook body carries: `turns` in order, `changes` (edits and deletions of
    earlier messages, in order), `reports` for the ledger, and `malformed` — one
    `"<field> <problem>"` line per message that could not be read."""

    turns: list[tuple[SessionSource, MessageEvent]] = field(default_factory=list)
    changes: list[QueuedChange] = field(default_factory=list)
    reports: list[StatusReport] = field(default_factory=list)
    malformed: list[str] = field(default_factory=list)


def _skip(reason: str, *args: Any) -> None:
    log.debug("whatsapp cloud payload skipped: " + reason, *args)


def _contact_for(contacts: list, message: Mapping) -> dict:
    """The `contacts[]` entry of `message`'s sender: same BSUID, else same phone, else the only one."""
    sender_bsuid = message.get("from_user_id")
    sender_phone = message.get("from")
    entries = [c for c in contacts if isinstance(c, dict)]
    for contact in entries:
        if sender_bsuid and contact.get("user_id") == sender_bsuid:
            return contact
    for contact in entries:
        if sender_phone and contact.get("wa_id") == sender_phone:
            return contact
    return entries[0] if len(entries) == 1 else {}


def message_text(message: Mapping, path: str) -> tuple[str, list[dict[str, Any]]]:
    """`(text, media)` of a Cloud API message object (text, media captions, buttons, list
    replies). Media entries are `{"kind", "id", "mime_type"?}` (the file is fetched by id)."""
    kind = fields.text(message, "type", path) or ""
    text = ""
    media: list[dict[str, Any]] = []
    if kind == "text":
        body = fields.obj(message, "text", path, required=True)
        assert body is not None
        text = fields.text(body, "body", f"{path}.text") or ""
    elif kind in MEDIA_TYPES:
        part = fields.obj(message, kind, path, required=True)
        assert part is not None
        where = f"{path}.{kind}"
        text = fields.text(part, "caption", where) or ""
        entry = {"kind": kind, "id": fields.ident(part, "id", where), "mime_type": fields.text(part, "mime_type", where)}
        media.append({k: v for k, v in entry.items() if v})
    elif kind == "button":
        part = fields.obj(message, "button", path, required=True)
        assert part is not None
        text = fields.text(part, "text", f"{path}.button") or ""
    elif kind == "interactive":
        part = fields.obj(message, "interactive", path, required=True)
        assert part is not None
        for reply in ("button_reply", "list_reply"):
            chosen = fields.obj(part, reply, f"{path}.interactive")
            if chosen is not None:
                text = fields.text(chosen, "title", f"{path}.interactive.{reply}") or ""
    return text, media


def map_message(message: Any, contacts: list, path: str, *, own_number: str | None = None
                ) -> tuple[SessionSource, MessageEvent] | QueuedChange | None:
    """Map one `messages[]` item (W5, W6, W7): a turn, a `QueuedChange` (an `edit` or a `revoke`
    of an earlier message, docs/behaviour.md §5), or None when it is neither (the business number's
    own messages included: `own_number` is its `display_phone_number`)."""
    if not isinstance(message, dict):
        raise MalformedPayload(path, f"must be an object, got {fields.type_name(message)}")
    message_id = fields.ident(message, "id", path, required=True)
    assert message_id is not None
    kind = fields.text(message, "type", path)
    if kind in NOT_TURNS:
        _skip("%s is a %s message", message_id, kind)
        return None
    fields.timestamp(message, "timestamp", path)
    phone = fields.ident(message, "from", path)
    if own_number and phone and phone.lstrip("+") == own_number.lstrip("+"):
        _skip("%s is the business number's own message", message_id)
        return None
    contact = _contact_for(contacts, message)
    cpath = path.rsplit(".messages", 1)[0] + ".contacts[]"
    bsuid = fields.ident(contact, "user_id", cpath) or fields.ident(message, "from_user_id", path)
    if phone is None and bsuid is None:
        raise MalformedPayload(f"{path}.from", "is missing (and so is the sender's user_id)")
    profile = fields.obj(contact, "profile", cpath) or {}
    name = fields.text(profile, "name", f"{cpath}.profile") or None
    group_id = fields.ident(message, "group_id", path)
    if group_id is not None:
        source = SessionSource(platform=PLATFORM, chat_id=group_id, chat_type="group", user_id=phone or bsuid,
                               user_name=name, user_id_alt=bsuid, message_id=message_id)
    else:
        source = SessionSource(platform=PLATFORM, chat_id=bsuid or phone or "", chat_name=name, chat_type="dm",
                               user_id=phone or bsuid, user_name=name, user_id_alt=bsuid, message_id=message_id)
    aliases = [IdentityAlias(PLATFORM, phone, bsuid, "contacts.user_id")] if phone and bsuid and phone != bsuid else []
    if kind == "revoke":
        # A deletion names the original (`revoke.original_message_id`); it is never a turn.
        revoke = fields.obj(message, "revoke", path, required=True)
        assert revoke is not None
        original_id = fields.ident(revoke, "original_message_id", f"{path}.revoke", required=True)
        assert original_id is not None
        return QueuedChange(replace(source, message_id=original_id), original_id, None)
    original_id = None
    content, content_path = message, path
    if kind == "edit":
        # An edit carries the original's id and the whole new message (`edit.message`).
        edit = fields.obj(message, "edit", path, required=True)
        assert edit is not None
        original_id = fields.ident(edit, "original_message_id", f"{path}.edit", required=True)
        content = fields.obj(edit, "message", f"{path}.edit", required=True)
        assert original_id is not None and content is not None
        content_path = f"{path}.edit.message"
    text, media = message_text(content, content_path)
    if not text.strip() and not media:
        _skip("%s (%s) has neither text nor media", message_id, kind)
        return None
    context = fields.obj(content, "context", content_path) or {}
    reply_to = fields.ident(context, "id", f"{content_path}.context")
    event = MessageEvent(source=source, text=text, message_id=message_id, media=media, raw=message,
                         reply_to_message_id=reply_to,
                         reply_to_author_id=(fields.ident(context, "from", f"{content_path}.context")
                                             if reply_to else None),
                         aliases=aliases)
    if original_id is not None:
        # Offered to the queue first; `event` (the edit's own id) is the turn `edits_as_turns` gives.
        return QueuedChange(replace(source, message_id=original_id), original_id, text, event)
    return source, event


def map_status(status: Any, path: str) -> StatusReport | None:
    """A `statuses[]` item as a delivery report; None for progress ("sent") and unknown values."""
    if not isinstance(status, dict):
        raise MalformedPayload(path, f"must be an object, got {fields.type_name(status)}")
    message_id = fields.ident(status, "id", path, required=True)
    value = fields.text(status, "status", path)
    report = REPORTS.get(value or "")
    if report is None:
        _skip("status %r of %s is no delivery report", value, message_id)
        return None
    assert message_id is not None
    if report == "delivered":
        return StatusReport(message_id, report)
    errors = fields.items(status, "errors", path)
    first = errors[0] if errors and isinstance(errors[0], dict) else {}
    code = first.get("code") if isinstance(first.get("code"), int) and not isinstance(first.get("code"), bool) else None
    title = fields.text(first, "title", f"{path}.errors[0]") or fields.text(first, "message", f"{path}.errors[0]")
    error = f"WhatsApp error {code}: {title or 'failed'}" if code is not None else f"WhatsApp: {title or 'failed'}"
    return StatusReport(message_id, report, error=error, code=code)


def map_webhook(body: Any, *, phone_number_id: str | None = None) -> CloudBatch:
    """Map one webhook body.

    Args:
        body: the decoded JSON body (after its signature was checked on the raw bytes).
        phone_number_id: our business number's id; changes for another number are skipped
            (None: accept every number of the app).

    Returns:
        A `CloudBatch` (turns, status reports, malformed lines).

    Raises:
        MalformedPayload: the body's envelope itself is broken (not an object, `entry` or
            `changes` of the wrong type). A broken message or status only lands in `malformed`.
    """
    batch = CloudBatch()
    if not isinstance(body, dict):
        raise MalformedPayload("body", f"must be an object, got {fields.type_name(body)}")
    if body.get("object") != OBJECT:
        _skip("object %r is not %s", body.get("object"), OBJECT)
        return batch
    for e, entry in enumerate(fields.items(body, "entry", "body")):
        epath = f"body.entry[{e}]"
        if not isinstance(entry, dict):
            raise MalformedPayload(epath, f"must be an object, got {fields.type_name(entry)}")
        for c, change in enumerate(fields.items(entry, "changes", epath)):
            cpath = f"{epath}.changes[{c}]"
            if not isinstance(change, dict):
                raise MalformedPayload(cpath, f"must be an object, got {fields.type_name(change)}")
            if change.get("field") != "messages":
                _skip("change field %r (only 'messages' carries turns)", change.get("field"))
                continue
            value = fields.obj(change, "value", cpath, required=True)
            assert value is not None
            vpath = f"{cpath}.value"
            metadata = fields.obj(value, "metadata", vpath) or {}
            number = fields.ident(metadata, "phone_number_id", f"{vpath}.metadata")
            if phone_number_id and number != phone_number_id:
                _skip("change for another business number")
                continue
            for err in fields.items(value, "errors", vpath):
                code = err.get("code") if isinstance(err, dict) else None
                log.warning("whatsapp cloud webhook reported an error (code %s)", code)
            contacts = fields.items(value, "contacts", vpath)
            for m, message in enumerate(fields.items(value, "messages", vpath)):
                try:
                    mapped = map_message(message, contacts, f"{vpath}.messages[{m}]",
                                         own_number=fields.ident(metadata, "display_phone_number", vpath))
                except MalformedPayload as exc:
                    batch.malformed.append(f"{exc.field} {exc.problem}")
                    continue
                if isinstance(mapped, QueuedChange):
                    batch.changes.append(mapped)
                elif mapped is not None:
                    batch.turns.append(mapped)
            for s, status in enumerate(fields.items(value, "statuses", vpath)):
                try:
                    report = map_status(status, f"{vpath}.statuses[{s}]")
                except MalformedPayload as exc:
                    batch.malformed.append(f"{exc.field} {exc.problem}")
                    continue
                if report is not None:
                    batch.reports.append(report)
    return batch
