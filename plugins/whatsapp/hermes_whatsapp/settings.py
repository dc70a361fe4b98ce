"""The `[platforms.whatsapp]` (bridge) and `[platforms.whatsapp_cloud]` (Cloud API) settings
tables (docs/configuration.md, docs/architecture.md §5 "Per-plugin sections").

Both subclass the SDK's `PlatformSettings`, so `enabled`, the access lists, `home_channel` and
the other keys every platform table accepts are accepted, and an unknown key is an error naming
it. Secrets are `SecretStr` (never in a repr, a log line or `plugins --json`); prefer the
environment for them: `HERMES_PLATFORMS__WHATSAPP_CLOUD__ACCESS_TOKEN=…`,
`HERMES_PLATFORMS__WHATSAPP_CLOUD__APP_SECRET=…`, `HERMES_PLATFORMS__WHATSAPP_CLOUD__VERIFY_TOKEN=…`,
`HERMES_PLATFORMS__WHATSAPP__BRIDGE_TOKEN=…`.

`allowed_users`, `admin_users` and `allowed_chats` entries are read as WhatsApp ids (`USER_IDS`,
`CHAT_IDS`): a phone number written with spaces or dashes becomes its digits, an entry that could
never match a sender or chat is refused (docs/behaviour.md §9).
"""

from __future__ import annotations

import re
from typing import ClassVar

from pydantic import Field, SecretStr, field_validator

from hermes_core.sdk import IdRule, PlatformSettings

DEFAULT_BRIDGE_URL = "http://127.0.0.1:3000"
DEFAULT_GRAPH_BASE_URL = "https://graph.facebook.com/v23.0"


def _http_url(value: str, name: str) -> str:
    if not value.startswith(("http://", "https://")):
        raise ValueError(f"{name} must start with http:// or https://")
    return value.rstrip("/")


# A phone number as people write it: an optional "+", digits and the separators of a written
# number (spaces, dashes, dots, parentheses).
_WRITTEN_PHONE = re.compile(r"\+?[0-9\s().-]*[0-9][0-9\s().-]*")
# Every character a WhatsApp user id holds: JIDs (`15551234567:12@s.whatsapp.net`), LIDs
# (`…@lid`), bare numbers, a leading "+", and Cloud BSUIDs (`US.13491208655302741918`).
_USER_ID = re.compile(r"\+?[A-Za-z0-9@.:_-]+")
# An old-style group id without its server (`15551234567-1600000000`, the canonical form of
# `15551234567-1600000000@g.us`): creator number, one dash, timestamp. Read as a written phone
# number it would lose its dash and match no group.
_OLD_GROUP_ID = re.compile(r"[0-9]+-[0-9]+")
# A chat id may also be a Cloud API `group_id`, an opaque id whose alphabet Meta does not
# document; the base64 characters are let through so that no real one is refused.
_CHAT_ID = re.compile(r"\+?[A-Za-z0-9@.:_+/=-]+")


def _read_user(text: str) -> str | None:
    if _WRITTEN_PHONE.fullmatch(text):
        return re.sub(r"[^0-9]", "", text)
    return text if _USER_ID.fullmatch(text) else None


def _read_chat(text: str) -> str | None:
    if _OLD_GROUP_ID.fullmatch(text):
        return text
    if _WRITTEN_PHONE.fullmatch(text):
        return re.sub(r"[^0-9]", "", text)
    return text if _CHAT_ID.fullmatch(text) else None


USER_IDS = IdRule(
    read=_read_user, never="a WhatsApp sender",
    accepted="a phone number with its country code (+1 555 123 4567), a JID (15551234567@s.whatsapp.net), "
             "a LID (…@lid) or a business-scoped user id (US.13491208655302741918)")
"""`allowed_users` / `admin_users` of both WhatsApp tables (docs/behaviour.md §9).

A phone number (an optional `+`, digits, spaces, dashes, dots, parentheses) is read as its digits
alone: `"+1-555-123-4567"` → `"15551234567"`, the number of a bridge sender's JID and a Cloud
sender's `wa_id`. Why normalised rather than refused: writing a number with spaces is the
ordinary way to write it and it means exactly one id, whereas the id rule of the session key
(seed §4: drop the first `+`, cut at `:` and `@`) keeps spaces and dashes, so such an entry never
matched anyone. A JID, a LID or a BSUID is kept as written. An entry with a character no WhatsApp
id has (a space in a name, a comma, letters in a number) could never match and is refused."""

CHAT_IDS = IdRule(
    read=_read_chat, never="a WhatsApp chat",
    accepted="a group JID (120363025555555555@g.us), a phone number with its country code "
             "(+1 555 123 4567), a JID or LID of a DM, or a Cloud API group id or business-scoped user "
             "id (US.13491208655302741918)")
"""`allowed_chats` of both WhatsApp tables (docs/behaviour.md §9): a chat id is a group JID
(`120363025555555555@g.us`, old ones `<creator>-<timestamp>@g.us`, with or without the server),
a DM's JID or LID, or on the Cloud API a `group_id`, a BSUID or a phone number. A phone number
is read as its digits, as in `USER_IDS` (a DM's chat id is the person's JID or `wa_id`); an
old-style group id without its server is kept with its dash; an entry with a space or another
character no chat id has (a group's subject, `"Family chat"`) is refused."""


class _WhatsAppTable(PlatformSettings):
    """What both WhatsApp tables share: access lists read the way WhatsApp ids are."""

    table: ClassVar[str | None] = "whatsapp"
    user_id_rule: ClassVar[IdRule | None] = USER_IDS
    chat_id_rule: ClassVar[IdRule | None] = CHAT_IDS
    role_id_rule: ClassVar[IdRule | None] = IdRule.no_roles("WhatsApp")  # no role_authorized here


class WhatsAppSettings(_WhatsAppTable):
    """Settings of the bridge adapter (platform `whatsapp`).

    Attributes:
        bridge_url: where the bridge listens (keep it on 127.0.0.1: it holds your WhatsApp
            session). Its HTTP contract is in the plugin's README.
        bridge_token: optional bearer token the bridge requires (`SecretStr`).
        session_dir: the bridge's auth folder (Baileys multi-file auth state), read for its
            `lid-mapping-<pn>.json` / `lid-mapping-<lid>_reverse.json` files at start and
            whenever the folder changes; None: only the aliases carried by events are learned.
        poll_timeout: seconds one long poll of `GET /events` may wait for an event.
        request_timeout: seconds any other bridge request may take.
        reconnect_initial / reconnect_max: first and longest pause, in seconds, between polls
            after the bridge failed or the gateway refused a message (exponential back-off).
        group_cache_ttl: seconds a group's subject (`GET /groups/<jid>`) is reused.
    """

    bridge_url: str = DEFAULT_BRIDGE_URL
    bridge_token: SecretStr | None = None
    session_dir: str | None = None
    poll_timeout: float = Field(25.0, gt=0, le=300)
    request_timeout: float = Field(30.0, gt=0)
    reconnect_initial: float = Field(0.5, gt=0)
    reconnect_max: float = Field(30.0, gt=0)
    group_cache_ttl: float = Field(3600.0, gt=0)

    @field_validator("bridge_url")
    @classmethod
    def _check_bridge_url(cls, value: str) -> str:
        return _http_url(value, "platforms.whatsapp.bridge_url")


class WhatsAppCloudSettings(_WhatsAppTable):
    """Settings of the Cloud API adapter (platform `whatsapp_cloud`).

    Attributes:
        access_token: the system-user access token for the Graph API (`SecretStr`); required.
        app_secret: the Meta app's secret (`SecretStr`); required: every webhook POST's
            `X-Hub-Signature-256` is checked with it and a bad one is answered 401.
        verify_token: the token typed into the app's webhook settings (`SecretStr`); required
            for the `hub.challenge` handshake.
        phone_number_id: the business phone number's id (sends go to `/<id>/messages`; webhook
            changes for other numbers are ignored). Required.
        graph_base_url: the Graph API base, with its version. Tests point it at a fake on
            127.0.0.1.
        http_listen / http_port / http_path: the webhook listener (`http_port = 0` picks a free
            port; see `WhatsAppCloudAdapter.http_address`). Put a TLS reverse proxy in front.
        request_timeout: seconds one Graph API request may take.
        rate_limit_wait: seconds to wait when the Graph API signals a rate limit without a
            `Retry-After` (throughput 130429, pair rate 131056: about one message per 6 s to the
            same user).
        max_body_bytes: largest webhook body accepted (Meta batches at most a few hundred KB).
    """

    table: ClassVar[str | None] = "whatsapp_cloud"

    access_token: SecretStr | None = None
    app_secret: SecretStr | None = None
    verify_token: SecretStr | None = None
    phone_number_id: str | None = None
    graph_base_url: str = DEFAULT_GRAPH_BASE_URL
    http_listen: str = "127.0.0.1"
    http_port: int = Field(8443, ge=0, le=65535)
    http_path: str = "/whatsapp/webhook"
    request_timeout: float = Field(30.0, gt=0)
    rate_limit_wait: float = Field(6.0, ge=0)
    max_body_bytes: int = Field(1_048_576, ge=1024)

    @field_validator("graph_base_url")
    @classmethod
    def _check_graph_base_url(cls, value: str) -> str:
        return _http_url(value, "platforms.whatsapp_cloud.graph_base_url")

    @field_validator("http_path")
    @classmethod
    def _check_http_path(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("platforms.whatsapp_cloud.http_path must start with '/'")
        return value

    @field_validator("phone_number_id")
    @classmethod
    def _check_phone_number_id(cls, value: str | None) -> str | None:
        if value is not None and not value.isdigit():
            raise ValueError("platforms.whatsapp_cloud.phone_number_id must be digits: the id of the "
                             "business phone number shown in the app's WhatsApp settings")
        return value
