"""Chat commands of the gateway (issue 2 item 8): `/new`, `/reset`, `/status`, `/help`.

`/new` and `/reset` are the explicit conversation boundaries (seed §6): a new session id, the
old transcript kept. Unknown commands get one short help line (issue 2 "bad input").
"""

from __future__ import annotations

import logging

from ..model.events import MessageEvent
from ..plugin_system.dispatch import call_broadcast
from .deps import PipelineDeps, maybe_await

log = logging.getLogger(__name__)

COMMANDS = ("new", "reset", "status", "help")
HELP_TEXT = ("Commands: /new or /reset starts a new session (the old transcript is kept), "
             "/status shows the session key, session id, turns and tokens, /help shows this help.")
UNKNOWN_TEXT = "Unknown command /{name}. Commands: /new, /reset, /status, /help."


def is_known(name: str) -> bool:
    """True for a command this module answers."""
    return name in COMMANDS


async def run_command(deps: PipelineDeps, key: str, event: MessageEvent) -> str:
    """Execute the slash command in `event` for session `key` and return the text to send back.

    Raises:
        StoreError (from the store): the store failed; the worker reports it to the chat.
    """
    name, _arg = event.command()
    if name in ("new", "reset"):
        return await _new_session(deps, key, event, reason=name)
    if name == "status":
        return await status_text(deps, key)
    if name == "help":
        return HELP_TEXT
    log.info("unknown command /%s in %s", name, key)
    return UNKNOWN_TEXT.format(name=name or "")


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


async def status_text(deps: PipelineDeps, key: str) -> str:
    """The `/status` answer: session key, session id, turns and tokens, one per line."""
    entry = await maybe_await(deps.store.get_entry(key))
    if entry is None:
        return f"Session key: {key}\nNo session yet: send a message to start one."
    turns = await deps.store.count_turns(entry.session_id)
    return "\n".join([
        f"Session key: {entry.session_key}",
        f"Session id: {entry.session_id}",
        f"Turns: {turns}",
        f"Tokens: {entry.total_tokens} (input {entry.input_tokens}, output {entry.output_tokens})",
    ])
