"""Cached `users.info` / `conversations.info` lookups (docs/adapters.md §3.0 "cached", §3.3 tiers).

Names and channel kinds change rarely, while Web API methods are rate limited per method and
workspace (Tier 2–4), so every answer is kept for `ttl` seconds in a bounded `cachetools.TTLCache`.
Concurrent lookups of one id share one request. A failed lookup (rate limited, timeout, network)
returns None and is not cached, so the next event tries again; an id Slack does not know
(`user_not_found`, `channel_not_found`) is cached as unknown. Tests may pre-fill the caches with
`prefill_user` / `prefill_channel`.

The kind of a channel is also learned for free from `message` events, which carry
`channel_type` (`remember_kind`): the `app_mention` of the same message then needs no lookup
(docs/adapters.md S-T4).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable

from cachetools import TTLCache
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from .mapping import ChannelFacts

log = logging.getLogger(__name__)

NOT_FOUND = ("user_not_found", "channel_not_found", "users_not_found")
MAX_ENTRIES = 10_000


def channel_facts(channel: dict[str, Any]) -> ChannelFacts:
    """`conversations.info`'s `channel` object → `ChannelFacts` (kind from `is_im` / `is_mpim` /
    `is_private`, name, purpose else topic)."""
    if channel.get("is_im"):
        kind = "im"
    elif channel.get("is_mpim"):
        kind = "mpim"
    elif channel.get("is_private") or channel.get("is_group"):
        kind = "group"
    else:
        kind = "channel"
    topic = None
    for key in ("purpose", "topic"):
        value = channel.get(key)
        if isinstance(value, dict) and isinstance(value.get("value"), str) and value["value"].strip():
            topic = value["value"]
            break
    name = channel.get("name") if isinstance(channel.get("name"), str) and channel.get("name") else None
    return ChannelFacts(kind=kind, name=name, topic=topic)


def user_display_name(user: dict[str, Any]) -> str | None:
    """`users.info`'s `user` object → `profile.display_name`, else `profile.real_name`, else
    `real_name`, else `name` (docs/adapters.md §3.0)."""
    profile = user.get("profile") if isinstance(user.get("profile"), dict) else {}
    for value in (profile.get("display_name"), profile.get("real_name"), user.get("real_name"), user.get("name")):
        if isinstance(value, str) and value.strip():
            return value
    return None


class Directory:
    """Cached user names and channel facts of one workspace.

    Args:
        client: the bot's `AsyncWebClient`.
        ttl: seconds an answer is reused.
    """

    def __init__(self, client: AsyncWebClient, ttl: float = 3600.0):
        self._client = client
        self._users: TTLCache = TTLCache(MAX_ENTRIES, ttl)
        self._channels: TTLCache = TTLCache(MAX_ENTRIES, ttl)
        self._kinds: TTLCache = TTLCache(MAX_ENTRIES, ttl)
        self._inflight: dict[tuple[str, str], asyncio.Future] = {}

    def prefill_user(self, user_id: str, name: str | None) -> None:
        """Store a user's display name (None: known not to exist)."""
        self._users[user_id] = name

    def prefill_channel(self, channel_id: str, facts: ChannelFacts | None) -> None:
        """Store a channel's facts (None: known not to exist)."""
        self._channels[channel_id] = facts

    def remember_kind(self, channel_id: str, channel_type: str) -> None:
        """Record the `channel_type` a `message` event carried for `channel_id`."""
        self._kinds[channel_id] = channel_type

    def cached_channel(self, channel_id: str) -> ChannelFacts | None:
        """What is known about `channel_id` without a request (a kind learned from an event
        fills in when `conversations.info` was never asked)."""
        facts = self._channels.get(channel_id)
        if facts is None and channel_id in self._kinds:
            return ChannelFacts(kind=self._kinds[channel_id])
        return facts

    def cached_user(self, user_id: str) -> str | None:
        """A user's display name when cached, else None."""
        return self._users.get(user_id)

    async def user_name(self, user_id: str) -> str | None:
        """The display name of `user_id`, or None (unknown user, or the lookup failed)."""
        if user_id in self._users:
            return self._users[user_id]
        return await self._once(("user", user_id), self._fetch_user, user_id)

    async def channel(self, channel_id: str) -> ChannelFacts | None:
        """The facts of `channel_id`, or None (unknown channel, or the lookup failed)."""
        if channel_id in self._channels:
            return self._channels[channel_id]
        return await self._once(("channel", channel_id), self._fetch_channel, channel_id)

    async def _once(self, key: tuple[str, str], fetch: Callable[[str], Awaitable[Any]], ident: str) -> Any:
        """Run `fetch(ident)` once for concurrent callers of the same key."""
        pending = self._inflight.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        result = None
        try:
            result = await fetch(ident)
            return result
        finally:
            # Waiters get the same answer (None when the fetch was cancelled).
            self._inflight.pop(key, None)
            future.set_result(result)

    async def _fetch_user(self, user_id: str) -> str | None:
        try:
            response = await self._client.users_info(user=user_id)
        except SlackApiError as exc:
            return self._failed("users.info", user_id, exc, self._users)
        except Exception as exc:  # network errors: not cached, next event tries again
            log.warning("slack users.info for %s failed: %s", user_id, type(exc).__name__)
            return None
        user = response.get("user")
        name = user_display_name(user) if isinstance(user, dict) else None
        self._users[user_id] = name
        return name

    async def _fetch_channel(self, channel_id: str) -> ChannelFacts | None:
        try:
            response = await self._client.conversations_info(channel=channel_id)
        except SlackApiError as exc:
            return self._failed("conversations.info", channel_id, exc, self._channels)
        except Exception as exc:
            log.warning("slack conversations.info for %s failed: %s", channel_id, type(exc).__name__)
            return None
        channel = response.get("channel")
        facts = channel_facts(channel) if isinstance(channel, dict) else None
        self._channels[channel_id] = facts
        return facts

    @staticmethod
    def _failed(method: str, ident: str, exc: SlackApiError, cache: TTLCache) -> None:
        error = exc.response.get("error") if exc.response is not None else None
        if error in NOT_FOUND:
            cache[ident] = None
            log.info("slack %s: %s is unknown (%s)", method, ident, error)
        else:
            log.warning("slack %s for %s failed: %s", method, ident, error or "error")
        return None
