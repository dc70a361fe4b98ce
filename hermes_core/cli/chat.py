"""`hermes-gateway chat`: the gateway on the local platform, in this terminal.

Each line of stdin is one message. The command returns when input ends (end of file, `/quit`,
`/exit`) and every message read has been answered, or on Ctrl-C / SIGTERM (the running turn is
drained or marked for resumption). Because the local source is always the same, the next
`chat` continues the same session and transcript.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any, Callable

from ..app import GatewayApp
from ..pipeline.deps import maybe_await
from ..platforms.local import LocalAdapter


async def run_chat(config: Any, *, install_signals: Callable[[asyncio.Event], None] | None = None,
                   stdin=None, stdout=None) -> None:
    """Run a terminal chat until input ends or a stop signal arrives.

    Raises:
        StartupError: the gateway could not start (one line).
    """
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    interactive = stdin.isatty() and stdout.isatty()
    adapter = LocalAdapter(stdin=stdin, stdout=stdout)
    gateway = GatewayApp(config, adapters={"local": adapter})
    stop = asyncio.Event()
    if install_signals is not None:
        install_signals(stop)
    await gateway.start()
    try:
        if interactive:
            await _banner(gateway, adapter, stdout)
            adapter.prompt = "> "  # prompts only on a terminal, after the banner
            adapter.write_prompt()
        input_done = asyncio.ensure_future(_input_finished(gateway, adapter))
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait({input_done, stopped}, return_when=asyncio.FIRST_COMPLETED)
        for fut in (input_done, stopped):
            fut.cancel()
    finally:
        await gateway.stop()


async def _input_finished(gateway: GatewayApp, adapter: LocalAdapter) -> None:
    await adapter.wait_closed()
    await gateway.runner.join()


async def _banner(gateway: GatewayApp, adapter: LocalAdapter, stdout) -> None:
    key = gateway.store.session_key(adapter.source)
    entry = await maybe_await(gateway.store.get_entry(key))
    if entry is None:
        line = "hermes-gateway chat: new conversation. /help for commands, /quit to leave."
    else:
        turns = await gateway.store.count_turns(entry.session_id)
        line = (f"hermes-gateway chat: continuing session {entry.session_id} ({turns} turns). "
                "/help for commands, /quit to leave.")
    stdout.write(line + "\n")
    stdout.flush()
