"""The `[platforms.telegram]` settings table (docs/architecture.md §5 "Per-plugin sections").

Validated by the core into `TelegramSettings` (the model returned from this plugin's
`hermes_settings_schema` hookimpl). The bot token is a `SecretStr`: it never appears in a repr,
a log line or an error message. Prefer the environment for it:
`HERMES_PLATFORMS__TELEGRAM__BOT_TOKEN=123:ABC`.
"""

from __future__ import annotations

import re
from typing import ClassVar, Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from hermes_core.sdk import IdRule, PlatformSettings

DEFAULT_BASE_URL = "https://api.telegram.org/bot"
DEFAULT_BASE_FILE_URL = "https://api.telegram.org/file/bot"


# Telegram ids are integers, sent as their decimal text (docs/adapters.md §1.0: `str(from.id)`,
# `str(chat.id)`); groups, supergroups and channels are negative, and so is a user id that is a
# chat posting as itself (`sender_chat.id`: an anonymous admin, a channel).
_TELEGRAM_ID = re.compile(r"-?[0-9]+")


def _read_id(text: str) -> str | None:
    # A username ("@alice", "alice") or a title is not an id and the Bot API never sends one in
    # its place, so such an entry is refused rather than guessed at.
    return text if _TELEGRAM_ID.fullmatch(text) else None


USER_IDS = IdRule(
    read=_read_id, never="a Telegram user",
    accepted="a numeric user id (123456789; a @username is not one), or the negative id of a chat "
             "posting as itself (-1001234567890)")
"""`allowed_users` / `admin_users` (docs/behaviour.md §9): numeric ids, kept as written."""

CHAT_IDS = IdRule(
    read=_read_id, never="a Telegram chat",
    accepted="a numeric chat id (-1001234567890 for a supergroup or channel, -4012345678 for a group, "
             "the user id for a private chat; a @username or a title is not one)")
"""`allowed_chats` (docs/behaviour.md §9): numeric ids, kept as written."""


class TelegramSettings(PlatformSettings):
    """Settings of the Telegram adapter: the common platform keys (`PlatformSettings`: enabled,
    adapter, access lists, home channel, `edits_as_turns` — docs/configuration.md) plus:

    Attributes:
        bot_token: the BotFather token (`SecretStr`). Required to start the adapter.
        base_url: Bot API base; the token is appended (`…/bot` + token). Tests point it at a fake
            server on 127.0.0.1.
        base_file_url: file download base (same rule).
        mode: `"polling"` (getUpdates long polling) or `"webhook"` (Telegram POSTs updates).
        poll_timeout: long-poll timeout of one getUpdates call, in seconds (0–50).
        poll_backoff_max: longest pause between failed getUpdates calls, in seconds.
        max_emit_attempts: how often one update is offered to the gateway before it is skipped
            with an ERROR log (the gateway refusing every time means the update is poison).
        webhook_url: public HTTPS URL Telegram posts to (required in webhook mode).
        webhook_listen / webhook_port / webhook_path: the local aiohttp listener
            (`webhook_port=0` picks a free port; see `TelegramAdapter.webhook_address`).
        webhook_secret: checked against `X-Telegram-Bot-Api-Secret-Token` (`SecretStr`).
        parse_mode: `"MarkdownV2"` (code fences and inline code rendered, everything else
            escaped) or `"plain"`. A refused formatted text is resent as plain text.
        max_retry_after: longest 429 `retry_after` waited out before a chunk is sent again, in
            seconds; a longer one fails the delivery at once (the ledger records it, the next
            start's sweep re-sends it). Read through `TelegramAdapter.retry_policy`.
        send_attempts: attempts per chunk when the platform answers 429 (first try included).
        topic_names: forum topic names from config, `{chat_id: {thread_id: name}}`, used when
            the update does not carry the topic's creation message.

    `allowed_users`, `admin_users` and `allowed_chats` take numeric ids (`USER_IDS`, `CHAT_IDS`),
    and so do the keys of `topic_names` (`CHAT_IDS`); an entry that is not one is refused at load
    (docs/behaviour.md §9).
    """

    table: ClassVar[str | None] = "telegram"
    user_id_rule: ClassVar[IdRule | None] = USER_IDS
    chat_id_rule: ClassVar[IdRule | None] = CHAT_IDS
    role_id_rule: ClassVar[IdRule | None] = IdRule.no_roles("Telegram")  # no role_authorized here

    bot_token: SecretStr | None = None
    base_url: str = DEFAULT_BASE_URL
    base_file_url: str = DEFAULT_BASE_FILE_URL
    mode: Literal["polling", "webhook"] = "polling"
    poll_timeout: int = Field(30, ge=0, le=50)
    poll_backoff_max: float = Field(30.0, gt=0)
    max_emit_attempts: int = Field(5, ge=1)

    webhook_url: str | None = None
    webhook_listen: str = "127.0.0.1"
    webhook_port: int = Field(8443, ge=0, le=65535)
    webhook_path: str = "/telegram"
    webhook_secret: SecretStr | None = None

    parse_mode: Literal["MarkdownV2", "plain"] = "MarkdownV2"
    max_retry_after: float = Field(60.0, ge=0)
    send_attempts: int = Field(3, ge=1)
    topic_names: dict[str, dict[str, str]] = Field(default_factory=dict)

    @field_validator("base_url", "base_file_url")
    @classmethod
    def _check_url(cls, value: str, info) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"platforms.telegram.{info.field_name} must start with http:// or https://")
        return value

    @field_validator("topic_names")
    @classmethod
    def _read_topic_chat_ids(cls, value: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
        """Each `[platforms.telegram.topic_names]` key read as a chat id by `CHAT_IDS`, as an
        `allowed_chats` entry is (docs/behaviour.md §9): the adapter looks a forum's names up by
        the chat id Telegram sends, so a key such as `"@ops"` would never apply and is refused.

        Raises:
            ValueError: a key can never match a Telegram chat, or two keys name one chat
                (`IdRule.keys`: the error names `platforms.telegram.topic_names`, the key and
                the accepted forms).
        """
        return CHAT_IDS.keys(value, cls._key("topic_names"))

    @model_validator(mode="after")
    def _check_webhook(self) -> "TelegramSettings":
        if self.mode == "webhook" and not self.webhook_url:
            raise ValueError("platforms.telegram.webhook_url is required when mode = 'webhook'")
        if not self.webhook_path.startswith("/"):
            raise ValueError("platforms.telegram.webhook_path must start with '/'")
        return self

    def missing_credentials(self) -> list[str]:
        """`["bot_token"]` while the token is unset (`hermes-gateway doctor`)."""
        return [] if self.bot_token else ["bot_token"]
