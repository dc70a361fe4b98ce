"""What the pipeline benchmarks share (bench_durability, bench_throughput): a real gateway path
(GatewayRunner + PipelineDeps + EchoAgent + a SessionStore on a fresh temporary home) driven by
a chat adapter that answers at once, and closed-loop sessions on it.

A message is `GatewayRunner.handle` (the durable acceptance an adapter waits for before
acknowledging the platform) followed by the session worker's turn, until the reply reaches the
adapter. A closed-loop session sends its next message when the previous one was answered, so
"N concurrent sessions" means N messages in flight.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator, Awaitable, Callable

from hermes_core.agents import EchoAgent
from hermes_core.model import MessageEvent, SessionSource
from hermes_core.ops.gc_tuning import restore_gc, tune_gc
from hermes_core.pipeline.deps import PipelineDeps
from hermes_core.pipeline.runner import GatewayRunner
from hermes_core.plugin_system.manager import create_plugin_manager
from hermes_core.sdk.adapter import BaseAdapter, SendResult
from hermes_core.settings import GatewayConfig
from hermes_core.store import SessionStore
from hermes_core.types import AdapterSpec

# Sessions created (warm-up messages in flight) at a time: enough to share commits, few enough
# that 10,000 sessions do not queue 10,000 turns at once.
WARM_UP_CHUNK = 1_000


class AnsweringChat(BaseAdapter):
    """Accepts every send and wakes the session loop waiting for that chat's answer."""

    spec = AdapterSpec(name="benchchat", label="Bench chat", pii_safe=True, max_message_length=4000)

    def __init__(self):
        super().__init__(None)
        self.waiting: dict[str, asyncio.Future] = {}

    async def start(self):
        pass

    async def stop(self):
        pass

    async def send(self, target, text, *, reply_to=None, metadata=None):
        future = self.waiting.pop(target.chat_id, None)
        if future is not None and not future.done():
            future.set_result(text)
        return SendResult(message_id="sent")


@dataclass
class Pipeline:
    """The gateway path of one temporary home."""

    runner: GatewayRunner
    chat: AnsweringChat
    store: SessionStore


def source(n: int) -> SessionSource:
    """The DM chat of session number `n` on the bench platform."""
    return SessionSource("benchchat", str(n), chat_type="dm", user_id=f"u{n}", user_name=f"user{n}")


@asynccontextmanager
async def open_pipeline(root: Path, store_class: type[SessionStore] = SessionStore,
                        agent_cache_size: int | None = None) -> AsyncIterator[Pipeline]:
    """A runner on a fresh home created under `root` (removed on exit, after the runner
    drained and the store closed), with the garbage collector tuned as `GatewayApp` tunes it
    (undone on exit). `store_class`: the store to run (a subclass for a baseline).
    `agent_cache_size`: `[agent.agent_cache] max_size` (None: the default, the seed's 128)."""
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        cache = {"agent": {"agent_cache": {"max_size": agent_cache_size}}} if agent_cache_size is not None else {}
        config = GatewayConfig(home=Path(tmp) / "home", platforms={"benchchat": {"allow_all": True}}, **cache)
        gc_before = tune_gc(config.core.gc_young_threshold)
        store = store_class(config.sessions_dir, config)
        await store.open()
        chat = AnsweringChat()
        pm, _report = create_plugin_manager(config)
        runner = GatewayRunner(PipelineDeps(config=config, store=store, pm=pm, agent=EchoAgent(),
                                            adapters={"benchchat": chat}))
        try:
            yield Pipeline(runner, chat, store)
        finally:
            await runner.drain(5)
            await store.close()
            restore_gc(gc_before)


async def one_message(pipe: Pipeline, src: SessionSource, number: int) -> None:
    """Send message `number` of chat `src` and return when its reply was sent."""
    answered = asyncio.get_running_loop().create_future()
    pipe.chat.waiting[src.chat_id] = answered
    await pipe.runner.handle(MessageEvent(source=src, text=f"hello number {number}",
                                          message_id=f"{src.chat_id}-{number}"))
    await answered


async def create_sessions(pipe: Pipeline, sources: list[SessionSource]) -> None:
    """One warm-up message per source (it creates the session), `WARM_UP_CHUNK` at a time."""
    for start in range(0, len(sources), WARM_UP_CHUNK):
        await asyncio.gather(*(one_message(pipe, s, 0) for s in sources[start:start + WARM_UP_CHUNK]))


async def run_loops(count: int, seconds: float, message: Callable[[int, int], Awaitable[None]]) -> tuple[int, float]:
    """`count` closed loops: loop `n` awaits `message(n, 1)`, `message(n, 2)`, … one after the
    other while `seconds` of wall time have not passed; returns when the messages in flight at
    the deadline were done too.

    Returns:
        (messages done, seconds from the start until the last was done).
    """
    done = 0
    started = time.perf_counter()
    deadline = started + seconds

    async def loop(n: int) -> None:
        nonlocal done
        number = 1
        while time.perf_counter() < deadline:
            await message(n, number)
            done += 1
            number += 1

    await asyncio.gather(*(loop(n) for n in range(count)))
    return done, time.perf_counter() - started


async def closed_loops(pipe: Pipeline, sources: list[SessionSource], seconds: float) -> tuple[int, float]:
    """Every source sends messages 1, 2, … one after the other (`run_loops`) until the reply to
    each was sent. Returns (messages answered, seconds from the start until the last answer)."""
    return await run_loops(len(sources), seconds, lambda n, number: one_message(pipe, sources[n], number))
