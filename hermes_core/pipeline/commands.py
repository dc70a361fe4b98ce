"""Chat commands of the gateway, each in one place with its help line (seed §3, §6, §8;
docs/behaviour.md §5, §11).

`COMMANDS` is the registry: name, usage, help line and how the runner places it in the session's
queue (`placement`):

* `CONTROL` — `/new [title]`, `/reset`, `/stop`: interrupt the running turn, clear (or, for
  `/stop`, drop the one-slot follow-up of) the queued human messages, stop the session's
  background work, and run right after the interrupted turn.
* `QUEUE` — `/queue <text>`: a full turn of its own (the runner turns it into a TURN job).
* `ORDERED` — `/resume`, `/title`, `/undo`, `/retry`, `/compress`: change the conversation, so
  they wait for the running turn and run in arrival order.
* `IMMEDIATE` — `/status`, `/help`, `/restart` (admins only) and unknown commands: answered at
  once even while a turn runs.

Every command answers in one short message (the texts below are the literal replies, documented
in docs/behaviour.md §11). `/undo` finishes its intake row in the transaction of its rewind,
`/compress` in the transaction of its rewrite, and `/retry` begins its turn again in the
transaction of its rewind (the runner then answers it, `CommandResult.turn_begun`): a crash never
runs any of them twice. `/undo` and `/compress` also record their answer's delivery obligation
in that transaction (`CommandResult.obligation_id`; the runner sends it as a turn's reply is
sent): a crash before the send leaves it to the start-up sweep (§6), so it is never lost. The
store is canonical: after `/undo`, `/retry`, `/compress` and `/resume` the session's live
transcript in the agent cache is dropped, so the next turn is built from the store and never
sees a rewound or replaced message.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Awaitable, Callable

from ..model.events import MessageEvent
from ..model.limits import INT64_MAX
from ..model.text import neutralize_inline
from ..model.timeutil import parse_timestamp
from ..plugin_system.dispatch import call_broadcast
from ..store.ledger import Confirmation
from .busy import DROPPED_TEXT, NOTHING_TO_STOP_TEXT, STOPPED_TEXT
from .compression import compress_session
from .deps import PipelineDeps, maybe_await

log = logging.getLogger(__name__)

# How the runner places a command (module docstring).
CONTROL, QUEUE, ORDERED, IMMEDIATE = "control", "queue", "ordered", "immediate"

TITLE_MAX_CHARS = 100
# A label (title or first user line) in a /resume listing or a reply, at most this long.
LABEL_MAX_CHARS = 60
RESUME_LIST_LIMIT = 10

NO_SESSION_TEXT = "No session yet: send a message to start one."
NEW_SESSION_TEXT = "Started a new session. Session id: {session_id}"
NEW_TITLED_TEXT = "Started a new session \"{title}\". Session id: {session_id}"
TITLE_EMPTY_TEXT = "Nothing to name: write /title followed by the session's title."
TITLED_TEXT = "Session titled \"{title}\"."
RESUME_NONE_TEXT = "No earlier sessions to resume."
RESUME_HEADER = "Your recent sessions:"
RESUME_FOOTER = "Switch with /resume <number>."
RESUME_NOT_FOUND_TEXT = "No session \"{query}\" to resume. Send /resume for the list."
RESUME_CURRENT_TEXT = "Already in this session."
RESUMED_TEXT = "Resumed \"{label}\". Session id: {session_id}"
RESUME_RACE_TEXT = "The chat changed meanwhile; nothing was switched. Send /resume again."
UNDO_USAGE_TEXT = "Write /undo, or /undo followed by the number of turns to undo."
NOTHING_TO_UNDO_TEXT = "Nothing to undo."
UNDONE_TEXT = "Undid {turns} turn(s) ({rows} message(s)), back to before \"{text}\"."
NOTHING_TO_RETRY_TEXT = "Nothing to retry."
RETRY_STOPPED_TEXT = "Nothing to retry: the conversation was stopped. Your next message starts a new session."
RETRYING_TEXT = "Retrying \"{text}\"."
NOTHING_TO_COMPRESS_TEXT = "Nothing to compress yet."
COMPRESSED_TEXT = ("Compressed the conversation: {summarised} earlier message(s) summarised, "
                   "{kept} kept as they were.")
COMPRESS_FAILED_TEXT = "Could not compress the conversation; it is unchanged."
RESTARTING_TEXT = "Restarting the gateway: replies in progress finish first, then it starts again."
RESTART_DENIED_TEXT = "Only an admin can restart the gateway."
RESTART_UNAVAILABLE_TEXT = "Restarting is not available here: nothing would start the gateway again."


@dataclass(frozen=True, slots=True)
class CommandResult:
    """What a command did: `text` is the reply; `turn_begun` (`/retry`): the command recorded the
    session's last user message again with its turn marker (`store.retry_turn`), and the runner
    answers it right after the reply (`run_turn(begun=True)`); `obligation_id` (`/undo`,
    `/compress`): the reply is that delivery obligation of session `session_id`, recorded
    'attempting' with the command's change, which also finished the command's intake row, and
    the runner sends it through the ledger (`ledger.send_obligation(attempting=True)`) instead
    of as a notice, and does not finish that row again."""

    text: str
    turn_begun: bool = False
    obligation_id: int | None = None
    session_id: str | None = None


@dataclass(frozen=True, slots=True)
class CommandCall:
    """One command being run: the gateway's services, the session key, the event, the argument
    and, for the runner's bookkeeping, the queue depth (`/status`), whether `/stop` found
    something to stop, how many queued messages the command cleared and the command's intake
    row (`/undo` and `/retry` settle it in the transaction of their rewind, `/compress` in that
    of its rewrite)."""

    deps: PipelineDeps
    key: str
    event: MessageEvent
    arg: str
    queue_depth: int = 0
    stopped: bool = False
    dropped: int = 0
    inbound_id: int | None = None


Handler = Callable[[CommandCall], Awaitable[CommandResult]]


@dataclass(frozen=True, slots=True)
class Command:
    """One chat command: `/name`, its usage and help line (`/help`), its placement (module
    docstring) and its handler (None for `/queue`, which the runner turns into a turn)."""

    name: str
    usage: str
    help: str
    placement: str
    handler: Handler | None

    @property
    def help_line(self) -> str:
        return f"{self.usage} — {self.help}"


def _one_line(text: str | None) -> str:
    """`text` on one line, its whitespace runs collapsed to one space."""
    return " ".join((text or "").split())


def _short(text: str | None, limit: int = LABEL_MAX_CHARS) -> str:
    """One line of at most `limit` characters (an ellipsis marks a cut)."""
    line = _one_line(text)
    return line if len(line) <= limit else line[:limit - 1] + "…"


# ---- /new, /reset, /stop ----------------------------------------------------------------------

async def _control(call: CommandCall) -> CommandResult:
    """`/new [title]`, `/reset` or `/stop` after the runner interrupted the running turn, cleared
    the queue and stopped the background work (seed §8 "clearing").

    `/stop`: when something was stopped (`call.stopped`: a turn, a follow-up or background work)
    the session is marked `suspended` (seed §2: the next message starts a new session id) and the
    reply is "Stopped. Your next message starts a new session."; otherwise "No active task to
    stop." and nothing changes. `call.dropped` > 0 adds "Dropped N queued message(s)."."""
    name = call.event.command()[0]
    if name == "stop":
        if not call.stopped:
            return CommandResult(NOTHING_TO_STOP_TEXT)
        await store_suspend(call.deps, call.key)
        text = STOPPED_TEXT
    else:
        title = _short(call.arg, TITLE_MAX_CHARS) if name == "new" else ""
        text = await _new_session(call.deps, call.key, call.event, reason=name, title=title or None)
    if call.dropped:
        text += "\n" + DROPPED_TEXT.format(count=call.dropped)
    return CommandResult(text)


async def store_suspend(deps: PipelineDeps, key: str) -> None:
    """Mark `key` suspended (seed §2 `/stop`); a key without a session yet has nothing to mark."""
    if not await deps.store.suspend_session(key):
        log.info("/stop in %s: no session to suspend", key)
    else:
        log.info("/stop: session %s suspended", key)


async def _new_session(deps: PipelineDeps, key: str, event: MessageEvent, *, reason: str,
                       title: str | None) -> str:
    store = deps.store
    old = await maybe_await(store.get_entry(key))
    entry = await store.reset_session(key, display_name=event.source.chat_name, title=title)
    if entry is None:  # no route yet: the first session of this chat starts fresh
        entry = await store.get_or_create_session(event.source, force_new=True)
        if title:
            await store.set_session_title(entry.session_id, title)
    if old is not None:
        await call_broadcast(deps.pm, "hermes_session_finalized", timeout=deps.hook_timeout_s, entry=old)
    await call_broadcast(deps.pm, "hermes_session_reset", timeout=deps.hook_timeout_s,
                         entry=entry, reason=reason)
    if title:
        return NEW_TITLED_TEXT.format(title=title, session_id=entry.session_id)
    return NEW_SESSION_TEXT.format(session_id=entry.session_id)


# ---- /title, /resume ----------------------------------------------------------------------------

async def _title(call: CommandCall) -> CommandResult:
    title = _short(call.arg, TITLE_MAX_CHARS)
    if not title:
        return CommandResult(TITLE_EMPTY_TEXT)
    entry = await maybe_await(call.deps.store.get_entry(call.key))
    if entry is None:
        return CommandResult(NO_SESSION_TEXT)
    await call.deps.store.set_session_title(entry.session_id, title)
    log.info("session %s titled", entry.session_id)
    return CommandResult(TITLED_TEXT.format(title=title))


def _label(summary: dict, none: str = "(empty)") -> str:
    """The session as the `/resume` list names it: its title, else its first user line, else `none`."""
    return _short(summary.get("title") or summary.get("first_user_text") or none)


def _listing_line(number: int, summary: dict, current: str | None, *, in_full: bool = True) -> str:
    """One line of the `/resume` list. `in_full` False: the store sees only part of the session's
    transcript (degraded, `counts_turns_in_full`): never shown as empty (docs/behaviour.md §12)."""
    when = parse_timestamp(summary["last_activity"])
    stamp = when.strftime("%Y-%m-%d %H:%M UTC") if when is not None else "?"
    mark = " (current)" if summary["session_id"] == current else ""
    count = f"{summary['message_count']} message(s)"
    if in_full:
        return f"{number}. {_label(summary)} — {stamp}, {count}{mark}"
    return (f"{number}. {_label(summary, '(cannot be read right now)')} — {stamp}, at least {count} (earlier ones "
            f"cannot be read right now){mark}")


def _number_arg(text: str) -> int | None:
    """A command's number argument: ASCII digits only (`str.isdigit` also takes "²", which
    `int` refuses), else None."""
    return int(text) if text.isascii() and text.isdigit() else None


def _pick(sessions: list[dict], query: str) -> dict | None:
    """`/resume <n | session id | title | label>`: the n-th listed session, else the session with
    that id, else the first whose title equals `query` (typed whole, even past the
    `TITLE_MAX_CHARS` it was stored cut to, or as the list shows it), else the first untitled one
    whose listed label (`_label`: its first user line, shortened as the list shows it) or whole
    first user line equals `query` (every comparison case-insensitive)."""
    index = _number_arg(query)
    if index is not None:
        return sessions[index - 1] if 1 <= index <= len(sessions) else None
    for summary in sessions:
        if summary["session_id"] == query:
            return summary
    folded = query.casefold()
    as_titled = {folded, _short(query, TITLE_MAX_CHARS).casefold()}  # a long title is stored cut
    for summary in sessions:
        title = summary.get("title")
        if title and (title.casefold() in as_titled or _label(summary).casefold() == folded):
            return summary
    # Titles win over labels: a title the user chose must not be shadowed by another session's
    # first line. The user types what the list shows, so the shortened label matches too.
    for summary in sessions:
        if summary.get("title"):
            continue
        if folded in (_label(summary).casefold(), _one_line(summary.get("first_user_text")).casefold()):
            return summary
    return None


async def _resume(call: CommandCall) -> CommandResult:
    """List the requester's own recent sessions, or switch to one (compare-and-swap)."""
    store = call.deps.store
    # Read before any await: the switch succeeds only if the key still points here afterwards.
    entry = await maybe_await(store.get_entry(call.key))
    current = entry.session_id if entry is not None else None
    sessions = await store.recent_sessions(call.event.source, limit=RESUME_LIST_LIMIT)
    query = _one_line(call.arg)
    if not query:
        if not [s for s in sessions if s["session_id"] != current]:
            return CommandResult(RESUME_NONE_TEXT)
        lines = [_listing_line(n, s, current, in_full=store.counts_turns_in_full(s["session_id"]))
                 for n, s in enumerate(sessions, 1)]
        return CommandResult("\n".join([RESUME_HEADER, *lines, RESUME_FOOTER]))
    target = _pick(sessions, query)
    if target is None:
        return CommandResult(RESUME_NOT_FOUND_TEXT.format(query=_short(query)))
    if target["session_id"] == current:
        return CommandResult(RESUME_CURRENT_TEXT)
    if entry is None:  # a chat without a route yet gets one, then switches it
        entry = await store.get_or_create_session(call.event.source)
        current = entry.session_id
    switched = await store.switch_session(call.key, target["session_id"], expected_session_id=current)
    if switched is None:
        log.info("/resume in %s lost a race (the key no longer points at %s)", call.key, current)
        return CommandResult(RESUME_RACE_TEXT)
    call.deps.agent_cache.invalidate(call.key)
    log.info("/resume: %s switched from %s to %s", call.key, current, switched.session_id)
    return CommandResult(RESUMED_TEXT.format(label=_label(target), session_id=switched.session_id))


# ---- /undo, /retry, /compress -------------------------------------------------------------------

def _confirmation(call: CommandCall, text: Callable[[dict], str] | str) -> Confirmation:
    """The command's answer `text` (or what makes it from the change's result) as owed to its
    chat, recorded with the change (`store.ledger.Confirmation`)."""
    return Confirmation(call.key, call.event.source, call.event.message_id, text)


def _undone_text(result: dict) -> str:
    """`/undo`'s answer for the rewind's `result` (docs/behaviour.md §11)."""
    return UNDONE_TEXT.format(turns=result["turns_undone"], rows=result["rewound_count"],
                              text=_short(result["target_text"]))


async def _rewind(call: CommandCall, n: int, *, again: bool = False) -> dict | None:
    """Rewind the last `n` user turns of the key's session, or with `again` (`/retry`, n = 1)
    rewind the last one and begin it again (`store.retry_turn`); the command's intake row is
    settled in the same transaction, and without `again` (`/undo`) its answer is owed from it
    on (`obligation_id` in the result). None: nothing was rewound. The result also names the
    rewound session (`session_id`)."""
    store = call.deps.store
    entry = await maybe_await(store.get_entry(call.key))
    if entry is None:
        return None
    if again:
        result = await store.retry_turn(call.key, entry.session_id, inbound_id=call.inbound_id,
                                        platform_message_id=call.event.message_id)
    else:
        result = await store.rewind_session(entry.session_id, n, inbound_id=call.inbound_id,
                                            confirmation=_confirmation(call, _undone_text))
    if result is not None:
        result["session_id"] = entry.session_id
        # The store is canonical: the next turn rebuilds its history without the rewound rows.
        call.deps.agent_cache.invalidate_session(entry.session_id)
        call.deps.agent_cache.invalidate(call.key)
        log.info("%d turn(s) rewound in %s", result["turns_undone"], entry.session_id)
    return result


async def _undo(call: CommandCall) -> CommandResult:
    arg = call.arg.strip()
    turns = _number_arg(arg) if arg else 1
    if not turns:
        return CommandResult(UNDO_USAGE_TEXT)
    # More turns than a session can have is every turn; the store's LIMIT takes a 64-bit integer.
    result = await _rewind(call, min(turns, INT64_MAX))
    if result is None:
        return CommandResult(NOTHING_TO_UNDO_TEXT)
    return CommandResult(_undone_text(result), obligation_id=result["obligation_id"],
                         session_id=result["session_id"])


async def _retry(call: CommandCall) -> CommandResult:
    entry = await maybe_await(call.deps.store.get_entry(call.key))
    if entry is not None and entry.suspended:
        # After /stop the conversation is closed: the next message starts a new session, so a
        # retry would rewind one session and run the text in another (a wake-up's text too,
        # outside the session it is bound to; docs/behaviour.md §10).
        return CommandResult(RETRY_STOPPED_TEXT)
    # A last message without text (a file alone) is not rewound: there is nothing to send again.
    result = await _rewind(call, 1, again=True)
    if result is None:
        return CommandResult(NOTHING_TO_RETRY_TEXT)
    return CommandResult(RETRYING_TEXT.format(text=_short(result["target_text"])), turn_begun=True)


async def _compress(call: CommandCall) -> CommandResult:
    entry = await maybe_await(call.deps.store.get_entry(call.key))
    if entry is None:
        return CommandResult(NOTHING_TO_COMPRESS_TEXT)
    # The intake row is finished, and this answer owed, with the rewrite: killed before the answer
    # is sent, the next start sends it and does not run /compress again on the summary it wrote
    # (docs/behaviour.md §11).
    def compressed(summarised: int, kept: int) -> Confirmation:
        return _confirmation(call, COMPRESSED_TEXT.format(summarised=summarised, kept=kept))

    outcome = await compress_session(call.deps, call.key, entry, call.event.source, inbound_id=call.inbound_id,
                                     confirmation=compressed)
    if outcome.status == "nothing":
        return CommandResult(NOTHING_TO_COMPRESS_TEXT)
    if outcome.status == "failed":
        return CommandResult(COMPRESS_FAILED_TEXT)
    return CommandResult(COMPRESSED_TEXT.format(summarised=outcome.summarised, kept=outcome.kept),
                         obligation_id=outcome.obligation_id, session_id=entry.session_id)


# ---- /restart ------------------------------------------------------------------------------------

async def _restart(call: CommandCall) -> CommandResult:
    """Admin only (`[platforms.<id>] admin_users`, docs/behaviour.md §9): a planned restart — the
    drain with reason `restart_timeout`, then exit code 75 for the supervisor (§6)."""
    deps = call.deps
    if deps.access is None or not deps.access.is_admin(call.event):
        log.info("/restart refused in %s: the sender is not an admin", call.key)
        return CommandResult(RESTART_DENIED_TEXT)
    if deps.request_restart is None:
        return CommandResult(RESTART_UNAVAILABLE_TEXT)
    log.warning("/restart from an admin in %s: planned restart", call.key)
    # After this answer is on its way: the shutdown stops the adapters from receiving, and the
    # drain waits for answers still being sent.
    asyncio.get_running_loop().call_soon(deps.request_restart)
    return CommandResult(RESTARTING_TEXT)


# ---- /status, /help, unknown --------------------------------------------------------------------

async def _status(call: CommandCall) -> CommandResult:
    return CommandResult(await status_text(call.deps, call.key, queued=call.queue_depth))


async def _help(call: CommandCall) -> CommandResult:
    return CommandResult(help_text(call.deps, call.event.source.platform))


COMMANDS: tuple[Command, ...] = (
    Command("new", "/new [title]", "starts a new session (the old transcript is kept), optionally titled",
            CONTROL, _control),
    Command("reset", "/reset", "the same as /new", CONTROL, _control),
    Command("stop", "/stop", "stops the current reply and background work (your next message starts a "
            "new session)", CONTROL, _control),
    Command("queue", "/queue <message>", "runs a message as its own turn after the current one",
            QUEUE, None),
    Command("resume", "/resume [number | id | title | label]",
            "lists your recent sessions, or switches to one", ORDERED, _resume),
    Command("title", "/title <text>", "names the current session", ORDERED, _title),
    Command("undo", "/undo [n]", "removes your last n turns and their replies (default 1)", ORDERED, _undo),
    Command("retry", "/retry", "removes your last turn and sends that message again", ORDERED, _retry),
    Command("compress", "/compress", "replaces the older part of the conversation by a summary",
            ORDERED, _compress),
    Command("status", "/status", "shows the session key, session id, turns, tokens and queued messages",
            IMMEDIATE, _status),
    Command("help", "/help", "shows this help", IMMEDIATE, _help),
    Command("restart", "/restart", "restarts the gateway (admins only)", IMMEDIATE, _restart),
)
BY_NAME: dict[str, Command] = {c.name: c for c in COMMANDS}

def help_text(deps: PipelineDeps, platform: str) -> str:
    """The `/help` answer in a chat on `platform` (docs/behaviour.md §11): `Commands:`, then the
    help line of each command that works there — `/restart` only where something would start
    the gateway again (`deps.request_restart`; elsewhere it only answers that it is not
    available) — then the platform's own commands (`AdapterSpec.help_lines` of its adapter in
    `deps.adapters`, e.g. the terminal's `/quit`)."""
    adapter = deps.adapters.get(platform)
    spec = getattr(adapter, "spec", None)
    lines = [c.help_line for c in _available(deps)]
    return "\n".join(["Commands:", *lines, *getattr(spec, "help_lines", ())])


def unknown_text(deps: PipelineDeps, name: str) -> str:
    """The answer to an unknown `/name` (docs/behaviour.md §11): the commands that work here, as
    `/help` lists them (no `/restart` where nothing would start the gateway again). The name is
    echoed cut to `LABEL_MAX_CHARS`: it is no argument, so no length limit refused a long one,
    and the answer stays one short message. It is echoed inert (`neutralize_inline`): no
    invisible character, and a control character (an escape sequence, a bell) shown as a space."""
    return (f"Unknown command /{neutralize_inline(name, LABEL_MAX_CHARS)}. Commands: " + ", ".join(f"/{c.name}" for c in _available(deps))
            + ".")


def _available(deps: PipelineDeps) -> list[Command]:
    """The commands that work in this gateway: `/restart` only where something starts it again."""
    return [c for c in COMMANDS if c.name != "restart" or deps.request_restart is not None]


def placement_of(name: str) -> str:
    """How the runner places `/name` (an unknown command is IMMEDIATE: it only gets the help line)."""
    command = BY_NAME.get(name)
    return command.placement if command is not None else IMMEDIATE


async def run_command(deps: PipelineDeps, key: str, event: MessageEvent, *, queue_depth: int = 0,
                      stopped: bool = False, dropped: int = 0, inbound_id: int | None = None) -> CommandResult:
    """Execute the slash command in `event` for session `key`.

    Args:
        queue_depth: messages waiting in the session's queue (shown by `/status`; seed §8).
        stopped: `/stop` only: a turn, a follow-up or background work was stopped when it arrived.
        dropped: `/new`, `/reset`, `/stop`: queued human messages cleared when it arrived.
        inbound_id: the command's intake row (`/undo` and `/retry` settle it with their rewind,
            `/compress` with its rewrite).
    Returns:
        The CommandResult (reply, and for `/retry` whether its turn was begun).
    Raises:
        StoreError (from the store): the store failed; the worker reports it to the chat.
    """
    name, arg = event.command()
    command = BY_NAME.get(name)
    if command is None or command.handler is None:
        # A peer's text, said as the answer says it (`unknown_text`): one inert, short line.
        log.info("unknown command /%s in %s", neutralize_inline(name, LABEL_MAX_CHARS), key)
        return CommandResult(unknown_text(deps, name or ""))
    return await command.handler(CommandCall(deps, key, event, arg, queue_depth=queue_depth,
                                             stopped=stopped, dropped=dropped, inbound_id=inbound_id))


async def status_text(deps: PipelineDeps, key: str, *, queued: int = 0) -> str:
    """The `/status` answer: session key, session id, turns and tokens, one per line, and
    "Queued: N" (the queue depth, seed §8) when N > 0. Turns are "at least N" while the store
    runs degraded and the session's earlier turns are in the unavailable state.db
    (docs/behaviour.md §11, §12)."""
    queued_line = [f"Queued: {queued}"] if queued > 0 else []
    entry = await maybe_await(deps.store.get_entry(key))
    if entry is None:
        return "\n".join([f"Session key: {key}", NO_SESSION_TEXT] + queued_line)
    counted = await deps.store.count_turns(entry.session_id)
    turns = str(counted) if deps.store.counts_turns_in_full(entry.session_id) else (
        f"at least {counted} (earlier ones cannot be counted right now)")
    return "\n".join([
        f"Session key: {entry.session_key}",
        f"Session id: {entry.session_id}",
        f"Turns: {turns}",
        f"Tokens: {entry.total_tokens} (input {entry.input_tokens}, output {entry.output_tokens})",
    ] + queued_line)
