"""Context compression (docs/behaviour.md §11; seed §3 `rewrite_transcript`).

A session's transcript is sent whole to the agent every turn; once the last prompt's tokens
exceed `agent.compression.threshold` × `agent.context_window` (checked after each completed
turn), or on `/compress`, the older part of the transcript is replaced by a summary the agent
writes, and the recent tail (at least `agent.compression.keep_recent` messages, starting at a user
message so no exchange is cut in half) stays verbatim, reasoning fields included.

The replacement is one `rewrite_transcript` (the old rows are soft-deleted, kept for audit, and
the new ones inserted in one transaction; `/compress` finishes its intake row in it, so a crash
never runs the command twice, and records its answer's delivery obligation in it, so a crash
before the send never loses that answer); the session id stays. A summary that fails (backend
error, interruption, timeout, empty text) or a rewrite that fails changes nothing. The agent
cache's live transcript is dropped afterwards, so the next turn starts from the store.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Callable

from ..agents.base import AgentError
from ..model.timeutil import format_timestamp
from ..store.ledger import Confirmation
from .context import build_session_context
from .deps import PipelineDeps

log = logging.getLogger(__name__)

# The summary's row in the transcript: a system message, so /undo never takes it for a user turn.
SUMMARY_ROLE = "system"
SUMMARY_PREFIX = "Summary of the earlier conversation:\n"
COMPRESSED, NOTHING, FAILED = "compressed", "nothing", "failed"


@dataclass(frozen=True, slots=True)
class CompressionOutcome:
    """`status` is COMPRESSED, NOTHING (nothing but the tail, and at most an earlier summary
    before it) or FAILED (nothing changed); `summarised` and `kept` count messages;
    `obligation_id` is the delivery obligation of the `/compress` answer recorded with the
    rewrite (None without one)."""

    status: str
    summarised: int = 0
    kept: int = 0
    obligation_id: int | None = None


def should_compress(config: Any, prompt_tokens: int) -> bool:
    """True when a prompt of `prompt_tokens` tokens exceeds the configured share of the model's
    context window (`agent.context_window` 0 disables automatic compression)."""
    window = config.agent.context_window
    return window > 0 and prompt_tokens > config.agent.compression.threshold * window


def is_summary(message: dict[str, Any]) -> bool:
    """True for the row an earlier compression wrote in place of the older part."""
    content = message.get("content")
    return message.get("role") == SUMMARY_ROLE and isinstance(content, str) and content.startswith(SUMMARY_PREFIX)


def split_tail(messages: list[dict[str, Any]], keep_recent: int) -> int:
    """Index where the verbatim tail starts: `len - keep_recent`, moved back to the nearest user
    message (the tail opens an exchange), or 0 when nothing older would be left."""
    start = max(0, len(messages) - keep_recent)
    while start > 0 and messages[start].get("role") != "user":
        start -= 1
    return start


async def compress_session(deps: PipelineDeps, key: str, entry: Any, source: Any, *,
                           inbound_id: int | None = None,
                           confirmation: Callable[[int, int], Confirmation] | None = None) -> CompressionOutcome:
    """Compress the transcript of `entry`'s session (module docstring).

    Args:
        key: the session key (its agent cache entry is dropped after a rewrite).
        entry: the SessionEntry whose `session_id` is compressed.
        source: the SessionSource the summary's session context is built from.
        inbound_id: the `/compress`'s intake row, finished in the rewrite's transaction (None
            for the automatic compression after a turn).
        confirmation: the `/compress`'s answer, given the messages summarised and kept; its
            delivery obligation is recorded in the rewrite's transaction (None: nothing owed).
    Returns:
        The CompressionOutcome. Never raises for a failed summary; a store failure on reading
        raises (TranscriptReadError) and changes nothing.
    """
    messages = await deps.store.load_transcript(entry.session_id)
    start = split_tail(messages, deps.config.agent.compression.keep_recent)
    older, tail = messages[:start], messages[start:]
    if all(is_summary(message) for message in older):
        # Nothing but an earlier summary (or nothing) before the tail: summarising that summary
        # again would add nothing and could only lose detail.
        return CompressionOutcome(NOTHING, kept=len(tail))
    context = build_session_context(source, deps.config, entry, pm=deps.pm,
                                    platform_settings=deps.access.settings)
    try:
        async with asyncio.timeout(deps.config.agent.gateway_timeout):
            reply = await deps.agent.summarize(context, older)
    except (AgentError, TimeoutError) as exc:
        # AgentInterrupted is an AgentError: a /new or /stop meanwhile leaves the transcript as is.
        log.warning("compression of %s failed (%s); transcript unchanged", entry.session_id, exc)
        return CompressionOutcome(FAILED)
    if not reply.text.strip():
        log.warning("compression of %s got an empty summary; transcript unchanged", entry.session_id)
        return CompressionOutcome(FAILED)
    summary = {"role": SUMMARY_ROLE, "content": SUMMARY_PREFIX + reply.text.strip(),
               "timestamp": older[-1].get("timestamp") or format_timestamp(deps.clock())}
    owed = confirmation(len(older), len(tail)) if confirmation is not None else None
    try:
        ob_id = await deps.store.rewrite_transcript(entry.session_id, [summary, *tail], inbound_id=inbound_id,
                                                    confirmation=owed)
    except Exception as exc:  # atomic: the old rows stay active
        log.error("compression of %s could not rewrite the transcript (%s); unchanged", entry.session_id, exc)
        return CompressionOutcome(FAILED)
    finally:
        deps.agent_cache.invalidate_session(entry.session_id)
        deps.agent_cache.invalidate(key)
    log.info("compressed %s: %d message(s) summarised, %d kept", entry.session_id, len(older), len(tail))
    return CompressionOutcome(COMPRESSED, summarised=len(older), kept=len(tail), obligation_id=ob_id)
