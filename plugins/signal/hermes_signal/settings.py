"""The `[platforms.signal]` settings table (docs/architecture.md §5 "Per-plugin sections").

Validated by the core into `SignalSettings` (the model returned by this plugin's
`hermes_settings_schema` hookimpl). signal-cli's HTTP daemon has no authentication, so there is
no secret here: keep the daemon bound to 127.0.0.1 (docs/adapters.md §5.3).
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from hermes_core.sdk import PlatformSettings

DEFAULT_BASE_URL = "http://127.0.0.1:8080"  # signal-cli's `--http` default is localhost:8080

# E.164: a "+" and 7 to 15 digits (signal-cli's account identifier in single-account mode).
_E164 = re.compile(r"^\+[1-9][0-9]{6,14}$")


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
    """

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
