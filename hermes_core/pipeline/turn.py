"""One agent turn (seed §2, §7, §9; docs/behaviour.md §6):

key → session → transcript (user message + turn marker + intake row 'running', one transaction)
→ agent (history from the transcript) → transcript (assistant reply) + delivery obligation +
end of the turn marker (one transaction) → token counters → send the obligation ('attempting',
then 'delivered' / 'failed') → `clear_resume_pending` only when the turn really completed.

A crash before the reply is recorded leaves a marked turn without a reply: start-up marks the
session `resume_pending` and auto-continues it (`resume=True` here). A crash after it leaves an
open obligation, which the start-up ledger sweep sends (seed §7).

A full disk (docs/behaviour.md §12) does not throw the computed reply away: the write of the
reply is tried again, with a growing pause and one log line per failed attempt, until it passes
(then the reply is sent once) or the turn is cancelled at shutdown (then the marker stays and the
turn is resumed once at the next start).

The history comes from the agent cache (seed §11, `agent_cache`), not from a reload of the whole
transcript: a hit costs O(1) in the transcript's length; a miss (first turn, new session id,
eviction) loads it once from the store. Each message the store records is appended to the live
transcript; if a store write fails or the turn is cancelled, the entry is dropped so the next
turn rebuilds from the store (the store is canonical, docs/behaviour.md §0).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable
from dataclasses import dataclass

from ..agents.base import AgentError, AgentInterrupted
from ..model.events import MessageEvent
from ..model.timeutil import format_timestamp
from ..store import is_disk_full
from ..store.ledger import text_owed
from ..store.rows import normalize_message, row_to_message
from .agent_cache import CachedSession
from .context import build_session_context, build_session_context_prompt, sender_prefix, should_redact
from .deps import PipelineDeps, maybe_await
from .ledger import send_obligation
from .notices import AGENT_FAILED, AGENT_TIMEOUT, failure_notice
from .typing_indicator import typing_while

log = logging.getLogger(__name__)

# Pauses between attempts to write a reply while the disk is full (seconds, doubling up to the cap).
FULL_DISK_FIRST_RETRY_S = 0.5
FULL_DISK_MAX_RETRY_S = 30.0


async def _until_written(key: str, what: str, write: Callable[[], Awaitable[Any]]) -> Any:
    """`await write()`, tried again while it fails because the disk is full (module docstring).
    Any other failure raises at once; so does cancellation (the turn stays marked)."""
    pause = FULL_DISK_FIRST_RETRY_S
    while True:
        try:
            return await write()
        except Exception as exc:
            if not is_disk_full(exc):
                raise
            log.error("disk full: the %s of %s is kept in memory and written again in %.1f s (%s)",
                      what, key, pause, " ".join(str(exc).split()))
        await asyncio.sleep(pause)
        pause = min(pause * 2, FULL_DISK_MAX_RETRY_S)



@dataclass(frozen=True, slots=True)
class TurnResult:
    """What a turn did: `status` is `completed`, `interrupted`, `timeout`, `failed` or
    `nothing_to_resume`; `reply` is the text owed to the chat (the agent's reply or the
    notice; "" when nothing is owed)."""

    status: str
    session_id: str
    reply: str


def _as_stored(message: dict, clock) -> dict:
    """`message` exactly as `store.load_transcript` would return it once recorded."""
    return row_to_message(normalize_message(message, clock))


def _before_last_user(transcript: list[dict]) -> list[dict]:
    """The history of a resumed turn: everything before the last user message."""
    for index in range(len(transcript) - 1, -1, -1):
        if transcript[index].get("role") == "user":
            return transcript[:index]
    return transcript


async def run_turn(deps: PipelineDeps, key: str, event: MessageEvent, *, inbound_id: int | None = None,
                   resume: bool = False, on_answered: Callable[[], None] | None = None) -> TurnResult:
    """Run one turn for `event` in session `key` and deliver the answer.

    Args:
        inbound_id: the durable intake row of `event` (it becomes 'running' with the user message).
        resume: auto-continue after a restart (seed §7): no new user message is recorded; the
            session's unanswered last user message is answered again. Nothing to answer →
            `resume_pending` is cleared and nothing is sent.
        on_answered: called once the turn's outcome is recorded (reply and delivery obligation):
            from then on there is nothing left to interrupt, only the send and bookkeeping.
    Raises:
        StoreError (from the store) when the user message cannot be recorded; nothing is sent
        to the agent then, and the worker tells the chat.
    """
    store, source = deps.store, event.source
    adapter = deps.adapters[source.platform]
    entry = await store.get_or_create_session(source)
    context = build_session_context(source, deps.config, entry, pm=deps.pm)
    cache = deps.agent_cache
    reply_to = event.message_id
    # A resumed turn answers the stored user message again: judged as a human turn.
    internal = event.is_internal and not resume
    if resume:
        live = await cache.acquire(key, entry.session_id, store.load_transcript)
        last = await store.resume_turn(key, entry.session_id)
        if last is None:
            log.info("nothing to resume in %s (its last message has a reply)", key)
            await store.clear_resume_pending(key)
            return TurnResult(status="nothing_to_resume", session_id=entry.session_id, reply="")
        text, reply_to = last["content"], last["platform_message_id"]
        cache.begin_turn(live)
        recorded_user, history = None, _before_last_user(live.messages)
    else:
        text = event.text
        if context.shared_multi_user_session and not event.is_internal:
            # Run-time prefix, so the system prompt names no user and stays identical (seed §5).
            text = sender_prefix(source, pm=deps.pm, redact=should_redact(deps.config, adapter.spec)) + text
        user_message = {"role": "user", "content": text, "timestamp": format_timestamp(deps.clock())}
        if event.message_id:
            user_message["platform_message_id"] = event.message_id
        # Record the message (and the turn marker) before anything else can fail (docs/behaviour.md §0).
        await store.begin_turn(key, entry.session_id, user_message, inbound_id=inbound_id)
        recorded_user = _as_stored(user_message, deps.clock)
        live = await _live_transcript(deps, key, entry.session_id, recorded_user)
        cache.begin_turn(live)
        # The agent gets the live list itself (no copy): the user message just recorded joins
        # it after the agent has answered, so until then the list is exactly the history.
        history = live.messages
    try:
        return await _answer(deps, key, source, entry, context, adapter, live, history, text,
                             recorded_user, reply_to=reply_to, internal=internal, on_answered=on_answered)
    except BaseException:
        # A failed store write or a cancelled turn: the live transcript may no longer match
        # the store; the next turn rebuilds it from there.
        cache.discard(live)
        raise
    finally:
        cache.end_turn(live)


async def _live_transcript(deps: PipelineDeps, key: str, session_id: str, recorded_user: dict):
    """The cache entry of the session, without the user message just recorded (seed §11: a hit
    is reused as is; a miss loads the transcript once and leaves that message out, since it
    joins the live list after the agent has answered)."""
    cache = deps.agent_cache
    live = cache.get(key, session_id)
    if live is not None:
        return live
    loaded = await deps.store.load_transcript(session_id)
    tail = loaded[-1] if loaded else {}
    if tail.get("role") == "user" and tail.get("content") == recorded_user["content"]:
        loaded.pop()
        return cache.put(key, session_id, loaded)
    # Not where it should be (a concurrent write?): answer from what was loaded, cache nothing.
    log.warning("transcript of %s does not end with the message just recorded; not cached", session_id)
    cache.invalidate(key)
    return CachedSession(key, session_id, loaded, len(loaded), 0.0)


async def _answer(deps: PipelineDeps, key: str, source, entry, context, adapter, live, history: list[dict],
                  text: str, recorded_user: dict | None, *, reply_to: str | None, internal: bool,
                  on_answered: Callable[[], None] | None = None) -> TurnResult:
    """The rest of the turn once the user message is recorded: agent, reply, delivery."""
    store, cache = deps.store, deps.agent_cache
    # From here until record_reply the turn marker is set; if anything raises or the task is
    # cancelled first, the marker stays so start-up recovery can finish the turn (seed §7).
    prompt = build_session_context_prompt(context, redact_pii=deps.config.redaction.enabled, pm=deps.pm,
                                          specs={name: a.spec for name, a in deps.adapters.items()})
    status, reply_text, usage = "completed", "", None
    timeout = deps.config.agent.gateway_timeout
    try:
        async with asyncio.timeout(timeout), typing_while(adapter, source):
            reply = await deps.agent.run_turn(context, history, text, system_context=prompt)
        reply_text, usage = reply.text, reply.usage
    except AgentInterrupted:
        # Only the runner interrupts (a follow-up, /stop, /new), and it answers the chat itself:
        # the interrupted turn owes nothing, so the chat hears about it once.
        status, reply_text = "interrupted", ""
    except TimeoutError as exc:
        deps.agent.interrupt(key)
        log.warning("agent gave no answer in %s within %s s", key, timeout)
        status, reply_text = "timeout", failure_notice(deps.pm, deps.config, AGENT_TIMEOUT, source, exc)
    except AgentError as exc:
        # The detail (backend URL, exception class) is for the operator only (docs/behaviour.md §0).
        log.error("agent failed in %s: %s", key, exc)
        status, reply_text = "failed", failure_notice(deps.pm, deps.config, AGENT_FAILED, source, exc)
    if recorded_user is not None:
        cache.append(live, recorded_user, persisted=True)
    if status == "completed":
        owed = text_owed(reply_text, internal=internal)
        assistant = {"role": "assistant", "content": reply_text, "timestamp": format_timestamp(deps.clock())}
        # In the live transcript first, counted as not yet persisted until the store has it.
        cache.append(live, _as_stored(assistant, deps.clock), persisted=False)
        # Reply + obligation + end of the marker: one transaction (docs/behaviour.md §6).
        ob_id = await _until_written(key, "reply", lambda: store.record_reply(
            key, entry.session_id, assistant, origin=source, content=owed, internal=internal, reply_to=reply_to))
        cache.mark_persisted(live)
        if on_answered is not None:
            on_answered()
        try:
            await store.update_session(key, last_prompt_tokens=usage.input_tokens, usage=usage)
        except Exception as exc:  # counters only: the reply is recorded and is sent all the same
            if not is_disk_full(exc):
                raise
            log.error("disk full: token counters of %s not updated for this turn", key)
    else:
        owed = reply_text
        ob_id = await _until_written(key, "notice", lambda: store.record_reply(
            key, entry.session_id, None, origin=source, content=owed, internal=internal, reply_to=reply_to))
        if on_answered is not None:
            on_answered()
    if ob_id is not None:
        await send_obligation(deps, ob_id, source, owed, session_key=key, session_id=entry.session_id,
                              reply_to=reply_to, kind="reply" if status == "completed" else "notice")
    if status == "completed":
        await store.clear_resume_pending(key)
        if deps.on_turn_completed is not None:
            await maybe_await(deps.on_turn_completed(key))
    elif status == "interrupted":  # asked for by the runner (a follow-up, /stop, /new)
        log.info("turn in %s ended interrupted", key)
    else:
        log.warning("turn in %s ended %s", key, status)
    return TurnResult(status=status, session_id=entry.session_id, reply=owed or "")
