"""Benchmark of durable throughput (docs/behaviour.md §12): messages per second through the real
pipeline with state.db at `synchronous = FULL` + group commit (the store as shipped), against
`synchronous = NORMAL` without group commit (every write its own transaction: the store before
group commit), measured in the same run at 1, 100 and 1,000 concurrent sessions.

A message is what the gateway does for one inbound chat message: `GatewayRunner.handle` (the
durable acceptance the adapter waits for before acknowledging the platform), then the session
worker's turn with the echo agent: user message + turn marker, reply + delivery obligation,
token counters, 'attempting' / 'delivered', intake row finished — about ten writes. Each
session is a closed loop: it sends its next message when the previous one was answered, so
"N concurrent sessions" means N messages in flight. Sessions are created by one warm-up message
each, then every variant runs for a fixed wall time; variants alternate (`--repeat` rounds) so
that a noisy neighbour on the machine hits both alike, and the figures are the rounds' means.

Run: `.venv/bin/python benchmarks/bench_durability.py [--seconds 5] [--sessions 1 100 1000] [--repeat 2]`
(homes are created under `--dir`, default the system temp folder: use a real disk, not tmpfs,
or fsync costs nothing and both variants look alike).
Target: FULL + group commit / NORMAL without ≥ 1.0 at 100 sessions.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from pathlib import Path

from _harness import closed_loops, create_sessions, open_pipeline, source

from hermes_core.store import SessionStore
from hermes_core.store.db import Database

SHIPPED, BASELINE = "FULL + group commit", "NORMAL, no group commit"


class UngroupedNormalDatabase(Database):
    """The writer as it was before docs/behaviour.md §12: NORMAL, one transaction per write."""

    SYNCHRONOUS = "NORMAL"
    GROUP_COMMIT = False


class BaselineStore(SessionStore):
    database_class = UngroupedNormalDatabase


async def measure(root: Path, variant: str, sessions: int, seconds: float) -> dict[str, float]:
    """One variant at one concurrency in a fresh home; returns msg/s and group sizes."""
    async with open_pipeline(root, SessionStore if variant == SHIPPED else BaselineStore) as pipe:
        sources = [source(i) for i in range(sessions)]
        await create_sessions(pipe, sources)
        db = pipe.store._b().db
        commits0, writes0 = db.commits, db.writes
        done, elapsed = await closed_loops(pipe, sources, seconds)
        commits = db.commits - commits0
        return {"rate": done / elapsed, "per_commit": (db.writes - writes0) / max(commits, 1)}


async def run(root: Path, levels: list[int], seconds: float, repeat: int) -> dict:
    results: dict[tuple[str, int], list[dict[str, float]]] = {}
    for sessions in levels:
        for round_no in range(repeat):
            order = (BASELINE, SHIPPED) if round_no % 2 == 0 else (SHIPPED, BASELINE)
            for variant in order:
                results.setdefault((variant, sessions), []).append(await measure(root, variant, sessions, seconds))
    return results


def report(results: dict, levels: list[int]) -> None:
    print(f"{'sessions':>8}  {'variant':26} {'msg/s':>9} {'writes/commit':>14}")
    ratios = {}
    for sessions in levels:
        rates = {}
        for variant in (BASELINE, SHIPPED):
            runs = results[(variant, sessions)]
            rates[variant] = statistics.fmean(r["rate"] for r in runs)
            per_commit = statistics.fmean(r["per_commit"] for r in runs)
            print(f"{sessions:>8}  {variant:26} {rates[variant]:>9.1f} {per_commit:>14.1f}")
        ratios[sessions] = rates[SHIPPED] / rates[BASELINE]
    print()
    for sessions in levels:
        print(f"{sessions:>5} session(s): {SHIPPED} / {BASELINE} = {ratios[sessions]:.2f}×")
    if 100 in ratios:
        verdict = "met" if ratios[100] >= 1.0 else "NOT met"
        print(f"target: ≥ 1.00× at 100 sessions: {ratios[100]:.2f}× — {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="timed wall time per variant and round")
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 100, 1000], help="concurrency levels")
    parser.add_argument("--repeat", type=int, default=2, help="rounds per level (variants alternate)")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()),
                        help="where the temporary homes are created (a real disk)")
    args = parser.parse_args()
    levels = sorted(args.sessions)
    results = asyncio.run(run(args.dir, levels, args.seconds, args.repeat))
    print(f"{args.seconds:g} s per variant × {args.repeat} round(s), means shown; homes under {args.dir}")
    report(results, levels)


if __name__ == "__main__":
    main()
