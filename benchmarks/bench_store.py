"""Benchmark of the session store: per-message cost at 1,000 and 100,000 sessions,
sessions.json mirror rewrites included, against a raw aiosqlite baseline measured in the same
run; and the time to open a store with 100,000 sessions and rebuild its mirror.

Per message the store does what the gateway does: `get_or_create_session` + `append_to_transcript`
+ `update_session` (with token usage), on a session picked at random from a working set of 1,000
sessions drawn from the whole population: the same working-set size at 1k and at 100k, so both
runs have the same cache hit ratio and the comparison isolates the number of stored sessions.
The store runs as in a gateway: the home lock held and the sessions.json mirror rewriting itself
in the background (debounced, cost-bounded: see `store/mirror.py`). Every message is timed on its
own, so the mean and the 99th percentile include the slow-down while a mirror rewrite runs (its
thread shares the GIL with the event loop), and each variant runs for a fixed wall time long
enough to span several rewrites at 100k. A "cache off" variant disables the entry cache, so every
message also looks its entry up in SQLite. The raw baseline runs one INSERT into `messages` (same
schema, same FTS triggers) + one UPDATE of `sessions` per message, autocommit, with the same
PRAGMAs, on the same picks, and has no mirror.

"open + first mirror rebuild" opens a store on a 100k home without a sessions.json and waits
for the rebuilt file; its baseline reads every route with raw aiosqlite and writes them as one
JSON file (fsync). "open (mirror intact)" is a restart after a clean close.

Run: `.venv/bin/python benchmarks/bench_store.py [--seconds 20] [--large 100000]`
Targets: store mean 100k/1k ≤ 1.5×, store/raw mean ≤ 3×, open with 100k sessions < 2 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sqlite3
import statistics
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import aiosqlite

from hermes_core import GatewayConfig, SessionEntry, SessionSource
from hermes_core.model import TokenUsage, format_timestamp
from hermes_core.store import SessionStore
from hermes_core.store.sqlite_backend import entry_json, session_params

WORKING_SET = 1000
WARM_UP = 300
USAGE = TokenUsage(input_tokens=120, output_tokens=40)
PRAGMAS = ("journal_mode = WAL", "synchronous = FULL", "foreign_keys = ON", "busy_timeout = 5000",
           "secure_delete = ON")


def source(i: int) -> SessionSource:
    return SessionSource(platform="telegram", chat_id=str(1_000_000 + i), chat_type="dm", user_id=str(i),
                         user_name=f"user{i}")


def session_id(i: int) -> str:
    return f"20260101_000000_{i:08x}"


async def make_store_home(root: Path, name: str, n: int) -> GatewayConfig:
    """A home whose state.db holds n sessions, bulk-inserted with executemany (one transaction).
    It has no sessions.json: the first store opened on it rebuilds the mirror."""
    config = GatewayConfig(home=root / name)
    async with SessionStore(config.sessions_dir, config, lock_home=False):
        pass  # creates the schema (migrations)
    base = datetime(2026, 1, 1, tzinfo=timezone.utc)
    routes, sessions = [], []
    for i in range(n):
        src, when = source(i), base + timedelta(seconds=i)
        entry = SessionEntry(session_key=f"agent:main:telegram:dm:{src.chat_id}", session_id=session_id(i),
                             created_at=when, updated_at=when, origin=src, platform="telegram", chat_type="dm")
        routes.append((entry.session_key, entry.session_id, entry_json(entry), when.timestamp(), 0))
        sessions.append(session_params(entry))
    conn = sqlite3.connect(config.db_path, isolation_level=None)
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO routes (session_key, session_id, entry, updated_ts, suspended) "
                     "VALUES (?, ?, ?, ?, ?)", routes)
    conn.executemany(
        "INSERT INTO sessions (session_id, session_key, origin, platform, chat_id, participant_id, chat_type, "
        "display_name, created_at, updated_at, parent_session_id) VALUES (?,?,?,?,?,?,?,?,?,?,?)", sessions)
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    (config.sessions_dir / "sessions.json").unlink(missing_ok=True)
    return config


class StoreRunner:
    """The store as a gateway runs it (home lock, background mirror)."""

    def __init__(self, config: GatewayConfig, cache: bool) -> None:
        self.store = SessionStore(config.sessions_dir, config)
        self.cache = cache
        self.k = 0

    async def start(self) -> None:
        await self.store.open()
        await self.store.flush_mirror()  # the start-up rebuild is measured on its own below
        if not self.cache:
            self.store.cache_size = 0

    async def one(self, i: int) -> None:
        store = self.store
        self.k += 1
        entry = await store.get_or_create_session(source(i))
        await store.append_to_transcript(entry.session_id, {"role": "user", "content": f"hello number {self.k}"})
        await store.update_session(entry.session_key, 160, usage=USAGE)

    def mirror_stats(self) -> tuple[int, float]:
        mirror = self.store._mirror
        return (mirror.writes, mirror.total_duration) if mirror is not None else (0, 0.0)

    async def stop(self) -> None:
        await self.store.close()


class RawRunner:
    """One INSERT + one UPDATE per message on raw aiosqlite (no mirror)."""

    def __init__(self, config: GatewayConfig) -> None:
        self.path = config.db_path
        self.k = 0

    async def start(self) -> None:
        self.db = await aiosqlite.connect(str(self.path), isolation_level=None)
        for pragma in PRAGMAS:
            await self.db.execute(f"PRAGMA {pragma}")

    async def one(self, i: int) -> None:
        self.k += 1
        sid = session_id(i)
        now = format_timestamp(datetime.now(timezone.utc))
        await self.db.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
                              (sid, "user", f"hello number {self.k}", now))
        await self.db.execute("UPDATE sessions SET updated_at = ?, input_tokens = input_tokens + 120 "
                              "WHERE session_id = ?", (now, sid))

    def mirror_stats(self) -> tuple[int, float]:
        return 0, 0.0

    async def stop(self) -> None:
        await self.db.close()


def summarise(times: list[float], wall: float, mirror: tuple[int, float]) -> dict[str, float]:
    ordered = sorted(times)
    return {"mean": statistics.fmean(times), "p50": ordered[len(ordered) // 2],
            "p99": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], "n": len(times),
            "rewrites": mirror[0], "mirror_share": mirror[1] / wall if wall else 0.0}


async def run_variant(runner, working: list[int], seconds: float, rng: random.Random) -> dict[str, float]:
    await runner.start()
    try:
        for _ in range(WARM_UP):
            await runner.one(rng.choice(working))
        writes0, spent0 = runner.mirror_stats()
        times: list[float] = []
        clock = time.perf_counter
        began = clock()
        deadline = began + seconds
        while True:
            start = clock()
            if start >= deadline:
                break
            await runner.one(rng.choice(working))
            times.append(clock() - start)
        wall = clock() - began
        writes, spent = runner.mirror_stats()
        return summarise(times, wall, (writes - writes0, spent - spent0))
    finally:
        await runner.stop()


async def measure(root: Path, label: str, n: int, seconds: float, seed: int) -> dict[str, dict[str, float]]:
    """Each variant on its own home, one after the other (a store's background mirror must not
    run during another variant's timing)."""
    rng = random.Random(seed)
    working = rng.sample(range(n), min(WORKING_SET, n))
    results = {}
    for name, make in (("raw", lambda c: RawRunner(c)), ("store", lambda c: StoreRunner(c, cache=True)),
                       ("cache off", lambda c: StoreRunner(c, cache=False))):
        config = await make_store_home(root, f"{name.replace(' ', '-')}-{label}", n)
        results[name] = await run_variant(make(config), working, seconds, random.Random(seed))
    return results


async def open_and_rebuild(config: GatewayConfig) -> tuple[float, float]:
    """(open + first mirror rebuild, open with the mirror intact) in seconds, worst of 3."""
    rebuild = intact = 0.0
    mirror_file = config.sessions_dir / "sessions.json"
    for _ in range(3):
        mirror_file.unlink(missing_ok=True)
        store = SessionStore(config.sessions_dir, config)
        start = time.perf_counter()
        await store.open()
        await store.flush_mirror()
        rebuild = max(rebuild, time.perf_counter() - start)
        await store.close()
        store = SessionStore(config.sessions_dir, config)
        start = time.perf_counter()
        await store.open()
        intact = max(intact, time.perf_counter() - start)
        assert store._mirror.writes == 0  # nothing to rebuild after a clean close
        await store.close()
    return rebuild, intact


async def raw_rebuild(config: GatewayConfig) -> float:
    """Baseline: connect with the same PRAGMAs, read every route, write them as one JSON file
    with fsync. Worst of 3."""
    worst = 0.0
    target = config.home / "raw-mirror.json"
    for _ in range(3):
        start = time.perf_counter()
        async with aiosqlite.connect(str(config.db_path), isolation_level=None) as db:
            for pragma in PRAGMAS:
                await db.execute(f"PRAGMA {pragma}")
            rows = await db.execute_fetchall("SELECT session_key, entry FROM routes ORDER BY session_key")
        text = "{" + ",\n".join(f"{json.dumps(k)}: {v}" for k, v in rows) + "}\n"
        with open(target, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        worst = max(worst, time.perf_counter() - start)
    return worst


async def main() -> None:
    parser = argparse.ArgumentParser(description="session store benchmark")
    parser.add_argument("--seconds", type=float, default=20.0, help="timed seconds per variant and size")
    parser.add_argument("--large", type=int, default=100_000, help="sessions in the large store")
    args = parser.parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        small = await measure(root, "1k", 1000, args.seconds, seed=1)
        large = await measure(root, "100k", args.large, args.seconds, seed=2)
        home = await make_store_home(root, "open", args.large)
        rebuilt, opened = await open_and_rebuild(home)
        raw_rebuilt = await raw_rebuild(home)

    print(f"per message = get_or_create_session + append_to_transcript + update_session; "
          f"{args.seconds:.0f} s per variant; µs")
    print(f"{'variant':<22}{'sessions':>9}{'messages':>10}{'mean':>8}{'p50':>8}{'p99':>8}"
          f"{'mirror rewrites':>17}{'mirror share':>14}")
    print("-" * 96)
    for label, res in (("1k", small), ("100k", large)):
        for name in ("raw", "store", "cache off"):
            r = res[name]
            mirror = f"{r['rewrites']:.0f}" if name != "raw" else "-"
            share = f"{r['mirror_share'] * 100:.1f} %" if name != "raw" else "-"
            print(f"{name:<22}{label:>9}{r['n']:>10.0f}{r['mean'] * 1e6:>8.0f}{r['p50'] * 1e6:>8.0f}"
                  f"{r['p99'] * 1e6:>8.0f}{mirror:>17}{share:>14}")

    def ratio(a: float, b: float) -> float:
        return a / b if b else float("inf")
    rows = [
        ("store mean 100k / 1k", ratio(large["store"]["mean"], small["store"]["mean"]), "≤ 1.5×"),
        ("store p99 100k / 1k", ratio(large["store"]["p99"], small["store"]["p99"]), "(info)"),
        ("store (cache off) mean 100k / 1k", ratio(large["cache off"]["mean"], small["cache off"]["mean"]), "≤ 1.5×"),
        ("raw mean 100k / 1k", ratio(large["raw"]["mean"], small["raw"]["mean"]), "(info)"),
        ("store / raw mean, 1k", ratio(small["store"]["mean"], small["raw"]["mean"]), "≤ 3×"),
        ("store / raw mean, 100k", ratio(large["store"]["mean"], large["raw"]["mean"]), "≤ 3×"),
        ("store / raw p99, 100k", ratio(large["store"]["p99"], large["raw"]["p99"]), "(info)"),
        ("store (cache off) / raw mean, 100k", ratio(large["cache off"]["mean"], large["raw"]["mean"]), "(info)"),
    ]
    print(f"\n{'ratio':<46}{'value':>10}{'target':>10}")
    print("-" * 66)
    for name, value, target in rows:
        print(f"{name:<46}{value:>9.2f}×{target:>10}")
    print(f"\n{'time, ' + format(args.large, ',') + ' sessions (worst of 3)':<46}{'s':>10}{'target':>10}")
    print("-" * 66)
    print(f"{'open (mirror intact)':<46}{opened:>10.3f}{'< 2 s':>10}")
    print(f"{'open + first mirror rebuild':<46}{rebuilt:>10.3f}{'< 2 s':>10}")
    print(f"{'raw aiosqlite read + write of the routes':<46}{raw_rebuilt:>10.3f}")
    print(f"{'open + rebuild / raw':<46}{ratio(rebuilt, raw_rebuilt):>9.2f}×")
    ok = (ratio(large["store"]["mean"], small["store"]["mean"]) <= 1.5
          and ratio(large["cache off"]["mean"], small["cache off"]["mean"]) <= 1.5
          and max(ratio(r["store"]["mean"], r["raw"]["mean"]) for r in (small, large)) <= 3
          and opened < 2 and rebuilt < 2)
    print(f"\n{'all targets met' if ok else 'TARGET MISSED'} (run took {time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    asyncio.run(main())
