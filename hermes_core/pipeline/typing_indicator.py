"""The typing indicator while a turn runs (docs/plugins.md "capabilities").

An adapter whose spec lists the `"typing"` capability implements `send_typing(target)`; the core
calls it when the agent starts and then every `TYPING_REFRESH_S` seconds until the turn ends
(platforms drop the indicator after about 5 s: Telegram's `sendChatAction` lasts 5 s, Discord's
typing 10 s). A failing indicator is cosmetic: it is logged once per turn and never stops the turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, AsyncIterator

from ..types import CAP_TYPING

log = logging.getLogger(__name__)

# Seconds between two `send_typing` calls of one turn.
TYPING_REFRESH_S = 4.0


async def _keep_typing(adapter: Any, target: Any, interval_s: float) -> None:
    warned = False
    while True:
        try:
            await adapter.send_typing(target)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not warned:
                log.warning("%s typing indicator failed (%s); the turn goes on without it",
                            adapter.spec.name, type(exc).__name__)
                warned = True
        await asyncio.sleep(interval_s)


@contextlib.asynccontextmanager
async def typing_while(adapter: Any, target: Any, *, interval_s: float = TYPING_REFRESH_S) -> AsyncIterator[None]:
    """Show "typing…" in `target`'s chat for the duration of the `async with` body, when the
    adapter has the `"typing"` capability; otherwise do nothing."""
    if CAP_TYPING not in getattr(adapter.spec, "capabilities", ()):
        yield
        return
    task = asyncio.create_task(_keep_typing(adapter, target, interval_s), name=f"typing-{adapter.spec.name}")
    await asyncio.sleep(0)  # the first indicator goes out even when the agent answers at once
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
