"""Outbound path of the Discord adapter (docs/adapters.md §2.3).

* The target channel is `thread_id or chat_id`: a thread is a channel for the REST API, and for
  threads `chat_id` is the parent (D-T10; forum parents accept no messages at all).
* A reply references its trigger with `fail_if_not_exists=False`, so a deleted trigger does not
  make the reply fail; it pings nobody (`allowed_mentions` none by default, never `@everyone`
  or roles, never the replied-to author).
* Rate limits: discord.py keeps the per-route buckets (`X-RateLimit-*`) and sits out 429s up to
  `max_ratelimit_timeout`; a longer wait surfaces as `discord.RateLimited`, translated here into
  the SDK's `RetryAfter` so the delivery layer decides (wait, or record a failed delivery).
"""

from __future__ import annotations

import logging

import discord

from hermes_core.sdk import RetryAfter, SendResult, SessionSource

log = logging.getLogger(__name__)

MAX_CHARS = 2000  # content limit of a bot message, in characters (code points)


def mentions_policy(mode: str) -> discord.AllowedMentions:
    """`"none"`: nobody is pinged. `"users"`: `<@id>` user mentions ping; `@everyone`, roles
    and the replied-to author never do."""
    if mode == "users":
        return discord.AllowedMentions(everyone=False, users=True, roles=False, replied_user=False)
    return discord.AllowedMentions.none()


def target_channel_id(target: SessionSource) -> int:
    """The channel a reply to `target` is posted in: the thread when there is one.

    Raises:
        ValueError: the id is not a Discord snowflake.
    """
    raw = target.thread_id or target.chat_id
    if not raw or not str(raw).isdigit():
        raise ValueError(f"not a discord channel id: {raw!r}")
    return int(raw)


def reply_anchor(message_id: str | None) -> int | None:
    """Discord message id to reply to, from an event's `message_id` (`"150…"` or the edit form
    `"150…@<edited_timestamp>"`); None when it is not a Discord id."""
    if not message_id:
        return None
    head = str(message_id).split("@", 1)[0]
    return int(head) if head.isdigit() else None


class Sender:
    """Sends through a logged-in `discord.Client`.

    Args:
        client: the adapter's client (its HTTP session must be open: after `login`).
        allowed_mentions: see `mentions_policy`.
    """

    def __init__(self, client: discord.Client, allowed_mentions: discord.AllowedMentions):
        self.client = client
        self.allowed_mentions = allowed_mentions

    async def send(self, target: SessionSource, text: str, *, reply_to: str | None = None) -> SendResult:
        """Post one chunk (≤ 2000 characters) to `target`'s thread or channel.

        Raises:
            RetryAfter: Discord asked for a longer wait than discord.py sits out.
            ValueError: the chunk is over 2000 characters, or the target is not a Discord channel.
            discord.HTTPException: any other refusal (Forbidden, NotFound, …).
        """
        if len(text) > MAX_CHARS:
            raise ValueError(f"discord message is longer than {MAX_CHARS} characters; chunk it first "
                             "(send_text / hermes_core.sdk.chunking.chunk_text)")
        channel = self.client.get_partial_messageable(target_channel_id(target))
        kwargs: dict = {"allowed_mentions": self.allowed_mentions}
        anchor = reply_anchor(reply_to)
        if anchor is not None:
            kwargs["reference"] = channel.get_partial_message(anchor).to_reference(fail_if_not_exists=False)
            kwargs["mention_author"] = False
        try:
            message = await channel.send(text, **kwargs)
        except discord.RateLimited as exc:
            raise RetryAfter(exc.retry_after, scope="route") from exc
        return SendResult(message_id=str(message.id))

    async def edit(self, target: SessionSource, message_id: str, text: str) -> SendResult:
        """Replace the text of a message the bot sent.

        Raises:
            ValueError: not a Discord message id, or the text is over 2000 characters.
            RetryAfter / discord.HTTPException: as `send`.
        """
        anchor = reply_anchor(message_id)
        if anchor is None:
            raise ValueError(f"not a discord message id: {message_id!r}")
        if len(text) > MAX_CHARS:
            raise ValueError(f"discord message is longer than {MAX_CHARS} characters")
        channel = self.client.get_partial_messageable(target_channel_id(target))
        try:
            message = await channel.get_partial_message(anchor).edit(content=text,
                                                                     allowed_mentions=self.allowed_mentions)
        except discord.RateLimited as exc:
            raise RetryAfter(exc.retry_after, scope="route") from exc
        return SendResult(message_id=str(message.id))

    async def typing(self, target: SessionSource) -> None:
        """Show "typing…" in `target`'s thread or channel (Discord shows it ~10 s). Best effort:
        a refusal is logged at DEBUG, never raised."""
        channel = self.client.get_partial_messageable(target_channel_id(target))
        try:
            await channel.typing()
        except (discord.HTTPException, discord.RateLimited) as exc:
            log.debug("discord typing indicator in %s refused: %s", channel.id, exc)
