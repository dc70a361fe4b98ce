"""The memory budget and signal of the agent cache's pressure pass (seed §11 "memory-pressure
eviction"; docs/behaviour.md §8).

Budget (`agent.agent_cache.memory_high_mb`):
  * `auto`: the limit of the cgroup the gateway runs in — cgroup v2 `memory.high`, then
    `memory.max` (the process's own cgroup first, then its ancestors), then cgroup v1
    `memory.limit_in_bytes`; without any limit, the total RAM (`/proc/meminfo` MemTotal);
  * a number: that many MiB, fixed;
  * `0` / `off`: pressure eviction disabled.
Signal: under a cgroup limit, that cgroup's own `memory.stat` `anon` (v1: `total_rss`, else
`rss`) — the budget covers the whole unit, child processes included; otherwise the process's
anonymous RSS (`RssAnon`), read from `/proc/self/statm` as resident minus shared pages: the
kernel counts the shared ones as file-backed plus shmem pages, so the difference is exactly the
`RssAnon` of `/proc/self/status`, in one short line instead of some fifty (the signal is read on
every agent-cache insert: 6 µs instead of 18 µs on the reference machine).

Everything is read from files under injectable roots so tests can write a fake cgroup tree.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

MIB = 1024 * 1024
# cgroup v1 reports "no limit" as a page-rounded LONG_MAX; anything this large is no limit.
_V1_UNLIMITED = 1 << 60
# How long a found cgroup limit (its file and value) is reused before the hierarchy is walked
# again (seconds). Reading memory runs on every agent-cache insert; walking the cgroup tree costs
# several file reads each time, while a unit's limit changes only when an operator changes it.
LIMIT_TTL_S = 30.0
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")  # the unit of /proc/self/statm


def parse_memory_high_mb(value: Any) -> int | str | None:
    """Interpret `agent.agent_cache.memory_high_mb`.

    Args:
        value: `"auto"`, `"off"`, `0`, a positive int (MiB) or its decimal text (`"512"`).
    Returns:
        `"auto"`, a positive int (MiB), or None when pressure eviction is disabled (`0`/`off`).
    Raises:
        ValueError: anything else (negative, fractional text, unknown word), naming the key.
    """
    if isinstance(value, bool):
        raise ValueError(f"agent.agent_cache.memory_high_mb must be auto, off or MiB >= 0; got {value!r}")
    if isinstance(value, str):
        word = value.strip().lower()
        if word == "auto":
            return "auto"
        if word == "off":
            return None
        if not word.isdigit():
            raise ValueError(f"agent.agent_cache.memory_high_mb must be auto, off or MiB >= 0; got {value!r}")
        value = int(word)
    if isinstance(value, int) and value >= 0:
        return value or None
    raise ValueError(f"agent.agent_cache.memory_high_mb must be auto, off or MiB >= 0; got {value!r}")


@dataclass(frozen=True, slots=True)
class MemoryReading:
    """One look at memory: `budget_bytes` (bytes), `used_bytes` (anonymous bytes, None when it
    could not be read), `budget_source` and `signal_source` (what they were read from, for logs)."""

    budget_bytes: int
    used_bytes: int | None
    budget_source: str
    signal_source: str

    @property
    def over_budget(self) -> bool:
        return self.exceeds(1.0)

    def exceeds(self, share: float) -> bool:
        """True when the memory used is known and above `share` × the budget (1.0: over it)."""
        return self.used_bytes is not None and self.used_bytes > self.budget_bytes * share


def _read_text(path: Path) -> str | None:
    """The text of a small /proc or cgroup file, None when unreadable. Plain `os` calls: the
    signal is read on every agent-cache insert, where `Path.read_text`'s text layer cost twice
    the read itself (docs/behaviour.md §8)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", "replace")


def _read_limit(path: Path) -> int | None:
    """A cgroup limit file: bytes, or None for `max`, a missing file or garbage."""
    text = _read_text(path)
    if text is None:
        return None
    text = text.strip()
    if not text.isdigit():
        return None  # "max" (no limit) or unreadable
    value = int(text)
    return value if 0 < value < _V1_UNLIMITED else None


def _stat_value(path: Path, names: tuple[str, ...]) -> int | None:
    """The first of `names` found in a `memory.stat` file (bytes)."""
    text = _read_text(path)
    if text is None:
        return None
    values = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            values[parts[0]] = int(parts[1])
    for name in names:
        if name in values:
            return values[name]
    return None


def _kib_field(path: Path, name: str) -> int | None:
    """`Name:   1234 kB` from /proc files, in bytes."""
    text = _read_text(path)
    if text is None:
        return None
    for line in text.splitlines():
        if line.startswith(name + ":"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                return int(parts[1]) * 1024
    return None


class MemoryProbe:
    """Reads the budget and the anonymous-memory signal (module docstring).

    Args:
        cgroup_root: where cgroups are mounted (`/sys/fs/cgroup`; v2 may be at `unified/` in
            hybrid mode, v1 memory at `memory/`).
        proc_self: the process's proc directory (`/proc/self`: files `cgroup`, `status`).
        meminfo: the `/proc/meminfo` file (total RAM).
        limit_ttl_s: seconds a found cgroup limit (or, without one, the total RAM) is reused by
            `read` (`LIMIT_TTL_S`; 0: every read looks again). The signal is read afresh every time.
        clock: monotonic seconds (`time.monotonic`; injectable for tests).
    """

    def __init__(self, cgroup_root: Path | str = "/sys/fs/cgroup", proc_self: Path | str = "/proc/self",
                 meminfo: Path | str = "/proc/meminfo", *, limit_ttl_s: float = LIMIT_TTL_S,
                 clock: Any = time.monotonic) -> None:
        self.cgroup_root = Path(cgroup_root)
        self.proc_self = Path(proc_self)
        self._statm = self.proc_self / "statm"  # read on every insert: joined once
        self.meminfo = Path(meminfo)
        self.limit_ttl_s = limit_ttl_s
        self._clock = clock
        # (read at, cgroup_limit(), total_ram()): what the budget comes from, reused for a while
        self._limit: tuple[float, tuple[int, Path, str] | None, int | None] | None = None

    def _current_limit(self) -> tuple[tuple[int, Path, str] | None, int | None]:
        """`(cgroup_limit(), total_ram())`, reused for `limit_ttl_s` seconds (total RAM is only
        read when there is no cgroup limit)."""
        now = self._clock()
        if self._limit is None or now - self._limit[0] >= self.limit_ttl_s:
            limit = self.cgroup_limit()
            self._limit = (now, limit, self.total_ram() if limit is None else None)
        return self._limit[1], self._limit[2]

    def _memberships(self) -> tuple[str | None, str | None]:
        """(v2 path, v1 memory path) from `/proc/self/cgroup`."""
        v2 = v1 = None
        for line in (_read_text(self.proc_self / "cgroup") or "").splitlines():
            parts = line.split(":", 2)
            if len(parts) != 3:
                continue
            hid, controllers, path = parts
            if hid == "0" and controllers == "":
                v2 = path
            elif "memory" in controllers.split(","):
                v1 = path
        return v2, v1

    def _ancestors(self, base: Path, path: str) -> list[Path]:
        """The cgroup directory of `path` under `base`, then each parent up to `base`."""
        parts = [p for p in path.split("/") if p and p not in (".", "..")]
        return [base.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]

    def cgroup_limit(self) -> tuple[int, Path, str] | None:
        """The nearest cgroup memory limit: `(bytes, cgroup dir, source)` or None when the
        process runs under no limit. v2 `memory.high` before `memory.max`, then v1."""
        v2, v1 = self._memberships()
        if v2 is not None:
            base = self.cgroup_root
            if not (base / "cgroup.controllers").exists() and (base / "unified").is_dir():
                base = base / "unified"  # hybrid hierarchy
            for directory in self._ancestors(base, v2):
                for name in ("memory.high", "memory.max"):
                    limit = _read_limit(directory / name)
                    if limit is not None:
                        return limit, directory, f"cgroup v2 {name}"
        if v1 is not None:
            for directory in self._ancestors(self.cgroup_root / "memory", v1):
                limit = _read_limit(directory / "memory.limit_in_bytes")
                if limit is not None:
                    return limit, directory, "cgroup v1 memory.limit_in_bytes"
        return None

    def total_ram(self) -> int | None:
        """Total RAM in bytes (MemTotal, else sysconf), None when unknown."""
        total = _kib_field(self.meminfo, "MemTotal")
        if total:
            return total
        try:
            return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return None

    def process_anon(self) -> int | None:
        """The process's anonymous RSS (`RssAnon`) in bytes, None when unreadable (module
        docstring: `statm` resident − shared pages)."""
        fields = (_read_text(self._statm) or "").split()
        if len(fields) < 3 or not (fields[1].isdigit() and fields[2].isdigit()):
            return None
        return (int(fields[1]) - int(fields[2])) * _PAGE_SIZE

    def read(self, setting: Any) -> MemoryReading | None:
        """Budget and signal for `memory_high_mb` = `setting` (see `parse_memory_high_mb`).

        Returns:
            A MemoryReading, or None when pressure eviction is disabled or no budget can be
            determined (logged).
        Raises:
            ValueError: a bad setting.
        """
        parsed = parse_memory_high_mb(setting)
        if parsed is None:
            return None
        limit, ram = self._current_limit()
        if parsed == "auto":
            if limit is not None:
                budget, budget_source = limit[0], limit[2]
            else:
                budget, budget_source = ram, "total RAM"
                if budget is None:
                    log.warning("agent cache: no cgroup limit and total RAM unknown; pressure eviction skipped")
                    return None
        else:
            budget, budget_source = int(parsed) * MIB, "agent.agent_cache.memory_high_mb"
        if limit is not None:
            directory = limit[1]
            names = ("anon",) if limit[2].startswith("cgroup v2") else ("total_rss", "rss")
            used = _stat_value(directory / "memory.stat", names)
            signal = f"{directory / 'memory.stat'} {names[0]}"
            if used is None:  # stat unreadable: fall back to the process itself
                used, signal = self.process_anon(), "RssAnon"
        else:
            used, signal = self.process_anon(), "RssAnon"
        return MemoryReading(budget_bytes=budget, used_bytes=used, budget_source=budget_source,
                             signal_source=signal)


def malloc_trim() -> bool:
    """Return freed heap arenas to the OS (glibc `malloc_trim(0)` via ctypes) so a sweep
    actually lowers RSS (seed §11). Returns False (doing nothing) off glibc or on failure."""
    import ctypes
    import ctypes.util
    import platform

    try:
        if platform.libc_ver()[0] != "glibc":
            return False
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
        return True
    except (OSError, AttributeError, ValueError):
        return False
