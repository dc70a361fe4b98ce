"""`hermes-gateway chat`: the gateway on the local platform, in this terminal.

Each line of stdin is one message. The command returns when input ends (end of file, `/quit`,
`/exit`) and every message read has been answered, or on Ctrl-C / SIGTERM (the running turn is
drained or marked for resumption; one line on stderr says so at once, and a second Ctrl-C
quits immediately with exit code 130). Because the local source is always the same, the next
`chat` continues the same session and transcript.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any, Callable

from ..app import GatewayApp
from ..pipeline.deps import maybe_await
from ..platforms.local import LocalAdapter
from .common import held_terminal_log, log


async def run_chat(config: Any, *, install_signals: Callable[[asyncio.Event], None] | None = None,
                   stdin=None, stdout=None) -> None:
    """Run a terminal chat until input ends or a stop signal arrives.

    Raises:
        StartupError: the gateway could not start (one line).
    """
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    interactive = stdin.isatty() and stdout.isatty()
    # A terminal gets a real line editor (history, arrows, Ctrl-L); piped input stays plain.
    adapter = LocalAdapter(stdin=stdin, stdout=stdout,
                           line_editor=interactive and stdin is sys.stdin and stdout is sys.stdout)
    gateway = GatewayApp(config, adapters={"local": adapter})
    stop = asyncio.Event()
    if install_signals is not None:
        install_signals(stop)
    else:
        install_interrupt_handlers(stop, gateway)
    with held_terminal_log():  # a failed start prints one line, not the warnings leading to it
        await gateway.start()
    try:
        if interactive:
            await _banner(gateway, adapter, stdout)
            adapter.prompt = "> "  # prompts only on a terminal, after the banner
            adapter.write_prompt()
        # Read now even while another replica receives for the terminal (its ingress lease,
        # docs/adapters.md §6): an end of input must end this chat while it waits too.
        adapter.read_ahead()
        input_done = asyncio.ensure_future(_input_finished(gateway, adapter))
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait({input_done, stopped}, return_when=asyncio.FIRST_COMPLETED)
        for fut in (input_done, stopped):
            fut.cancel()
    finally:
        await gateway.stop()


# The drain gives the running reply `[scheduler] drain_timeout_s` seconds to finish; only a turn
# still running after that is marked for resumption (seed §7 "drain timeout marking").
STOPPING_BUSY = ("Stopping… the running reply has {seconds:g} s to finish, otherwise it resumes at the "
                 "next start (press Ctrl-C again to quit now)")
STOPPING_IDLE = "Stopping…"
RESTART_IGNORED = ("A planned restart (SIGUSR1) is not available in a terminal chat: nothing would start it "
                   "again; the chat goes on.")
FORCED_EXIT_CODE = 130  # 128 + SIGINT, what shells report for a Ctrl-C'd command


def install_interrupt_handlers(stop: asyncio.Event, gateway: GatewayApp, *, stderr=None) -> None:
    """Ctrl-C / SIGTERM in `chat`: the first one prints one line on stderr at once and starts the
    graceful stop (`stop` is set: the running turn gets `[scheduler] drain_timeout_s` to
    finish, then is marked for resumption); a second Ctrl-C exits immediately with code 130. That is safe: every
    accepted message and the turn marker are already committed to SQLite, so the next start
    resumes the interrupted turn, and the kernel releases the home lock. SIGUSR1 (a planned
    restart, which only `run` can do) prints one line and changes nothing.

    No-op where the loop cannot take signal handlers (not the main thread)."""
    loop = asyncio.get_running_loop()
    err = stderr or sys.stderr

    def on_signal(signum: int) -> None:
        if stop.is_set():
            if signum == signal.SIGINT:
                _force_exit()
            return
        log.info("stop requested (%s)", signal.Signals(signum).name)
        busy = gateway.runner is not None and bool(gateway.runner.busy_sessions())
        seconds = gateway.config.scheduler.drain_timeout_s
        # The stop first: the line is for a person, and a closed stderr must not cancel the stop.
        stop.set()
        _tell(err, STOPPING_BUSY.format(seconds=seconds) if busy else STOPPING_IDLE)

    def on_restart_signal() -> None:
        # SIGUSR1 is `run`'s planned restart; its default action would kill the chat mid-turn.
        _tell(err, RESTART_IGNORED)

    for signum, handler, args in ((signal.SIGINT, on_signal, (signal.SIGINT,)),
                                  (signal.SIGTERM, on_signal, (signal.SIGTERM,)),
                                  (signal.SIGUSR1, on_restart_signal, ())):
        try:
            loop.add_signal_handler(signum, handler, *args)
        except (NotImplementedError, RuntimeError):
            pass


def _tell(err, line: str) -> None:
    """Write one line for the person at the terminal; a stderr nobody reads any more (closed
    pipe, EPIPE) is logged, never raised into the signal handler."""
    try:
        err.write(line + "\n")
        err.flush()
    except (OSError, ValueError) as exc:
        log.info("could not write to stderr (%s): %s", type(exc).__name__, line)


def _force_exit() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(FORCED_EXIT_CODE)


async def _input_finished(gateway: GatewayApp, adapter: LocalAdapter) -> None:
    """The input ended: piped lines already read are answered first (a script), unless nobody
    reads the answers any more (`chat | head`): then the stop's drain finishes the running turn
    and the rest stays in the intake for the next start."""
    await adapter.wait_input_ended()  # not a pause: a replica's terminal may stop and go on (docs/adapters.md §6)
    if not adapter.output_closed:
        await gateway.runner.join()


async def _banner(gateway: GatewayApp, adapter: LocalAdapter, stdout) -> None:
    key = gateway.store.session_key(adapter.source)
    entry = await maybe_await(gateway.store.get_entry(key))
    if entry is None:
        line = "hermes-gateway chat: new conversation. /help for commands, /quit to leave."
    else:
        turns = await gateway.store.count_turns(entry.session_id)
        line = (f"hermes-gateway chat: continuing session {entry.session_id} "
                f"({turns} turn{'' if turns == 1 else 's'}). "
                "/help for commands, /quit to leave.")
    stdout.write(line + "\n")
    stdout.flush()
