"""Benchmark of the session store (issue 3): per-message cost at 1,000 and 100,000 sessions,
against a raw aiosqlite baseline measured in the same run, and open time with 100,000 sessions.

Per message the store does what the gateway does: `get_or_create_session` + `append_to_transcript`
+ `update_session`, on a session picked at random from a working set of 1,000 sessions drawn from
the whole population (the same working-set size at 1k and 100k, so both runs have the same cache
hit ratio and the comparison isolates the number of stored sessions). A "cold" variant disables
the entry cache, so every message also looks its entry up in SQLite. The raw baseline runs one
INSERT into `messages` (same schema, same FTS triggers) + one UPDATE of `sessions`, autocommit,
with the same PRAGMAs, on the same picks.

Run: `.venv/bin/python benchmarks/bench_store.py [--messages 3000]`
Targets: 100k/1k ≤ 1.5×, store/raw ≤ 3×, open with 100k sessions < 2 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
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


def source(i: int) -> SessionSource:
    return SessionSource(platform="telegram", chat_id=str(1_000_000 + i), chat_type="dm", user_id=str(i),
                         user_name=f"user{i}")


async def make_schema(config: GatewayConfig) -> None:
    async with SessionStore(config.sessions_dir, config, lock_home=False):
        pass


def populate(config: GatewayConfig, n: int) -> None:
    """Bulk-insert n sessions (routes + session rows) with executemany, one transaction."""
    base = datetime(2026, 1, 1, tzinfo=timezone.utc)
    routes, sessions = [], []
    for i in range(n):
        src = source(i)
        when = base + timedelta(seconds=i)
        entry = SessionEntry(session_key=f"agent:main:telegram:dm:{src.chat_id}",
                             session_id=f"20260101_000000_{i:08x}", created_at=when, updated_at=when,
                             origin=src, platform="telegram", chat_type="dm")
        routes.append((entry.session_key, entry.session_id, entry_json(entry), when.timestamp(), 0))
        sessions.append(session_params(entry))
    conn = sqlite3.connect(config.db_path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO routes (session_key, session_id, entry, updated_ts, suspended) "
                     "VALUES (?, ?, ?, ?, ?)", routes)
    conn.executemany(
        "INSERT INTO sessions (session_id, session_key, origin, platform, chat_id, participant_id, chat_type, "
        "display_name, created_at, updated_at, parent_session_id) VALUES (?,?,?,?,?,?,?,?,?,?,?)", sessions)
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


WORKING_SET = 1000


def picks_for(n_sessions: int, messages: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    working = rng.sample(range(n_sessions), min(WORKING_SET, n_sessions))
    return [rng.choice(working) for _ in range(messages)]


async def store_per_message(config: GatewayConfig, n_sessions: int, messages: int, seed: int,
                            cold: bool = False) -> float:
    picks = picks_for(n_sessions, messages, seed)
    usage = TokenUsage(input_tokens=120, output_tokens=40)
    async with SessionStore(config.sessions_dir, config) as store:
        if cold:
            store.cache_size = 0
        for i in picks[:50]:  # warm-up
            await store.get_or_create_session(source(i))
        start = time.perf_counter()
        for k, i in enumerate(picks):
            entry = await store.get_or_create_session(source(i))
            await store.append_to_transcript(entry.session_id, {"role": "user", "content": f"hello number {k}"})
            await store.update_session(entry.session_key, 160, usage=usage)
        elapsed = time.perf_counter() - start
    return elapsed / messages


async def raw_per_message(config: GatewayConfig, n_sessions: int, messages: int, seed: int) -> float:
    picks = picks_for(n_sessions, messages, seed)
    db = await aiosqlite.connect(str(config.db_path), isolation_level=None)
    try:
        for pragma in ("journal_mode = WAL", "synchronous = NORMAL", "foreign_keys = ON", "busy_timeout = 5000",
                       "secure_delete = ON"):
            await db.execute(f"PRAGMA {pragma}")
        start = time.perf_counter()
        for k, i in enumerate(picks):
            sid = f"20260101_000000_{i:08x}"
            now = format_timestamp(datetime.now(timezone.utc))
            await db.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
                             (sid, "user", f"hello number {k}", now))
            await db.execute("UPDATE sessions SET updated_at = ?, input_tokens = input_tokens + 120 "
                             "WHERE session_id = ?", (now, sid))
        elapsed = time.perf_counter() - start
    finally:
        await db.close()
    return elapsed / messages


async def open_time(config: GatewayConfig) -> float:
    start = time.perf_counter()
    store = SessionStore(config.sessions_dir, config)
    await store.open()
    elapsed = time.perf_counter() - start
    await store.close()
    return elapsed


def fresh_config(root: Path, name: str) -> GatewayConfig:
    return GatewayConfig(home=root / name, storage={"mirror_debounce_s": float(__import__("os").environ.get("DEB", "0.25"))})


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=3000, help="messages per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (median is reported)")
    parser.add_argument("--large", type=int, default=100_000, help="sessions in the large store")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        configs = {}
        for label, n in (("1k", 1000), ("100k", args.large)):
            for kind in ("store", "cold", "raw"):
                cfg = fresh_config(root, f"{kind}-{label}")
                await make_schema(cfg)
                populate(cfg, n)
                configs[(kind, label)] = (cfg, n)
        print(f"populated in {time.perf_counter() - t0:.1f} s")

        results: dict[tuple[str, str], list[float]] = {k: [] for k in configs}
        for r in range(args.rounds):
            for (kind, label), (cfg, n) in configs.items():
                if kind == "raw":
                    value = await raw_per_message(cfg, n, args.messages, seed=r)
                else:
                    value = await store_per_message(cfg, n, args.messages, seed=r, cold=kind == "cold")
                results[(kind, label)].append(value)
        med = {k: statistics.median(v) for k, v in results.items()}

        opens = [await open_time(configs[("store", "100k")][0]) for _ in range(3)]
        open_s = max(opens)

    us = {k: v * 1e6 for k, v in med.items()}
    print()
    print(f"{'measure':<44}{'value':>12}{'target':>12}")
    print("-" * 68)
    for label in ("1k", "100k"):
        print(f"{'store per message, ' + label + ' sessions (µs)':<44}{us[('store', label)]:>12.0f}{'':>12}")
        print(f"{'store, entry cache off, ' + label + ' (µs)':<44}{us[('cold', label)]:>12.0f}{'':>12}")
        print(f"{'raw aiosqlite per message, ' + label + ' (µs)':<44}{us[('raw', label)]:>12.0f}{'':>12}")
    scale = med[("store", "100k")] / med[("store", "1k")]
    raw_scale = med[("raw", "100k")] / med[("raw", "1k")]
    cold_scale = med[("cold", "100k")] / med[("cold", "1k")]
    print(f"{'store 100k / 1k':<44}{scale:>11.2f}×{'≤ 1.5×':>12}")
    print(f"{'store, entry cache off, 100k / 1k':<44}{cold_scale:>11.2f}×{'≤ 1.5×':>12}")
    print(f"{'raw 100k / 1k':<44}{raw_scale:>11.2f}×{'':>12}")
    for label in ("1k", "100k"):
        ratio = med[("store", label)] / med[("raw", label)]
        print(f"{'store / raw, ' + label:<44}{ratio:>11.2f}×{'≤ 3×':>12}")
    print(f"{'open with ' + format(args.large, ',') + ' sessions (s, worst of 3)':<44}{open_s:>12.3f}{'< 2 s':>12}")
    ok = scale <= 1.5 and cold_scale <= 1.5 and all(med[("store", l)] / med[("raw", l)] <= 3 for l in ("1k", "100k")) and open_s < 2
    print()
    print("all targets met" if ok else "TARGET MISSED")


if __name__ == "__main__":
    asyncio.run(main())
