"""The `[platforms.whatsapp]` (bridge) and `[platforms.whatsapp_cloud]` (Cloud API) settings
tables (docs/configuration.md, docs/architecture.md §5 "Per-plugin sections").

Both subclass the SDK's `PlatformSettings`, so `enabled`, the access lists, `home_channel` and
the other keys every platform table accepts are accepted, and an unknown key is an error naming
it. Secrets are `SecretStr` (never in a repr, a log line or `plugins --json`); prefer the
environment for them: `HERMES_PLATFORMS__WHATSAPP_CLOUD__ACCESS_TOKEN=…`,
`HERMES_PLATFORMS__WHATSAPP_CLOUD__APP_SECRET=…`, `HERMES_PLATFORMS__WHATSAPP_CLOUD__VERIFY_TOKEN=…`,
`HERMES_PLATFORMS__WHATSAPP__BRIDGE_TOKEN=…`.

`allowed_users`, `admin_users` and `allowed_chats` entries are read as the ids each transport
sends (`USER_IDS` and `CHAT_IDS` for the bridge, `CLOUD_USER_IDS` and `CLOUD_CHAT_IDS` for the
Cloud API): a phone number written with spaces or dashes becomes its digits, an entry that could
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
# A user's JID `<user>[_<agent>][:<device>]@<server>` (docs/adapters.md §4.0), or the same
# without its server: the user part is digits, a phone number or a LID. Group 1 is the user
# part, group 2 the server.
_USER_JID = re.compile(r"\+?([0-9]+)(?:_[0-9]+)?(?::[0-9]+)?(?:@([A-Za-z.]+))?")
# The servers of a phone-number user (whatsapp-web.js writes `c.us` for `s.whatsapp.net`), and
# those of every user the bridge delivers: LIDs and hosted business accounts too. `g.us` is a
# group's, never a sender's; `broadcast` and `newsletter` chats are skipped by the adapter.
_PHONE_SERVERS = frozenset({"s.whatsapp.net", "c.us"})
_BRIDGE_USER_SERVERS = _PHONE_SERVERS | {"lid", "hosted", "hosted.lid"}
# A group JID, `120363025555555555@g.us` or old-style `<creator>-<timestamp>@g.us`.
_GROUP_JID = re.compile(r"[0-9]+(?:-[0-9]+)?@g\.us")
# An old-style group id without its server (`15551234567-1600000000`, the canonical form of
# `15551234567-1600000000@g.us`): creator number, one dash, timestamp. Read as a written phone
# number it would lose its dash and match no group.
_OLD_GROUP_ID = re.compile(r"[0-9]+-[0-9]+")
# A Cloud business-scoped user id (docs/adapters.md §4.3): an ISO-3166 country code, ".", up to
# 128 alphanumerics; a parent BSUID is `US.ENT.…`. Group 1 is the prefix.
_BSUID = re.compile(r"([A-Za-z]{2}\.(?:[Ee][Nn][Tt]\.)?)([A-Za-z0-9]{1,128})")
# A Cloud API `group_id` is opaque and Meta does not document its alphabet; the base64 and
# base64url characters are let through so that no real one is refused. Never an "@": an entry
# with one is a JID or an e-mail address.
_CLOUD_GROUP_ID = re.compile(r"[A-Za-z0-9+/=_-]+")


def _digits(text: str) -> str:
    return re.sub(r"[^0-9]", "", text)


def _read_bsuid(text: str) -> str | None:
    # Meta sends the country code in upper case, so "us.1349…" means exactly "US.1349…".
    found = _BSUID.fullmatch(text)
    return found.group(1).upper() + found.group(2) if found else None


def _read_user(text: str) -> str | None:
    if _WRITTEN_PHONE.fullmatch(text):
        return _digits(text)
    jid = _USER_JID.fullmatch(text)
    if jid:  # kept as written: the access gate compares it in its canonical form (seed §4)
        return text if jid.group(2) is None or jid.group(2).lower() in _BRIDGE_USER_SERVERS else None
    return _read_bsuid(text)  # anything else, "carol@example.com" included, is refused


def _read_chat(text: str) -> str | None:
    if _OLD_GROUP_ID.fullmatch(text) or _GROUP_JID.fullmatch(text):
        return text
    return _read_user(text) or (text if _CLOUD_GROUP_ID.fullmatch(text) else None)


def _read_cloud_user(text: str) -> str | None:
    if _WRITTEN_PHONE.fullmatch(text):
        return _digits(text)
    jid = _USER_JID.fullmatch(text)
    if jid:
        # A phone-number JID names one number, which is the Cloud sender's `wa_id`; a LID or a
        # hosted JID is a bridge-side id the Cloud API never sends and nothing maps it to one.
        return jid.group(1) if (jid.group(2) or "s.whatsapp.net").lower() in _PHONE_SERVERS else None
    return _read_bsuid(text)


def _read_cloud_chat(text: str) -> str | None:
    return _read_cloud_user(text) or (text if _CLOUD_GROUP_ID.fullmatch(text) else None)


USER_IDS = IdRule(
    read=_read_user, never="a WhatsApp sender",
    accepted="a phone number with its country code (+1 555 123 4567), a JID (15551234567@s.whatsapp.net), "
             "a LID (…@lid) or a business-scoped user id (US.13491208655302741918)")
"""`allowed_users` / `admin_users` of the bridge table (docs/behaviour.md §9).

A phone number (an optional `+`, digits, spaces, dashes, dots, parentheses) is read as its digits
alone: `"+1-555-123-4567"` → `"15551234567"`, the number of a bridge sender's JID. Why normalised
rather than refused: writing a number with spaces is the ordinary way to write it and it means
exactly one id, whereas the id rule of the session key (seed §4: drop the first `+`, cut at `:`
and `@`) keeps spaces and dashes, so such an entry never matched anyone. A user JID (digits,
optionally `_<agent>` and `:<device>`, on `s.whatsapp.net`, `c.us`, `lid`, `hosted` or
`hosted.lid`, docs/adapters.md §4.0) is kept as written; a BSUID too, its country code in upper
case. Anything else could never match and is refused: a name, letters in a number, an address on
another server (`"carol@example.com"`: the key's id rule would cut it to `"carol"`), a group JID
(`…@g.us` is a chat, never a sender)."""

CHAT_IDS = IdRule(
    read=_read_chat, never="a WhatsApp chat",
    accepted="a group JID (120363025555555555@g.us), a phone number with its country code "
             "(+1 555 123 4567), a JID or LID of a DM, or a Cloud API group id or business-scoped user "
             "id (US.13491208655302741918)")
"""`allowed_chats` of the bridge table (docs/behaviour.md §9): a chat id is a group JID
(`120363025555555555@g.us`, old ones `<creator>-<timestamp>@g.us`, with or without the server)
or a DM's JID or LID, read as in `USER_IDS` (a phone number as its digits). An old-style group
id without its server is kept with its dash; an opaque id without an `@` (a Cloud `group_id`) is
let through. An entry with a space, an `@` on a server that is not WhatsApp's or another
character no chat id has (a group's subject, `"Family chat"`) is refused."""

CLOUD_USER_IDS = IdRule(
    read=_read_cloud_user, never="a WhatsApp Cloud API sender",
    accepted="a phone number with its country code (+1 555 123 4567; a phone JID such as "
             "15551234567@s.whatsapp.net is read as its number) or a business-scoped user id "
             "(US.13491208655302741918); the Cloud API never sends a LID or a group JID")
"""`allowed_users` / `admin_users` of `[platforms.whatsapp_cloud]` (docs/behaviour.md §9).

A Cloud sender is its `wa_id` (phone digits, no `+`) or its BSUID (docs/adapters.md §4.3), and
the core compares Cloud ids as they are (the key's JID rule is the bridge's alone). A phone number
is read as its digits, as in `USER_IDS`; a phone-number JID (`15551234567:12@s.whatsapp.net`,
`…@c.us`) as its number, normalised rather than refused because its user part is that phone
number (docs/adapters.md §4.0 "PN") and so means exactly one `wa_id`. A LID, a hosted JID and a
group JID are refused: the Cloud API never sends them and nothing maps them to a `wa_id`."""

CLOUD_CHAT_IDS = IdRule(
    read=_read_cloud_chat, never="a WhatsApp Cloud API chat",
    accepted="a Cloud API group id (the group_id of its webhooks), a business-scoped user id "
             "(US.13491208655302741918) or a phone number with its country code (+1 555 123 4567); "
             "the Cloud API never sends a group JID (…@g.us) or a LID")
"""`allowed_chats` of `[platforms.whatsapp_cloud]` (docs/behaviour.md §9): a Cloud chat is a
`group_id`, a DM's BSUID or its `from` digits (docs/adapters.md §4.3), read as in
`CLOUD_USER_IDS`; an opaque id without an `@` is let through as a `group_id`. A bridge group JID
or LID is refused: Cloud groups have their own ids."""


class _WhatsAppTable(PlatformSettings):
    """What both WhatsApp tables share; access lists read as bridge ids (the Cloud table reads them
    as Cloud ids)."""

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
    """Settings of the Cloud API adapter (platform `whatsapp_cloud`). Its access lists are read
    as Cloud ids (`CLOUD_USER_IDS`, `CLOUD_CHAT_IDS`): no LID or group JID.

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
    user_id_rule: ClassVar[IdRule | None] = CLOUD_USER_IDS
    chat_id_rule: ClassVar[IdRule | None] = CLOUD_CHAT_IDS

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
