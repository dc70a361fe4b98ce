"""`SignalAdapter`: signal-cli's HTTP daemon through httpx (docs/adapters.md §5, docs/behaviour.md §4).

Receiving (`receiver.EventStream`): the SSE stream `GET /api/v1/events?account=…`, reconnecting
with back-off. Each payload is mapped (`mapping.map_payload`) and handed to the gateway; `emit`
returns once the gateway has durably accepted the message. The stream cannot redeliver, so a
message the gateway refuses is offered again (`max_emit_attempts`, with a pause) before it is
dropped with an ERROR log. Number ↔ UUID pairs seen in any payload (senders, sync destinations,
quote authors, mentions) are remembered, so a later envelope carrying only a number is keyed on
the UUID. Only one process may read a daemon's stream (`ingress = "single_receiver"`).
An edit (`editMessage`) or a remote delete of a message is offered to the gateway's queue first
(`BaseAdapter.edit_queued`): a message still queued takes the new text in place, or is withdrawn
(docs/behaviour.md §5 "Edits and deletions"). Otherwise a remote delete is nothing more, and an
edit is a new turn only with `edits_as_turns` on.

Sending (`send`, one chunk per call, the BaseAdapter contract): JSON-RPC `send` with
`recipient: [<uuid>]` for a DM (Note to Self included: the recipient is the account itself) or
`groupId` (the raw id, `chat_id` without `group:`) for a group; the first chunk quotes the
trigger (`quoteTimestamp` + `quoteAuthor`). Chunks are at most 2000 UTF-8 bytes: signal-cli
sends longer bodies as a long-text attachment (docs/adapters.md §5.4), which the delivery
layer avoids by chunking in `spec`'s unit. A rate limit with `retryAfterSeconds` becomes
`RetryAfter` (the delivery layer waits it out, capped, keeping per-chat order); an untrusted
identity, an unregistered recipient or a rate limit without a wait becomes a
`SignalDeliveryError`, a failed delivery with a clear reason. The timestamp of every sent message
is remembered, so its Note-to-Self echo (a sync carrying it) is not answered (G-T3).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from typing import Any

import httpx
from pydantic import BaseModel
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_after_attempt, wait_exponential

from hermes_core.sdk import (CAP_EDIT, CAP_TYPING, INGRESS_SINGLE_RECEIVER, AdapterSpec, BaseAdapter, ChatSendQueue,
                             IdentityAlias, MessageEvent, QueuedChange, RetryPolicy, SendResult, SessionSource,
                             chunk_text, measure, offer_change, send_chunks)

from .mapping import GROUP_PREFIX, MalformedPayload, event_ids, identity_pairs, map_payload, quote_of, raw_group_id
from .receiver import EventStream
from .rpc import CHECK_PATH, SignalRpc, SignalRpcError, send_timestamp
from .settings import SignalSettings

log = logging.getLogger(__name__)

MAX_TEXT_BYTES = 2000      # signal-cli sends at most 2000 UTF-8 bytes inline (docs/adapters.md §5.4)
SENT_MEMORY = 1024         # own message timestamps kept for echo filtering
ALIAS_MEMORY = 10_000      # number → UUID pairs kept in memory
NO_ACCOUNT = "platforms.signal.account is not set (the bot's number, e.g. \"+15559990000\")"
STOP_GRACE_S = 10.0        # how long `stop` lets a message in hand reach the gateway


class SignalStartError(RuntimeError):
    """The adapter cannot start (no account configured)."""


class _Bounded(OrderedDict):
    """An insertion-ordered map that forgets its oldest entries beyond `limit`."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit = limit

    def remember(self, key: Any, value: Any = True) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.limit:
            self.popitem(last=False)


class SignalAdapter(BaseAdapter):
    """Signal platform adapter (entry point `hermes_core.adapters: signal`).

    Args:
        settings: a `SignalSettings` (or a dict validated into one); `account` is required to
            `start`.
        on_message: the gateway's inbound handler (see `BaseAdapter`).
        transport: an httpx transport to use instead of the network (tests may pass one; the
            plugin's own tests use a real server on 127.0.0.1).
    """

    spec = AdapterSpec(
        name="signal",
        label="Signal",
        pii_safe=True,
        max_message_length=MAX_TEXT_BYTES,
        length_unit="bytes",
        capabilities=frozenset({CAP_TYPING, CAP_EDIT}),
        settings_model=SignalSettings,
        required_env=(),
        install_hint="pip install hermes-gateway-signal",
        ingress=INGRESS_SINGLE_RECEIVER,  # one event stream per daemon account (docs/adapters.md §6)
    )

    # First pause before offering a refused message to the gateway again, in seconds (doubles).
    emit_backoff_s = 0.25

    def __init__(self, settings: BaseModel | dict | None = None, *, on_message=None,
                 transport: httpx.AsyncBaseTransport | None = None):
        if settings is None:
            settings = SignalSettings()
        elif isinstance(settings, dict):
            settings = SignalSettings.model_validate(settings)
        elif not isinstance(settings, SignalSettings):
            settings = SignalSettings.model_validate(settings.model_dump())
        super().__init__(settings, on_message=on_message)
        self.settings: SignalSettings = settings
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self._rpc: SignalRpc | None = None
        self._stream: EventStream | None = None
        self._send_queue = ChatSendQueue()
        self.account_uuid: str | None = settings.account_uuid
        self._uuids: _Bounded = _Bounded(ALIAS_MEMORY)
        self._sent: _Bounded = _Bounded(SENT_MEMORY)
        self.dropped = 0

    # ---- calls and lifecycle -------------------------------------------------------------

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        """One JSON-RPC call to the daemon (`SignalRpc.call`). After `stop` — the gateway stops
        receiving before it drains the turns still running — a short-lived client carries the
        call, so the replies of those turns are still delivered.

        Raises:
            SignalStartError: `account` is not configured.
            SignalRpcError / httpx.HTTPError: as `SignalRpc.call`.
        """
        if self._rpc is not None:
            return await self._rpc.call(method, params)
        account = self.settings.account
        if not account:
            raise SignalStartError(NO_ACCOUNT)
        async with httpx.AsyncClient(base_url=self.settings.base_url, transport=self._transport,
                                     timeout=self.settings.request_timeout) as client:
            return await SignalRpc(client, account, timeout=self.settings.request_timeout).call(method, params)

    async def start(self) -> None:
        """Open the HTTP client and start reading the event stream. Idempotent.

        An unreachable daemon does not fail the start: it is logged and the stream keeps
        retrying with back-off (the daemon may start after the gateway).

        Raises:
            SignalStartError: `account` is not configured.
        """
        if self._client is not None:
            return
        account = self.settings.account
        if not account:
            raise SignalStartError(NO_ACCOUNT)
        client = httpx.AsyncClient(base_url=self.settings.base_url, transport=self._transport,
                                   timeout=self.settings.request_timeout)
        self._client = client
        self._rpc = SignalRpc(client, account, timeout=self.settings.request_timeout)
        try:
            check = await client.get(CHECK_PATH, timeout=5.0)
            if check.status_code != 200:
                log.warning("signal-cli daemon at %s answered %s to %s; is it `signal-cli daemon --http`?",
                            self.settings.base_url, check.status_code, CHECK_PATH)
        except httpx.HTTPError as exc:
            log.warning("signal-cli daemon at %s is not reachable yet (%s: %s); retrying in the background",
                        self.settings.base_url, type(exc).__name__, exc)
        self._stream = EventStream(client, account=account, on_payload=self.handle_payload,
                                   idle_timeout=self.settings.stream_idle_timeout,
                                   initial=self.settings.reconnect_initial, maximum=self.settings.reconnect_max)
        self._stream.start()
        log.info("signal adapter started (daemon %s)", self.settings.base_url)

    async def stop(self) -> None:
        """Stop reading (the message in hand reaches the gateway first) and close the client.
        Idempotent. Messages not yet fetched stay queued at Signal's servers when the daemon
        runs with `--receive-mode=on-connection`."""
        if self._client is None:
            return
        if self._stream is not None:
            await self._stream.stop(STOP_GRACE_S)
            self._stream = None
        await self._client.aclose()
        self._client = None
        self._rpc = None
        log.info("signal adapter stopped")

    async def health(self) -> dict[str, Any]:
        """`{"ok", "connected", "connections", "last_error", "dropped"}`: ok while the event
        stream is open."""
        stream = self._stream
        connected = bool(stream and stream.connected)
        return {"ok": connected, "connected": connected, "connections": stream.connections if stream else 0,
                "last_error": stream.last_error if stream else None, "dropped": self.dropped}

    # ---- receiving -----------------------------------------------------------------------

    def uuid_for_number(self, number: str) -> str | None:
        """The UUID last seen with `number`, or None."""
        return self._uuids.get(number)

    async def _learn(self, payload: Any, event) -> list[tuple[str, str]]:
        """The number ↔ UUID pairs of `payload` new to this process. With an event they go on it
        (the core records them before keying it) and are returned for `_remember` once the event
        is accepted; without one (a typing indicator or receipt teaches them too) they are
        recorded in the core's alias store directly."""
        new = [(number, uuid) for number, uuid in identity_pairs(payload) if self._uuids.get(number) != uuid]
        for number, uuid in new:
            if number == self.settings.account and self.account_uuid is None:
                self.account_uuid = uuid
        if event is not None:
            fresh = set(new)
            event.aliases = [a for a in event.aliases if (a.alias_id, a.canonical_id) in fresh]
            return new
        if new and self._record_aliases is not None:
            try:
                await self._record_aliases([IdentityAlias(self.spec.name, number, uuid, "signal envelope")
                                            for number, uuid in new])
            except Exception as exc:  # they come again with the next payload
                log.warning("signal number/UUID aliases not recorded: %s: %s", type(exc).__name__, exc)
                return []
        self._remember(new)
        return new

    def _remember(self, pairs: list[tuple[str, str]]) -> None:
        for number, uuid in pairs:
            self._uuids.remember(number, uuid)

    async def handle_payload(self, payload: Any) -> None:
        """Map one decoded payload (an SSE event's data, a JSON-RPC notification, or a JSON-RPC
        batch list) and hand the messages in it to the gateway, in order. Never raises for bad
        input: malformed payloads are logged with the field at fault and skipped."""
        if isinstance(payload, list):
            for item in payload:
                await self.handle_payload(item)
            return
        try:
            mapped = map_payload(payload, account=self.settings.account, account_uuid=self.account_uuid,
                                 ignore_stories=self.settings.ignore_stories,
                                 uuid_for_number=self.uuid_for_number, own_sent=self._sent)
        except MalformedPayload as exc:
            log.warning("skipping malformed signal payload: %s", exc)
            mapped = None
        except Exception:
            # A payload shape the mapping did not anticipate: skip it, keep the stream running.
            log.exception("skipping signal payload: it could not be mapped")
            mapped = None
        if isinstance(mapped, QueuedChange):
            # Its number ↔ UUID pair is recorded first, so the queue folds a message queued under
            # the number into the UUID as the session key does (docs/behaviour.md §5).
            await self._learn(payload, None)
            event = await self._offer_change(mapped)
        else:
            event = mapped[1] if mapped is not None else None
        pairs = await self._learn(payload, event)
        if event is not None and await self._emit_with_retries(event):
            self._remember(pairs)

    async def _offer_change(self, change: QueuedChange) -> MessageEvent | None:
        """Offer an edit or a remote delete to the gateway's queue (`offer_change`,
        docs/behaviour.md §5 "Edits and deletions"). Returns the event to emit as a turn of its
        own: the edit's, when the original is no longer queued and `edits_as_turns` is on; None
        otherwise. A queue failure is one error line and no turn. Logged with the original's
        timestamp only, never text or numbers."""
        what = "edit" if change.text is not None else "remote delete"
        label = f"signal {what} of message {change.source.message_id}"

        async def under_either_author_id(source: SessionSource, message_id: str, text: str | None) -> bool:
            # The original may have been emitted under its author's number, its change under the
            # UUID, or the reverse (`mapping.event_ids`).
            for candidate in dict.fromkeys((message_id, *event_ids(source))):
                if await self.edit_queued(source, candidate, text):
                    return True
            return False

        try:
            return await offer_change(under_either_author_id, change, edits_as_turns=self.settings.edits_as_turns,
                                      label=label, logger=log)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # Not known whether it reached the queue: making it a turn could answer it twice.
            log.error("%s not applied to the queue, skipped: %s", label, type(exc).__name__)
            return None

    async def _emit_with_retries(self, event) -> bool:
        """Offer `event` to the gateway up to `max_emit_attempts` times (exponential pauses from
        `emit_backoff_s`): the event stream cannot redeliver a message the gateway refused.
        Returns True once it was accepted, False when it was dropped (logged)."""
        attempts = self.settings.max_emit_attempts

        def log_refusal(state: RetryCallState) -> None:
            exc = state.outcome.exception()
            log.warning("signal message %s not accepted (attempt %d): %s: %s; offering it again",
                        event.source.message_id, state.attempt_number, type(exc).__name__, exc)

        retrying = AsyncRetrying(stop=stop_after_attempt(attempts),
                                 wait=wait_exponential(multiplier=self.emit_backoff_s, max=5.0),
                                 retry=retry_if_exception_type(Exception), before_sleep=log_refusal,
                                 reraise=True)
        try:
            await retrying(self.emit, event)
        except Exception as exc:
            self.dropped += 1
            log.error("signal message %s refused by the gateway %d times, dropped: %s: %s",
                      event.source.message_id, attempts, type(exc).__name__, exc)
            return False
        return True

    # ---- sending -------------------------------------------------------------------------

    def _address(self, target: SessionSource) -> dict[str, Any]:
        """`{"groupId": <raw id>}` for a group, `{"recipient": [<uuid or number>]}` for a DM."""
        if target.chat_type == "group" or target.chat_id.startswith(GROUP_PREFIX):
            return {"groupId": raw_group_id(target.chat_id_alt or target.chat_id, "target.chat_id")}
        return {"recipient": [target.chat_id]}

    def _own_id(self) -> str:
        return self.account_uuid or self.settings.account or ""

    async def _send(self, params: dict[str, Any]) -> int:
        result, error = None, None
        try:
            result = await self.call("send", params)
        except SignalRpcError as exc:
            error = exc
        timestamp = send_timestamp(result, error)  # raises the matching delivery error
        self._sent.remember(timestamp)
        return timestamp

    async def send(self, target: SessionSource, text: str, *, reply_to: str | None = None,
                   metadata: dict[str, Any] | None = None) -> SendResult:
        """Send one chunk (≤ 2000 UTF-8 bytes) to `target`'s chat.

        Args:
            target: the stored origin (raw ids): a DM's `chat_id` is the peer's UUID (or number),
                a group's is `"group:<id>"` (raw id also in `chat_id_alt`).
            text: the chunk, sent as plain text.
            reply_to: the trigger's event message id (`"<timestamp>:<author>"`); quoted. A bare
                timestamp is quoted with the target's user as author.

        Returns:
            SendResult whose message id is `"<timestamp>:<account uuid or number>"`.

        Raises:
            hermes_core.sdk.RetryAfter: rate limited with a known wait.
            SignalDeliveryError: untrusted identity, unregistered recipient, rate limited without
                a wait, captcha required.
            hermes_core.sdk.SendError / httpx.HTTPError: any other refusal or the daemon is down.
            ValueError: the chunk is longer than 2000 UTF-8 bytes.
        """
        if measure(text, "bytes") > MAX_TEXT_BYTES:
            raise ValueError(f"signal message is longer than {MAX_TEXT_BYTES} UTF-8 bytes; chunk it first")
        params: dict[str, Any] = {**self._address(target), "message": text}
        quote = quote_of(reply_to)
        if quote is None and reply_to and str(reply_to).isdigit():
            author = target.user_id_alt or target.user_id
            quote = (int(reply_to), author) if author else None
        if quote is not None:
            params["quoteTimestamp"], params["quoteAuthor"] = quote
        timestamp = await self._send(params)
        return SendResult(message_id=f"{timestamp}:{self._own_id()}")

    async def send_text(self, target: SessionSource, text: str, *, reply_to: str | None = None,
                        metadata: dict[str, Any] | None = None,
                        policy: RetryPolicy | None = None) -> list[SendResult]:
        """Send a whole reply: chunked at 2000 UTF-8 bytes (code fences closed and reopened), in
        order under the chat's lock, rate limits waited out (SDK `send_chunks`). The first chunk
        quotes `reply_to`.

        Raises:
            hermes_core.sdk.SendError: a chunk failed (`err.sent` lists the ones sent).
        """
        chunks = chunk_text(text, MAX_TEXT_BYTES, "bytes")
        kwargs = {"policy": policy} if policy is not None else {}
        return await send_chunks(self, target, chunks, reply_to=reply_to, metadata=metadata,
                                 queue=self._send_queue, **kwargs)

    async def edit_message(self, target: SessionSource, message_id: str, text: str, *,
                           metadata: dict[str, Any] | None = None) -> SendResult:
        """Replace the text of a message the bot sent (capability "edit"): `send` with
        `editTimestamp`.

        Args:
            target: the chat the message is in.
            message_id: the bot's message id from a `SendResult` (`"<timestamp>:<author>"`).
            text: the new text (≤ 2000 UTF-8 bytes).

        Raises:
            ValueError: `message_id` is not a Signal message id, or the text is too long.
            Same as `send` otherwise.
        """
        quote = quote_of(message_id)
        if quote is None:
            raise ValueError(f"not a signal message id: {message_id!r}")
        if measure(text, "bytes") > MAX_TEXT_BYTES:
            raise ValueError(f"signal message is longer than {MAX_TEXT_BYTES} UTF-8 bytes")
        timestamp = await self._send({**self._address(target), "message": text, "editTimestamp": quote[0]})
        return SendResult(message_id=f"{timestamp}:{self._own_id()}")

    async def send_typing(self, target: SessionSource) -> None:
        """Show the typing indicator in `target`'s chat (JSON-RPC `sendTyping`). Best effort: a
        failure is logged at DEBUG, never raised (it is cosmetic)."""
        try:
            await self.call("sendTyping", self._address(target))
        except (SignalRpcError, SignalStartError, httpx.HTTPError, MalformedPayload) as exc:
            log.debug("signal typing indicator not sent: %s", exc)
