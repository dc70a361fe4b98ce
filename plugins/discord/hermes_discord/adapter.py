"""`DiscordAdapter`: a discord.py 2.x gateway bot (docs/adapters.md §2, docs/behaviour.md §4).

Lifecycle. `start` logs in over REST (`GET /users/@me`, `GET /oauth2/applications/@me`: the bot
id used to drop its own messages, and the application's intent flags), then runs discord.py's
connection loop (IDENTIFY, heartbeats, RESUME after a drop, re-IDENTIFY after an invalidated
session) in a task, and returns once the gateway session is READY. Receiving is `receiver.py`,
sending is `sender.py`.

Intents: GUILDS (channel and thread cache), GUILD_MESSAGES, DIRECT_MESSAGES, and the privileged
MESSAGE_CONTENT when `message_content` is on. When the application does not have Message Content
enabled in the Developer Portal, requesting it would make Discord close the connection (4014),
so the adapter says so clearly at start and connects without it: the bot then still sees DMs and
messages that mention it, and other guild messages arrive with empty text (D-T4).

Endpoints: `api_base` / `gateway_url` settings set discord.py's process-wide `Route.BASE` and
`DiscordWebSocket.DEFAULT_GATEWAY` (a local fake server in tests). Discord ids are never
redacted (`pii_safe=False`: mentions need raw ids, docs/behaviour.md §7).

One gateway connection per bot token: every connection receives every event (docs/adapters.md
§6), so `ingress` is "single_receiver".
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import discord
import discord.gateway
import discord.http
import yarl
from pydantic import BaseModel

from hermes_core.sdk import (CAP_EDIT, CAP_THREADS, CAP_TYPING, INGRESS_SINGLE_RECEIVER, AdapterSpec, BaseAdapter,
                             ChatSendQueue, RetryPolicy, SendResult, SessionSource, chunk_text, send_chunks)

from .receiver import Receiver
from .sender import MAX_CHARS, Sender, mentions_policy
from .settings import DiscordSettings

log = logging.getLogger(__name__)


class DiscordStartError(RuntimeError):
    """The adapter could not connect (no or rejected token, unreachable API, refused intents).
    The message never contains the token."""


def build_intents(message_content: bool) -> discord.Intents:
    """GUILDS, GUILD_MESSAGES, DIRECT_MESSAGES, and MESSAGE_CONTENT when asked for."""
    intents = discord.Intents.none()
    intents.guilds = True
    intents.guild_messages = True
    intents.dm_messages = True
    intents.message_content = message_content
    return intents


class _Client(discord.Client):
    """discord.py client that reports connection state to the adapter."""

    def __init__(self, adapter: "DiscordAdapter", **options: Any):
        super().__init__(**options)
        self._adapter = adapter

    async def on_connect(self) -> None:  # READY (a new gateway session)
        self._adapter._on_session(resumed=False)

    async def on_resumed(self) -> None:  # RESUMED (the old session continues; missed events replayed)
        self._adapter._on_session(resumed=True)

    async def on_disconnect(self) -> None:
        log.info("discord gateway connection lost; discord.py reconnects (RESUME when possible)")


class DiscordAdapter(BaseAdapter):
    """Discord platform adapter (entry point `hermes_core.adapters: discord`).

    Args:
        settings: a `DiscordSettings` (or a dict validated into one); `bot_token` is required
            to `start`.
        on_message: the gateway's inbound handler (see `BaseAdapter`).
        data_dir: the adapter's directory under HERMES_HOME (unused: the adapter keeps no files).
    """

    spec = AdapterSpec(
        name="discord",
        label="Discord",
        pii_safe=False,
        max_message_length=MAX_CHARS,
        length_unit="chars",
        capabilities=frozenset({CAP_THREADS, CAP_TYPING, CAP_EDIT}),
        settings_model=DiscordSettings,
        # Every gateway connection of one bot receives every event (docs/adapters.md §6).
        ingress=INGRESS_SINGLE_RECEIVER,
        required_env=("HERMES_PLATFORMS__DISCORD__BOT_TOKEN",),
        install_hint="pip install hermes-gateway-discord",
    )

    def __init__(self, settings: BaseModel | dict | None = None, *, on_message=None, data_dir=None):
        if settings is None:
            settings = DiscordSettings()
        elif isinstance(settings, dict):
            settings = DiscordSettings.model_validate(settings)
        elif not isinstance(settings, DiscordSettings):
            settings = DiscordSettings.model_validate(settings.model_dump())
        super().__init__(settings, on_message=on_message, data_dir=data_dir)
        self.settings: DiscordSettings = settings
        self.client: discord.Client | None = None
        self.intents: discord.Intents | None = None
        self.bot_id: str | None = None
        self.sessions = 0  # gateway sessions opened (IDENTIFY → READY)
        self.resumes = 0  # RESUMEs that succeeded
        self._receiver: Receiver | None = None
        self._sender: Sender | None = None
        self._run_task: asyncio.Task | None = None
        self._connected: asyncio.Event | None = None
        self._last_error: str | None = None
        self._send_queue = ChatSendQueue()
        self._started = False

    # ---- lifecycle -------------------------------------------------------------------------------

    @property
    def _token(self) -> str:
        token = self.settings.bot_token
        return token.get_secret_value().strip() if token is not None else ""

    def _scrub(self, value: Any) -> str:
        text = str(value)
        return text.replace(self._token, "<discord-token>") if self._token else text

    def _point_at_endpoints(self) -> None:
        if self.settings.api_base:
            discord.http.Route.BASE = self.settings.api_base
        if self.settings.gateway_url:
            discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(self.settings.gateway_url)

    async def start(self) -> None:
        """Log in, connect to the gateway and wait for READY (`connect_timeout`). Idempotent.

        Raises:
            DiscordStartError: no token, the token was rejected, the API or gateway is
                unreachable, or Discord closed the connection (the reason is named; the token
                never appears).
        """
        if self._started:
            return
        if not self._token:
            raise DiscordStartError("platforms.discord.bot_token is not set "
                                    "(set HERMES_PLATFORMS__DISCORD__BOT_TOKEN)")
        await self._discard_client()  # a previous run's client, kept open for late sends
        self._point_at_endpoints()
        self.intents = build_intents(self.settings.message_content)
        mentions = mentions_policy(self.settings.allowed_mentions)
        client = _Client(self, intents=self.intents, allowed_mentions=mentions,
                         max_ratelimit_timeout=self.settings.max_ratelimit_timeout)
        self.client = client
        self._connected = asyncio.Event()
        self._receiver = Receiver(client, self.settings, self.emit, lambda: self.bot_id, self.edit_queued)
        self._sender = Sender(client, mentions)
        try:
            await client.login(self._token)
        except discord.LoginFailure:
            await self._discard_client()
            raise DiscordStartError("discord rejected the bot token (401 Unauthorized)") from None
        except (discord.HTTPException, OSError, asyncio.TimeoutError) as exc:
            await self._discard_client()
            raise DiscordStartError(f"discord login failed: {type(exc).__name__}: {self._scrub(exc)}") from None
        self.bot_id = str(client.user.id)
        self._check_message_content(client)
        self._receiver.start()
        self._run_task = asyncio.create_task(self._run(client), name="discord-gateway")
        ready = asyncio.create_task(self._connected.wait())
        await asyncio.wait({ready, self._run_task}, timeout=self.settings.connect_timeout,
                                     return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        if not self._connected.is_set():
            reason = self._last_error or f"no READY within {self.settings.connect_timeout:g}s"
            await self._shutdown()
            raise DiscordStartError(f"discord gateway connection failed: {reason}")
        self._started = True
        log.info("discord adapter started as %s (id %s)", client.user, self.bot_id)

    def _check_message_content(self, client: discord.Client) -> None:
        """Say clearly when the bot will not see message text (D-T4), and never request an intent
        Discord would refuse with close code 4014."""
        if not self.settings.message_content:
            log.warning("discord: message_content = false: guild messages that do not mention the bot "
                        "arrive with empty text and are not answered (DMs and mentions are)")
            return
        flags = client.application_flags
        if flags.gateway_message_content or flags.gateway_message_content_limited:
            return
        self.intents.message_content = False  # the client identifies with this same Intents object
        log.warning("discord: the Message Content intent is not enabled for this application "
                    "(Developer Portal → Bot → Privileged Gateway Intents); connecting without it: "
                    "guild messages that do not mention the bot arrive with empty text and are not "
                    "answered (DMs and mentions are)")

    async def _run(self, client: discord.Client) -> None:
        try:
            await client.connect(reconnect=True)
        except asyncio.CancelledError:
            raise
        except discord.PrivilegedIntentsRequired:
            self._last_error = ("Discord refused the privileged intents (close code 4014): enable the "
                                "Message Content intent in the Developer Portal or set message_content = false")
            log.error("discord: %s", self._last_error)
        except discord.ConnectionClosed as exc:
            self._last_error = f"the gateway closed the connection with code {exc.code}"
            if exc.code == 4004:
                self._last_error += " (authentication failed: the bot token was rejected)"
            log.error("discord: %s; not reconnecting", self._last_error)
        except Exception as exc:
            self._last_error = f"{type(exc).__name__}: {self._scrub(exc)}"
            log.error("discord gateway connection ended: %s", self._last_error)
        else:
            log.info("discord gateway connection closed")

    def _on_session(self, *, resumed: bool) -> None:
        if resumed:
            self.resumes += 1
            log.info("discord gateway session resumed (missed events are replayed)")
        else:
            self.sessions += 1
            if self.sessions > 1:
                # A new session after a lost one: Discord does not replay the old session's events.
                log.warning("discord gateway session could not be resumed; a new session started")
        self._last_error = None
        if self._connected is not None:
            self._connected.set()

    async def stop(self) -> None:
        """Stop receiving: close the gateway connection, then hand every message already received
        to the gateway. Sending keeps working (the gateway sends the replies of the turns it
        drains after stopping its adapters) until `aclose`. Idempotent."""
        if not self._started:
            return
        self._started = False
        await self._stop_receiving()
        log.info("discord adapter stopped receiving (replies can still be sent until it is closed)")

    async def aclose(self) -> None:
        """Stop receiving (if still running) and close discord.py's HTTP session; the gateway
        calls it through the `hermes_shutdown` hook, after its drain. Idempotent."""
        await self.stop()
        await self._discard_client()

    async def _stop_receiving(self) -> None:
        # Stop reading the gateway first, then let queued messages reach the gateway while the
        # HTTP session still works (channel lookups).
        if self._run_task is not None:
            self._run_task.cancel()
            try:
                await self._run_task
            except asyncio.CancelledError:
                pass
            self._run_task = None
        if self.client is not None and self.client.ws is not None:
            await self.client.ws.close(code=1000)
        if self._receiver is not None:
            await self._receiver.drain()

    async def _shutdown(self) -> None:
        await self._stop_receiving()
        await self._discard_client()

    async def _discard_client(self) -> None:
        if self.client is not None and not self.client.is_closed():
            await self.client.close()

    async def health(self) -> dict[str, Any]:
        """`{"ok", "bot_id", "sessions", "resumes", "latency_s", "last_error"}`; ok while started,
        the gateway loop runs and the inbound consumer runs."""
        running = self._run_task is not None and not self._run_task.done()
        consuming = self._receiver is not None and self._receiver.running
        latency = self.client.latency if self.client is not None else None
        return {"ok": self._started and running and consuming and self._last_error is None,
                "bot_id": self.bot_id, "sessions": self.sessions, "resumes": self.resumes,
                "latency_s": latency if latency is not None and latency != float("inf") else None,
                "last_error": self._last_error}

    # ---- sending ---------------------------------------------------------------------------------

    def _require_sender(self) -> Sender:
        if self._sender is None or self.client is None or self.client.is_closed():
            raise RuntimeError("discord adapter is not started (or already closed)")
        return self._sender

    async def send(self, target: SessionSource, text: str, *, reply_to: str | None = None,
                   metadata: dict[str, Any] | None = None) -> SendResult:
        """Send one chunk (≤ 2000 characters) to `target`'s thread, else its channel; the chunk
        replies to `reply_to` (a deleted trigger does not fail it) and pings nobody.

        Returns:
            SendResult with Discord's message id.

        Raises:
            hermes_core.sdk.errors.RetryAfter: rate limited for longer than discord.py sits out.
            ValueError: the chunk is longer than 2000 characters or the target is not a Discord
                channel.
            discord.HTTPException: any other refusal (missing permissions, unknown channel, …).
            RuntimeError: the adapter was never started, or is closed (`aclose`).
        """
        return await self._require_sender().send(target, text, reply_to=reply_to)

    async def send_text(self, target: SessionSource, text: str, *, reply_to: str | None = None,
                        metadata: dict[str, Any] | None = None,
                        policy: RetryPolicy | None = None) -> list[SendResult]:
        """Send a whole reply: chunked at 2000 characters (code fences closed and reopened), in
        order under the chat's lock, rate limits waited out (SDK `send_chunks`). The first chunk
        replies to `reply_to`.

        Raises:
            hermes_core.sdk.errors.SendError: a chunk failed (`err.sent` lists the ones sent).
        """
        chunks = chunk_text(text, self.spec.max_message_length, self.spec.length_unit)
        kwargs = {"policy": policy} if policy is not None else {}
        return await send_chunks(self, target, chunks, reply_to=reply_to, metadata=metadata,
                                 queue=self._send_queue, **kwargs)

    async def edit_message(self, target: SessionSource, message_id: str, text: str, *,
                           metadata: dict[str, Any] | None = None) -> SendResult:
        """Replace the text of a message the bot sent (capability "edit").

        Raises:
            ValueError: not a Discord message id, or over 2000 characters.
            hermes_core.sdk.errors.RetryAfter / discord.HTTPException: as `send`.
        """
        return await self._require_sender().edit(target, message_id, text)

    async def send_typing(self, target: SessionSource) -> None:
        """Show "typing…" in `target`'s thread or channel (capability "typing"); best effort."""
        await self._require_sender().typing(target)
