"""The `[platforms.slack]` settings table (docs/architecture.md §5 "Per-plugin sections").

Validated by the core into `SlackSettings` (the model returned from this plugin's
`hermes_settings_schema` hookimpl). Tokens and the signing secret are `SecretStr`: they never
appear in a repr, a log line or an error message. Prefer the environment for them:
`HERMES_PLATFORMS__SLACK__BOT_TOKEN=xoxb-…`, `HERMES_PLATFORMS__SLACK__APP_TOKEN=xapp-…`,
`HERMES_PLATFORMS__SLACK__SIGNING_SECRET=…`.

Per-channel behaviour (docs/adapters.md §3.0, §0.3 item 10) lives in `[platforms.slack.channels.<id>]`:

    [platforms.slack.channels.G0LEGACY01]
    free_response = true       # answer every message there, not only mentions
    reply_in_thread = false    # answer in the channel instead of opening a thread
"""

from __future__ import annotations

import re
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from hermes_core.sdk import IdRule, PlatformSettings


DEFAULT_API_BASE_URL = "https://slack.com/api/"

# Core commands a user may start with "!" instead of "/": Slack's client takes a leading "/" as
# one of its own slash commands (and refuses them inside threads), so "!new" is read as "/new"
# (docs/adapters.md §3.5).
DEFAULT_BANG_COMMANDS = ("new", "reset", "stop", "queue", "status", "help", "title", "resume", "undo",
                         "retry", "compress", "restart")


# Slack ids are upper-case letters and digits led by their kind (docs/adapters.md §3.0): users
# `U…` (`W…` in Enterprise Grid), a bot's messages carry its `B…` id; channels `C…`, DMs `D…`,
# legacy private channels and group DMs `G…`.
_SLACK_ID = re.compile(r"[A-Za-z0-9]+")


def _slack_reader(kinds: str, sigil: str):
    # A mention copied from a message (`<@U0123ABCD>`, `<#C0123ABCD|general>`: docs/adapters.md
    # S-T8) names one id; only the id counts, the `|label` after it is a name Slack may change.
    mention = re.compile(rf"<{sigil}([^|>]*)(?:\|[^>]*)?>")

    def read(text: str) -> str | None:
        found = mention.fullmatch(text)
        if found:
            text = found.group(1)
        if not _SLACK_ID.fullmatch(text) or text[0].upper() not in kinds:
            return None  # a handle ("@alice"), a "#channel" name, a name with a space
        if text == text.upper():
            return text  # as Slack sends it ("USLACKBOT" has no digit and is an id all the same)
        # Slack sends ids in upper case only, so "u0123abcd" means exactly "U0123ABCD". A
        # lower-case entry without a digit is a name ("ursula", "general"), never an id.
        return text.upper() if any(c.isdigit() for c in text) else None
    return read


USER_IDS = IdRule(
    read=_slack_reader("UWB", "@"), never="a Slack user",
    accepted="a member id (profile, Copy member ID: U0123ABCD, W0123ABCD in Enterprise Grid, or a "
             "bot's B0123ABCD), not a @handle or a name")
"""`allowed_users` / `admin_users` (docs/behaviour.md §9): ids, upper-cased; a user mention
(`<@U0123ABCD>`) as its id."""

CHAT_IDS = IdRule(
    read=_slack_reader("CDG", "#"), never="a Slack conversation",
    accepted="a conversation id (channel details, Channel ID: C0123ABCD; D… for a DM, G… for a legacy "
             "private channel or group DM), not a #channel name")
"""`allowed_chats` (docs/behaviour.md §9): ids, upper-cased; a channel mention (`<#C0123ABCD>`,
`<#C0123ABCD|general>`) as its id."""


class SlackChannelSettings(BaseModel):
    """Behaviour of the bot in one channel (`[platforms.slack.channels.<channel id>]`).

    Attributes:
        free_response: answer every message in this channel, not only mentions and replies in
            threads the bot takes part in.
        reply_in_thread: answer a top-level message in a new thread (True) or in the channel
            (False); None follows `SlackSettings.reply_in_thread`.
    """

    model_config = ConfigDict(extra="forbid")

    free_response: bool = False
    reply_in_thread: bool | None = None


class SlackSettings(PlatformSettings):
    """Settings of the Slack adapter (the keys every platform accepts come from `PlatformSettings`).

    Attributes:
        bot_token: the bot token (`xoxb-…`, `SecretStr`); required to start.
        app_token: the app-level token (`xapp-…`, `SecretStr`, scope `connections:write`);
            required in Socket Mode.
        signing_secret: the app's signing secret (`SecretStr`); required in HTTP mode, where
            every request's `X-Slack-Signature` is checked with it.
        mode: `"socket"` (Socket Mode: a WebSocket the gateway opens, no public URL) or `"http"`
            (the Events API posts to `http_listen:http_port` + `http_path`).
        api_base_url: Web API base URL, ending in `/`. Tests point it at a fake on 127.0.0.1.
        http_listen / http_port / http_path: the local listener of HTTP mode (`http_port = 0`
            picks a free port; see `SlackAdapter.http_address`).
        reply_in_thread: answer top-level channel messages in a new thread (default). The
            message that opens the thread is keyed by its own `ts`, so the starter and the
            replies share one session (docs/adapters.md §0.3 items 7 and 10).
        require_mention: in channels and group DMs answer only mentions, replies in threads the
            bot takes part in, and every message of a `free_response` channel. Off: answer every
            message the bot receives.
        channels: per-channel overrides, `{channel id: SlackChannelSettings}`.
        bang_commands: command names a leading `!` may stand for (`!new` → `/new`).
        lookup_timeout: seconds the name lookups (`users.info`, `conversations.info`) may take
            before an event is accepted without them (Slack's ack window is 3 s).
        cache_ttl: seconds a looked-up user or channel name is reused.
        thread_memory_days: how long the threads the bot answered in are remembered (their
            replies are answered without a mention).
        ping_interval: Socket Mode ping interval, in seconds.

    `allowed_users`, `admin_users` and `allowed_chats` take Slack ids (`USER_IDS`, `CHAT_IDS`): a
    lower-case id is upper-cased, a handle or a name is refused at load (docs/behaviour.md §9). So
    do `home_channel` and the keys of `channels` (`CHAT_IDS`).
    """

    table: ClassVar[str | None] = "slack"
    user_id_rule: ClassVar[IdRule | None] = USER_IDS
    chat_id_rule: ClassVar[IdRule | None] = CHAT_IDS
    role_id_rule: ClassVar[IdRule | None] = IdRule.no_roles("Slack")  # no role_authorized here

    bot_token: SecretStr | None = None
    app_token: SecretStr | None = None
    signing_secret: SecretStr | None = None
    mode: Literal["socket", "http"] = "socket"
    api_base_url: str = DEFAULT_API_BASE_URL

    http_listen: str = "127.0.0.1"
    http_port: int = Field(3000, ge=0, le=65535)
    http_path: str = "/slack/events"

    reply_in_thread: bool = True
    require_mention: bool = True
    channels: dict[str, SlackChannelSettings] = Field(default_factory=dict)
    bang_commands: list[str] = Field(default_factory=lambda: list(DEFAULT_BANG_COMMANDS))

    lookup_timeout: float = Field(1.5, gt=0, le=2.5)
    cache_ttl: float = Field(3600.0, gt=0)
    thread_memory_days: int = Field(30, ge=1)
    ping_interval: float = Field(10.0, gt=0)

    @field_validator("api_base_url")
    @classmethod
    def _check_api_base_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("platforms.slack.api_base_url must start with http:// or https://")
        if not value.endswith("/"):
            raise ValueError("platforms.slack.api_base_url must end with '/'")
        return value

    @field_validator("channels")
    @classmethod
    def _read_channel_ids(cls, value: dict[str, SlackChannelSettings]) -> dict[str, SlackChannelSettings]:
        """Each `[platforms.slack.channels.<id>]` key read as a conversation id by `CHAT_IDS`, as
        an `allowed_chats` entry is (docs/behaviour.md §9): the adapter looks a channel up by the
        id Slack sends, so `"c0123abcd"` is kept as `"C0123ABCD"` and a key that names no
        conversation (`"general"`, `"#general"`) would never apply and is refused.

        Raises:
            ValueError: a key can never match, or two keys name one conversation (`IdRule.keys`).
        """
        return CHAT_IDS.keys(value, cls._key("channels"))

    @model_validator(mode="after")
    def _check(self) -> "SlackSettings":
        if not self.http_path.startswith("/"):
            raise ValueError("platforms.slack.http_path must start with '/'")
        return self

    def missing_credentials(self) -> list[str]:
        """The unset tokens this mode needs: `bot_token`, plus `app_token` in Socket Mode or
        `signing_secret` in HTTP mode (`hermes-gateway doctor`)."""
        needed = {"bot_token": self.bot_token}
        needed.update({"app_token": self.app_token} if self.mode == "socket" else {"signing_secret": self.signing_secret})
        return [name for name, value in needed.items() if not value]

    def channel(self, channel_id: str) -> SlackChannelSettings:
        """The overrides of `channel_id` (defaults when it has none)."""
        return self.channels.get(channel_id) or SlackChannelSettings()

    def replies_in_thread(self, channel_id: str) -> bool:
        """True when the bot answers a top-level message of `channel_id` in a new thread."""
        own = self.channel(channel_id).reply_in_thread
        return self.reply_in_thread if own is None else own
