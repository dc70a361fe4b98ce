"""One agent turn (issue 2 item 8; seed §2, §7, §9; SPEC.md §6):

key → session → transcript (user message + turn marker + intake row 'running', one transaction)
→ agent (history from the transcript) → transcript (assistant reply) + delivery obligation +
end of the turn marker (one transaction) → token counters → send the obligation ('attempting',
then 'delivered' / 'failed') → `clear_resume_pending` only when the turn really completed.

A crash before the reply is recorded leaves a marked turn without a reply: start-up marks the
session `resume_pending` and auto-continues it (`resume=True` here). A crash after it leaves an
open obligation, which the start-up ledger sweep sends (seed §7).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from ..agents.base import AgentError, AgentInterrupted
from ..model.events import MessageEvent
from ..model.timeutil import format_timestamp
from ..store.ledger import text_owed
from .context import build_session_context, build_session_context_prompt, sender_prefix, should_redact
from .deps import PipelineDeps, maybe_await
from .ledger import send_obligation

log = logging.getLogger(__name__)

INTERRUPTED_TEXT = "The turn was interrupted before the agent answered."
TIMEOUT_TEXT = "The agent did not answer within {seconds} seconds; the turn was stopped."
FAILED_TEXT = "The agent failed to answer: {error}"


@dataclass(frozen=True, slots=True)
class TurnResult:
    """What a turn did: `status` is `completed`, `interrupted`, `timeout`, `failed` or
    `nothing_to_resume`; `reply` is the text owed to the chat (the agent's reply or the
    notice; "" when nothing is owed)."""

    status: str
    session_id: str
    reply: str


def _without_trailing(transcript: list[dict], text: str) -> list[dict]:
    """The history the agent sees: the transcript minus the user message just recorded."""
    if transcript and transcript[-1].get("role") == "user" and transcript[-1].get("content") == text:
        return transcript[:-1]
    return transcript


def _before_last_user(transcript: list[dict]) -> list[dict]:
    """The history of a resumed turn: everything before the last user message."""
    for index in range(len(transcript) - 1, -1, -1):
        if transcript[index].get("role") == "user":
            return transcript[:index]
    return transcript


async def run_turn(deps: PipelineDeps, key: str, event: MessageEvent, *, inbound_id: int | None = None,
                   resume: bool = False) -> TurnResult:
    """Run one turn for `event` in session `key` and deliver the answer.

    Args:
        inbound_id: the durable intake row of `event` (it becomes 'running' with the user message).
        resume: auto-continue after a restart (seed §7): no new user message is recorded; the
            session's unanswered last user message is answered again. Nothing to answer →
            `resume_pending` is cleared and nothing is sent.
    Raises:
        StoreError (from the store) when the user message cannot be recorded; nothing is sent
        to the agent then, and the worker tells the chat.
    """
    store, source = deps.store, event.source
    adapter = deps.adapters[source.platform]
    entry = await store.get_or_create_session(source)
    context = build_session_context(source, deps.config, entry, pm=deps.pm)
    reply_to = event.message_id
    # A resumed turn answers the stored user message again: judged as a human turn.
    internal = event.is_internal and not resume
    if resume:
        last = await store.resume_turn(key, entry.session_id)
        if last is None:
            log.info("nothing to resume in %s (its last message has a reply)", key)
            await store.clear_resume_pending(key)
            return TurnResult(status="nothing_to_resume", session_id=entry.session_id, reply="")
        text, reply_to = last["content"], last["platform_message_id"]
        history = _before_last_user(await store.load_transcript(entry.session_id))
    else:
        text = event.text
        if context.shared_multi_user_session and not event.is_internal:
            # Run-time prefix, so the system prompt names no user and stays identical (seed §5).
            text = sender_prefix(source) + text
        user_message = {"role": "user", "content": text, "timestamp": format_timestamp(deps.clock())}
        if event.message_id:
            user_message["platform_message_id"] = event.message_id
        # Record the message (and the turn marker) before anything else can fail (SPEC.md §0).
        await store.begin_turn(key, entry.session_id, user_message, inbound_id=inbound_id)
        history = _without_trailing(await store.load_transcript(entry.session_id), text)
    # From here until record_reply the turn marker is set; if anything raises or the task is
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
        owed = text_owed(reply_text, internal=internal)
        assistant = {"role": "assistant", "content": reply_text, "timestamp": format_timestamp(deps.clock())}
        # Reply + obligation + end of the marker: one transaction (SPEC.md §6).
        ob_id = await store.record_reply(key, entry.session_id, assistant, origin=source, content=owed,
                                         internal=internal, reply_to=reply_to)
        await store.update_session(key, last_prompt_tokens=usage.input_tokens, usage=usage)
    else:
        owed = reply_text
        ob_id = await store.record_reply(key, entry.session_id, None, origin=source, content=owed,
                                         internal=internal, reply_to=reply_to)
    if ob_id is not None:
        await send_obligation(deps, ob_id, source, owed, session_key=key, session_id=entry.session_id,
                              reply_to=reply_to, kind="reply" if status == "completed" else "notice")
    if status == "completed":
        await store.clear_resume_pending(key)
        if deps.on_turn_completed is not None:
            await maybe_await(deps.on_turn_completed(key))
    else:
        log.warning("turn in %s ended %s", key, status)
    return TurnResult(status=status, session_id=entry.session_id, reply=owed or "")
