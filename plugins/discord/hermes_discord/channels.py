"""What the mapping needs to know about a channel (docs/adapters.md §2.0, trap D-T1).

MESSAGE_CREATE does not say what kind of channel a message came from, so the adapter resolves
`channel_id` (discord.py's cache, else `GET /channels/{id}`) into a `ChannelInfo` and hands it to
the pure mapping. `ChannelInfo.from_payload` reads a raw Discord channel object (what the REST
API and the gateway send, and what the test fixtures hold); `ChannelInfo.from_library` reads a
discord.py channel object (`TextChannel`, `Thread`, `ForumChannel`, `DMChannel`, `GroupChannel`,
…) by its attributes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from . import payload as p

# Channel types (Discord API "Channel Types").
DM = 1
GROUP_DM = 3
THREAD_TYPES = frozenset({10, 11, 12})  # announcement, public, private thread (forum posts are 11)
FORUM_TYPES = frozenset({15, 16})  # forum and media channels: their topic is the posting guidelines


@dataclass(frozen=True, slots=True)
class ChannelInfo:
    """The facts of one channel the mapping uses.

    Attributes:
        id: channel id (snowflake string).
        type: Discord channel type (0 text, 1 DM, 3 group DM, 5 announcement, 10/11/12 threads,
            15 forum, 16 media, …).
        name: channel name (threads: the thread or post title; group DMs: the chat's name).
        topic: channel topic (forum/media: the posting guidelines).
        parent_id: for threads, the channel the thread lives in.
        guild_id: the guild of a guild channel, else None.
        recipients: `(user id, username)` of the other members of a DM / group DM.
    """

    id: str
    type: int
    name: str | None = None
    topic: str | None = None
    parent_id: str | None = None
    guild_id: str | None = None
    recipients: tuple[tuple[str, str], ...] = ()

    @property
    def is_thread(self) -> bool:
        """True for announcement, public and private threads (forum/media posts included)."""
        return self.type in THREAD_TYPES

    @classmethod
    def from_payload(cls, data: Any, path: str = "channel") -> "ChannelInfo":
        """Read a raw Discord channel object.

        Raises:
            MalformedPayload: a missing/mistyped field (named with `path` as its root).
        """
        if not isinstance(data, Mapping):
            raise p.MalformedPayload(path, f"must be an object, got {type(data).__name__}")
        recipients = []
        for index, user in enumerate(p.array(data, "recipients", path)):
            where = f"{path}.recipients[{index}]"
            if not isinstance(user, Mapping):
                raise p.MalformedPayload(where, f"must be an object, got {type(user).__name__}")
            recipients.append((p.snowflake(user, "id", where), p.string(user, "username", where, required=True)))
        return cls(
            id=p.snowflake(data, "id", path),
            type=p.integer(data, "type", path),
            name=p.string(data, "name", path),
            topic=p.string(data, "topic", path),
            parent_id=p.snowflake(data, "parent_id", path, required=False),
            guild_id=p.snowflake(data, "guild_id", path, required=False),
            recipients=tuple(recipients),
        )

    @classmethod
    def from_library(cls, channel: Any) -> "ChannelInfo":
        """Read a discord.py channel object (any of its channel classes) by its attributes."""
        kind = getattr(channel, "type", None)
        kind = int(getattr(kind, "value", kind))
        guild = getattr(channel, "guild", None)
        parent_id = getattr(channel, "parent_id", None)
        users = list(getattr(channel, "recipients", None) or ())
        recipient = getattr(channel, "recipient", None)
        if not users and recipient is not None:
            users = [recipient]
        return cls(
            id=str(channel.id),
            type=kind,
            name=getattr(channel, "name", None),
            topic=getattr(channel, "topic", None),
            parent_id=str(parent_id) if parent_id is not None else None,
            guild_id=str(guild.id) if guild is not None else None,
            recipients=tuple((str(u.id), u.name) for u in users),
        )
