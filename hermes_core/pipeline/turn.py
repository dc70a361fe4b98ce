"""One agent turn (issue 2 item 8; seed §2, §7, §9):

key → session → transcript (user message + turn marker, one transaction) → agent (history from
the transcript) → transcript (assistant reply) → token counters → delivery → end of the turn
marker → `clear_resume_pending` only when the turn really completed (SPEC.md §2).

The marker is ended after delivery, so a crash between recording the reply and sending it leaves
a marked turn with a persisted reply, which start-up recovery re-sends (seed §7).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from ..agents.base import AgentError, AgentInterrupted
from ..model.events import MessageEvent
from ..model.timeutil import format_timestamp
from .context import build_session_context, build_session_context_prompt, sender_prefix, should_redact
from .deps import PipelineDeps

log = logging.getLogger(__name__)

INTERRUPTED_TEXT = "The turn was interrupted before the agent answered."
TIMEOUT_TEXT = "The agent did not answer within {seconds} seconds; the turn was stopped."
FAILED_TEXT = "The agent failed to answer: {error}"


@dataclass(frozen=True, slots=True)
class TurnResult:
    """What a turn did: `status` is `completed`, `interrupted`, `timeout` or `failed`;
    `reply` is the text sent to the chat (the agent's reply or the notice)."""

    status: str
    session_id: str
    reply: str


def _without_trailing(transcript: list[dict], text: str) -> list[dict]:
    """The history the agent sees: the transcript minus the user message just recorded."""
    if transcript and transcript[-1].get("role") == "user" and transcript[-1].get("content") == text:
        return transcript[:-1]
    return transcript


async def run_turn(deps: PipelineDeps, key: str, event: MessageEvent) -> TurnResult:
    """Run one turn for `event` in session `key` and deliver the answer.

    Raises:
        StoreError (from the store) when the user message cannot be recorded; nothing is sent
        to the agent then, and the worker tells the chat.
    """
    store, source = deps.store, event.source
    adapter = deps.adapters[source.platform]
    entry = await store.get_or_create_session(source)
    context = build_session_context(source, deps.config, entry, pm=deps.pm)
    text = event.text
    if context.shared_multi_user_session and not event.is_internal:
        # Run-time prefix, so the system prompt names no user and stays identical (seed §5).
        text = sender_prefix(source) + text
    user_message = {"role": "user", "content": text, "timestamp": format_timestamp(deps.clock())}
    if event.message_id:
        user_message["platform_message_id"] = event.message_id
    # Record the message (and the turn marker) before anything else can fail (SPEC.md §0).
    await store.begin_turn(key, entry.session_id, user_message)
    history = _without_trailing(await store.load_transcript(entry.session_id), text)
    # From here until end_turn the turn marker is set. It is ended only once the chat has its
    # answer (the reply, or a notice saying why there is none); if anything raises or the task is
    # cancelled first, the marker stays so start-up recovery can finish the turn (seed §7).
    prompt = build_session_context_prompt(context, pm=deps.pm,
                                          redact=should_redact(deps.config, adapter.spec))
    status, reply_text, usage = "completed", "", None
    timeout = deps.config.agent.gateway_timeout
    try:
        async with asyncio.timeout(timeout):
            reply = await deps.agent.run_turn(context, history, text, system_context=prompt)
        reply_text, usage = reply.text, reply.usage
    except AgentInterrupted:
        status, reply_text = "interrupted", INTERRUPTED_TEXT
    except TimeoutError:
        deps.agent.interrupt(key)
        status, reply_text = "timeout", TIMEOUT_TEXT.format(seconds=timeout)
    except AgentError as exc:
        log.error("agent failed in %s: %s", key, exc)
        status, reply_text = "failed", FAILED_TEXT.format(error=exc)
    if status == "completed":
        await store.append_to_transcript(entry.session_id, {
            "role": "assistant", "content": reply_text, "timestamp": format_timestamp(deps.clock())})
        await store.update_session(key, last_prompt_tokens=usage.input_tokens, usage=usage)
    await deps.deliverer.deliver(adapter, source, reply_text, session_key=key,
                                 session_id=entry.session_id, reply_to=event.message_id,
                                 kind="reply" if status == "completed" else "notice")
    await store.end_turn(key)
    if status == "completed":
        await store.clear_resume_pending(key)
    else:
        log.warning("turn in %s ended %s", key, status)
    return TurnResult(status=status, session_id=entry.session_id, reply=reply_text)
