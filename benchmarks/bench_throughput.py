"""Benchmark of pipeline throughput against the raw insert+commit rate (docs/behaviour.md §12):
messages per second through the real gateway path, as a ratio to one durable SQLite insert per
message, measured in the same run at 1, 100 and 10,000 concurrent sessions, `synchronous = FULL`
in both.

* **raw**: one aiosqlite connection on a fresh file (WAL, `synchronous = FULL`, a table shaped
  like `messages`: session_id, role, content, timestamp); N closed-loop tasks each run
  `BEGIN IMMEDIATE; INSERT one row; COMMIT` on that shared connection, one transaction at a time
  (an asyncio.Lock keeps them from interleaving). One durable insert per message.
* **engine floor**: the store's write engine as shipped (`store.db.Database`: group commit,
  `synchronous = FULL`) on a fresh file, with a message's shape and none of its logic: per
  message, in a session task per chat, the acceptance with the user message, then the reply,
  each a one-row insert the message waits for, the answer released after the reply as the
  pipeline's send is, then 'delivered' in a background task the session does not wait for
  (docs/behaviour.md §12 "Three commits per message, two in a row"). What the gateway could
  reach if the per-message logic cost nothing: the part of the gap to the raw rate that is not
  the engine's.
* **pipeline**: `GatewayRunner.handle` + the session worker's turn with the echo agent until the
  reply reaches the adapter (benchmarks/_harness.py), with the store as shipped. N sessions are
  first created by one warm-up message each (concurrently, in chunks; not timed), then each runs
  as a closed loop (its next message when the previous one was answered) for the wall time.
  Also reported, over every message of the timed loops (the writes that follow a reply
  included): commits per message (`Database.commits`) and calls to the SQLite thread per message
  (every call to aiosqlite's worker thread goes through `aiosqlite.core.Connection._execute`,
  which this process wraps with a counter); and where the time went: the event loop's CPU per
  message, its busy share of the wall time, and the SQLite thread's CPU per message (per-thread
  CPU clocks, `time.pthread_getcpuclockid`). A loop that is busy less than all the time was
  waiting for the SQLite thread (docs/behaviour.md §12 "Where the time goes at 10,000 sessions").
  With more than one session the two take turns on one GIL, so one message per their CPU
  together is a ceiling; it is printed as msg/s and as a ratio to the raw rate ("The ratio
  targets and the disk").

* **hand-overs** (1 session, after the timed rounds; `--no-hand-overs` skips it): one more round
  of raw and pipeline in which every call to the SQLite thread is timed, to print where one
  message's time goes: on the SQLite thread, handing calls to it and back, and the rest (the
  loop's own work between calls), with the median of each hand-over per call. Its stamps cost
  every call a few µs, so it is kept out of the ratios (docs/behaviour.md §12 "Where the time
  goes with one session").

A loop sends no new message once the wall time has passed; msg/s is the messages done divided by
the time until the last one in flight at the deadline was done (in both variants alike: at
10,000 sessions one round of the loops can outlast the wall time). Variants alternate over
`--repeat` rounds so a noisy neighbour hits both alike; figures are the rounds' means.

Run: `.venv/bin/python benchmarks/bench_throughput.py [--seconds 5] [--sessions 1 100 10000]
[--repeat 1] [--dir DIR] [--agent-cache-size N]` (total wall time with the defaults on the 2-core machine: about 60 s
with the pipeline at ~1,500 msg/s at 10,000 sessions, most of it creating those sessions and their
first round of messages, each 10,000 / the pipeline's msg/s. At 10,000 sessions one round of the
loops outlasts 5 s, so `--seconds 20` gives a steadier figure there).
Homes are created under `--dir`, default the system temp folder: use a real disk, not tmpfs,
or fsync costs nothing. `--agent-cache-size` sets the pipeline's `[agent.agent_cache] max_size`
(default the seed's 128): with more sessions than that, every turn reloads its transcript
(docs/behaviour.md §8 "Many concurrent chats").

Targets: pipeline/raw ≥ 0.3× at 1 session and ≥ 1.0× at 100 and at 10,000 sessions (group
commit across sessions lets the gateway beat a commit per message); on the single-session path
at most 4 commits per message, each a single call to the SQLite thread (checked as thread
calls per commit ≤ 1: a read on the path counts against it too).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from functools import partial
from pathlib import Path

import aiosqlite
import aiosqlite.core
from rich.console import Console
from rich.table import Table

from _harness import closed_loops, create_sessions, open_pipeline, run_loops, source
from hermes_core.ops.gc_tuning import tune_gc
from hermes_core.settings import AgentCacheSettings, CoreSettings
from hermes_core.store.db import Database

RAW, FLOOR, PIPELINE = "raw insert+commit", "engine floor", "pipeline"
RATIO_TARGETS = {1: 0.3, 100: 1.0, 10_000: 1.0}
MAX_COMMITS_PER_MESSAGE = 4  # on the single-session path
MAX_CALLS_PER_COMMIT = 1.0

# A fixed width when printing to a file or a pipe (rich would use 80 columns and cut the table).
console = Console(width=None if sys.stdout.isatty() else 120)


class ThreadCalls:
    """Counts calls to aiosqlite's worker thread, all connections of this process; while
    `timings` is a list (the hand-over round only, never the timed rounds, so the stamps cost
    no variant anything), each call also appends its `(loop → thread, on the thread, thread →
    loop)` in nanoseconds: from the call being queued until the thread starts it, the thread's
    run, and from the thread's end until the awaiting coroutine runs again."""

    count = 0
    timings: list[tuple[int, int, int]] | None = None

    @classmethod
    def install(cls) -> None:
        original = aiosqlite.core.Connection._execute

        async def counted(self, fn, *args, **kwargs):
            cls.count += 1
            if cls.timings is None:
                return await original(self, fn, *args, **kwargs)
            stamps: list[int] = []

            def timed(*a, **k):
                stamps.append(time.perf_counter_ns())
                try:
                    return fn(*a, **k)
                finally:
                    stamps.append(time.perf_counter_ns())

            queued = time.perf_counter_ns()
            try:
                return await original(self, timed, *args, **kwargs)
            finally:
                if len(stamps) == 2 and cls.timings is not None:
                    cls.timings.append((stamps[0] - queued, stamps[1] - stamps[0],
                                        time.perf_counter_ns() - stamps[1]))

        aiosqlite.core.Connection._execute = counted


async def measure_raw(root: Path, sessions: int, seconds: float) -> dict[str, float]:
    """N closed loops of one durable insert each on a fresh database; msg/s and calls/msg."""
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        conn = await aiosqlite.connect(Path(tmp) / "raw.db", isolation_level=None)
        try:
            await conn.execute("PRAGMA journal_mode = WAL")
            await conn.execute("PRAGMA synchronous = FULL")
            await conn.execute("CREATE TABLE messages (session_id TEXT, role TEXT, content TEXT, timestamp TEXT)")
            lock = asyncio.Lock()
            calls0 = ThreadCalls.count

            async def message(n: int, number: int) -> None:
                async with lock:
                    await conn.execute("BEGIN IMMEDIATE")
                    await conn.execute("INSERT INTO messages VALUES (?, ?, ?, ?)",
                                       (f"s{n}", "user", f"hello number {number}",
                                        datetime.now(timezone.utc).isoformat()))
                    await conn.execute("COMMIT")

            done, elapsed = await run_loops(sessions, seconds, message)
            return {"rate": done / elapsed, "calls": (ThreadCalls.count - calls0) / done}
        finally:
            await conn.close()


async def measure_floor(root: Path, sessions: int, seconds: float) -> dict[str, float]:
    """N closed loops through the store's write engine with a message's three writes (module
    docstring); msg/s and calls/msg."""
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        db = Database(Path(tmp) / "floor.db")
        await db.open()
        try:
            await db.write_one("CREATE TABLE floor (session_id TEXT, content TEXT)", ())

            def insert(session: int, content: str):
                return db.write_one("INSERT INTO floor VALUES (?, ?)", (f"s{session}", content))

            inbox: dict[int, asyncio.Queue] = {n: asyncio.Queue() for n in range(sessions)}
            detached: set[asyncio.Task] = set()

            async def session_task(n: int) -> None:
                while True:
                    text, answered = await inbox[n].get()
                    await insert(n, text)  # the acceptance with the user message
                    await insert(n, text)  # the reply
                    answered.set_result(None)  # sent
                    task = asyncio.create_task(insert(n, "delivered"))
                    detached.add(task)
                    task.add_done_callback(detached.discard)

            tasks = [asyncio.create_task(session_task(n)) for n in range(sessions)]
            calls0 = ThreadCalls.count

            async def message(n: int, number: int) -> None:
                answered = asyncio.get_running_loop().create_future()
                inbox[n].put_nowait((f"hello number {number}", answered))
                await answered

            done, elapsed = await run_loops(sessions, seconds, message)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, *detached, return_exceptions=True)
            return {"rate": done / elapsed, "calls": (ThreadCalls.count - calls0) / done}
        finally:
            await db.close()


async def measure_pipeline(root: Path, sessions: int, seconds: float,
                           agent_cache_size: int | None = None) -> dict[str, float]:
    """N sessions created, then N closed loops through the gateway; msg/s, commits and calls per msg.
    `agent_cache_size`: the agent cache's entry limit (None: the default)."""
    async with open_pipeline(root, agent_cache_size=agent_cache_size) as pipe:
        sources = [source(i) for i in range(sessions)]
        started = time.perf_counter()
        await create_sessions(pipe, sources)
        await pipe.runner.join()  # the warm-up's writes after its replies are not counted
        warm_up = time.perf_counter() - started
        db = pipe.store._b().db
        sqlite_clock = time.pthread_getcpuclockid(db.conn._thread.ident)
        commits0, calls0 = db.commits, ThreadCalls.count
        loop0, sqlite0, wall0 = time.thread_time(), time.clock_gettime(sqlite_clock), time.perf_counter()
        done, elapsed = await closed_loops(pipe, sources, seconds)
        await pipe.runner.join()  # the writes after the last replies belong to the timed messages
        loop_cpu, wall = time.thread_time() - loop0, time.perf_counter() - wall0
        sqlite_cpu = time.clock_gettime(sqlite_clock) - sqlite0
        return {"rate": done / elapsed, "commits": (db.commits - commits0) / done,
                "calls": (ThreadCalls.count - calls0) / done, "warm_up": warm_up,
                "loop_us": loop_cpu / done * 1e6, "loop_busy": loop_cpu / wall, "sqlite_us": sqlite_cpu / done * 1e6}


async def run(root: Path, levels: list[int], seconds: float, repeat: int, agent_cache_size: int | None) -> dict:
    results: dict[tuple[str, int], list[dict[str, float]]] = {}
    pipeline = partial(measure_pipeline, agent_cache_size=agent_cache_size)
    for sessions in levels:
        for round_no in range(repeat):
            order = (RAW, FLOOR, PIPELINE) if round_no % 2 == 0 else (PIPELINE, FLOOR, RAW)
            for variant in order:
                measure = {RAW: measure_raw, FLOOR: measure_floor, PIPELINE: pipeline}[variant]
                result = await measure(root, sessions, seconds)
                results.setdefault((variant, sessions), []).append(result)
                extra = (f", {result['commits']:.3g} commits/msg, loop {result['loop_us']:.0f} µs/msg "
                         f"(busy {result['loop_busy']:.0%}), SQLite thread {result['sqlite_us']:.0f} µs/msg, "
                         f"sessions created in {result['warm_up']:.1f} s" if variant == PIPELINE else "")
                console.print(f"[dim]{sessions:,} session(s), {variant}, round {round_no + 1}: {result['rate']:.1f} "
                              f"msg/s, {result['calls']:.3g} thread calls/msg{extra}[/dim]")
    return results


async def measure_hand_overs(root: Path, seconds: float) -> dict[str, dict[str, float]]:
    """One more round of raw and pipeline at 1 session with every thread call timed
    (`ThreadCalls.timings`; not part of the ratios: the stamps cost each call a few µs). Per
    variant: µs per message, calls per message; per message (means × calls) the time on the
    thread, the time handing calls over both ways, and the rest (the loop's own work between
    calls); per call, the medians of each hand-over."""
    found = {}
    for variant, measure in ((RAW, measure_raw), (PIPELINE, measure_pipeline)):
        ThreadCalls.timings = []
        try:
            result = await measure(root, 1, seconds)
            timings = ThreadCalls.timings  # the pipeline's one warm-up message too: a few calls in thousands
        finally:
            ThreadCalls.timings = None
        per_message = 1e6 / result["rate"]

        def per_msg(index: int) -> float:
            return statistics.fmean(t[index] for t in timings) / 1000 * result["calls"]

        def median(index: int) -> float:
            return statistics.median(t[index] for t in timings) / 1000

        on_thread, hand_overs = per_msg(1), per_msg(0) + per_msg(2)
        found[variant] = {"us": per_message, "calls": result["calls"], "on_thread": on_thread,
                          "hand_overs": hand_overs, "rest": per_message - on_thread - hand_overs,
                          "to_thread": median(0), "to_loop": median(2)}
    return found


def report_hand_overs(found: dict[str, dict[str, float]]) -> None:
    table = Table(title="1 session: where a message's time goes "
                        "(one more round, every call to the SQLite thread timed)",
                  caption="per message: µs on the SQLite thread, handing calls over (loop → thread: from the call "
                          "being queued until the thread starts it; thread → loop: from its end until the awaiting "
                          "coroutine runs), and the rest (the loop's own work between calls); per call: the medians "
                          "of the two hand-overs (docs/behaviour.md §12)")
    for name in ("variant", "µs / msg", "calls\n/ msg", "on the thread\nµs / msg", "hand-overs\nµs / msg",
                 "the rest\nµs / msg", "loop → thread\nµs / call", "thread → loop\nµs / call"):
        table.add_column(name, justify="right", no_wrap=True)
    for variant, f in found.items():
        table.add_row(variant, f"{f['us']:.0f}", f"{f['calls']:.2f}", f"{f['on_thread']:.0f}", f"{f['hand_overs']:.0f}",
                      f"{f['rest']:.0f}", f"{f['to_thread']:.1f}", f"{f['to_loop']:.1f}")
    console.print(table)


def verdict(ok: bool) -> str:
    return "[green]met[/green]" if ok else "[red]NOT met[/red]"


def report(results: dict, levels: list[int]) -> None:
    def mean(variant: str, sessions: int, key: str) -> float:
        return statistics.fmean(r[key] for r in results[(variant, sessions)])

    table = Table(title="Pipeline vs raw insert+commit (synchronous = FULL in both)",
                  caption="engine floor: the write engine with a message's three writes and none of its logic; "
                          "commits/msg, calls/msg: the pipeline's commits and SQLite-thread calls per message; "
                          "loop, SQLite: CPU per message of the event loop (and its busy share) and of the SQLite thread")
    for name in ("sessions", "raw\nmsg/s", "engine floor\n/ raw", "pipeline\nmsg/s", "pipeline\n/ raw", "target",
                 "commits\n/ msg", "calls\n/ msg", "loop µs\n/ msg", "loop\nbusy", "SQLite µs\n/ msg"):
        table.add_column(name, justify="right", no_wrap=True)
    single = None
    for sessions in levels:
        raw, pipe = mean(RAW, sessions, "rate"), mean(PIPELINE, sessions, "rate")
        ratio = pipe / raw
        target = RATIO_TARGETS.get(sessions)
        commits, calls = mean(PIPELINE, sessions, "commits"), mean(PIPELINE, sessions, "calls")
        if sessions == 1:
            single = (commits, calls)
        floor = mean(FLOOR, sessions, "rate") / raw
        # Commits and calls to 3 significant digits: at 10,000 sessions a group holds thousands.
        table.add_row(f"{sessions:,}", f"{raw:.0f}", f"{floor:.2f}×", f"{pipe:.0f}", f"{ratio:.2f}×",
                      "—" if target is None else f"≥ {target:.1f}× {verdict(ratio >= target)}",
                      f"{commits:.3g}", f"{calls:.3g}", f"{mean(PIPELINE, sessions, 'loop_us'):.0f}",
                      f"{mean(PIPELINE, sessions, 'loop_busy'):.0%}", f"{mean(PIPELINE, sessions, 'sqlite_us'):.0f}")
    console.print(table)
    for sessions in levels:
        if sessions == 1:
            continue  # strictly sequential: bound by its commits and hand-overs, not by CPU alone
        # The loop and the SQLite thread take turns on one GIL (docs/behaviour.md §12), so with
        # many sessions in flight the pipeline cannot pass one message per their CPU together.
        cpu_us = mean(PIPELINE, sessions, "loop_us") + mean(PIPELINE, sessions, "sqlite_us")
        console.print(f"{sessions:,} sessions: the pipeline's CPU per message (loop + SQLite thread) is "
                      f"{cpu_us:.0f} µs, a ceiling of {1e6 / cpu_us:.0f} msg/s = "
                      f"{1e6 / cpu_us / mean(RAW, sessions, 'rate'):.2f}× the raw rate")
    if single is not None:
        commits, calls = single
        per_commit = calls / commits if commits else float("inf")
        console.print(f"1 session: {commits:.2f} commits/msg (target ≤ {MAX_COMMITS_PER_MESSAGE}) — "
                      f"{verdict(commits <= MAX_COMMITS_PER_MESSAGE)}; {per_commit:.2f} thread calls per "
                      f"commit (target ≤ {MAX_CALLS_PER_COMMIT:g}) — {verdict(per_commit <= MAX_CALLS_PER_COMMIT)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="timed wall time per variant and round")
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 100, 10_000], help="concurrency levels")
    parser.add_argument("--repeat", type=int, default=1, help="rounds per level (variants alternate)")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()),
                        help="where the temporary homes are created (a real disk)")
    parser.add_argument("--agent-cache-size", type=int, default=None, metavar="N",
                        help="[agent.agent_cache] max_size of the pipeline (default: the seed's 128)")
    parser.add_argument("--no-hand-overs", dest="hand_overs", action="store_false",
                        help="skip the extra 1-session round that times each call to the SQLite thread")
    args = parser.parse_args()
    if args.agent_cache_size is not None and args.agent_cache_size < 1:  # as [agent.agent_cache] max_size
        parser.error(f"--agent-cache-size must be at least 1, got {args.agent_cache_size}")
    levels = sorted(set(args.sessions))
    ThreadCalls.install()
    # Every variant under the collector settings of a gateway process (docs/behaviour.md §12).
    tune_gc(CoreSettings().gc_young_threshold)
    started = time.perf_counter()
    results = asyncio.run(run(args.dir, levels, args.seconds, args.repeat, args.agent_cache_size))
    cache = AgentCacheSettings().max_size if args.agent_cache_size is None else args.agent_cache_size
    console.print(f"{args.seconds:g} s per variant × {args.repeat} round(s), means shown; agent cache of "
                  f"{cache:,} entries; homes under {args.dir}; total {time.perf_counter() - started:.0f} s")
    report(results, levels)
    if args.hand_overs and 1 in levels:
        report_hand_overs(asyncio.run(measure_hand_overs(args.dir, args.seconds)))


if __name__ == "__main__":
    main()
