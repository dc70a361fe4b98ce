"""Inbound path of the Discord adapter: gateway dispatch → channel facts → mapping → `emit`.

discord.py turns each MESSAGE_CREATE into a `Message` whose channel is a `PartialMessageable`
when the channel is not cached, which would silently misfile an uncached thread (D-T1); and an
exception inside one of its parsers ends its connection loop. So the receiver taps the raw
dispatch instead (`ConnectionState.parsers`, the table discord.py's gateway calls for every
dispatch — a private table, which is why the distribution pins discord.py's minor version):

* every parser is wrapped so a payload discord.py cannot parse is logged with the event name and
  skipped, and the connection keeps running;
* MESSAGE_CREATE, MESSAGE_UPDATE, MESSAGE_DELETE and MESSAGE_DELETE_BULK `d` objects are put, in
  gateway order, on one queue before discord.py parses them. An edit of the text is offered to the gateway's queue
  first (`offer_change`: a message still queued takes the new text in place, docs/behaviour.md
  §5); otherwise it is a turn only with `edits_as_turns` on, and only logged with it off. A
  deletion withdraws the message if it is still queued, and is never a turn;
* one consumer task takes them in order, resolves the channel (discord.py's cache, else
  `GET /channels/{id}`, so a thread is a thread even when uncached), maps the payload with the
  pure `map_message`, and awaits `emit` (retried with backoff: Discord never redelivers a
  gateway event, so giving up would lose the message).

RESUME replays events the bot may already have seen (D-T2): message ids handed to the gateway
recently are skipped here, and the core's persisted inbound dedupe is the second line. The same
memory keeps each message's SessionSource: a MESSAGE_DELETE names no author, yet a guild
channel's session is per user (docs/behaviour.md §4), so a deletion is routed with the source its
message was handed over with (docs/adapters.md D-T12).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from typing import Any, Awaitable, Callable

import aiohttp
import discord
from tenacity import AsyncRetrying, stop_after_attempt, wait_exponential

from hermes_core.sdk import MessageEvent, QueuedChange, QueuedEditor, SessionSource, offer_change

from . import payload as p
from .channels import ChannelInfo
from .mapping import MalformedPayload, channel_source, map_message
from .settings import DiscordSettings

log = logging.getLogger(__name__)

RECENT_IDS = 2048  # message ids (and their sources) remembered against RESUME replays, for deletions
CHANNEL_CACHE = 1024  # channels resolved over REST (their kind never changes)
DRAIN_GRACE_S = 10.0  # how long `stop` lets queued messages reach the gateway

Emit = Callable[[MessageEvent], Awaitable[None]]


async def _nothing_queued(source: SessionSource, message_id: str, text: str | None) -> bool:
    """The queue editor of a receiver without a gateway: nothing is ever queued."""
    return False


class _Recent:
    """A bounded, insertion-ordered map: the oldest entries fall out first. Holds each message
    id's SessionSource (`Receiver._recent`) and each channel's `ChannelInfo` (`_channels`)."""

    def __init__(self, size: int):
        self.size = size
        self._items: OrderedDict[str, Any] = OrderedDict()

    def get(self, key: str) -> Any:
        return self._items.get(key)

    def put(self, key: str, value: Any) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    def __contains__(self, key: str) -> bool:
        return key in self._items


class Receiver:
    """Takes message dispatches from a `discord.Client` and emits gateway events in order.

    Args:
        client: the adapter's discord.py client (before `login`/`connect`).
        settings: the adapter's settings (`allowed_roles`, `edits_as_turns`, `max_emit_attempts`).
        emit: the adapter's `emit` (returns once the gateway durably accepted the event).
        bot_id: callable returning the bot's own user id once known (after login).
        edit_queued: the adapter's `edit_queued`: an edit of the text is offered to the gateway's
            queue first (`handle`), a deletion withdraws a message still queued (`handle_delete`).
    """

    def __init__(self, client: discord.Client, settings: DiscordSettings, emit: Emit,
                 bot_id: Callable[[], str | None], edit_queued: QueuedEditor | None = None):
        self.client = client
        self.settings = settings
        self._emit = emit
        self._edit_queued: QueuedEditor = edit_queued or _nothing_queued
        self._bot_id = bot_id
        self._queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self._consumer: asyncio.Task | None = None
        self._recent = _Recent(RECENT_IDS)
        self._channels = _Recent(CHANNEL_CACHE)
        self.skipped_malformed = 0
        self.given_up = 0
        self._install_taps()

    # ---- the tap on discord.py's dispatch table --------------------------------------------------

    def _install_taps(self) -> None:
        parsers: dict[str, Callable[[Any], None]] = self.client._connection.parsers
        for name, parse in list(parsers.items()):
            parsers[name] = self._guarded(name, parse)
        for name, kind in (("MESSAGE_CREATE", "create"), ("MESSAGE_UPDATE", "edit"), ("MESSAGE_DELETE", "delete"),
                           ("MESSAGE_DELETE_BULK", "delete_bulk")):
            parsers[name] = self._tapped(kind, parsers[name])

    def _guarded(self, name: str, parse: Callable[[Any], None]) -> Callable[[Any], None]:
        def guarded(data: Any) -> None:
            try:
                parse(data)
            except Exception as exc:
                # discord.py would end its connection loop on this; the payload is skipped instead.
                log.warning("discord %s dispatch could not be parsed by discord.py and was skipped: "
                            "%s: %s", name, type(exc).__name__, exc)
        return guarded

    def _tapped(self, kind: str, parse: Callable[[Any], None]) -> Callable[[Any], None]:
        def tapped(data: Any) -> None:
            # Queued before discord.py parses it: the queue keeps gateway order (a deletion comes
            # after its message was handed over). An edit is queued whatever `edits_as_turns`
            # says: it may change a message still queued (`handle`).
            self._queue.put_nowait((kind, data))
            parse(data)
        return tapped

    # ---- the consumer ----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the consumer task (idempotent)."""
        if self._consumer is None or self._consumer.done():
            self._consumer = asyncio.create_task(self._consume(), name="discord-inbound")

    async def drain(self, timeout: float = DRAIN_GRACE_S) -> None:
        """Let every queued message reach the gateway (up to `timeout` seconds), then stop the
        consumer. Call after the gateway connection stopped delivering."""
        if self._consumer is None:
            return
        try:
            await asyncio.wait_for(self._queue.join(), timeout)
        except asyncio.TimeoutError:
            log.warning("discord adapter stopped with %d message(s) not yet handed to the gateway",
                        self._queue.qsize())
        self._consumer.cancel()
        try:
            await self._consumer
        except asyncio.CancelledError:
            pass
        self._consumer = None

    @property
    def running(self) -> bool:
        return self._consumer is not None and not self._consumer.done()

    async def _consume(self) -> None:
        while True:
            kind, data = await self._queue.get()
            try:
                if kind == "delete":
                    await self.handle_delete(data)
                elif kind == "delete_bulk":
                    await self.handle_delete_bulk(data)
                else:
                    await self.handle(data, edit=kind == "edit")
            except asyncio.CancelledError:
                raise
            except Exception:
                # A payload shape the mapping did not anticipate: skip it, keep receiving.
                log.exception("discord message dispatch skipped: it could not be handled")
            finally:
                self._queue.task_done()

    async def handle(self, data: Any, *, edit: bool = False) -> bool:
        """Resolve, map and emit one MESSAGE_CREATE / MESSAGE_UPDATE `d` object.

        Returns:
            True when the gateway accepted an event for it; False when it was not for the agent,
            malformed (logged with the field), a replay, refused by the gateway every time, or an
            edit that is no turn (the queue took it, or `edits_as_turns` is off).
        """
        event_name = "MESSAGE_UPDATE" if edit else "MESSAGE_CREATE"
        try:
            if not isinstance(data, dict):
                raise MalformedPayload("d", f"must be an object, got {type(data).__name__}")
            message_id = p.snowflake(data, "id", "d")
            if not edit and message_id in self._recent:
                log.debug("discord message %s skipped: already handed to the gateway (replay)", message_id)
                return False
            channel, parent = await self._resolve(p.snowflake(data, "channel_id", "d"))
            guild_id = p.snowflake(data, "guild_id", "d", required=False)
            mapped = map_message(data, bot_id=self._bot_id(), channel=channel, parent=parent,
                                 guild_name=self._guild_name(guild_id),
                                 allowed_roles=self.settings.allowed_roles, edit=edit)
        except MalformedPayload as exc:
            self.skipped_malformed += 1
            log.warning("skipping malformed discord %s: %s", event_name, exc)
            return False
        if mapped is None:
            return False
        source, event = mapped
        if edit:
            # Offered to the gateway's queue first (docs/behaviour.md §5): a message still queued
            # takes the new text in place; only otherwise does `edits_as_turns` decide.
            turn = await offer_change(self._edit_queued, QueuedChange(source, message_id, event.text, event),
                                      edits_as_turns=self.settings.edits_as_turns,
                                      label=f"discord update of message {message_id}", logger=log)
            if turn is None:
                return False
        if not await self._emit_with_retry(event):
            return False
        if not edit:
            self._recent.put(message_id, source)
        return True

    async def handle_delete(self, data: Any) -> None:
        """Offer one MESSAGE_DELETE `d` object (`id`, `channel_id`, `guild_id`) to the gateway's
        queue: a message still queued is withdrawn (docs/behaviour.md §5); a deletion is never a
        turn.

        The payload names no author, and a guild channel's session is per user
        (`group_sessions_per_user`): the deletion is routed with the SessionSource its message was
        handed to the gateway with (remembered for the last `RECENT_IDS` messages). A message not
        remembered (handed over before a restart) gets what its channel alone gives
        (`mapping.channel_source`, from discord.py's cache and ours, never a REST call): exact for
        a DM, a thread, or a channel without per-user sessions; in a per-user channel it names no
        author and the gateway looks for the message by channel and id in every queue
        (docs/adapters.md D-T12). A malformed one is one warning naming the field.
        """
        try:
            if not isinstance(data, dict):
                raise MalformedPayload("d", f"must be an object, got {type(data).__name__}")
            message_id = p.snowflake(data, "id", "d")
            channel_id = p.snowflake(data, "channel_id", "d")
            guild_id = p.snowflake(data, "guild_id", "d", required=False)
            source = self._recent.get(message_id)
            if source is None:
                channel = self._cached_channel(channel_id)
                parent = (self._cached_channel(channel.parent_id)
                          if channel is not None and channel.is_thread and channel.parent_id else None)
                source = channel_source(message_id, channel_id, guild_id, channel=channel, parent=parent,
                                        bot_id=self._bot_id())
        except MalformedPayload as exc:
            self.skipped_malformed += 1
            log.warning("skipping malformed discord MESSAGE_DELETE: %s", exc)
            return
        await offer_change(self._edit_queued, QueuedChange(source, message_id, None), edits_as_turns=False,
                           label=f"discord deletion of message {message_id}", logger=log)

    async def handle_delete_bulk(self, data: Any) -> None:
        """Offer one MESSAGE_DELETE_BULK `d` object (`ids`, `channel_id`, `guild_id`: a moderator's
        purge) to the gateway's queue: each id as one MESSAGE_DELETE (`handle_delete`), in the
        order given. A malformed one is one warning naming the field."""
        try:
            if not isinstance(data, dict):
                raise MalformedPayload("d", f"must be an object, got {type(data).__name__}")
            if not isinstance(data.get("ids"), list):
                raise MalformedPayload("d.ids", f"must be a list, got {type(data.get('ids')).__name__}")
        except MalformedPayload as exc:
            self.skipped_malformed += 1
            log.warning("skipping malformed discord MESSAGE_DELETE_BULK: %s", exc)
            return
        one = {k: data[k] for k in ("channel_id", "guild_id") if k in data}
        for message_id in data["ids"]:
            await self.handle_delete({**one, "id": message_id})

    async def _emit_with_retry(self, event: MessageEvent) -> bool:
        attempts = self.settings.max_emit_attempts
        retrying = AsyncRetrying(stop=stop_after_attempt(attempts), wait=wait_exponential(multiplier=0.25, max=10),
                                 reraise=True,
                                 before_sleep=lambda state: log.warning(
                                     "discord message %s not accepted by the gateway (attempt %d of %d): %s",
                                     event.message_id, state.attempt_number, attempts,
                                     type(state.outcome.exception()).__name__))
        try:
            await retrying(self._emit, event)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.given_up += 1
            log.error("discord message %s refused by the gateway %d times, given up: %s: %s",
                      event.message_id, attempts, type(exc).__name__, exc)
            return False
        return True

    # ---- channel facts ---------------------------------------------------------------------------

    def _guild_name(self, guild_id: str | None) -> str | None:
        if guild_id is None:
            return None
        guild = self.client.get_guild(int(guild_id))
        return getattr(guild, "name", None) if guild is not None else None

    async def _resolve(self, channel_id: str) -> tuple[ChannelInfo | None, ChannelInfo | None]:
        channel = await self.channel_info(channel_id)
        parent = None
        if channel is not None and channel.is_thread and channel.parent_id:
            parent = await self.channel_info(channel.parent_id)
        return channel, parent

    def _cached_channel(self, channel_id: str) -> ChannelInfo | None:
        """Facts of a channel from discord.py's cache or ours, else None (no REST call)."""
        cached = self.client.get_channel(int(channel_id))
        return ChannelInfo.from_library(cached) if cached is not None else self._channels.get(channel_id)

    async def channel_info(self, channel_id: str) -> ChannelInfo | None:
        """Facts of a channel: discord.py's cache (filled by READY, GUILD_CREATE, THREAD_CREATE,
        THREAD_LIST_SYNC, CHANNEL_CREATE), else `GET /channels/{id}` (remembered: a channel's
        kind never changes). None when Discord refuses (logged)."""
        cached = self.client.get_channel(int(channel_id))
        if cached is not None:
            return ChannelInfo.from_library(cached)
        known = self._channels.get(channel_id)
        if known is not None:
            return known
        try:
            fetched = await self.client.fetch_channel(int(channel_id))
        except (discord.HTTPException, discord.InvalidData, aiohttp.ClientError, asyncio.TimeoutError) as exc:
            log.warning("discord channel %s could not be resolved (%s: %s); its message is filed by "
                        "the payload alone", channel_id, type(exc).__name__, exc)
            return None
        info = ChannelInfo.from_library(fetched)
        self._channels.put(channel_id, info)
        return info
