"""Shared pieces of the in-process pipeline tests: the "testchat" adapters that record what the
gateway sends, an agent that never answers, a hand-moved clock, and small drivers of a real
GatewayApp. They stand in for the chat platform and the model, never for the pipeline.

`hermes_core.testing.fakes.CapturingAdapter` / `FakeClock` are not drop-ins here: the tests
compare plain tuples of what was sent on the "testchat" platform and move `clock.now` by hand."""

from __future__ import annotations

import asyncio
import os
from datetime import datetime, timezone

from hermes_core.agents.base import Agent, AgentReply
from hermes_core.app import GatewayApp
from hermes_core.model import MessageEvent, SessionSource, TokenUsage
from hermes_core.sdk.adapter import BaseAdapter, SendResult
from hermes_core.settings import GatewayConfig
from hermes_core.types import AdapterSpec

KEY = "agent:main:testchat:dm:100"
"""The session key of `dm()` (default chat "100")."""


class RecordingAdapter(BaseAdapter):
    """Collects every send as (chat_id, text, reply_to).

    Args:
        limit: another `max_message_length` (characters) for splitting tests; None keeps 4000.
    """

    spec = AdapterSpec(name="testchat", label="Test chat", pii_safe=True, max_message_length=4000)

    def __init__(self, limit: int | None = None):
        super().__init__(None)
        if limit is not None:
            self.spec = AdapterSpec(name="testchat", label="Test chat", max_message_length=limit)
        self.sent: list[tuple[str, str, str | None]] = []
        self.started = self.stopped = False

    async def start(self):
        self.started = True

    async def stop(self):
        self.stopped = True

    async def send(self, target, text, *, reply_to=None, metadata=None):
        self.sent.append((target.chat_id, text, reply_to))
        return SendResult(message_id=str(len(self.sent)))

    def texts(self, chat_id: str | None = None) -> list[str]:
        """The texts sent (to `chat_id` only, when given), in order."""
        return [t for c, t, _ in self.sent if chat_id is None or c == chat_id]


class ChatAdapter(BaseAdapter):
    """Collects every send as (text, reply_to): the tests that use it talk to one chat."""

    spec = AdapterSpec(name="testchat", label="Test chat", pii_safe=True, max_message_length=4000)

    def __init__(self):
        super().__init__(None)
        self.sent: list[tuple[str, str | None]] = []

    async def start(self):
        return None

    async def stop(self):
        return None

    async def send(self, target, text, *, reply_to=None, metadata=None):
        self.sent.append((text, reply_to))
        return SendResult(message_id=str(len(self.sent)))

    def texts(self) -> list[str]:
        """The texts sent, in order."""
        return [t for t, _ in self.sent]


class BlockingAgent(Agent):
    """Never answers: every turn runs until it is cancelled (e.g. when the drain timeout cuts it
    off). `started` lists the messages whose turns began, in order."""

    def __init__(self):
        super().__init__()
        self.started: list[str] = []

    async def _generate(self, context, history, message, system_context):
        self.started.append(message)
        await asyncio.Event().wait()
        return AgentReply("unreachable", TokenUsage())


class HeldAgent(Agent):
    """Each turn waits for its message's gate. An interrupted turn records itself and then waits
    for `let_interrupted_end` before it really ends, so the test decides when the next turn may
    start (follow-ups sent meanwhile are certain to find the interrupted turn still running)."""

    def __init__(self):
        super().__init__()
        self.gates: dict[str, asyncio.Event] = {}
        self.started: list[str] = []
        self.interrupted: list[str] = []
        self.let_interrupted_end = asyncio.Event()

    def gate(self, message: str) -> asyncio.Event:
        return self.gates.setdefault(message, asyncio.Event())

    def open(self, *messages: str) -> None:
        for message in messages:
            self.gate(message).set()

    async def _generate(self, context, history, message, system_context):
        self.started.append(message)
        try:
            await self.gate(message).wait()
        except asyncio.CancelledError:
            self.interrupted.append(message)
            await self.let_interrupted_end.wait()
            raise
        return AgentReply("ok " + message, TokenUsage(input_tokens=1, output_tokens=2))


class Clock:
    """A clock the test moves by assigning `now` (an aware UTC datetime; 2026-03-01 12:00 unless
    `now` is given). Call it for the current time."""

    def __init__(self, now: datetime | None = None):
        self.now = now or datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)

    def __call__(self):
        return self.now


class SecondsClock:
    """A clock in plain seconds (float) for the agent cache; the test sets `t` by hand."""

    def __init__(self, t: float = 0.0):
        self.t = t

    def __call__(self):
        return self.t


def dm(chat_id="100", user="u100", name="Ann"):
    """The source of a direct message on "testchat"."""
    return SessionSource("testchat", chat_id, chat_type="dm", user_id=user, user_name=name)


async def start_app(home, adapter, agent, **config):
    """Start a GatewayApp on `home` (no watcher) with `adapter` as "testchat"; `config` are
    GatewayConfig overrides (default `platforms`: every testchat sender allowed). Returns the
    started app."""
    config.setdefault("platforms", {"testchat": {"allow_all": True}})
    cfg = GatewayConfig(home=home, **config)
    app = GatewayApp(cfg, adapters={"testchat": adapter}, agent=agent, watcher=False)
    await app.start()
    return app


async def say(app, source, text, message_id=None):
    """Hand one message to the runner and wait until every turn has ended."""
    await app.runner.handle(MessageEvent(source=source, text=text, message_id=message_id))
    await app.runner.join()


async def until(predicate):
    """Wait (at most 10 s, then TimeoutError) until `predicate()` is true."""
    async with asyncio.timeout(10):
        while not predicate():
            await asyncio.sleep(0.005)


def statm(anon_kib: int, shared_kib: int = 10240) -> str:
    """A `/proc/self/statm` line (pages: size resident shared text lib data dt) whose resident
    minus shared pages are `anon_kib` KiB of anonymous memory."""
    page_kib = os.sysconf("SC_PAGE_SIZE") // 1024
    shared = shared_kib // page_kib
    resident = shared + anon_kib // page_kib
    return f"{resident * 4} {resident} {shared} 1 0 {resident} 0\n"
