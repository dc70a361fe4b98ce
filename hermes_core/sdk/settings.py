"""PlatformSettings: the keys every `[platforms.<id>]` table accepts (docs/configuration.md,
docs/architecture.md §5).

A platform plugin's settings model subclasses `PlatformSettings` and adds its own keys (tokens
as `SecretStr`). The core validates each table into the plugin's model; a platform whose model
does not subclass it (or that has no model) still gets these keys validated into a plain
`PlatformSettings` (`plugin_system.settings.common_platform_settings`). `enabled` and `adapter`
are read by the core; the access keys are enforced once by the core (docs/behaviour.md §9), never
by the plugin itself.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from pydantic import ConfigDict, Field, ValidationInfo, field_validator

from ..strict_numbers import NoBoolNumbers
from .idlists import IdRule

DEFAULT_REFUSAL_NOTICE = "This assistant is private."


class PlatformSettings(NoBoolNumbers):
    """Settings every platform table accepts (unknown keys are refused: `extra="forbid"`).

    Attributes:
        enabled: start this platform's adapter (core-owned).
        adapter: `"pkg.module:Class"` replacing the platform's adapter class (core-owned).
        allowed_users: user ids (canonical, as in the session source) allowed to talk to the bot.
        allowed_chats: chat ids whose every member may talk to the bot.
        allowed_roles: platform roles whose holders may talk to the bot (the adapter sets
            `SessionSource.role_authorized` when the sender has one; Discord only).
        allow_all: anybody may talk to the bot (no allow-list).
        allow_bots: messages from other bots and webhooks are processed (ignored by default).
        refusal_notice: what a refused sender is told (once per chat, in DMs).
        admin_users: user ids allowed to run admin commands.
        home_channel: chat id where the gateway posts notices that belong to no chat; read by
            `chat_id_rule` like an `allowed_chats` entry.
        home_channel_name: display name of `home_channel`.
        edits_as_turns: an edited message (no longer queued) starts a new turn; by default edits
            of messages already answered are ignored and logged (docs/behaviour.md §5).

    Class attributes a platform's model sets (docs/behaviour.md §9, sdk/idlists.py):
        table: the table's name in errors (`"telegram"` → `platforms.telegram.allowed_users`).
        user_id_rule: how `allowed_users` and `admin_users` entries are read; None (the
            default): kept as written.
        chat_id_rule: the same for `allowed_chats` and `home_channel`.
        role_id_rule: the same for `allowed_roles` (`IdRule.no_roles(label)` on a platform
            without roles: every entry is refused).
    """

    table: ClassVar[str | None] = None
    user_id_rule: ClassVar[IdRule | None] = None
    chat_id_rule: ClassVar[IdRule | None] = None
    role_id_rule: ClassVar[IdRule | None] = None

    # Ids written as TOML integers (`allowed_users = [12345]`) are ids all the same.
    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True)

    enabled: bool = False
    adapter: str | None = None
    allowed_users: list[str] = Field(default_factory=list)
    allowed_chats: list[str] = Field(default_factory=list)
    allowed_roles: list[str] = Field(default_factory=list)
    allow_all: bool = False
    allow_bots: bool = False
    refusal_notice: str = DEFAULT_REFUSAL_NOTICE
    admin_users: list[str] = Field(default_factory=list)
    home_channel: str | None = None
    home_channel_name: str | None = None
    edits_as_turns: bool = False

    @field_validator("allowed_users", "allowed_chats", "allowed_roles", "admin_users", mode="before")
    @classmethod
    def _ids_from_text(cls, value: Any) -> Any:
        """An id list given as one string (an environment variable,
        `HERMES_PLATFORMS__TELEGRAM__ALLOWED_USERS=111,222` or `=[111, 222]`): a JSON list, else
        comma-separated ids. Lists pass unchanged."""
        if not isinstance(value, str):
            return value
        text = value.strip()
        if text.startswith("["):
            try:
                return json.loads(text)
            except ValueError:  # '[111, 222' would be the ids '[111' and '222', matching nobody
                raise ValueError("starts with '[' but is not a valid JSON list; write a JSON list "
                                 "([111, 222]) or comma-separated ids (111,222)") from None
        return [part.strip() for part in text.split(",") if part.strip()]

    @field_validator("allowed_users", "admin_users", "allowed_chats", "allowed_roles")
    @classmethod
    def _read_ids(cls, value: list[str], info: ValidationInfo) -> list[str]:
        """Entries in the form the platform sends its ids, by the model's rule; an entry that can
        never match is an error naming it (docs/behaviour.md §9)."""
        rule = {"allowed_chats": cls.chat_id_rule,
                "allowed_roles": cls.role_id_rule}.get(info.field_name, cls.user_id_rule)
        if rule is None:
            return value
        return rule.entries(value, cls._key(info.field_name))

    @field_validator("home_channel")
    @classmethod
    def _read_home_channel(cls, value: str | None) -> str | None:
        """The home channel is a chat id, read by the model's `chat_id_rule` as an
        `allowed_chats` entry is (docs/behaviour.md §9): one that can never be a chat is refused
        at load, not when something is first sent there. Unset or blank stays unset."""
        if cls.chat_id_rule is None or value is None or not value.strip():
            return value
        return cls.chat_id_rule.entries([value], cls._key("home_channel"))[0]

    @classmethod
    def _key(cls, field: str) -> str:
        """`field`'s full name in errors (`platforms.telegram.home_channel`)."""
        return f"platforms.{cls.table or cls.__name__}.{field}"

    def missing_credentials(self) -> list[str]:
        """Keys of this table the platform needs to start but that are unset (tokens, account
        ids), for `hermes-gateway doctor` (docs/operations.md §1), which names them and never their
        values. None by default; a platform's settings model returns its own."""
        return []


COMMON_PLATFORM_KEYS = frozenset(PlatformSettings.model_fields)
