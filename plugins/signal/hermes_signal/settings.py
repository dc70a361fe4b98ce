"""The `[platforms.signal]` settings table (docs/architecture.md §5 "Per-plugin sections").

Validated by the core into `SignalSettings` (the model returned by this plugin's
`hermes_settings_schema` hookimpl). signal-cli's HTTP daemon has no authentication, so there is
no secret here: keep the daemon bound to 127.0.0.1 (docs/adapters.md §5.3).
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import ClassVar

from pydantic import Field, field_validator

from hermes_core.sdk import IdRule, MalformedPayload, PlatformSettings

from .mapping import GROUP_PREFIX, REST_GROUP_PREFIX, raw_group_id

DEFAULT_BASE_URL = "http://127.0.0.1:8080"  # signal-cli's `--http` default is localhost:8080

# E.164: a "+" and 7 to 15 digits (signal-cli's account identifier in single-account mode).
_E164 = re.compile(r"^\+[1-9][0-9]{6,14}$")
# A number as people write it: "+", then digits and the separators of a written number.
_WRITTEN_NUMBER = re.compile(r"\+[0-9\s().-]*[0-9][0-9\s().-]*")
# An ACI: a UUID, which signal-cli sends in lower case (docs/adapters.md §5.1: `sourceUuid`).
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def _read_user(text: str) -> str | None:
    # A sender is named by its number (`sourceNumber`, E.164) or its ACI (`sourceUuid`). A number
    # written with spaces or dashes, or a UUID in upper case, means exactly one of them and is
    # read as signal-cli sends it; anything else (a number without "+" and its country code,
    # whose country cannot be guessed; a Signal username; a name) is never sent as an id.
    if _WRITTEN_NUMBER.fullmatch(text):
        number = "+" + re.sub(r"[^0-9]", "", text)
        return number if _E164.match(number) else None
    return text.lower() if _UUID.fullmatch(text) else None


def _is_group_id(text: str) -> bool:
    # signal-cli's group id: base64 of 32 bytes (v2 groups) or 16 bytes (legacy v1 groups),
    # docs/adapters.md §5.0.
    try:
        return len(base64.b64decode(text, validate=True)) in (16, 32)
    except (binascii.Error, ValueError):
        return False


def _read_chat(text: str) -> str | None:
    # A DM's chat is its person (UUID, or number); a group's is `group:<id>`, its raw id matching
    # too (`chat_id_alt`). signal-cli-rest-api's `group.<base64 of the id>` means exactly one
    # group and is read as `group:<id>`; the raw id stays byte-exact (no case change).
    if text.startswith((GROUP_PREFIX, REST_GROUP_PREFIX)):
        try:
            raw = raw_group_id(text, "allowed_chats")
        except MalformedPayload:
            return None
        return GROUP_PREFIX + raw if _is_group_id(raw) else None
    if _is_group_id(text):
        return text
    return _read_user(text)


USER_IDS = IdRule(
    read=_read_user, never="a Signal sender",
    accepted="a phone number with + and its country code (+1 555 123 4567) or an ACI UUID "
             "(0b9c8d7e-6f5a-4b3c-8d2e-1f0a9b8c7d6e), not a username or a name")
"""`allowed_users` / `admin_users` (docs/behaviour.md §9): numbers as `+<digits>`, UUIDs in lower
case."""

CHAT_IDS = IdRule(
    read=_read_chat, never="a Signal chat",
    accepted="a group id (group:Pmpi+EfPWmsxiomLe9Nx2XF9HOE483p6iKiFj65iMwI=, the id alone, or "
             "signal-cli-rest-api's group.… form), or for a DM the person's number with + and its country "
             "code or ACI UUID, not a group's name")
"""`allowed_chats` (docs/behaviour.md §9): groups as `group:<id>` or the raw id, a person as in
`USER_IDS`."""


class SignalSettings(PlatformSettings):
    """Settings of the Signal adapter: the keys every platform table accepts
    (`PlatformSettings`: `enabled`, access lists, `home_channel`, `edits_as_turns` — an edit,
    `editMessage`, of a message no longer queued starts a new turn only when it is True; an edit
    of a queued one always replaces its text, docs/behaviour.md §5) plus:

    Attributes:
        account: the bot's Signal number in E.164 form (`"+15559990000"`), the account the
            daemon runs. Required to start. Sent as `account` with every request and as
            `?account=` on the event stream (needed when the daemon runs several accounts).
        account_uuid: the account's own ACI (UUID), if known; otherwise it is learned from the
            first sync message the account sends. Used to recognise the account's own messages.
        base_url: where `signal-cli daemon --http` listens. Use 127.0.0.1 or localhost: the
            daemon answers 421 to any other Host header.
        request_timeout: seconds one JSON-RPC request may take (a `send` waits for Signal's
            servers).
        stream_idle_timeout: seconds without a byte on the event stream after which it is
            considered dead and reopened; keep it above 15 (the daemon writes a keep-alive every
            15 s).
        reconnect_initial / reconnect_max: first and longest pause, in seconds, between attempts
            to reopen the event stream (exponential back-off with jitter).
        max_emit_attempts: how often one message is offered to the gateway before it is dropped
            with an ERROR log (the event stream cannot redeliver it).
        ignore_stories: story messages are not turns (docs/adapters.md §5.1).

    `allowed_users` and `admin_users` take numbers and UUIDs, `allowed_chats` group ids too
    (`USER_IDS`, `CHAT_IDS`): a number written with spaces is read as `+<digits>`, a UUID in
    lower case; an entry no Signal id can equal is refused at load (docs/behaviour.md §9).
    """

    table: ClassVar[str | None] = "signal"
    user_id_rule: ClassVar[IdRule | None] = USER_IDS
    chat_id_rule: ClassVar[IdRule | None] = CHAT_IDS
    role_id_rule: ClassVar[IdRule | None] = IdRule.no_roles("Signal")  # no role_authorized here

    account: str | None = None
    account_uuid: str | None = None
    base_url: str = DEFAULT_BASE_URL
    request_timeout: float = Field(60.0, gt=0)
    stream_idle_timeout: float = Field(45.0, gt=0)
    reconnect_initial: float = Field(0.5, gt=0)
    reconnect_max: float = Field(30.0, gt=0)
    max_emit_attempts: int = Field(5, ge=1)
    ignore_stories: bool = True

    @field_validator("account")
    @classmethod
    def _check_account(cls, value: str | None) -> str | None:
        if value is not None and not _E164.match(value):
            raise ValueError("platforms.signal.account must be the bot's number in E.164 form, "
                             "a '+' followed by 7 to 15 digits")
        return value

    @field_validator("base_url")
    @classmethod
    def _check_base_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("platforms.signal.base_url must start with http:// or https://")
        return value.rstrip("/")

    def missing_credentials(self) -> list[str]:
        """`["account"]` while the bot's number is unset (`hermes-gateway doctor`)."""
        return [] if self.account else ["account"]
