"""The cyclic garbage collector's young-generation threshold for a gateway process
(`[core] gc_young_threshold`; docs/behaviour.md §12 "Garbage collection").

CPython runs a young collection every 700 net container allocations by default, and every tenth
of those a middle one, every tenth of those (and once the survivors grew by a quarter) a full one.
A collection traverses every live object of its generations, and a busy gateway keeps many alive
that are not garbage: each turn in flight holds its task, coroutine frames, futures, entry and
transcript. At 10,000 concurrent sessions that made the collector the largest single cost of a
message — a full collection took about 0.35 s and ran every second or so — while nearly all the
gateway's garbage is freed by reference counting the moment it is dropped. Raising the young
threshold makes every generation run that much less often; the middle and full thresholds keep
their ratios (and the full collection its "grew by a quarter" rule), so cyclic garbage is still
collected, later.

**The threshold follows the live heap.** A fixed threshold is only right for one load: the turns
in flight live for seconds under load, so once they hold more objects than the threshold, every
young collection traverses a full generation of live objects and frees almost nothing (at 10,000
sessions, about 75 ms per collection, one a second, and a middle one of about 0.5 s every ten).
So after each young collection the threshold is set to `YOUNG_PER_SURVIVOR` times the objects
that survived young collections and are still alive (the middle generation), never below the
configured value: a collection then comes after that many more net allocations, its traversal
costs about what the previous one kept, and the collector's share of the work stays bounded
whatever the number of turns in flight. When the load falls, the survivors and so the threshold
fall back to the configured value.
"""

from __future__ import annotations

import gc
import logging
from typing import Any

log = logging.getLogger(__name__)

# Net allocations allowed before the next young collection, per object that survived the last
# ones (module docstring): 2 keeps the cyclic garbage that may wait for a collection to at most
# about twice the live young heap.
YOUNG_PER_SURVIVOR = 2
_C_INT_MAX = 2**31 - 1  # gc.set_threshold takes a C int


class _FollowLiveHeap:
    """The `gc.callbacks` entry that re-sets the young threshold after each young collection
    (module docstring), never below `floor`."""

    def __init__(self, floor: int) -> None:
        self.floor = floor

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase != "stop" or info.get("generation") != 0:
            return  # a middle or full collection empties the middle generation: nothing to read
        young, middle, old = gc.get_threshold()
        wanted = min(_C_INT_MAX, max(self.floor, YOUNG_PER_SURVIVOR * len(gc.get_objects(generation=1))))
        if wanted != young:
            gc.set_threshold(wanted, middle, old)


# One entry per `tune_gc` not yet undone, innermost last (None: that call left the thresholds
# fixed); only the innermost follows the heap. A benchmark tunes the process once and each
# pipeline it opens again, like a gateway in it.
_tunings: list[_FollowLiveHeap | None] = []


def tune_gc(young_threshold: int) -> tuple[int, int, int]:
    """Set the collector's young-generation threshold, keeping the older generations', and let
    it follow the live heap from then on, never below `young_threshold` (module docstring).
    Undone by `restore_gc` with the value returned.

    Args:
        young_threshold: net container allocations (objects) between two young collections at
            least; 0 leaves the interpreter's thresholds as they are, fixed.
    Returns:
        The thresholds before the call, `(young, middle, old)` as `gc.get_threshold()` gives them.
    Raises:
        ValueError: `young_threshold` is negative.
    """
    if young_threshold < 0:
        raise ValueError(f"core.gc_young_threshold must be >= 0; got {young_threshold}")
    before = gc.get_threshold()
    follow = _FollowLiveHeap(young_threshold) if young_threshold else None
    if follow is not None:
        gc.set_threshold(young_threshold, before[1], before[2])
        log.debug("garbage collector thresholds %s (were %s)", gc.get_threshold(), before)
    _tunings.append(follow)
    _activate()
    return before


def restore_gc(before: tuple[int, int, int]) -> None:
    """Undo the innermost `tune_gc`: the thresholds `before` (its return value), followed as the
    `tune_gc` around it (if any) had them, else fixed."""
    if _tunings:
        _tunings.pop()
    _activate()
    gc.set_threshold(*before)


def _activate() -> None:
    """Make the innermost tuning, when it follows the heap, this module's one `gc.callbacks` entry."""
    for callback in [c for c in gc.callbacks if isinstance(c, _FollowLiveHeap)]:
        gc.callbacks.remove(callback)
    if _tunings and _tunings[-1] is not None:
        gc.callbacks.append(_tunings[-1])
