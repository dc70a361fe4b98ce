"""`sessions.json`: the seed's routing index file (seed §3 layout; docs/behaviour.md §0, §3).

With SQLite open it is a *mirror* of the `routes` table, rebuilt from SQLite (so deleting or
corrupting it loses nothing). In degraded mode it is the index itself. Writes are atomic (temp
file in the same directory, fsync, rename, fsync of the directory, mode 0600), debounced, and
forced on shutdown. The first key is a `_README` string; loaders skip keys starting with `_`,
non-dict values and bad entries one at a time and never crash on a corrupt file.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

from ..model import SessionEntry, validate_session_id
from . import cpu
from .files import WriteFailures, write_atomic
from .rows import unstorable

log = logging.getLogger(__name__)

SESSIONS_FILE_NAME = "sessions.json"
# A sessions.json that an import or a start took entries from, skipping some, is kept under this
# name beside it (`.skipped.2`, `.3`, … when taken) before the mirror rewrites it: the rewrite
# comes from the store, which never held the skipped entries (docs/behaviour.md §3).
SKIPPED_SUFFIX = ".skipped"
MIRROR_README = (
    "Routing index of hermes-gateway: session key -> current session entry. "
    "state.db is the source of truth; this file is rewritten from it and may be deleted safely "
    "while the gateway is stopped."
)
# Cost bound of the mirror (O(1) per message at 100k sessions; docs/behaviour.md §3). A rewrite renders the
# whole file (the seed's format is one atomic JSON object), so its CPU cost c grows with the
# number of routes (~0.4 s at 100k sessions on 2 cores, as benchmarks/bench_store.py measures).
# After a rewrite that cost c CPU seconds the next one starts no sooner than
# max(debounce_s, COST_FACTOR x c) after it ended, so rewriting takes at most
# 1 / (COST_FACTOR + 1) ~ 9 % of one core however busy the gateway is. c is CPU time spent in the
# rewrite's worker threads (`store.cpu`), not wall time: under load the threads wait for the
# interpreter and the loop far longer than they compute, and a wall-time bound deferred the
# next rewrite by minutes; with CPU time the file lags SQLite by debounce_s + (COST_FACTOR + 1)
# x c plus the rewrite's own wall time, a few seconds. The SQLite read, the JSON assembly and the
# file write run in worker threads (`SqliteBackend.render_mirror`, `write_atomic`), so the event
# loop only waits for the result. Shutdown (`close`) always writes the final state, gap or not.
# Per message the store only sets a flag (`mark_dirty`, O(1)).
COST_FACTOR = 10.0


def flush_gap(debounce_s: float, last_cpu_s: float, cost_factor: float = COST_FACTOR) -> float:
    """Seconds to wait after a rewrite that cost `last_cpu_s` CPU seconds before the next one:
    `max(debounce_s, cost_factor * last_cpu_s)` (see the cost bound above)."""
    return max(debounce_s, cost_factor * max(0.0, last_cpu_s))


def file_signature(path: Path) -> str | None:
    """`"size:mtime_ns"` of `path`, or None when it does not exist."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return f"{st.st_size}:{st.st_mtime_ns}"


def render_from_json_texts(items: list[tuple[str, str]], extras: dict[str, Any] | None = None) -> str:
    """Render sessions.json from `(session_key, entry JSON text)` pairs without re-parsing them.

    `extras` are additional `_`-prefixed keys (ignored by loaders of the seed's format).
    """
    parts = ['{"_README": ', json.dumps(MIRROR_README)]
    for key, value in (extras or {}).items():
        parts += [", ", json.dumps(key), ": ", json.dumps(value)]
    for key, text in items:
        parts += [",\n", json.dumps(key), ": ", text]
    parts.append("}\n")
    return "".join(parts)


def load_sessions_json(path: Path, skipped: list[str] | None = None
                       ) -> tuple[dict[str, SessionEntry], dict[str, Any]]:
    """Leniently read a sessions.json (ours or an older gateway's).

    Args:
        path: the file.
        skipped: if given, receives one line per skipped entry (key and reason).

    Returns:
        `(entries by session key, extras)` where extras holds the `_`-prefixed keys. A missing,
        unreadable or non-JSON file gives `({}, {})` and a logged warning; each bad entry is
        skipped and logged on its own; naive timestamps are read as host local time.
    """
    path = Path(path)
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}, {}
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("%s cannot be read (%s); ignoring it", path, exc)
        return {}, {}
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        log.warning("%s is not valid JSON (%s); ignoring it", path, exc)
        return {}, {}
    if not isinstance(data, dict):
        log.warning("%s does not hold a JSON object; ignoring it", path)
        return {}, {}
    return entries_from_data(data, path, skipped)


def entries_from_data(data: dict[str, Any], path: Path | str, skipped: list[str] | None = None,
                      warnings: list[str] | None = None
                      ) -> tuple[dict[str, SessionEntry], dict[str, Any]]:
    """Turn an already parsed sessions.json object into entries, leniently (see
    `load_sessions_json`; `path` only names the file in log lines).

    The dict key is the session key (seed §3: sessions.json maps session key → entry, and every
    lookup goes by that key). An entry whose inner `session_key` differs is accepted under the
    dict key, with a warning logged and appended to `warnings` (one line naming both keys): the
    route keeps answering the chat it was found under, and the mismatch is never silent.

    An entry holding a value the store cannot take (a lone surrogate, in its key too, a NUL
    character or an integer beyond 64 bits: `rows.unstorable`) is a bad entry: skipped here, before the one
    transaction that stores the others (an import, a start taking an older gateway's file,
    docs/behaviour.md §3, §12), so it never fails them all. The lines of `skipped` and `warnings`
    show such a key with `\\ud800`-style escapes: they are printed, and a terminal cannot show a
    lone surrogate.

    Returns:
        `(entries by session key, extras)`; bad entries are skipped and logged one at a time.
    """
    entries: dict[str, SessionEntry] = {}
    extras: dict[str, Any] = {}
    for key, value in data.items():
        if key.startswith("_"):
            extras[key] = value
            continue
        shown = key.encode("utf-8", "backslashreplace").decode("utf-8")
        if not isinstance(value, dict):
            log.warning("%s: entry %r is not an object; skipped", path, key)
            if skipped is not None:
                skipped.append(f"{shown}: not an object")
            continue
        item = dict(value)
        item.setdefault("session_key", key)
        try:
            entry = SessionEntry.from_dict(item)
            validate_session_id(entry.session_id)
            # Checked as it will be stored: under the dict key, whatever the inner one says.
            problem = unstorable({**entry.to_dict(), "session_key": key}, "session entry")
            if problem is not None:
                raise ValueError(problem)
        except (ValueError, TypeError) as exc:
            log.warning("%s: entry %r skipped: %s", path, key, exc)
            if skipped is not None:
                skipped.append(f"{shown}: {exc}")
            continue
        if entry.session_key != key:
            line = (f"{shown}: inner session_key {entry.session_key!r} differs from its key; "
                    f"imported under {key!r}")
            log.warning("%s: entry %s", path, line)
            if warnings is not None:
                warnings.append(line)
            entry.session_key = key
        entries[key] = entry
    return entries, extras


def kept_skipped_copies(sessions_dir: Path) -> list[Path]:
    """The copies `keep_skipped_original` made in `sessions_dir` (`sessions.json.skipped`,
    `.skipped.2`, …), sorted by name; `[]` when there are none or the folder cannot be listed.
    Erasure edits them and `doctor` lists them (docs/operations.md §1, §5)."""
    base = SESSIONS_FILE_NAME + SKIPPED_SUFFIX
    try:
        names = [p for p in Path(sessions_dir).iterdir() if p.name == base
                 or (p.name.startswith(base + ".") and p.name[len(base) + 1:].isdigit())]
    except OSError:
        return []
    return sorted(p for p in names if p.is_file())


def keep_skipped_original(path: Path, skipped: int) -> Path | None:
    """Copy `path` (a sessions.json the mirror is about to rewrite, from which a load skipped
    `skipped` entries) byte for byte to `<path>.skipped` beside it, or `.skipped.2`, `.3`, …
    when that name is taken (an earlier copy the operator has not dealt with is never
    overwritten); atomic, mode 0600 (`write_atomic`). Call it before the first rewrite: the
    skipped entries are then recoverable from the copy (docs/behaviour.md §3). One warning says
    where.

    Returns:
        The copy's path, or None when it could not be made (logged as an error: the skipped
        entries are then only named in the log).
    """
    path = Path(path)
    kept = path.with_name(path.name + SKIPPED_SUFFIX)
    number = 1
    while kept.exists() or kept.is_symlink():
        number += 1
        kept = path.with_name(f"{path.name}{SKIPPED_SUFFIX}.{number}")
    try:
        write_atomic(kept, path.read_bytes())
    except OSError as exc:
        log.error("%s: the %d entr(ies) skipped above cannot be kept: copying the file to %s failed (%s); the "
                  "next rewrite of sessions.json leaves them out", path, skipped, kept, exc.strerror or exc)
        return None
    log.warning("%s: the file as it was is kept as %s: the %d entr(ies) skipped above are in it, and the next "
                "rewrite of sessions.json leaves them out", path, kept, skipped)
    return kept


class MirrorWriter:
    """Debounced, atomic rewrites of sessions.json from a render function.

    Args:
        path: the sessions.json path.
        render: async callable returning the full file text (runs the heavy part off the loop).
        debounce_s: minimum seconds between rewrites (`[storage] mirror_debounce_s`); the gap
            also grows to `cost_factor` × the last rewrite's CPU cost (`flush_gap`), which
            bounds the mirror to ~1/(cost_factor+1) of one core at any index size.
        cost_factor: K of the bound (default `COST_FACTOR` = 10).

    Attributes:
        writes: rewrites done by this writer.
        last_cpu: CPU seconds the last rewrite cost (its worker threads: read, render, write).
        last_duration: wall seconds the last rewrite took (render + atomic write).
        total_duration: wall seconds spent rewriting since start (benchmarks report it).
    """

    def __init__(self, path: Path, render: Callable[[], Awaitable[str]], debounce_s: float,
                 cost_factor: float = COST_FACTOR) -> None:
        self.path = Path(path)
        self._render = render
        self._debounce_s = debounce_s
        self._cost_factor = cost_factor
        self._dirty = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._write_lock = asyncio.Lock()
        self._last_end: float | None = None  # loop time at the end of the last rewrite
        self.last_cpu = 0.0
        self.last_duration = 0.0
        self.total_duration = 0.0
        self.writes = 0
        # size:mtime_ns of the file right after our last write (None: not written this run).
        self.last_signature: str | None = None
        # A full disk fails every retry: one warning per run of failures, one INFO line when a
        # rewrite succeeds again; the file stays dirty, so it catches up then (docs/behaviour.md §3).
        self.failures = WriteFailures(log, "sessions.json mirror", self.path,
                                      "retrying; state.db has every change")

    def start(self) -> None:
        """Start the background rewrite task on the running loop (idempotent)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="sessions.json mirror")

    def mark_dirty(self) -> None:
        """O(1): note that the index changed; the background task rewrites the file later."""
        self._dirty.set()

    def _delay(self, now: float) -> float:
        """Seconds from `now` (loop time, just marked dirty) to the next rewrite: at least the
        debounce, and not before `flush_gap` has passed since the last rewrite ended."""
        if self._last_end is None:
            return self._debounce_s
        due = self._last_end + flush_gap(self._debounce_s, self.last_cpu, self._cost_factor)
        return max(self._debounce_s, due - now)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._dirty.wait()
            await asyncio.sleep(self._delay(loop.time()))
            try:
                await self.flush()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a full disk must not kill the gateway; retry later
                self.failures.failed(exc)
                await asyncio.sleep(max(1.0, self._debounce_s))

    async def flush(self) -> None:
        """Rewrite the file now if it is dirty.

        Raises:
            OSError: the file could not be written (it stays dirty).
        """
        async with self._write_lock:
            if not self._dirty.is_set():
                return
            self._dirty.clear()
            started = time.perf_counter()
            meter = None
            try:
                with cpu.measure() as meter:
                    text = await self._render()
                    await cpu.in_thread(write_atomic, self.path, text)
            except BaseException:
                self._dirty.set()
                if meter is not None:
                    # A failed rewrite (a full disk) cost its render too: the retry keeps to the
                    # same cost bound as a rewrite that succeeded (docs/behaviour.md §3).
                    self.last_cpu, self._last_end = meter.seconds, asyncio.get_running_loop().time()
                raise
            self.last_cpu = meter.seconds
            self.last_duration = time.perf_counter() - started
            self.total_duration += self.last_duration
            self._last_end = asyncio.get_running_loop().time()
            self.writes += 1
            self.last_signature = file_signature(self.path)
            self.failures.succeeded()

    async def close(self) -> None:
        """Stop the background task and write the final state."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        await self.flush()
