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
collected, later: at most that many more objects wait for it.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger(__name__)

def tune_gc(young_threshold: int) -> tuple[int, int, int]:
    """Set the collector's young-generation threshold, keeping the older generations' (module
    docstring).

    Args:
        young_threshold: net container allocations (objects) between two young collections;
            0 leaves the interpreter's thresholds as they are.
    Returns:
        The thresholds before the call, `(young, middle, old)` as `gc.get_threshold()` gives them.
    Raises:
        ValueError: `young_threshold` is negative.
    """
    if young_threshold < 0:
        raise ValueError(f"core.gc_young_threshold must be >= 0; got {young_threshold}")
    before = gc.get_threshold()
    if young_threshold:
        gc.set_threshold(young_threshold, before[1], before[2])
        log.debug("garbage collector thresholds %s (were %s)", gc.get_threshold(), before)
    return before
