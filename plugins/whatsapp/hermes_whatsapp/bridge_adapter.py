"""`WhatsAppAdapter`: the bridge transport, platform `whatsapp` (docs/adapters.md §4.0–§4.2, §4.5).

Receiving: a long-poll loop on the bridge's `GET /events?after=<seq>`. Each event is mapped
(`bridge_mapping.map_bridge_event`) and every turn in it handed to the gateway; an edit or a
deletion of an earlier message is offered to the gateway's queue (`offer_change`: a message still
queued takes the new text or is withdrawn, docs/behaviour.md §5), and only an edit it did not take
becomes a turn, with `edits_as_turns` on. Only once all of them are done does the cursor move past
the event, and the next poll acknowledges it to the bridge. A message the gateway refuses leaves
the cursor where it was: after a pause the same event is polled again (the bridge keeps it), so
nothing is lost; a message accepted twice is answered once (the core's inbound dedupe). One
process may poll a bridge (`ingress = "single_receiver"`).

Identity (trap W-T1): the `…Alt` fields of each message travel as `MessageEvent.aliases` (the
core records them before keying), those of an edit or a deletion as `QueuedChange.aliases`
(recorded here before the change is offered); `lid-mapping.update` events and the bridge's
`lid-mapping-*.json` session files (`session_dir`, re-read when the folder changes) are recorded
through `record_alias`. The shortest normalised id is canonical, as the key builder picks it.

Sending: `POST /send {chatId: <raw chat JID>, message, replyTo}` — the raw JID the message came
from (LID or phone JID, or the group JID), never one rebuilt from a key (W-T6). Chunks of at
most 4096 characters. A 429 with `Retry-After` is waited out by the delivery layer. While a turn
runs the chat shows "typing…" (`POST /typing`).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import httpx
from cachetools import TTLCache
from pydantic import BaseModel

from hermes_core.sdk import (CAP_TYPING, INGRESS_SINGLE_RECEIVER, AdapterSpec, BaseAdapter, MalformedPayload,
                             QueuedChange, RetryAfter, SendResult, SessionSource, measure, offer_change)

from .bridge import BridgeClient, BridgeError, lid_mappings
from .bridge_mapping import group_subjects, map_bridge_event, mapping_update
from .jid import PLATFORM, is_group
from .settings import WhatsAppSettings

log = logging.getLogger(__name__)

MAX_TEXT_CHARS = 4096      # upstream's chunk size for readability (docs/adapters.md §4.5)
STOP_GRACE_S = 10.0        # how long `stop` lets the event in hand reach the gateway


def _group_jids(payload: Any) -> set[str]:
    """Group JIDs an event's messages are in (to look their subjects up before mapping)."""
    found: set[str] = set()
    if not isinstance(payload, dict):
        return found
    info = payload.get("Info")
    if isinstance(info, dict) and isinstance(info.get("Chat"), str):
        found.add(info["Chat"])
    messages = payload.get("messages")
    for item in messages if isinstance(messages, list) else ():
        key = item.get("key") if isinstance(item, dict) else None
        if isinstance(key, dict) and isinstance(key.get("remoteJid"), str):
            found.add(key["remoteJid"])
    return {jid for jid in found if is_group(jid)}


class WhatsAppAdapter(BaseAdapter):
    """WhatsApp bridge adapter (entry point `hermes_core.adapters: whatsapp`).

    Args:
        settings: a `WhatsAppSettings` (or a dict validated into one).
        on_message: the gateway's inbound handler (see `BaseAdapter`).
        transport: an httpx transport instead of the network (the plugin's own tests use a real
            fake bridge on 127.0.0.1 instead).
    """

    spec = AdapterSpec(
        name=PLATFORM,
        label="WhatsApp",
        pii_safe=True,           # phone numbers and JIDs are redactable identifiers
        max_message_length=MAX_TEXT_CHARS,
        length_unit="chars",
        capabilities=frozenset({CAP_TYPING}),
        settings_model=WhatsAppSettings,
        required_env=(),
        install_hint="pip install hermes-gateway-whatsapp",
        ingress=INGRESS_SINGLE_RECEIVER,  # one poller per bridge session (docs/adapters.md §6)
    )

    def __init__(self, settings: BaseModel | dict | None = None, *, on_message=None,
                 transport: httpx.AsyncBaseTransport | None = None):
        if settings is None:
            settings = WhatsAppSettings()
        elif isinstance(settings, dict):
            settings = WhatsAppSettings.model_validate(settings)
        elif not isinstance(settings, WhatsAppSettings):
            settings = WhatsAppSettings.model_validate(settings.model_dump())
        super().__init__(settings, on_message=on_message)
        self.settings: WhatsAppSettings = settings
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self._bridge: BridgeClient | None = None
        self._task: asyncio.Task | None = None
        self._stopping = False
        self._handling = False
        self.cursor = 0
        self.connected = False
        self.last_error: str | None = None
        self._groups: TTLCache = TTLCache(maxsize=4096, ttl=settings.group_cache_ttl)
        self._session_stamp: float | None = None

    # ---- lifecycle -----------------------------------------------------------------------

    def _new_client(self) -> httpx.AsyncClient:
        headers = {}
        if self.settings.bridge_token is not None:
            headers["Authorization"] = f"Bearer {self.settings.bridge_token.get_secret_value()}"
        return httpx.AsyncClient(base_url=self.settings.bridge_url, transport=self._transport, headers=headers,
                                 timeout=self.settings.request_timeout)

    async def start(self) -> None:
        """Open the client, learn the session files' aliases and start polling. Idempotent.

        An unreachable bridge does not fail the start: it is logged and polling retries with
        back-off (the bridge may start after the gateway).
        """
        if self._client is not None:
            return
        self._client = self._new_client()
        self._bridge = BridgeClient(self._client, poll_timeout=self.settings.poll_timeout)
        try:
            health = await self._bridge.health()
            if health.get("status") not in (None, "connected", "open"):
                log.warning("whatsapp bridge is up but its WhatsApp session is %r (scan the QR code in the bridge?)",
                            health.get("status"))
        except BridgeError as exc:
            log.warning("%s; polling keeps retrying in the background", exc)
        await self._load_session_files()
        self._stopping = False
        self._task = asyncio.create_task(self._run(), name="whatsapp-bridge-poll")
        log.info("whatsapp bridge adapter started (bridge %s)", self.settings.bridge_url)

    async def stop(self) -> None:
        """Stop polling (the event in hand reaches the gateway first), acknowledge what was
        accepted, close the client. Idempotent. Events not yet accepted stay at the bridge."""
        if self._client is None:
            return
        self._stopping = True
        task, self._task = self._task, None
        if task is not None:
            if self._handling:
                try:
                    await asyncio.wait_for(asyncio.shield(task), STOP_GRACE_S)
                except (TimeoutError, asyncio.CancelledError, Exception):
                    pass
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if self.cursor and self._bridge is not None:
            try:  # acknowledge the accepted events now rather than at the next start
                await self._bridge.acknowledge(self.cursor)
            except BridgeError:
                pass
        await self._client.aclose()
        self._client = None
        self._bridge = None
        self.connected = False
        log.info("whatsapp bridge adapter stopped")

    async def health(self) -> dict[str, Any]:
        """`{"ok", "connected", "cursor", "last_error"}`: ok while polls succeed."""
        return {"ok": self.connected, "connected": self.connected, "cursor": self.cursor,
                "last_error": self.last_error}

    # ---- receiving -----------------------------------------------------------------------

    async def _run(self) -> None:
        delay = self.settings.reconnect_initial
        while not self._stopping:
            assert self._bridge is not None
            try:
                batch = await self._bridge.events(self.cursor)
            except RetryAfter as exc:  # the bridge is pacing us: wait what it asked, capped
                await asyncio.sleep(min(exc.seconds, self.settings.reconnect_max))
                continue
            except Exception as exc:  # BridgeError, or a bug: never let the poll loop die
                if not isinstance(exc, BridgeError):
                    log.exception("whatsapp bridge poll failed unexpectedly")
                elif self.connected or self.last_error != str(exc):
                    log.warning("%s; polling again in %.1f s", exc, delay)
                self.connected, self.last_error = False, str(exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.settings.reconnect_max)
                continue
            if not self.connected:
                log.info("whatsapp bridge connected")
            self.connected, self.last_error = True, None
            await self._load_session_files()
            refused = False
            self._handling = True
            try:
                for seq, payload in batch:
                    if not await self.handle_event(payload):
                        refused = True
                        break
                    self.cursor = seq
            finally:
                self._handling = False
            if refused:
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.settings.reconnect_max)
            else:
                delay = self.settings.reconnect_initial

    async def _load_session_files(self) -> None:
        """Record the aliases of the bridge's `lid-mapping-*.json` files when the folder changed."""
        if not self.settings.session_dir or self._record_aliases is None:
            return
        folder = Path(self.settings.session_dir).expanduser()
        try:
            stamp = folder.stat().st_mtime
        except OSError:
            if self._session_stamp is None:
                log.warning("whatsapp session_dir %s does not exist (yet)", folder)
                self._session_stamp = -1.0
            return
        if stamp == self._session_stamp:
            return
        aliases = await asyncio.to_thread(lid_mappings, folder)
        try:
            if aliases:
                await self._record_aliases(aliases)
        except Exception as exc:  # retried when the folder is looked at next
            log.warning("whatsapp session-file aliases not recorded: %s: %s", type(exc).__name__, exc)
            return
        self._session_stamp = stamp
        log.info("whatsapp: %d LID/phone alias(es) read from the bridge's session files", len(aliases))

    async def _learn_groups(self, payload: Any) -> None:
        self._groups.update(group_subjects(payload))
        for jid in _group_jids(payload) - set(self._groups):
            try:
                subject = await self._bridge.group_subject(jid) if self._bridge else None
            except Exception as exc:  # a name is nice to have: never hold a message for it
                log.debug("whatsapp group subject lookup failed: %s", exc)
                subject = None
            self._groups[jid] = subject

    async def handle_event(self, payload: Any) -> bool:
        """Handle one bridge event; True when it is done (every turn in it accepted and every
        edit or deletion applied, or nothing to do), False when the gateway refused a turn, a
        change or an alias (poll it again later).
        Never raises for bad input: a malformed event is logged with the field at fault and
        skipped, so one broken event never blocks the ones after it."""
        try:
            alias = mapping_update(payload)
            if alias is None:
                await self._learn_groups(payload)
                mapped = map_bridge_event(payload, group_names=self._groups.get)
        except MalformedPayload as exc:
            log.warning("skipping malformed whatsapp bridge event: %s", exc)
            return True
        except Exception:
            log.exception("skipping whatsapp bridge event: it could not be mapped")
            return True
        if alias is not None:
            try:
                await self.record_alias(alias.alias_id, alias.canonical_id, source=alias.source)
            except Exception as exc:
                log.warning("whatsapp LID/phone alias not recorded: %s: %s; the event is polled again",
                            type(exc).__name__, exc)
                return False
            return True
        for item in mapped:
            if isinstance(item, QueuedChange):
                # An edit or a deletion is offered to the gateway's queue first (docs/behaviour.md
                # §5); only an edit the queue did not take may still be a turn (`edits_as_turns`).
                label = f"whatsapp {item.kind} of message {item.message_id}"
                try:
                    if item.aliases and self._record_aliases is not None:
                        # Its own LID ↔ phone pair first, as a message's is before its key (W-T1):
                        # the queue matches chat and sender by the canonical ids, and this change
                        # may be the first event to tell the pair (docs/adapters.md W-T11).
                        await self._record_aliases(item.aliases)
                    event = await offer_change(self.edit_queued, item, label=label, logger=log,
                                               edits_as_turns=self.settings.edits_as_turns)
                except Exception as exc:
                    log.warning("%s not applied to the queue: %s; it stays at the bridge", label, type(exc).__name__)
                    return False
                if event is None:
                    continue
            else:
                event = item[1]
            try:
                await self.emit(event)
            except Exception as exc:
                log.warning("whatsapp message %s not accepted by the gateway: %s: %s; it stays at the bridge",
                            event.message_id, type(exc).__name__, exc)
                return False
        return True

    # ---- sending -------------------------------------------------------------------------

    async def _call(self, method: str, *args: Any) -> Any:
        """Call a `BridgeClient` method; after `stop` (the gateway drains turns after it stops
        receiving) a short-lived client carries it, so those replies still go out."""
        if self._bridge is not None:
            return await getattr(self._bridge, method)(*args)
        async with self._new_client() as client:
            return await getattr(BridgeClient(client, poll_timeout=self.settings.poll_timeout), method)(*args)

    async def send(self, target: SessionSource, text: str, *, reply_to: str | None = None,
                   metadata: dict[str, Any] | None = None) -> SendResult:
        """Send one chunk (≤ 4096 characters) to `target.chat_id` — the raw JID — quoting
        `reply_to` (a message id of that chat).

        Raises:
            hermes_core.sdk.RetryAfter: the bridge asked to wait (429).
            BridgeError: the bridge refused the send or is down.
            ValueError: the chunk is longer than 4096 characters.
        """
        if measure(text, "chars") > MAX_TEXT_CHARS:
            raise ValueError(f"whatsapp message is longer than {MAX_TEXT_CHARS} characters; chunk it first")
        return SendResult(message_id=await self._call("send", target.chat_id, text, reply_to))

    async def send_typing(self, target: SessionSource) -> None:
        """Show "typing…" in `target`'s chat. Best effort: a failure is logged at DEBUG."""
        try:
            await self._call("typing", target.chat_id)
        except Exception as exc:
            log.debug("whatsapp typing indicator not sent: %s", exc)
