"""One agent turn (seed §2, §7, §9; docs/behaviour.md §6):

key → session → transcript (user message + turn marker + intake row 'running', one transaction)
→ agent (history from the transcript) → transcript (assistant reply) + delivery obligation
('attempting') + end of the turn marker + token counters + intake row finished + (a completed
turn) `resume_pending` cleared (one transaction) → send the obligation → 'delivered' / 'failed'.
A message costs three commits, each one call to the SQLite thread, the last one off the session's
path: its durable acceptance shares the first (a busy session's message has a commit of its own
before them) (docs/behaviour.md §12 "Three commits per message, two in a row").

A crash before the reply is recorded leaves a marked turn without a reply: start-up marks the
session `resume_pending` and auto-continues it (`resume=True` here). A crash after it leaves an
open obligation, which the start-up ledger sweep sends (seed §7).

A full disk (docs/behaviour.md §12) loses nothing accepted: the writes of the user message and of
the computed reply are tried again, with a growing pause and one log line per failed attempt,
until they pass (then the turn goes on and the reply is sent once) or the turn is cancelled at
shutdown (then the intake row or the marker stays and the message is replayed, or the turn
resumed, once at the next start).

The history comes from the agent cache (seed §11, `agent_cache`), not from a reload of the whole
transcript: a hit costs O(1) in the transcript's length; a miss (first turn, new session id,
eviction) loads it once from the store. Each message the store records is appended to the live
transcript; if a store write fails or the turn is cancelled, the entry is dropped so the next
turn rebuilds from the store (the store is canonical, docs/behaviour.md §0).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from typing import Any, Awaitable, Callable
from dataclasses import dataclass, fields
from functools import partial
from operator import attrgetter

from ..agents.base import AgentError, AgentInterrupted
from ..model.events import MessageEvent
from ..model.source import SessionSource
from ..store import is_disk_full
from ..store.ledger import text_owed
from ..store.records import MessageRow
from ..store.rows import normalize_message, row_to_message
from .agent_cache import CachedSession
from .compression import compress_session, should_compress
from .context import (build_session_context, build_session_context_prompt, chat_instructions_block, sender_prefix,
                      should_redact)
from .deps import PipelineDeps, maybe_await
from .ledger import OutcomeRecorder, send_obligation
from .notices import AGENT_FAILED, AGENT_TIMEOUT, failure_notice, tell_pending_notice
from .reply_context import quoted_context
from .typing_indicator import typing_while

log = logging.getLogger(__name__)

# Pauses between attempts to write a reply while the disk is full (seconds, doubling up to the cap).
FULL_DISK_FIRST_RETRY_S = 0.5
FULL_DISK_MAX_RETRY_S = 30.0
# The status of a turn whose message turned out to be a duplicate when its acceptance was folded
# into the turn's first write (`run_turn(accept_event=)`): nothing was recorded.
DUPLICATE = "duplicate"


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
    notice; "" when nothing is owed); `steered_used` is how many of the follow-ups handed to the
    turn (steer) the agent took (they are in the transcript); `usage` the agent's TokenUsage of a
    completed turn."""

    status: str
    session_id: str
    reply: str
    steered_used: int = 0
    usage: Any = None


def _as_stored(message: dict, clock) -> tuple[MessageRow, dict]:
    """`message` validated once: the row the store records (it takes a MessageRow as is) and the
    dict `store.load_transcript` will return for it, which joins the live transcript."""
    row = normalize_message(message, clock)
    return row, row_to_message(row)


def _before_last_user(transcript: list[dict]) -> list[dict]:
    """The history of a resumed turn: everything before the last user message."""
    for index in range(len(transcript) - 1, -1, -1):
        if transcript[index].get("role") == "user":
            return transcript[:index]
    return transcript


def shown_key(deps: PipelineDeps, key: str) -> str:
    """`key` as a log line shows it: itself, or `key_<12 hex>` (a SHA-256 prefix, stable per
    key) when `[redaction] enabled`, since keys carry user and chat ids (docs/operations.md §4)."""
    if not deps.config.redaction.enabled:
        return key
    return "key_" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def _log_turn(deps: PipelineDeps, key: str, platform: str, outcome: str, seconds: float, usage: Any,
              resume: bool) -> None:
    """The one structured line per turn (docs/operations.md §4): session, platform, outcome,
    duration and tokens; `[logging] format = "json"` writes the fields as JSON."""
    fields = {"event": "turn", "session": shown_key(deps, key), "platform": platform, "outcome": outcome,
              "duration_s": round(seconds, 3), "resumed": resume,
              "input_tokens": getattr(usage, "input_tokens", 0), "output_tokens": getattr(usage, "output_tokens", 0),
              "total_tokens": getattr(usage, "total_tokens", 0)}
    log.info("turn %s in %s (%s): %.3f s, tokens %d in / %d out", outcome, fields["session"], platform,
             seconds, fields["input_tokens"], fields["output_tokens"], extra={"hermes": fields})


async def run_turn(deps: PipelineDeps, key: str, event: MessageEvent, *, inbound_id: int | None = None,
                   resume: bool = False, begun: bool = False,
                   steered: list[tuple[MessageEvent, int | None]] | None = None,
                   on_answered: Callable[[], None] | None = None,
                   accept_event: dict[str, Any] | None = None,
                   on_accepted: Callable[[int | None], None] | None = None,
                   recorder: OutcomeRecorder | None = None) -> TurnResult:
    """Run one turn for `event` in session `key` and deliver the answer; the turn is counted
    (`hermes_turns_total`, its duration) and logged in one structured line whatever its outcome
    (`error`: an exception, `cancelled`: the task was cancelled, e.g. by the shutdown drain).

    Args:
        inbound_id: the durable intake row of `event`: it becomes 'running' with the user message
            and is finished with the reply (in the same transactions).
        resume: auto-continue after a restart (seed §7): no new user message is recorded; the
            session's unanswered last user message is answered again. Nothing to answer →
            `resume_pending` is cleared and nothing is sent.
        begun: the turn's user message and turn marker are recorded already (`/retry`,
            `store.retry_turn`: the rewound message recorded again as it was, no sender prefix
            added twice): the session's last user message is answered as a resumed turn answers
            it, but counted and logged as a turn of its own.
        steered: follow-ups handed to this turn while it runs (`busy_input_mode = "steer"`; the
            list may grow meanwhile); those the agent took are recorded after the user message.
        on_answered: called once the turn's outcome is recorded (reply, delivery obligation and
            `inbound_id` finished): from then on there is nothing left to interrupt, only the send.
        accept_event: `event` is not stored yet (instead of `inbound_id`): the write of the user
            message accepts it (`store.begin_turn(accept_event=)`, docs/behaviour.md §12); that
            write is not retried on a full disk (the adapter must not acknowledge what was not
            stored: its error propagates). `on_accepted(inbound_id)` is called once it committed;
            None there is a duplicate: the turn ends with status `duplicate`, nothing recorded,
            counted or logged as a turn.
        recorder: records the reply's 'delivered' mark off the session's path
            (`ledger.send_obligation(recorder=)`).

    After a completed turn whose prompt exceeded the configured share of the context window, the
    transcript is compressed (`compression`; docs/behaviour.md §11). The first turn after `/new` or
    `/reset` (`is_fresh_reset`) re-injects the chat's instructions (`hermes_chat_instructions`).
    Raises:
        StoreError (from the store) when the user message cannot be recorded; nothing is sent
        to the agent then, and the worker tells the chat.
    """
    started, outcome, usage = time.monotonic(), "error", None
    try:
        result = await _run_turn(deps, key, event, inbound_id=inbound_id, resume=resume, begun=begun,
                                 steered=steered, on_answered=on_answered, accept_event=accept_event,
                                 on_accepted=on_accepted, recorder=recorder)
        outcome, usage = result.status, result.usage
        return result
    except asyncio.CancelledError:
        outcome = "cancelled"
        raise
    finally:
        if outcome != DUPLICATE:  # not a turn: the runner counts the message as deduplicated
            platform = event.source.platform
            seconds = time.monotonic() - started
            deps.metrics.turn(platform, outcome, seconds)
            if resume and outcome != "nothing_to_resume":
                deps.metrics.resume(platform)
            _log_turn(deps, key, platform, outcome, seconds, usage, resume)


async def _run_turn(deps: PipelineDeps, key: str, event: MessageEvent, *, inbound_id: int | None,
                    resume: bool, begun: bool, steered: list[tuple[MessageEvent, int | None]] | None,
                    on_answered: Callable[[], None] | None, accept_event: dict[str, Any] | None,
                    on_accepted: Callable[[int | None], None] | None, recorder: OutcomeRecorder | None
                    ) -> TurnResult:
    store, source = deps.store, event.source
    adapter = deps.adapters[source.platform]
    entry = await store.get_or_create_session(source)
    if not event.is_internal:  # told at the user's next message (a stuck-loop suspension), once
        await tell_pending_notice(deps, key, entry, source, recorder=recorder)
    context = build_session_context(source, deps.config, entry, pm=deps.pm,
                                    platform_settings=deps.access.settings)
    cache = deps.agent_cache
    reply_to = event.message_id
    # A resumed turn answers the stored user message again: judged as a human turn.
    internal = event.is_internal and not resume
    if resume or begun:
        live = await cache.acquire(key, entry.session_id, store.load_transcript)
        last = (live.messages[-1] if live.messages else None) if begun else await store.resume_turn(
            key, entry.session_id)
        if last is None:
            log.info("nothing to resume in %s (its last message has a reply)", key)
            await store.clear_resume_pending(key)
            return TurnResult(status="nothing_to_resume", session_id=entry.session_id, reply="")
        text, reply_to = last["content"], last.get("platform_message_id")
        cache.begin_turn(live)
        recorded_user, history = None, _before_last_user(live.messages)
    else:
        text = event.text
        if context.shared_multi_user_session and not event.is_internal:
            # Run-time prefix, so the system prompt names no user and stays identical (seed §5).
            text = sender_prefix(source, pm=deps.pm, redact=should_redact(deps.config, adapter.spec)) + text
        user_message = {"role": "user", "content": text, "timestamp": deps.clock()}
        if event.message_id:
            user_message["platform_message_id"] = event.message_id
        # Record the message (and the turn marker) before anything else can fail (docs/behaviour.md §0);
        # on a full disk it waits for room like the reply (its intake row stays open meanwhile).
        user_row, recorded_user = _as_stored(user_message, deps.clock)
        if accept_event is not None:
            inbound_id = await store.begin_turn(key, entry.session_id, user_row, accept_event=accept_event)
            if on_accepted is not None:
                on_accepted(inbound_id)
            if inbound_id is None:
                return TurnResult(status=DUPLICATE, session_id=entry.session_id, reply="")
        else:
            await _until_written(key, "user message", lambda: store.begin_turn(
                key, entry.session_id, user_row, inbound_id=inbound_id))
        live = await _live_transcript(deps, key, entry.session_id, recorded_user)
        cache.begin_turn(live)
        # The agent gets the live list itself (no copy): the user message just recorded joins
        # it after the agent has answered, so until then the list is exactly the history.
        history = live.messages
        # What the platform knows beyond the text reaches the agent only, as a quoted prefix;
        # the transcript keeps the message as written (docs/behaviour.md §7).
        text = quoted_context(event, pm=deps.pm, redact=should_redact(deps.config, adapter.spec)) + text
    try:
        result, prompt_tokens = await _answer(deps, key, source, entry, context, adapter, live, history, text,
                                              recorded_user, reply_to=reply_to, internal=internal,
                                              inbound_id=inbound_id, on_answered=on_answered, recorder=recorder,
                                              steered=steered if steered is not None else [])
    except BaseException:
        # A failed store write or a cancelled turn: the live transcript may no longer match
        # the store; the next turn rebuilds it from there.
        cache.discard(live)
        raise
    finally:
        cache.end_turn(live)
    if result.status == "completed" and should_compress(deps.config, prompt_tokens):
        log.info("prompt of %d tokens in %s is over the compression threshold", prompt_tokens, key)
        try:
            await compress_session(deps, key, entry, source)
        except Exception:  # the turn is done and answered; the transcript stays as it was
            log.exception("automatic compression of %s failed", entry.session_id)
    return result


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
                  inbound_id: int | None,
                  steered: list[tuple[MessageEvent, int | None]],
                  on_answered: Callable[[], None] | None = None,
                  recorder: OutcomeRecorder | None = None) -> tuple[TurnResult, int]:
    """The rest of the turn once the user message is recorded: agent, reply, delivery.
    Returns the TurnResult and the prompt tokens the agent reported (0 when it did not answer)."""
    store, cache = deps.store, deps.agent_cache
    # From here until record_reply the turn marker is set; if anything raises or the task is
    # cancelled first, the marker stays so start-up recovery can finish the turn (seed §7).
    prompt = _context_prompt(deps, live, context)
    if entry.is_fresh_reset and not internal:
        # The first turn after /new or /reset (seed §2 `is_fresh_reset`): the chat's instructions once.
        block = chat_instructions_block(deps.pm, source)
        prompt = "\n\n".join(part for part in (prompt, block) if part)
    status, reply_text, usage, reasoning = "completed", "", None, {}
    timeout = deps.config.agent.gateway_timeout
    try:
        async with asyncio.timeout(timeout), typing_while(adapter, source):
            reply = await deps.agent.run_turn(context, history, text, system_context=prompt)
        reply_text, usage, reasoning = reply.text, reply.usage, dict(reply.reasoning)
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
    # The follow-ups the agent took (steer) are recorded with the reply, after the turn's own
    # message, and their intake rows are finished with it: one transaction, so a crash can
    # never leave one of them recorded without the rest (docs/behaviour.md §5, §12).
    taken, taken_ids = _take_steered(deps, key, live, steered)
    finished = ([inbound_id] if inbound_id is not None else []) + taken_ids
    if status == "completed":
        owed = text_owed(reply_text, internal=internal)
        assistant = {"role": "assistant", "content": reply_text, "timestamp": deps.clock()}
        try:
            assistant, stored = _as_stored({**assistant, **reasoning}, deps.clock)
        except ValueError as exc:
            if not reasoning:
                raise
            # What the backend returned beside the text is not JSON: the reply itself is kept.
            log.error("agent reply in %s kept without its reasoning: %s", key, exc)
            assistant, stored = _as_stored(assistant, deps.clock)
        # In the live transcript first, counted as not yet persisted until the store has it.
        cache.append(live, stored, persisted=False)
        # Reply + obligation ('attempting': it is sent next) + end of the marker + token counters
        # + intake rows finished + resume_pending / is_fresh_reset cleared: one transaction, one
        # commit (docs/behaviour.md §6, §12).
        # A partial, not a closure (fewer objects for the collector, docs/behaviour.md §12).
        ob_id = await _until_written(key, "reply", partial(
            store.record_reply, key, entry.session_id, assistant, origin=source, content=owed, internal=internal,
            reply_to=reply_to, sending=True, before=taken, inbound_ids=finished, usage=usage, completed=True))
    else:
        owed = reply_text
        ob_id = await _until_written(key, "notice", partial(
            store.record_reply, key, entry.session_id, None, origin=source, content=owed, internal=internal,
            reply_to=reply_to, sending=True, before=taken, inbound_ids=finished))
    cache.mark_persisted(live)
    if on_answered is not None:
        on_answered()
    if ob_id is not None:
        await send_obligation(deps, ob_id, source, owed, session_key=key, session_id=entry.session_id,
                              reply_to=reply_to, kind="reply" if status == "completed" else "notice",
                              attempting=True, recorder=recorder)
    if status == "completed":
        if deps.on_turn_completed is not None:
            await maybe_await(deps.on_turn_completed(key))
    elif status == "interrupted":  # asked for by the runner (a follow-up, /stop, /new)
        log.info("turn in %s ended interrupted", key)
    else:
        log.warning("turn in %s ended %s", key, status)
    prompt_tokens = usage.input_tokens if status == "completed" else 0
    return (TurnResult(status=status, session_id=entry.session_id, reply=owed or "", steered_used=len(taken),
                       usage=usage),
            prompt_tokens)


# What the memo of the session-context section compares of a source (`_context_prompt`): every
# field but the message's own id, which some adapters (Discord) put on every source and the
# section never shows; in a shared session not the sender's fields either, since its section
# names no user (docs/behaviour.md §7; seed §5). A field added to SessionSource counts by default.
_SENDER_FIELDS = frozenset({"user_id", "user_name", "user_id_alt", "is_bot", "role_authorized"})
_source_shown = attrgetter(*(f.name for f in fields(SessionSource) if f.name != "message_id"))
_shared_source_shown = attrgetter(*(f.name for f in fields(SessionSource)
                                    if f.name != "message_id" and f.name not in _SENDER_FIELDS))


def _context_prompt(deps: PipelineDeps, live, context) -> str:
    """The session-context prompt section (`build_session_context_prompt`), built again only when
    what it is made of changed since the session's last turn in the agent cache: the source
    (names, topic, thread; not the message's own id, nor the sender in a shared session) and
    whether the session is shared. The rest (connected platforms, home channels, the adapters'
    labels, the plugins' notes, pseudonyms and redaction rules) is fixed while the gateway runs,
    and equal inputs give the same text (docs/behaviour.md §7: the section stays the same from
    turn to turn). Building it costs several hook calls and about a twentieth of a message's
    event-loop time (docs/behaviour.md §12)."""
    shared = context.shared_multi_user_session
    inputs = (shared, (_shared_source_shown if shared else _source_shown)(context.source))
    if live.prompt is not None and live.prompt[0] == inputs:
        return live.prompt[1]
    prompt = build_session_context_prompt(context, redact_pii=deps.config.redaction.enabled, pm=deps.pm,
                                          specs={name: a.spec for name, a in deps.adapters.items()})
    live.prompt = (inputs, prompt)
    return prompt


def _take_steered(deps: PipelineDeps, key: str, live,
                  steered: list[tuple[MessageEvent, int | None]]) -> tuple[list[MessageRow], list[int]]:
    """The follow-ups the agent took during the turn (steer), as user message rows to record after
    the turn's own (added to the live transcript, not yet persisted), and their intake rows.
    The runner queues the others as turns of their own."""
    used = min(deps.agent.take_steered(key), len(steered))
    messages, inbound_ids = [], []
    for steer_event, inbound_id in steered[:used]:
        message = {"role": "user", "content": steer_event.text, "timestamp": deps.clock()}
        if steer_event.message_id:
            message["platform_message_id"] = steer_event.message_id
        row, stored = _as_stored(message, deps.clock)
        messages.append(row)
        deps.agent_cache.append(live, stored, persisted=False)
        if inbound_id is not None:
            inbound_ids.append(inbound_id)
    return messages, inbound_ids
