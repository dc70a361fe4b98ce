"""`SlackAdapter`: slack-bolt `AsyncApp` on slack-sdk, Socket Mode or HTTP Events API
(docs/adapters.md §3, docs/behaviour.md §4, §5, §12).

Receiving (`receiver.py` runs the transport): every event envelope goes through
`handle_envelope`, one channel at a time in arrival order:

1. the ids the mapping needs are looked up — user name (`users.info`), channel kind, name and
   purpose (`conversations.info`; skipped for DMs), all cached (`lookups.Directory`) and bounded by
   `lookup_timeout` so the ack still fits Slack's 3-second window — and whether the bot takes part
   in the message's thread (`state.ThreadMemory`, a SQLite file in the adapter's data directory);
2. `mapping.classify` reads the envelope; malformed payloads, non-turn events and messages not
   addressed to the bot (a channel message without a mention, outside free-response channels and
   the bot's threads) are logged and acknowledged. An edit of a message's text
   (`message_changed`) or a deletion (`message_deleted`) goes to the gateway's queue first
   (`offer_change`, docs/behaviour.md §5 "Edits and deletions"), with the SessionSource the
   original message produced and its `ts`: a message still queued takes the new text in place or
   is withdrawn. Otherwise a deletion is done with, and an edit is a turn only with
   `edits_as_turns` on (id `<ts>@<edit ts>`);
3. the event is emitted to the gateway, which returns once it is durably accepted; only then is
   the envelope acknowledged. A refusal answers 500 / no ack, so Slack redelivers. Redeliveries and
   the `app_mention` + `message` pair of one message (S-T1) carry the same `(channel, ts)` and are
   dropped by the core's persisted inbound dedupe: never a second turn;
4. a message answered in a thread (a real one, or the synthetic root of a top-level channel
   message, docs/adapters.md §0.3 item 7) marks the thread as one the bot takes part in.

Sending: `send` posts one chunk with `chat.postMessage` into the target's thread (`thread_ts` =
`thread_id`, which for a synthetic root is the starter's `ts`: the first reply opens the thread),
as mrkdwn (`format.to_mrkdwn`, `&<>` escaped), link previews off. Slack's 429 becomes the SDK's
`RetryAfter` with the `Retry-After` seconds, so the delivery layer waits exactly that long and
sends the chunk again, in per-channel order. `edit_message` uses `chat.update`; `send_typing`
sets the assistant-thread status (`assistant.threads.setStatus`), the only working indicator a
bot has, and stops trying in a thread where Slack refuses it.

Tokens and the signing secret are `SecretStr`s; they never appear in this adapter's log lines or
errors (slack-sdk sends them in headers, which it does not log).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import aiohttp
from cachetools import TTLCache
from pydantic import BaseModel
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from hermes_core.sdk import (CAP_EDIT, CAP_THREADS, CAP_TYPING, CAP_WEBHOOK, INGRESS_SHARED, AdapterSpec,
                             BaseAdapter, ChatSendQueue, MalformedPayload, RetryAfter, RetryPolicy, SendError,
                             QueuedChange, SendResult, SessionSource, chunk_text, describe_failure, offer_change,
                             send_chunks)

from .format import escape, to_mrkdwn
from .lookups import Directory
from .mapping import DELETION, Classified, Facts, LookupKeys, classify, lookup_keys
from .receiver import SlackReceiver, SlackStartError
from .settings import SlackSettings
from .state import FILE_NAME, ThreadMemory

log = logging.getLogger(__name__)

MAX_TEXT_CHARS = 4000       # Slack's recommended ceiling for `text` (hard truncation at 40,000)
MAX_UPDATE_BYTES = 4000     # chat.update refuses longer text with msg_too_long
STOP_GRACE_S = 10.0         # how long `stop` lets events in hand reach the gateway
TYPING_STATUS = "is thinking…"


class SlackAdapter(BaseAdapter):
    """Slack platform adapter (entry point `hermes_core.adapters: slack`).

    Args:
        settings: a `SlackSettings` (or a dict validated into one); `bot_token` is required to
            start, plus `app_token` in Socket Mode or `signing_secret` in HTTP mode.
        on_message: the gateway's inbound handler (see `BaseAdapter`).
        data_dir: where the thread memory file lives; the core sets `HERMES_HOME/slack/` before
            `start()`. Without one the memory lasts until `stop`.

    Attributes:
        team_id / bot_user_id / bot_id: from `auth.test` at start.
        http_address: `(host, port)` of the HTTP listener (HTTP mode, after start).
    """

    spec = AdapterSpec(
        name="slack",
        label="Slack",
        pii_safe=True,
        max_message_length=MAX_TEXT_CHARS,
        length_unit="chars",
        capabilities=frozenset({CAP_THREADS, CAP_EDIT, CAP_TYPING, CAP_WEBHOOK}),
        settings_model=SlackSettings,
        required_env=("HERMES_PLATFORMS__SLACK__BOT_TOKEN", "HERMES_PLATFORMS__SLACK__APP_TOKEN"),
        install_hint="pip install hermes-gateway-slack",
        # Slack gives each Socket Mode event to one of up to 10 connections, and posts each HTTP
        # event once: every replica may receive (docs/adapters.md §6).
        ingress=INGRESS_SHARED,
    )

    def __init__(self, settings: BaseModel | dict | None = None, *, on_message=None,
                 data_dir: Path | str | None = None):
        if settings is None:
            settings = SlackSettings()
        elif isinstance(settings, dict):
            settings = SlackSettings.model_validate(settings)
        elif not isinstance(settings, SlackSettings):
            settings = SlackSettings.model_validate(settings.model_dump())
        super().__init__(settings, on_message=on_message, data_dir=data_dir)
        self.settings: SlackSettings = settings
        self._client: AsyncWebClient | None = None
        self._receiver: SlackReceiver | None = None
        self._memory: ThreadMemory | None = None
        self.directory: Directory | None = None
        self.team_id: str | None = None
        self.bot_user_id: str | None = None
        self.bot_id: str | None = None
        self._started = False
        self._stopping = False
        self._inflight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._background: set[asyncio.Task] = set()
        self._inbound_order = ChatSendQueue()
        self._send_queue = ChatSendQueue()
        # Threads where Slack refused the working status, not asked again for an hour.
        self._no_status: TTLCache = TTLCache(10_000, 3600)
        self._last_error: str | None = None

    # ---- lifecycle ---------------------------------------------------------------------------

    @property
    def client(self) -> AsyncWebClient:
        """The bot's Web API client (after `start`)."""
        if self._client is None:
            raise RuntimeError("slack adapter is not started")
        return self._client

    @property
    def http_address(self) -> tuple[str, int] | None:
        """`(host, port)` of the HTTP Events API listener, or None."""
        return self._receiver.http_address if self._receiver is not None else None

    def _auth_test_failure(self, exc: Exception) -> str:
        """Why `auth.test` failed other than a refused token, in words (never the token): Slack
        cannot be reached, or what answered is not Slack's Web API."""
        url = self.settings.api_base_url
        if isinstance(exc, (aiohttp.ClientConnectionError, TimeoutError, OSError)):
            return f"slack auth.test failed: cannot reach {url}: {describe_failure(exc)}"
        return f"slack auth.test failed: what answered at {url} is not Slack's Web API ({describe_failure(exc)})"

    async def _auth_test(self) -> tuple[AsyncWebClient, Any]:
        """A web client for the bot token against `api_base_url`, checked with `auth.test` (what
        `start` and `doctor --online` both do first). Returns the client and the answer.

        Raises:
            SlackStartError: the token is missing or rejected, or Slack is unreachable (the
                message names the setting, never its value).
        """
        if self.settings.bot_token is None:
            raise SlackStartError("platforms.slack.bot_token is not set (set HERMES_PLATFORMS__SLACK__BOT_TOKEN)")
        client = AsyncWebClient(token=self.settings.bot_token.get_secret_value(),
                                base_url=self.settings.api_base_url, timeout=10,
                                logger=logging.getLogger("hermes_slack.web"))
        try:
            auth = await client.auth_test()
        except SlackApiError as exc:
            error = exc.response.get("error") if exc.response is not None else "error"
            raise SlackStartError(f"slack auth.test refused the bot token: {error}") from None
        except Exception as exc:
            raise SlackStartError(self._auth_test_failure(exc)) from None
        return client, auth

    async def check_online(self) -> str:
        """`doctor --online`: `auth.test` with the bot token against `api_base_url`.

        Raises:
            SlackStartError: the token is missing or rejected, or Slack is unreachable (the
                message names the setting, never its value).
        """
        _, auth = await self._auth_test()
        return f"bot {auth.get('user_id')} in workspace {auth.get('team_id')}"

    async def start(self) -> None:
        """Check the bot token (`auth.test`), open the thread memory and start receiving.
        Idempotent.

        Raises:
            SlackStartError: a token or the signing secret is missing or rejected, Slack is
                unreachable, the thread memory file cannot be opened, or the HTTP port is taken.
                The message names the setting, never its value.
        """
        if self._started:
            return
        client, auth = await self._auth_test()
        self.team_id, self.bot_user_id, self.bot_id = auth.get("team_id"), auth.get("user_id"), auth.get("bot_id")
        path = Path(self.data_dir) / FILE_NAME if self.data_dir is not None else None
        if path is None:
            log.warning("slack adapter has no data directory: threads it answers in are forgotten at stop")
        memory = ThreadMemory(path, self.settings.thread_memory_days)
        try:
            await memory.open()
        except Exception as exc:
            raise SlackStartError(f"slack thread memory {path} cannot be opened: {describe_failure(exc)}") from None
        receiver = SlackReceiver(self.settings, client, self.handle_envelope)
        self._client, self._memory, self._receiver = client, memory, receiver
        self.directory = Directory(client, self.settings.cache_ttl)
        self._stopping = False
        try:
            await receiver.start()
        except BaseException:
            await memory.close()
            self._client = self._memory = self._receiver = self.directory = None
            raise
        self._started = True
        log.info("slack adapter started (%s mode) as bot user %s of team %s",
                 self.settings.mode, self.bot_user_id, self.team_id)

    async def stop(self) -> None:
        """Stop receiving and disconnect. Idempotent. Events already in hand are let through to
        the gateway (up to 10 s); events arriving meanwhile are not acknowledged, so Slack keeps
        them and redelivers. Sending keeps working (the gateway drains its turns after this)."""
        if not self._started:
            return
        self._started = False
        self._stopping = True
        try:
            await asyncio.wait_for(self._idle.wait(), STOP_GRACE_S)
        except asyncio.TimeoutError:
            log.warning("slack adapter: the gateway did not accept an event within %ss of stopping; "
                        "Slack will redeliver it", STOP_GRACE_S)
        for task in list(self._background):
            task.cancel()
        receiver, memory = self._receiver, self._memory
        self._receiver = self._memory = self.directory = None
        if receiver is not None:
            await receiver.stop()
        if memory is not None:
            await memory.close()
        # The Web API client stays: it is plain HTTP with nothing to close, and the gateway still
        # sends the replies of the turns it drains after stopping the adapters.
        log.info("slack adapter stopped")

    async def health(self) -> dict[str, Any]:
        """`{"ok", "mode", "team_id", "bot_user_id", "connected", "last_error"}`; ok while started,
        connected (Socket Mode) or listening (HTTP), and the last event was accepted."""
        connected = await self._receiver.connected() if self._receiver is not None else False
        return {"ok": self._started and connected and self._last_error is None, "mode": self.settings.mode,
                "team_id": self.team_id, "bot_user_id": self.bot_user_id, "connected": connected,
                "last_error": self._last_error}

    # ---- receiving ---------------------------------------------------------------------------

    async def handle_envelope(self, envelope: Any, retry_num: int = 0) -> bool:
        """Map one event envelope and emit it (module docstring, steps 1–4).

        Args:
            envelope: the `event_callback` object.
            retry_num: Slack's retry counter of this delivery (0: first delivery).

        Returns:
            True when the event is done with (emitted, or skipped on purpose: malformed, not a
            turn, not addressed to the bot): acknowledge it. False when the gateway did not
            accept it (or the adapter is stopping): do not acknowledge, Slack redelivers.
        """
        # Not `_started`: the socket may deliver held events before `start()` returns, and the
        # directory and memory are ready by then.
        if self._stopping or self.directory is None:
            return False
        self._inflight += 1
        self._idle.clear()
        try:
            keys = lookup_keys(envelope)
            # One channel at a time, in arrival order: a burst of messages keeps its order.
            async with self._inbound_order.hold(keys.channel or ""):
                return await self._handle(envelope, keys, retry_num)
        finally:
            self._inflight -= 1
            if self._inflight == 0:
                self._idle.set()

    async def _handle(self, envelope: Any, keys: LookupKeys, retry_num: int) -> bool:
        event_id = envelope.get("event_id") if isinstance(envelope, dict) else None
        facts = await self._facts(keys)
        try:
            # Edits and deletions are always read: they may change a message still queued
            # (docs/behaviour.md §5); `edits_as_turns` decides below, once the queue did not take it.
            result = classify(envelope, facts, self.settings, changes=True)
        except MalformedPayload as exc:
            log.warning("skipping malformed slack event %s: %s", event_id, exc)
            return True
        except Exception:
            # A payload shape the mapping did not anticipate: skip it, keep the adapter running.
            log.exception("skipping slack event %s: it could not be mapped", event_id)
            return True
        if result is None:
            return True
        source = result.source
        if result.change is not None:
            done = await self._offer_change(result, event_id)
            if done is not None:
                return done
        if result.ignore_reason is not None:
            log.debug("slack message %s in %s is not for the bot: %s", source.message_id, source.chat_id,
                      result.ignore_reason)
            return True
        if retry_num:
            log.info("slack redelivery #%d of event %s (message %s in %s)", retry_num, event_id,
                     source.message_id, source.chat_id)
        try:
            await self.emit(result.event)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._last_error = f"{type(exc).__name__}: {exc}"
            log.warning("slack message %s in %s not accepted by the gateway (%s); Slack will redeliver it",
                        source.message_id, source.chat_id, self._last_error)
            return False
        self._last_error = None
        await self._remember_thread(result)
        return True

    async def _offer_change(self, result: Classified, event_id: Any) -> bool | None:
        """Offer an edit or a deletion to the gateway's queue (`offer_change`, docs/behaviour.md
        §5 "Edits and deletions"). Returns what `_handle` answers (True: done with, acknowledge;
        False: the gateway failed, Slack redelivers), or None for an edit to be emitted as a new
        turn (not queued, `edits_as_turns` on)."""
        source, edit = result.source, result.change != DELETION
        message_id = source.message_id or ""
        change = QueuedChange(source, message_id, result.event.text if edit else None,
                              result.event if edit else None)
        label = f"slack {change.kind} of message {message_id} in {source.chat_id} (event {event_id})"
        try:
            event = await offer_change(self.edit_queued, change, edits_as_turns=self.settings.edits_as_turns,
                                       label=label, logger=log)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._last_error = f"{type(exc).__name__}: {exc}"
            log.warning("%s not applied to the gateway's queue (%s); Slack will redeliver it", label,
                        self._last_error)
            return False
        self._last_error = None
        return True if event is None else None

    async def _facts(self, keys: LookupKeys) -> Facts:
        """Look up what `classify` needs, within `lookup_timeout` (what is not back by then comes
        from the cache, or stays unknown; the lookups finish in the background for next time)."""
        assert self.directory is not None and self._memory is not None
        directory = self.directory
        if keys.channel and keys.channel_type:
            directory.remember_kind(keys.channel, keys.channel_type)
        lookups: dict[str, asyncio.Task] = {}
        if keys.channel and keys.channel_type != "im":
            lookups["channel"] = asyncio.create_task(directory.channel(keys.channel))
        if keys.user:
            lookups["user"] = asyncio.create_task(directory.user_name(keys.user))
        if lookups:
            done, pending = await asyncio.wait(lookups.values(), timeout=self.settings.lookup_timeout)
            for task in pending:
                self._background.add(task)
                task.add_done_callback(self._background.discard)
            if pending:
                log.warning("slack lookups for channel %s took longer than %ss; the message is accepted "
                            "with the names known so far", keys.channel, self.settings.lookup_timeout)
        channels, users = {}, {}
        if keys.channel:
            task = lookups.get("channel")
            facts = task.result() if task is not None and task.done() else None
            # Else what is cached, or at least the kind a message event of the channel carried.
            facts = facts or directory.cached_channel(keys.channel)
            if facts is not None:
                channels[keys.channel] = facts
        if keys.user:
            task = lookups.get("user")
            name = task.result() if task is not None and task.done() else directory.cached_user(keys.user)
            if name:
                users[keys.user] = name
        threads = set()
        if keys.channel and keys.thread_ts and await self._in_thread(keys.channel, keys.thread_ts):
            threads.add((keys.channel, keys.thread_ts))
        return Facts(bot_user_id=self.bot_user_id, bot_id=self.bot_id, channels=channels, users=users,
                     bot_threads=threads)

    async def _in_thread(self, channel: str, thread_ts: str) -> bool:
        try:
            return await self._memory.contains(channel, thread_ts) if self._memory is not None else False
        except Exception as exc:
            log.error("slack thread memory read failed: %s: %s", type(exc).__name__, exc)
            return False

    async def _remember_thread(self, result: Classified) -> None:
        source = result.source
        if source.chat_type != "dm" and source.thread_id:
            await self.remember_thread(source.chat_id, source.thread_id)

    async def remember_thread(self, channel: str, thread_ts: str) -> None:
        """Mark thread `thread_ts` of `channel` as one the bot takes part in (its replies are
        answered without a mention). Failures are logged, never raised."""
        if self._memory is None:
            return
        try:
            await self._memory.remember(channel, thread_ts)
        except Exception as exc:
            log.error("slack thread %s in %s not remembered: %s: %s", thread_ts, channel, type(exc).__name__, exc)

    # ---- sending -----------------------------------------------------------------------------

    async def _api(self, method: str, call, **kwargs) -> Any:
        """Call a Web API method; Slack's 429 → `RetryAfter`, `ok: false` → `SendError`."""
        try:
            return await call(**kwargs)
        except SlackApiError as exc:
            response = exc.response
            if response is not None and response.status_code == 429:
                raise RetryAfter(_retry_after(response.headers), scope="channel") from exc
            error = response.get("error") if response is not None else None
            raise SendError(f"slack {method} failed: {error or 'error'}", cause=exc) from exc

    async def send(self, target: SessionSource, text: str, *, reply_to: str | None = None,
                   metadata: dict[str, Any] | None = None) -> SendResult:
        """Post one chunk (≤ 4000 characters) to `target`'s channel and thread.

        Args:
            target: raw ids of the stored origin: `chat_id` (channel) and `thread_id` (the thread
                `ts`; for a synthetic root the starter's own `ts`, which opens the thread).
            text: the chunk; rendered as mrkdwn unless `metadata["format"] == "plain"` (then only
                `&<>` are escaped and mrkdwn is off).
            reply_to: the triggering message's `ts`; Slack threads are the only reply anchor, so
                it is not used beyond `target.thread_id`.

        Returns:
            SendResult with the posted message's `ts`.

        Raises:
            hermes_core.sdk.errors.RetryAfter: Slack answered 429 (seconds from `Retry-After`).
            hermes_core.sdk.errors.SendError: Slack refused the message (`channel_not_found`,
                `not_in_channel`, `is_archived`, …); the error code is in the message.
            ValueError: the chunk is longer than 4000 characters (chunk first: `send_text`).
        """
        if len(text) > MAX_TEXT_CHARS:
            raise ValueError(f"slack message is longer than {MAX_TEXT_CHARS} characters; chunk it first "
                             "(send_text / hermes_core.sdk.chunk_text)")
        plain = (metadata or {}).get("format") == "plain"
        kwargs: dict[str, Any] = {"channel": target.chat_id, "text": escape(text) if plain else to_mrkdwn(text),
                                  "mrkdwn": not plain, "unfurl_links": False, "unfurl_media": False}
        if target.thread_id:
            kwargs["thread_ts"] = target.thread_id
            kwargs["reply_broadcast"] = False
        response = await self._api("chat.postMessage", self.client.chat_postMessage, **kwargs)
        if target.thread_id and target.chat_type != "dm":
            await self.remember_thread(target.chat_id, target.thread_id)
        return SendResult(message_id=response.get("ts"))

    async def send_text(self, target: SessionSource, text: str, *, reply_to: str | None = None,
                        metadata: dict[str, Any] | None = None,
                        policy: RetryPolicy | None = None) -> list[SendResult]:
        """Send a whole reply: chunked at 4000 characters (code fences closed and reopened), in
        order under the channel's lock, 429 waited out (SDK `send_chunks`).

        Raises:
            hermes_core.sdk.errors.SendError: a chunk failed (`err.sent` lists the ones sent).
        """
        chunks = chunk_text(text, self.spec.max_message_length, self.spec.length_unit)
        kwargs = {"policy": policy} if policy is not None else {}
        return await send_chunks(self, target, chunks, reply_to=reply_to, metadata=metadata,
                                 queue=self._send_queue, **kwargs)

    async def edit_message(self, target: SessionSource, message_id: str, text: str, *,
                           metadata: dict[str, Any] | None = None) -> SendResult:
        """Replace the text of a message the bot posted (`chat.update`; capability "edit").

        Args:
            target: the channel the message is in.
            message_id: the message's `ts` (from a `SendResult`).
            text: the new text; at most 4000 bytes once rendered (Slack's `msg_too_long`).

        Raises:
            ValueError: the rendered text is longer than 4000 UTF-8 bytes.
            hermes_core.sdk.errors.RetryAfter / SendError: as `send`.
        """
        rendered = escape(text) if (metadata or {}).get("format") == "plain" else to_mrkdwn(text)
        if len(rendered.encode("utf-8")) > MAX_UPDATE_BYTES:
            raise ValueError(f"slack chat.update takes at most {MAX_UPDATE_BYTES} bytes of text")
        await self._api("chat.update", self.client.chat_update, channel=target.chat_id, ts=message_id,
                        text=rendered)
        return SendResult(message_id=message_id)

    async def send_typing(self, target: SessionSource) -> None:
        """Show "is thinking…" under the thread (`assistant.threads.setStatus`). Slack has no
        typing indicator for bots elsewhere: outside threads nothing is sent, and a thread where
        Slack refuses the status (not an assistant thread, missing scope) is not asked again."""
        if not target.thread_id or self._client is None:
            return
        where = (target.chat_id, target.thread_id)
        if where in self._no_status:
            return
        try:
            await self._client.assistant_threads_setStatus(channel_id=target.chat_id, thread_ts=target.thread_id,
                                                           status=TYPING_STATUS)
        except SlackApiError as exc:
            if exc.response is None or exc.response.status_code != 429:
                self._no_status[where] = True
            log.debug("slack working status refused in %s: %s", target.chat_id,
                      exc.response.get("error") if exc.response is not None else "error")


def _retry_after(headers: Any) -> float:
    """Seconds of Slack's `Retry-After` header (1 when absent or unreadable)."""
    value = None
    if headers:
        value = headers.get("Retry-After") or headers.get("retry-after")
    if isinstance(value, (list, tuple)):
        value = value[0] if value else None
    try:
        return max(0.0, float(value)) if value is not None else 1.0
    except (TypeError, ValueError):
        return 1.0
