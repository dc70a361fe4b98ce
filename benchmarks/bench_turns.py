"""Benchmark of a turn's cost against the transcript's length (seed §11 agent cache; docs/behaviour.md §8).

Per turn the gateway runs `pipeline.turn.run_turn` with the echo agent on a real store: the
session lookup, the user message + turn marker (one transaction), the history, the agent, the
reply + delivery obligation (one transaction), the token counters, the send to a recording
adapter and its ledger states. Each session is first filled to its length (100 or 2,000
messages) through the store, then timed turn by turn (every turn adds 2 messages).

Variants, measured in the same run on the same kind of home:
  * "turn (agent cache)": as the gateway runs — history from the agent cache;
  * "turn (cache dropped each turn)": the key invalidated before every turn, so each turn
    reloads the transcript from the store (what every turn did before the agent cache);
  * "raw append_to_transcript": the baseline — one `store.append_to_transcript` per message on
    a session of the same length (no turn around it).

Run: `.venv/bin/python benchmarks/bench_turns.py [--turns 300] [--lengths 100 2000]`
Target: turn (agent cache) mean at 2,000 messages within 1.5× of the mean at 100.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from hermes_core.agents import EchoAgent
from hermes_core.app import GatewayApp
from hermes_core.model import MessageEvent, SessionSource
from hermes_core.pipeline.turn import run_turn
from hermes_core.sdk.adapter import BaseAdapter, SendResult
from hermes_core.settings import GatewayConfig
from hermes_core.types import AdapterSpec

WARM_UP = 20
CACHED, DROPPED, RAW = "turn (agent cache)", "turn (cache dropped each turn)", "raw append_to_transcript"
VARIANTS = (CACHED, DROPPED, RAW)


class NullChat(BaseAdapter):
    """Accepts every send (the cost of a real platform is not what is measured)."""

    spec = AdapterSpec(name="benchchat", label="Bench chat", pii_safe=True, max_message_length=4000)

    def __init__(self):
        super().__init__(None)
        self.sent = 0

    async def start(self):
        pass

    async def stop(self):
        pass

    async def send(self, target, text, *, reply_to=None, metadata=None):
        self.sent += 1
        return SendResult(message_id=str(self.sent))


def source(n: int) -> SessionSource:
    return SessionSource("benchchat", str(n), chat_type="dm", user_id=f"u{n}", user_name=f"user{n}")


async def fill(app: GatewayApp, src: SessionSource, length: int) -> tuple[str, str]:
    """A session of `src` holding `length` messages (alternating user/assistant); (key, id)."""
    entry = await app.store.get_or_create_session(src)
    for i in range(length):
        role = "user" if i % 2 == 0 else "assistant"
        text = f"message {i} of the earlier conversation" if role == "user" else f"echo: message {i - 1}"
        await app.store.append_to_transcript(entry.session_id, {"role": role, "content": text})
    return entry.session_key, entry.session_id


async def time_turns(app: GatewayApp, src: SessionSource, key: str, turns: int, *, drop_cache: bool) -> list[float]:
    deps = app.runner.deps
    times = []
    for i in range(WARM_UP + turns):
        event = MessageEvent(source=src, text=f"turn {i} says hello")
        if drop_cache:
            deps.agent_cache.invalidate(key)
        start = time.perf_counter()
        result = await run_turn(deps, key, event)
        elapsed = time.perf_counter() - start
        assert result.status == "completed", result
        if i >= WARM_UP:
            times.append(elapsed)
    return times


async def time_appends(app: GatewayApp, session_id: str, n: int) -> list[float]:
    times = []
    for i in range(WARM_UP + n):
        start = time.perf_counter()
        await app.store.append_to_transcript(session_id, {"role": "user", "content": f"raw {i} hello"})
        elapsed = time.perf_counter() - start
        if i >= WARM_UP:
            times.append(elapsed)
    return times


async def measure(variant: str, length: int, turns: int) -> list[float]:
    """One variant at one length, in a fresh home: fill, checkpoint the WAL (so every row starts
    from the same journal state whatever the fill wrote), then time."""
    with tempfile.TemporaryDirectory() as tmp:
        config = GatewayConfig(home=Path(tmp) / "home", platforms={"benchchat": {"allow_all": True}})
        app = GatewayApp(config, adapters={"benchchat": NullChat()}, agent=EchoAgent(), watcher=False)
        await app.start()
        try:
            key, sid = await fill(app, source(1), length)
            with sqlite3.connect(config.db_path) as conn:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            if variant == RAW:
                return await time_appends(app, sid, turns)
            return await time_turns(app, source(1), key, turns, drop_cache=variant == DROPPED)
        finally:
            await app.stop()


async def run(turns: int, lengths: list[int]) -> dict[tuple[str, int], list[float]]:
    results: dict[tuple[str, int], list[float]] = {}
    for length in lengths:
        for variant in VARIANTS:
            results[(variant, length)] = await measure(variant, length, turns)
    return results


def report(results: dict[tuple[str, int], list[float]], lengths: list[int]) -> None:
    small, large = lengths[0], lengths[-1]
    base = {length: statistics.fmean(results[(RAW, length)]) for length in lengths}
    print(f"{'variant':34} {'length':>7} {'mean ms':>9} {'p50 ms':>8} {'p99 ms':>8} {'/ raw append':>13}")
    for variant in VARIANTS:
        for length in lengths:
            t = sorted(results[(variant, length)])
            mean = statistics.fmean(t)
            p99 = t[min(len(t) - 1, int(len(t) * 0.99))]
            print(f"{variant:34} {length:>7} {mean * 1e3:>9.3f} {statistics.median(t) * 1e3:>8.3f} "
                  f"{p99 * 1e3:>8.3f} {mean / base[length]:>12.2f}×")
    print()
    for variant in VARIANTS:
        ratio = statistics.fmean(results[(variant, large)]) / statistics.fmean(results[(variant, small)])
        print(f"{variant:34} mean at {large} / mean at {small}: {ratio:.2f}×")
    ratio = statistics.fmean(results[(CACHED, large)]) / statistics.fmean(results[(CACHED, small)])
    verdict = "met" if ratio <= 1.5 else "NOT met"
    print(f"target: turn (agent cache) at {large} within 1.5× of at {small}: {ratio:.2f}× — {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=300, help="timed turns per variant and length")
    parser.add_argument("--lengths", type=int, nargs="+", default=[100, 2000],
                        help="transcript lengths (messages) before the timed turns")
    args = parser.parse_args()
    lengths = sorted(args.lengths)
    results = asyncio.run(run(args.turns, lengths))
    print(f"{args.turns} timed turns per row after {WARM_UP} warm-up; each turn adds 2 messages")
    report(results, lengths)


if __name__ == "__main__":
    main()
