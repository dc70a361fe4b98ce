"""The `[platforms.discord]` settings table (docs/architecture.md §5 "Per-plugin sections").

Validated by the core into `DiscordSettings` (the model returned by this plugin's
`hermes_settings_schema` hookimpl). The bot token is a `SecretStr`: it never appears in a repr, a
log line or an error message. Set it in the environment, not in the file:
`HERMES_PLATFORMS__DISCORD__BOT_TOKEN=…`.
"""

from __future__ import annotations

import re
from typing import ClassVar, Literal

from pydantic import Field, SecretStr, field_validator

from hermes_core.sdk import IdRule, PlatformSettings

# discord.py refuses a `max_ratelimit_timeout` below 30 s (it would invite bans).
MIN_RATELIMIT_TIMEOUT_S = 30.0


# Discord ids are snowflakes sent as decimal strings (docs/adapters.md §2.0: `user_id = author.id`,
# `chat_id` = the channel id, a thread's parent channel).
_SNOWFLAKE = re.compile(r"[0-9]+")


def _read_snowflake(text: str) -> str | None:
    # A username, a display name or a legacy `name#1234` tag is not an id; Discord sends none of
    # them where the id goes, and names change, so such an entry is refused rather than guessed.
    return text if _SNOWFLAKE.fullmatch(text) else None


def _snowflake_reader(mention: str):
    # A mention copied from a message (docs/adapters.md D-T7) names exactly one id of its kind, so
    # it is read as that id; a mention of another kind (a role's `<@&id>` in allowed_users) is not.
    pattern = re.compile(mention)

    def read(text: str) -> str | None:
        found = pattern.fullmatch(text)
        return found.group(1) if found else _read_snowflake(text)
    return read


USER_IDS = IdRule(
    read=_snowflake_reader(r"<@!?([0-9]+)>"), never="a Discord user",
    accepted="a numeric user id (Developer Mode, Copy User ID: 1300000000000000001), not a username "
             "or a name#1234 tag")
"""`allowed_users` / `admin_users` (docs/behaviour.md §9): snowflakes, kept as written; a user
mention (`<@id>`, `<@!id>`) as its id."""

CHAT_IDS = IdRule(
    read=_snowflake_reader(r"<#([0-9]+)>"), never="a Discord channel",
    accepted="a numeric channel id (Developer Mode, Copy Channel ID: 1100000000000000010; for a "
             "thread, its parent channel's), not a #channel name")
"""`allowed_chats` (docs/behaviour.md §9): snowflakes, kept as written; a channel mention
(`<#id>`) as its id."""

ROLE_IDS = IdRule(
    read=_snowflake_reader(r"<@&([0-9]+)>"), never="a Discord role",
    accepted="a numeric role id (Server Settings, Roles, Copy Role ID: 1200000000000000100; the "
             "server id for @everyone), not a role name")
"""`allowed_roles` (docs/behaviour.md §9): snowflakes, kept as written, a role mention (`<@&id>`)
as its id; the mapping compares them
with the member's role ids, which a role's name never equals."""


class DiscordSettings(PlatformSettings):
    """Settings of the Discord adapter: the common platform keys (`PlatformSettings`: enabled,
    adapter, access lists, home channel, `edits_as_turns` — docs/configuration.md; access is
    decided by the core, docs/behaviour.md §9) plus the keys below. `allowed_roles` holds Discord
    role ids: a guild member with one of them gets `role_authorized` on its SessionSource. The
    `@everyone` role id is the guild id, so listing a guild id admits every member of that guild
    (and nobody elsewhere). `edits_as_turns` makes MESSAGE_UPDATE edits of the text new turns.

    Attributes:
        bot_token: the bot token from the Developer Portal (`SecretStr`). Required to start.
        api_base: REST base URL (`https://discord.com/api/v10` when unset). Tests and local
            fakes point it at 127.0.0.1, e.g. `http://127.0.0.1:8080/api/v10`.
        gateway_url: gateway websocket URL (`wss://gateway.discord.gg/` when unset), e.g.
            `ws://127.0.0.1:8080/gw`.
        message_content: request the privileged Message Content intent. When the application
            does not have it enabled, the adapter says so at start and connects without it
            (guild messages that do not mention the bot then arrive with empty text).
        allowed_mentions: `"none"` (default: replies can ping nobody, not even with `@everyone`
            or `<@id>` in the text) or `"users"` (user mentions in replies ping; roles and
            `@everyone` never do).
        max_ratelimit_timeout: longest rate-limit wait, in seconds, discord.py sits out itself
            (per-route buckets and 429s); a longer one is raised to the delivery layer as
            `RetryAfter` (minimum 30, discord.py's floor).
        max_emit_attempts: how often one message is offered to the gateway (with backoff)
            before it is given up with an ERROR log. Discord never redelivers a gateway event,
            so the adapter retries itself.
        connect_timeout: how long `start` waits for the gateway session (READY), in seconds.

    `allowed_users`, `admin_users`, `allowed_chats` and `allowed_roles` take numeric ids
    (`USER_IDS`, `CHAT_IDS`, `ROLE_IDS`); an entry that is not one is refused at load
    (docs/behaviour.md §9).
    """

    table: ClassVar[str | None] = "discord"
    user_id_rule: ClassVar[IdRule | None] = USER_IDS
    chat_id_rule: ClassVar[IdRule | None] = CHAT_IDS
    role_id_rule: ClassVar[IdRule | None] = ROLE_IDS

    bot_token: SecretStr | None = None
    api_base: str | None = None
    gateway_url: str | None = None
    message_content: bool = True
    allowed_mentions: Literal["none", "users"] = "none"
    max_ratelimit_timeout: float = Field(MIN_RATELIMIT_TIMEOUT_S, ge=MIN_RATELIMIT_TIMEOUT_S)
    max_emit_attempts: int = Field(5, ge=1)
    connect_timeout: float = Field(30.0, gt=0)

    @field_validator("api_base")
    @classmethod
    def _check_api_base(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("platforms.discord.api_base must start with http:// or https://")
        return value.rstrip("/") if value else value

    @field_validator("gateway_url")
    @classmethod
    def _check_gateway_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("ws://", "wss://")):
            raise ValueError("platforms.discord.gateway_url must start with ws:// or wss://")
        return value

    def missing_credentials(self) -> list[str]:
        """`["bot_token"]` while the token is unset (`hermes-gateway doctor`)."""
        return [] if self.bot_token else ["bot_token"]
