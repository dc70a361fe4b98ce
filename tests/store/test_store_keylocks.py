"""The store's per-key locks (`store.keylocks`; docs/behaviour.md §2, §12): one transition of a key
at a time, `hold_all` alone, and nothing left behind by a waiter that gives up."""

from __future__ import annotations

import asyncio
import random

import pytest

from hermes_core import SessionSource
from hermes_core.store.keylocks import KeyedLocks

# Not a speed limit: what turns a deadlock into a failure instead of a hung test run.
DEADLOCK_S = 30


def _unused(locks: KeyedLocks) -> bool:
    """No slot, no holder, no hold_all: what a KeyedLocks looks like when nobody uses it."""
    return locks._locks == {} and locks._idle.is_set() and locks._all_wanted == 0 and not locks._gate.locked()


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_hold_all_waits_for_holders_and_new_holders_wait_for_it():
    locks, order = KeyedLocks(), []
    release_a = asyncio.Event()

    async def holder(name, key, until=None):
        async with locks.hold(key):
            order.append(name + " in")
            if until is not None:
                await until.wait()
            order.append(name + " out")

    async def whole():
        async with locks.hold_all():
            order.append("all in")
            await asyncio.sleep(0)
            order.append("all out")

    a = asyncio.create_task(holder("a", "k1", release_a))
    await _settle()
    everything = asyncio.create_task(whole())
    await _settle()
    c = asyncio.create_task(holder("c", "k2"))  # a free key, yet behind the waiting hold_all
    await _settle()
    assert order == ["a in"]
    release_a.set()
    async with asyncio.timeout(DEADLOCK_S):
        await asyncio.gather(a, everything, c)
    assert order == ["a in", "a out", "all in", "all out", "c in", "c out"]
    assert _unused(locks)


async def test_waiters_that_give_up_leave_nothing_behind():
    locks = KeyedLocks()
    release = asyncio.Event()

    async def hold(key):
        async with locks.hold(key):
            await release.wait()

    async def hold_everything():
        async with locks.hold_all():
            await release.wait()

    first = asyncio.create_task(hold("k"))
    await _settle()
    on_the_key = asyncio.create_task(hold("k"))      # queued on the key's lock
    everything = asyncio.create_task(hold_everything())  # waiting for "k" to be free
    await _settle()
    at_the_gate = asyncio.create_task(hold("other"))  # queued behind the hold_all
    await _settle()
    for task in (on_the_key, everything, at_the_gate):
        task.cancel()
    await asyncio.gather(on_the_key, everything, at_the_gate, return_exceptions=True)
    assert list(locks._locks) == ["k"]  # the first holder's slot only
    late = asyncio.create_task(hold("other"))  # nothing in the way any more: no gate to queue at
    await _settle()
    assert list(locks._locks) == ["k", "other"]
    release.set()
    async with asyncio.timeout(DEADLOCK_S):
        await asyncio.gather(first, late)
    assert _unused(locks)


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_random_transitions_and_hold_alls_never_overlap(seed):
    rnd, locks = random.Random(seed), KeyedLocks()
    inside: dict[str, int] = {}
    overlaps = []

    async def transition(key):
        async with locks.hold(key):
            inside[key] = inside.get(key, 0) + 1
            if inside[key] != 1 or inside.get("*"):
                overlaps.append(key)
            try:
                for _ in range(rnd.randint(0, 3)):
                    await asyncio.sleep(0)
            finally:
                inside[key] -= 1

    async def whole():
        async with locks.hold_all():
            if any(inside.values()):
                overlaps.append("*")
            inside["*"] = 1
            try:
                await asyncio.sleep(0)
            finally:
                inside["*"] = 0

    tasks = []
    for _ in range(400):
        draw = rnd.random()
        tasks.append(asyncio.create_task(whole() if draw < 0.05 else
                                         transition("hot" if draw < 0.5 else f"k{rnd.randint(0, 9)}")))
        if rnd.random() < 0.3:
            await asyncio.sleep(0)
        if rnd.random() < 0.1:
            rnd.choice(tasks).cancel()
    async with asyncio.timeout(DEADLOCK_S):
        results = await asyncio.gather(*tasks, return_exceptions=True)
    assert [r for r in results if r is not None and not isinstance(r, asyncio.CancelledError)] == []
    assert overlaps == []
    assert _unused(locks)


async def test_concurrent_transitions_while_whole_store_operations_run(store, clock):
    # one key hit 30 times at once, 30 keys once each, with prunes, touch flushes and crash
    # recovery (the store's hold_all users) in between: one session for the hot key, no key
    # left held, nothing stuck.
    def source(chat):
        return SessionSource(platform="telegram", chat_id=chat, chat_type="dm", user_id=chat)

    first = await store.get_or_create_session(source("hot"))
    clock.advance(60)
    work = [store.get_or_create_session(source("hot")) for _ in range(30)]
    work += [store.get_or_create_session(source(f"c{i}")) for i in range(30)]
    work[10:10] = [store.prune_old_entries(30), store._flush_touched(), store.recover_interrupted_turns(3600)]
    work[40:40] = [store.prune_old_entries(30), store._flush_touched()]
    async with asyncio.timeout(DEADLOCK_S):
        results = await asyncio.gather(*work)
    hot = [r for r in results if getattr(r, "session_key", None) == first.session_key]
    assert {e.session_id for e in hot} == {first.session_id}
    assert len(hot) == 30
    assert await store._b().db.fetchval("SELECT COUNT(*) FROM routes") == 31
    assert await store._b().db.fetchval("SELECT COUNT(*) FROM sessions") == 31
    assert _unused(store._locks)
