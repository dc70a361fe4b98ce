"""Fakes for tests of the core and of plugins: a recording adapter, the gateway side of an
adapter (`FakeGateway`), a controllable clock and a model backend that answers when told
(`HeldEchoAgent`).

These stand in for the *outside world* (a chat platform, the wall clock), never for the
component under test.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, ClassVar

from ..agents.echo import EchoAgent
from ..model.events import MessageEvent
from ..model.identity import IdentityAlias
from ..sdk.adapter import BaseAdapter, SendResult
from ..types import AdapterSpec


class GatewayRefused(RuntimeError):
    """What `FakeGateway` raises for a message it refuses (as the real gateway raises when it
    cannot persist one): the adapter must not acknowledge the platform."""


class FakeGateway:
    """The gateway side of an adapter: its inbound handler, alias recorder and delivery reporter.

    `attach(adapter)` binds them. Every accepted event is appended to `events`, every recorded
    alias to `aliases`, every delivery report to `reports` as `(platform, message_id, status,
    error)`. Knobs:
        refuse: refuse (raise `GatewayRefused`) the next N events; `refused` counts refusals.
        hold: an `asyncio.Event`; while it is set here and not yet fired, `emit` waits inside the
            gateway (`in_emit` counts the waiting calls), so a test can check that the adapter
            has not acknowledged the platform before `emit` returned.
    """

    def __init__(self, refuse: int = 0) -> None:
        self.events: list[MessageEvent] = []
        self.aliases: list[IdentityAlias] = []
        self.reports: list[tuple[str, str, str, str | None]] = []
        self.refuse = refuse
        self.refused = 0
        self.hold: asyncio.Event | None = None
        self.in_emit = 0

    def attach(self, adapter: BaseAdapter) -> BaseAdapter:
        """Bind this gateway to `adapter` (inbound handler, alias recorder, delivery reporter);
        returns it."""
        adapter.bind(self, record_aliases=self.record_aliases, report_delivery=self.report_delivery)
        return adapter

    async def __call__(self, event: MessageEvent) -> None:
        if self.refuse > 0:
            self.refuse -= 1
            self.refused += 1
            raise GatewayRefused("the gateway could not persist the message (test refusal)")
        self.in_emit += 1
        try:
            if self.hold is not None:
                await self.hold.wait()
        finally:
            self.in_emit -= 1
        self.events.append(event)

    async def record_aliases(self, aliases) -> int:
        """Record `aliases` (IdentityAlias records); returns how many."""
        batch = list(aliases)
        self.aliases.extend(batch)
        return len(batch)

    async def report_delivery(self, platform: str, message_id: str, status: str, error: str | None) -> None:
        """Record one delivery report (the real gateway settles the ledger); returns None."""
        self.reports.append((platform, message_id, status, error))
        return None

    def texts(self) -> list[str]:
        """The texts of the accepted events, in order."""
        return [event.text for event in self.events]


@dataclass(frozen=True, slots=True)
class SentMessage:
    """One recorded `send`: the target's raw ids, the text and the reply anchor."""

    platform: str
    chat_id: str
    thread_id: str | None
    text: str
    reply_to: str | None
    metadata: dict[str, Any] | None
    message_id: str


class CapturingAdapter(BaseAdapter):
    """An adapter that records every `send` instead of talking to a platform.

    Class attribute `spec` is a "fake" platform (4096 chars, pii_safe). Use `with_spec(...)` for
    another limit or unit. `fail_with` is a list of exceptions raised by the next sends, one per
    call, before sends succeed again (e.g. `[RetryAfter(3)]`).

    Attributes:
        sent: the recorded `SentMessage`s, in send order.
        started / stopped: how many times start / stop changed state.
    """

    spec: ClassVar[AdapterSpec] = AdapterSpec(name="fake", label="Fake", pii_safe=True,
                                              max_message_length=4096, length_unit="chars",
                                              capabilities=frozenset({"threads"}))

    def __init__(self, settings=None, *, on_message=None):
        super().__init__(settings, on_message=on_message)
        self.sent: list[SentMessage] = []
        self.fail_with: list[BaseException] = []
        self.running = False
        self.started = 0
        self.stopped = 0
        self._counter = 0

    @classmethod
    def with_spec(cls, **changes: Any) -> type["CapturingAdapter"]:
        """A subclass whose spec has `changes` applied (e.g. `max_message_length=10`)."""
        spec = dataclasses.replace(cls.spec, **changes)
        return type(f"{cls.__name__}_{spec.name}", (cls,), {"spec": spec})

    async def start(self) -> None:
        if not self.running:
            self.running = True
            self.started += 1

    async def stop(self) -> None:
        if self.running:
            self.running = False
            self.stopped += 1

    async def send(self, target, text, *, reply_to=None, metadata=None) -> SendResult:
        await asyncio.sleep(0)  # a real send yields to the loop; ordering must survive that
        if self.fail_with:
            raise self.fail_with.pop(0)
        self._counter += 1
        message_id = str(self._counter)
        self.sent.append(SentMessage(target.platform, target.chat_id, target.thread_id, text,
                                     reply_to, metadata, message_id))
        return SendResult(message_id=message_id)

    async def health(self) -> dict[str, Any]:
        return {"ok": self.running, "sent": len(self.sent)}

    def texts(self) -> list[str]:
        """The texts sent, in order."""
        return [m.text for m in self.sent]


@dataclass
class FakeClock:
    """A clock tests move by hand. Call it (or `.now()`) for the current aware UTC datetime.

    `sleep(seconds)` advances the clock instead of waiting and records the wait in `sleeps`,
    so retry-after handling can be checked without real delays.
    """

    current: datetime = field(default_factory=lambda: datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc))
    sleeps: list[float] = field(default_factory=list)

    def __call__(self) -> datetime:
        return self.current

    def now(self) -> datetime:
        """The current time (aware UTC)."""
        return self.current

    def monotonic(self) -> float:
        """Seconds since the epoch of `current` (monotonic while only `advance` moves it)."""
        return self.current.timestamp()

    def advance(self, seconds: float) -> datetime:
        """Move the clock forward by `seconds` (>= 0) and return the new time."""
        if seconds < 0:
            raise ValueError("a clock cannot go backwards")
        self.current += timedelta(seconds=seconds)
        return self.current

    async def sleep(self, seconds: float) -> None:
        """Record the wait and advance the clock; yields to the loop once."""
        self.sleeps.append(seconds)
        self.advance(seconds)
        await asyncio.sleep(0)


class HeldEchoAgent(EchoAgent):
    """The echo agent as a slow model backend: each turn starts (its message is appended to
    `started`) and then answers only once `release` is set, so a test can send more messages
    while a turn runs (busy input, docs/behaviour.md §5)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.started: list[str] = []

    async def _generate(self, context, history, message, system_context):
        self.started.append(message)
        await self.release.wait()
        return await super()._generate(context, history, message, system_context)
