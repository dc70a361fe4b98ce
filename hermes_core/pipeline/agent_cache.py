"""The agent cache (seed §11; docs/behaviour.md §8): each session's live transcript kept across turns.

An LRU (`OrderedDict`) keyed by session key. An entry holds the session id and the live
transcript (message dicts exactly as `store.load_transcript` returns them — the seed's
`_session_messages`), how much of it is persisted (`last_flushed_idx`), whether a turn is running
on it and when it was last used. A turn finds its history here in O(1) instead of reloading
the whole transcript from the store each time.

  * Hit (same session id) → `move_to_end`, reuse. Miss → load from the store once. A different
    session id (`/new`, `/reset`, a switch, recovery) replaces the entry.
  * At `max_size` (128) the least recently used idle entry goes (`popitem(last=False)` order).
  * Housekeeping (`builtin.agent_cache_pressure`) applies the idle TTL (3600 s) and the
    memory-pressure sweep (`memory_budget`): over budget, up to `max_evictions_per_pass` LRU
    entries go, never the `protect_recent` most recent, never one with a turn running, never one
    whose transcript is not persisted yet; then `malloc_trim(0)`. `relieve_pressure` repeats
    such passes (each keeping the cap) while memory is within `RELIEF_HEADROOM` (2 %) of the
    budget or over it and a pass released something, and inserts run it too (a miss costs a
    transcript load; one read of /proc or the cgroup's memory.stat is small beside it):
    waiting for the next watcher tick let a burst of misses overshoot the budget by a quarter.
    After a check that found a tenth of the budget or more free, inserts read nothing for
    `INSERT_PROBE_INTERVAL_S` (10 ms); nearer the budget every insert checks.
  * Eviction is a soft release: the transcript stays in SQLite and the next turn rebuilds it
    from the store. Nothing here ends a transcript or a session (seed §10).

A session id lives in at most one entry: writing to a session through one entry drops any
other key's entry of the same session id (keys switched onto one session), so no stale copy
survives. Code that rewrites a transcript outside a turn (`/undo`, `/compress`, an import) calls
`invalidate(key)` or `invalidate_session(session_id)`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from .memory_budget import MemoryProbe, MemoryReading, malloc_trim, parse_memory_high_mb

log = logging.getLogger(__name__)

# Seconds (cache clock) an insert's pressure check waits, after a reading with at least a tenth
# of the budget free, before the next insert reads memory again. Each reading is four system
# calls on the event loop, and each hands the interpreter lock to the SQLite thread and back:
# one per insert cost 7 % of the throughput at 10,000 sessions, where every turn is a miss
# (docs/behaviour.md §8, §12). Near the budget every insert reads, so the sweep holds it as
# closely as with no pause (benchmarks/bench_memory.py).
INSERT_PROBE_INTERVAL_S = 0.01
INSERT_PROBE_HEADROOM = 0.1
# Share of the budget `relieve_pressure` keeps free: it releases entries once memory is within
# 2 % of the budget, not only once it is over. Memory is read at inserts and ticks, and what is
# allocated between two readings lands on top: relieving only what was over left memory a few
# KiB under the line, and the turn's next page crossed it (in half the runs of
# benchmarks/bench_memory.py). 2 % (6 MiB of 300) is twenty 16 KiB-tool-output transcripts; the
# budget stays a ceiling (docs/behaviour.md §8).
RELIEF_HEADROOM = 0.02
# Seconds (cache clock) between two memory-pressure log lines. Near the budget every insert may
# run a pass: one line per pass was 268 warnings in 4 s of benchmarks/bench_memory.py part 1. The
# passes in between are summed into the next line (`_PressureLog`), and the eviction counter
# (`hermes_agent_cache_evictions{reason="pressure"}`) has every one (docs/behaviour.md §8).
PRESSURE_LOG_INTERVAL_S = 60.0

MAX_SIZE = 128  # seed `_AGENT_CACHE_MAX_SIZE`


@dataclass(slots=True, eq=False)
class CachedSession:
    """One cache entry.

    Attributes:
        session_key: the key it is cached under.
        session_id: the session whose transcript `messages` is.
        messages: the live transcript, oldest first (load_transcript dicts). Treated as
            append-only: recorded messages are never edited in place.
        last_flushed_idx: how many of `messages` are persisted in the store.
        turns_running: turns currently using the entry (> 0 = mid-turn).
        last_used: cache clock (seconds) of the last lookup or turn end.
        prompt: the session-context prompt section of the last turn and what it was built from
            (`(inputs, text)`, set by the turn; docs/behaviour.md §7), or None.
    """

    session_key: str
    session_id: str
    messages: list[dict[str, Any]]
    last_flushed_idx: int
    last_used: float
    turns_running: int = 0
    prompt: tuple[Any, str] | None = None

    @property
    def mid_turn(self) -> bool:
        return self.turns_running > 0

    def transcript_persistence_caught_up(self) -> bool:
        """True when every live message is in the store (seed: `_last_flushed_db_idx` vs
        `len(_session_messages)`)."""
        return self.last_flushed_idx >= len(self.messages)


@dataclass(frozen=True, slots=True)
class PressureReport:
    """One pressure sweep: the reading (None when disabled), the evicted keys (LRU first),
    the keys skipped because they were mid-turn or not persisted, and whether malloc_trim ran."""

    reading: MemoryReading | None
    evicted: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()
    trimmed: bool = False


@dataclass
class CacheStats:
    """Counters since start: hits, misses (loads from the store) and evictions per reason
    (`capacity`, `idle`, `pressure`, `invalidated`, `replaced`, `superseded`)."""

    hits: int = 0
    misses: int = 0
    evictions: dict[str, int] = field(default_factory=dict)

    def count(self, reason: str, n: int = 1) -> None:
        self.evictions[reason] = self.evictions.get(reason, 0) + n


class _PressureLog:
    """The memory-pressure log lines (`PRESSURE_LOG_INTERVAL_S`). The passes are summed; a line
    tells the sum when the interval has passed since the last one (at the next pass or memory
    check), at once when a pass released entries and the last line did not (so the first eviction
    of an episode waits only when a warning was told in the minute before it, not behind a pass
    that released nothing), and at a stop (`tell`). A warning when entries were
    released, info when every candidate was busy or unsaved."""

    def __init__(self) -> None:
        self.last_told = float("-inf")  # cache clock of the last line
        self.warned = False  # the last line told released entries
        self.released = self.skipped = 0
        self.last: MemoryReading | None = None  # the reading of the last pass not yet told

    def record(self, now: float, reading: MemoryReading, released: int, skipped: int) -> None:
        """Sum one pass, then tell the sum if it is due."""
        self.released += released
        self.skipped, self.last = skipped, reading
        if released and not self.warned:
            self.tell(now)
        else:
            self.due(now)

    def due(self, now: float) -> None:
        """Tell the passes summed since the last line once `PRESSURE_LOG_INTERVAL_S` has passed."""
        if now - self.last_told >= PRESSURE_LOG_INTERVAL_S:
            self.tell(now)

    def tell(self, now: float) -> None:
        """Tell the passes summed since the last line, if any."""
        reading = self.last
        if reading is None:
            return
        where = "over" if reading.exceeds(1.0) else f"still within {RELIEF_HEADROOM:.0%} of"
        since = ("" if self.last_told == float("-inf")
                 else f" since the last such line {round(now - self.last_told, 2):g} s ago")
        (log.warning if self.released else log.info)(
            "memory pressure: %d MiB anonymous (%s) %s the %d MiB budget (%s); released %d cached transcript(s)%s, "
            "skipped %d busy or unsaved", (reading.used_bytes or 0) // 2**20, reading.signal_source, where,
            reading.budget_bytes // 2**20, reading.budget_source, self.released, since, self.skipped)
        self.last_told, self.warned = now, bool(self.released)
        self.released, self.last = 0, None


Loader = Callable[[str], Awaitable[list[dict[str, Any]]]]


class AgentCache:
    """LRU of live transcripts keyed by session key (module docstring; seed §11).

    Args:
        max_size: entries kept (>= 1; `agent.agent_cache.max_size`, 128).
        idle_ttl_secs: seconds unused before the housekeeping pass releases an entry
            (`idle_ttl_secs`, 3600; 0 disables the TTL).
        memory_high_mb: `"auto"`, MiB, or `0`/`"off"` (see `memory_budget.parse_memory_high_mb`).
        max_evictions_per_pass: pressure evictions per sweep (16).
        protect_recent: most recently used entries a sweep never touches (8).
        clock: monotonic seconds (injectable for tests).
        probe: reads the budget and anonymous memory; `MemoryProbe()` reads /sys and /proc.
        trim: called after a sweep that evicted something (`malloc_trim`); returns bool.
    Raises:
        ValueError: a bad `memory_high_mb` or `max_size` < 1.
    """

    def __init__(self, max_size: int = MAX_SIZE, idle_ttl_secs: float = 3600, memory_high_mb: Any = "auto",
                 max_evictions_per_pass: int = 16, protect_recent: int = 8, *,
                 clock: Callable[[], float] = time.monotonic, probe: MemoryProbe | None = None,
                 trim: Callable[[], bool] = malloc_trim) -> None:
        if max_size < 1:
            raise ValueError(f"agent.agent_cache.max_size must be >= 1; got {max_size}")
        self.max_size = int(max_size)
        self.idle_ttl_secs = float(idle_ttl_secs)
        self.memory_high_mb = parse_memory_high_mb(memory_high_mb)
        self.max_evictions_per_pass = max(0, int(max_evictions_per_pass))
        self.protect_recent = max(0, int(protect_recent))
        self.clock = clock
        self.probe = probe or MemoryProbe()
        self.trim = trim
        self.stats = CacheStats()
        self._entries: OrderedDict[str, CachedSession] = OrderedDict()
        # The entries with no turn running, in the same LRU order: what capacity eviction may
        # release. With many sessions in flight most entries are mid-turn, and a scan of the
        # whole LRU on every insert passed over all of them.
        self._idle: OrderedDict[str, CachedSession] = OrderedDict()
        self._by_session: dict[str, set[str]] = {}
        self._insert_probe_due = float("-inf")  # cache clock: the next insert that reads memory
        self._pressure_log = _PressureLog()
        self._lock = threading.Lock()  # seed `_agent_cache_lock`: the sweep may run off-loop

    @classmethod
    def from_config(cls, config: Any, **kwargs: Any) -> "AgentCache":
        """Build from a GatewayConfig's `[agent.agent_cache]`; `kwargs` as in the constructor."""
        s = config.agent.agent_cache
        return cls(s.max_size, s.idle_ttl_secs, s.memory_high_mb, s.max_evictions_per_pass,
                   s.protect_recent, **kwargs)

    # ---- lookup -------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, session_key: object) -> bool:
        return session_key in self._entries

    def keys(self) -> list[str]:
        """Cached session keys, least recently used first."""
        with self._lock:
            return list(self._entries)

    def peek(self, session_key: str) -> CachedSession | None:
        """The entry of `session_key` without touching its LRU position."""
        return self._entries.get(session_key)

    def get(self, session_key: str, session_id: str) -> CachedSession | None:
        """The entry of `session_key` if it caches `session_id` (a hit: moved to the MRU end);
        an entry of another session id is dropped (`replaced`) and None returned."""
        with self._lock:
            entry = self._entries.get(session_key)
            if entry is None:
                return None
            if entry.session_id != session_id:
                self._remove_locked(session_key, "replaced")
                return None
            self._touch_locked(entry)
            self.stats.hits += 1
            return entry

    async def acquire(self, session_key: str, session_id: str, load: Loader) -> CachedSession:
        """The entry of (`session_key`, `session_id`), loading the transcript with
        `await load(session_id)` on a miss (seed §11 "Miss → create, store in cache").

        Raises:
            whatever `load` raises (e.g. TranscriptReadError); nothing is cached then.
        """
        entry = self.get(session_key, session_id)
        if entry is not None:
            return entry
        messages = list(await load(session_id))
        return self.put(session_key, session_id, messages)

    def put(self, session_key: str, session_id: str, messages: list[dict[str, Any]]) -> CachedSession:
        """Cache `messages` (all persisted) as the transcript of `session_id` under
        `session_key`, replacing its entry and any other key's entry of the same session, and
        evicting LRU idle entries beyond `max_size`. Returns the entry."""
        with self._lock:
            self.stats.misses += 1
            current = self._entries.get(session_key)
            if current is not None and current.session_id == session_id and current.mid_turn:
                # A concurrent miss already cached it and a turn uses it: keep that one.
                self._entries.move_to_end(session_key)
                return current
            if current is not None:
                self._remove_locked(session_key, "replaced")
            for other in list(self._by_session.get(session_id, ())):
                self._remove_locked(other, "superseded")
            entry = CachedSession(session_key, session_id, messages, len(messages), self.clock())
            self._entries[session_key] = entry
            self._idle[session_key] = entry
            self._by_session.setdefault(session_id, set()).add(session_key)
            self._evict_capacity_locked()
        self._check_pressure_on_insert(session_key)
        return entry

    # ---- turns --------------------------------------------------------------------------------

    def begin_turn(self, entry: CachedSession) -> None:
        """Mark `entry` mid-turn (no sweep releases it until `end_turn`)."""
        with self._lock:
            entry.turns_running += 1
            if self._idle.get(entry.session_key) is entry:
                del self._idle[entry.session_key]
            self._touch_locked(entry)

    def end_turn(self, entry: CachedSession) -> None:
        """The turn using `entry` ended (completed or not)."""
        with self._lock:
            entry.turns_running = max(0, entry.turns_running - 1)
            if not entry.turns_running and self._entries.get(entry.session_key) is entry:
                self._idle[entry.session_key] = entry
            self._touch_locked(entry)

    def append(self, entry: CachedSession, message: dict[str, Any], *, persisted: bool) -> None:
        """Add one message (a load_transcript dict) to the live transcript. `persisted=False`
        leaves it counted as not yet in the store until `mark_persisted`. Any other key's
        entry of the same session id is dropped: it no longer matches the store."""
        with self._lock:
            entry.messages.append(message)
            if persisted and entry.last_flushed_idx == len(entry.messages) - 1:
                entry.last_flushed_idx = len(entry.messages)
            self._drop_others_locked(entry)

    def mark_persisted(self, entry: CachedSession) -> None:
        """Every live message of `entry` is now in the store."""
        with self._lock:
            entry.last_flushed_idx = len(entry.messages)

    def discard(self, entry: CachedSession) -> bool:
        """Drop `entry` if it is still cached (its transcript may not match the store, e.g. a
        store write failed or the turn was cancelled). Returns True when dropped."""
        with self._lock:
            if self._entries.get(entry.session_key) is entry:
                self._remove_locked(entry.session_key, "invalidated")
                return True
            return False

    # ---- invalidation -------------------------------------------------------------------------

    def invalidate(self, session_key: str) -> bool:
        """Forget the entry of `session_key` (its transcript was rewritten outside a turn, or the
        session ended: `/new`, `/reset`). The next turn reloads from the store. Returns True
        when there was one."""
        with self._lock:
            return self._remove_locked(session_key, "invalidated")

    def invalidate_session(self, session_id: str) -> int:
        """Forget every entry caching `session_id` (its transcript was rewritten, rewound or
        imported into). Returns how many."""
        with self._lock:
            keys = list(self._by_session.get(session_id, ()))
            for key in keys:
                self._remove_locked(key, "invalidated")
            return len(keys)

    def clear(self) -> None:
        """Forget everything (shutdown)."""
        with self._lock:
            self._entries.clear()
            self._idle.clear()
            self._by_session.clear()

    # ---- housekeeping -------------------------------------------------------------------------

    def evict_idle(self, now: float | None = None) -> list[str]:
        """Release entries unused for `idle_ttl_secs` or more (seed §10/§11 idle TTL), except
        mid-turn or not-yet-persisted ones. `now` is cache-clock seconds (default `clock()`).
        Returns the released keys, LRU first; [] when the TTL is 0 (disabled)."""
        if self.idle_ttl_secs <= 0:
            return []
        now = self.clock() if now is None else now
        released: list[str] = []
        with self._lock:
            for key, entry in list(self._entries.items()):
                if now - entry.last_used < self.idle_ttl_secs:
                    break  # LRU order: everything after this was used more recently
                if entry.mid_turn or not entry.transcript_persistence_caught_up():
                    continue
                self._remove_locked(key, "idle")
                released.append(key)
        if released:
            log.info("agent cache released %d idle session(s) (transcripts stay in the store)", len(released))
        return released

    def relieve_pressure(self, *, spare: str | None = None) -> PressureReport:
        """Sweep passes (each capped at `max_evictions_per_pass`, as `sweep_under_pressure`)
        while memory is over the budget less `RELIEF_HEADROOM` (2 %) and a pass released
        something.

        Args:
            spare: a session key no pass may release (the entry an insert just made).
        Returns:
            A PressureReport of all passes: the last reading, every released key (LRU first),
            the keys the last pass skipped, whether malloc_trim ran.
        """
        evicted: list[str] = []
        trimmed = False
        while True:
            report = self._sweep(spare, 1 - RELIEF_HEADROOM)
            evicted += report.evicted
            trimmed = trimmed or report.trimmed
            if not report.evicted:
                return PressureReport(reading=report.reading, evicted=tuple(evicted), skipped=report.skipped,
                                      trimmed=trimmed)

    def _check_pressure_on_insert(self, session_key: str) -> None:
        """The insert's pressure check (docs/behaviour.md §8): after a check that found memory
        at least INSERT_PROBE_HEADROOM under the budget, the inserts of the next
        INSERT_PROBE_INTERVAL_S (cache clock) read nothing; after any other check (memory near
        or over the budget, entries released, memory unreadable) the next insert checks again."""
        if self.memory_high_mb is None:
            return
        now = self.clock()
        if now < self._insert_probe_due:
            return
        report = self.relieve_pressure(spare=session_key)
        reading = report.reading
        calm = (not report.evicted and reading is not None and reading.used_bytes is not None
                and reading.used_bytes <= reading.budget_bytes * (1 - INSERT_PROBE_HEADROOM))
        self._insert_probe_due = now + INSERT_PROBE_INTERVAL_S if calm else float("-inf")

    def log_pending_pressure(self) -> None:
        """Log the memory-pressure passes not told yet (`PRESSURE_LOG_INTERVAL_S`): called at a
        stop, after which no later pass or check would tell them."""
        self._pressure_log.tell(self.clock())

    def sweep_under_pressure(self, *, spare: str | None = None) -> PressureReport:
        """Seed `_sweep_agent_cache_under_pressure()`: when anonymous memory exceeds the budget,
        release up to `max_evictions_per_pass` LRU entries — never the `protect_recent` most
        recent, a mid-turn one or one not yet persisted — then `malloc_trim`.

        Args:
            spare: a session key this pass never releases (see `relieve_pressure`).
        Returns:
            A PressureReport (reading None when disabled or no budget could be determined).
        """
        return self._sweep(spare, 1.0)

    def _sweep(self, spare: str | None, share: float) -> PressureReport:
        """One capped pass when anonymous memory exceeds `share` × the budget (1.0: the seed's
        trigger; `relieve_pressure`: 1 - RELIEF_HEADROOM)."""
        if self.memory_high_mb is None:
            return PressureReport(reading=None)
        reading = self.probe.read(self.memory_high_mb)
        if reading is None or not reading.exceeds(share):
            self._pressure_log.due(self.clock())
            return PressureReport(reading=reading)
        evicted: list[str] = []
        skipped: list[str] = []
        with self._lock:
            keys = list(self._entries)
            unprotected = keys[:max(0, len(keys) - self.protect_recent)]
            for key in unprotected:
                if len(evicted) >= self.max_evictions_per_pass:
                    break
                entry = self._entries[key]
                if entry.mid_turn or not entry.transcript_persistence_caught_up() or key == spare:
                    skipped.append(key)
                    continue
                self._remove_locked(key, "pressure")
                evicted.append(key)
        trimmed = bool(self.trim()) if evicted else False
        self._pressure_log.record(self.clock(), reading, len(evicted), len(skipped))
        return PressureReport(reading=reading, evicted=tuple(evicted), skipped=tuple(skipped), trimmed=trimmed)

    # ---- internals ----------------------------------------------------------------------------

    def _touch_locked(self, entry: CachedSession) -> None:
        """Used now: most recent in the LRU (which keeps the order by `last_used`)."""
        entry.last_used = self.clock()
        if self._entries.get(entry.session_key) is entry:
            self._entries.move_to_end(entry.session_key)
            if entry.session_key in self._idle:
                self._idle.move_to_end(entry.session_key)

    def _remove_locked(self, session_key: str, reason: str) -> bool:
        entry = self._entries.pop(session_key, None)
        if entry is None:
            return False
        self._idle.pop(session_key, None)
        keys = self._by_session.get(entry.session_id)
        if keys is not None:
            keys.discard(session_key)
            if not keys:
                del self._by_session[entry.session_id]
        self.stats.count(reason)
        return True

    def _drop_others_locked(self, entry: CachedSession) -> None:
        keys = self._by_session.get(entry.session_id)
        if not keys or (len(keys) == 1 and self._entries.get(entry.session_key) is entry):
            return
        for key in list(keys):
            if self._entries.get(key) is not entry:
                self._remove_locked(key, "superseded")

    def _evict_capacity_locked(self) -> None:
        """LRU eviction beyond max_size; entries with a turn running are passed over (the turn
        holds them; if every entry is busy the cache briefly exceeds max_size)."""
        excess = len(self._entries) - self.max_size
        if excess <= 0:
            return
        victims = []
        for key, entry in self._idle.items():  # LRU first, no turn running
            if entry.transcript_persistence_caught_up():
                victims.append(key)
                if len(victims) == excess:
                    break
        for key in victims:
            self._remove_locked(key, "capacity")
