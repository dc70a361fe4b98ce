"""Chat commands of the gateway (seed §6, §8; docs/behaviour.md §5): `/new`, `/reset`,
`/stop`, `/queue`, `/status`, `/help`.

`/new` and `/reset` are the explicit conversation boundaries (seed §6): a new session id, the
old transcript kept. `/stop` marks the session `suspended` (seed §2). `/queue` and the queue
clearing of `/new`, `/reset`, `/stop` are done by the runner (`runner.py`, `busy.py`), which
calls `run_control` once the interrupted turn has ended. Unknown commands get one short help
line.
"""

from __future__ import annotations

import logging

from ..model.events import MessageEvent
from ..plugin_system.dispatch import call_broadcast
from .busy import DROPPED_TEXT, NOTHING_TO_STOP_TEXT, STOPPED_TEXT
from .deps import PipelineDeps, maybe_await

log = logging.getLogger(__name__)

COMMANDS = ("new", "reset", "stop", "queue", "status", "help")
HELP_TEXT = ("Commands: /new or /reset starts a new session (the old transcript is kept), "
             "/stop stops the current reply (your next message starts a new session), "
             "/queue <message> runs a message as its own turn after the current one, "
             "/status shows the session key, session id, turns, tokens and queued messages, "
             "/help shows this help.")
UNKNOWN_TEXT = "Unknown command /{name}. Commands: /new, /reset, /stop, /queue, /status, /help."


def is_known(name: str) -> bool:
    """True for a command this module answers."""
    return name in COMMANDS


async def run_command(deps: PipelineDeps, key: str, event: MessageEvent, *, queue_depth: int = 0) -> str:
    """Execute the slash command in `event` for session `key` and return the text to send back.

    Args:
        queue_depth: messages waiting in the session's queue (shown by `/status`; seed §8).
    Raises:
        StoreError (from the store): the store failed; the worker reports it to the chat.
    """
    name, _arg = event.command()
    if name in ("new", "reset", "stop"):
        return await run_control(deps, key, event)
    if name == "status":
        return await status_text(deps, key, queued=queue_depth)
    if name == "help":
        return HELP_TEXT
    log.info("unknown command /%s in %s", name, key)
    return UNKNOWN_TEXT.format(name=name or "")


async def run_control(deps: PipelineDeps, key: str, event: MessageEvent, *, stopped: bool = False,
                      dropped: int = 0) -> str:
    """`/new`, `/reset` or `/stop` after the runner interrupted the running turn and cleared the
    queue (seed §8 "clearing"). Returns the reply text.

    Args:
        stopped: `/stop` only — a turn was interrupted or a follow-up dropped; then the session is
            marked `suspended` (seed §2: the next message starts a new session id) and the reply is
            "Stopped. Your next message starts a new session."; otherwise "No active task to stop."
            and nothing changes.
        dropped: queued human messages cleared; when > 0 the reply gains a line
            "Dropped N queued message(s)."
    Raises:
        StoreError (from the store): the store failed; the worker reports it to the chat.
    """
    name, _arg = event.command()
    if name == "stop":
        if not stopped:
            return NOTHING_TO_STOP_TEXT
        await store_suspend(deps, key)
        text = STOPPED_TEXT
    else:
        text = await _new_session(deps, key, event, reason=name)
    if dropped:
        text += "\n" + DROPPED_TEXT.format(count=dropped)
    return text


async def store_suspend(deps: PipelineDeps, key: str) -> None:
    """Mark `key` suspended (seed §2 `/stop`); a key without a session yet has nothing to mark."""
    if not await deps.store.suspend_session(key):
        log.info("/stop in %s: no session to suspend", key)
    else:
        log.info("/stop: session %s suspended", key)


async def _new_session(deps: PipelineDeps, key: str, event: MessageEvent, *, reason: str) -> str:
    store = deps.store
    old = await maybe_await(store.get_entry(key))
    entry = await store.reset_session(key, display_name=event.source.chat_name)
    if entry is None:  # no route yet: the first session of this chat starts fresh
        entry = await store.get_or_create_session(event.source, force_new=True)
    if old is not None:
        await call_broadcast(deps.pm, "hermes_session_finalized", timeout=deps.hook_timeout_s, entry=old)
    await call_broadcast(deps.pm, "hermes_session_reset", timeout=deps.hook_timeout_s,
                         entry=entry, reason=reason)
    return f"Started a new session. Session id: {entry.session_id}"


async def status_text(deps: PipelineDeps, key: str, *, queued: int = 0) -> str:
    """The `/status` answer: session key, session id, turns and tokens, one per line, and
    "Queued: N" (the queue depth, seed §8) when N > 0."""
    queued_line = [f"Queued: {queued}"] if queued > 0 else []
    entry = await maybe_await(deps.store.get_entry(key))
    if entry is None:
        return "\n".join([f"Session key: {key}", "No session yet: send a message to start one."] + queued_line)
    turns = await deps.store.count_turns(entry.session_id)
    return "\n".join([
        f"Session key: {entry.session_key}",
        f"Session id: {entry.session_id}",
        f"Turns: {turns}",
        f"Tokens: {entry.total_tokens} (input {entry.input_tokens}, output {entry.output_tokens})",
    ] + queued_line)
