"""Per-session-key locks of the store's state machine (seed §2; docs/behaviour.md §2, §12).

A transition reads an entry, changes it and writes it back; it must not interleave with another
transition of the same key (two concurrent `get_or_create_session` calls create one row). It may
interleave with transitions of other keys: their writes then share a group commit instead of
waiting for each other's fsync. Whole-store operations (pruning, crash recovery, flushing the
batched touch times) hold every key at once.

Every message takes a key's lock several times, so `hold` is a plain class, not a generator
context manager, and a key nobody else holds is taken without suspending (docs/behaviour.md §12).
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import AsyncIterator


class _Slot:
    """A key's lock and how many tasks hold it or wait for it (the slot goes with the last)."""

    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


class _Hold:
    """`async with locks.hold(key)`: registers with the KeyedLocks, then takes the key's lock."""

    __slots__ = ("_owner", "_key", "_slot")

    def __init__(self, owner: "KeyedLocks", key: str) -> None:
        self._owner, self._key, self._slot = owner, key, None

    async def __aenter__(self) -> None:
        owner = self._owner
        if owner._all_wanted:
            # A hold_all is running or waiting: new holders queue behind it.
            async with owner._gate:
                self._register(owner)
        else:
            self._register(owner)
        try:
            await self._slot.lock.acquire()
        except BaseException:
            self._leave()
            raise

    def _register(self, owner: "KeyedLocks") -> None:
        slot = owner._locks.get(self._key)
        if slot is None:
            slot = owner._locks[self._key] = _Slot()
        slot.users += 1
        owner._active += 1
        owner._idle.clear()
        self._slot = slot

    def _leave(self) -> None:
        owner, slot = self._owner, self._slot
        slot.users -= 1
        if slot.users == 0:
            owner._locks.pop(self._key, None)
        owner._active -= 1
        if owner._active == 0:
            owner._idle.set()

    async def __aexit__(self, *exc: object) -> None:
        self._slot.lock.release()
        self._leave()


class KeyedLocks:
    """One asyncio lock per key (created on demand, dropped when unused) plus `hold_all()`."""

    def __init__(self) -> None:
        self._locks: dict[str, _Slot] = {}
        self._gate = asyncio.Lock()  # held by hold_all(); hold() passes through it meanwhile
        self._all_wanted = 0  # hold_all() calls running or waiting for the gate
        self._active = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def hold(self, key: str) -> _Hold:
        """`async with locks.hold(key)`: hold `key` (waits for its current holder, and for a
        running or waiting `hold_all`)."""
        return _Hold(self, key)

    @asynccontextmanager
    async def hold_all(self) -> AsyncIterator[None]:
        """Hold every key: waits until no key is held and keeps new holders out meanwhile.
        Never call it while holding a key (it would wait for itself)."""
        self._all_wanted += 1
        try:
            async with self._gate:
                await self._idle.wait()
                yield
        finally:
            self._all_wanted -= 1
