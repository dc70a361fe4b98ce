"""Per-session-key locks of the store's state machine (seed §2; docs/behaviour.md §2, §12).

A transition reads an entry, changes it and writes it back; it must not interleave with another
transition of the same key (two concurrent `get_or_create_session` calls create one row). It may
interleave with transitions of other keys: their writes then share a group commit instead of
waiting for each other's fsync. Whole-store operations (pruning, crash recovery, flushing the
batched touch times) hold every key at once.
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import AsyncIterator


class KeyedLocks:
    """One asyncio lock per key (created on demand, dropped when unused) plus `hold_all()`."""

    def __init__(self) -> None:
        self._locks: dict[str, list] = {}  # key -> [asyncio.Lock, holders and waiters]
        self._gate = asyncio.Lock()  # held by hold_all(); hold() passes through it
        self._active = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        """Hold `key` (waits for its current holder, and for a running `hold_all`)."""
        async with self._gate:
            item = self._locks.setdefault(key, [asyncio.Lock(), 0])
            item[1] += 1
            self._active += 1
            self._idle.clear()
        try:
            async with item[0]:
                yield
        finally:
            item[1] -= 1
            if item[1] == 0:
                self._locks.pop(key, None)
            self._active -= 1
            if self._active == 0:
                self._idle.set()

    @asynccontextmanager
    async def hold_all(self) -> AsyncIterator[None]:
        """Hold every key: waits until no key is held and keeps new holders out meanwhile.
        Never call it while holding a key (it would wait for itself)."""
        async with self._gate:
            await self._idle.wait()
            yield
