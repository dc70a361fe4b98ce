"""CPU seconds spent in worker threads on behalf of one piece of work (docs/behaviour.md §3).

Why CPU and not wall time: the sessions.json mirror bounds its own cost by how long a rewrite
took. Under load a rewrite's worker threads wait for the interpreter lock and the event loop far
longer than they compute, so wall time made a 0.1 s rewrite look like 15 s and deferred the next
one by minutes. `time.thread_time()` counts only what the thread itself computed.

`measure()` opens a meter in the current context; `in_thread(fn, *args)` runs `fn` in a worker
thread (`asyncio.to_thread`, which carries the context over) and adds that thread's CPU time to
the meter open at the call, if any.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, TypeVar

T = TypeVar("T")


class CpuMeter:
    """CPU seconds (`seconds`, float) added by the `in_thread` calls made while it was open."""

    __slots__ = ("seconds",)

    def __init__(self) -> None:
        self.seconds = 0.0


_METER: contextvars.ContextVar[CpuMeter | None] = contextvars.ContextVar("hermes_store_cpu_meter", default=None)


@contextmanager
def measure() -> Iterator[CpuMeter]:
    """Open a CpuMeter for the `in_thread` calls awaited inside the block."""
    meter = CpuMeter()
    token = _METER.set(meter)
    try:
        yield meter
    finally:
        _METER.reset(token)


async def in_thread(fn: Callable[..., T], *args: Any) -> T:
    """`await asyncio.to_thread(fn, *args)`, metered (module docstring). Exceptions of `fn` propagate."""
    meter = _METER.get()

    def timed() -> T:
        started = time.thread_time()
        try:
            return fn(*args)
        finally:
            if meter is not None:
                meter.seconds += time.thread_time() - started

    return await asyncio.to_thread(timed)
