"""Benchmark of the agent cache's memory budget (seed §11; docs/behaviour.md §8).

Part 1 — memory. Live transcripts of `--sessions` sessions × `--messages` messages, every tenth
message a large tool output (`--tool-kb` KiB, unique text), go through one AgentCache with the
entry limit lifted, so only the memory-pressure sweep can keep the process's anonymous memory
(`RssAnon`) near `--budget-mb`. Each session is cached as a miss does it (`put`), then used by a
turn (`begin_turn` / `end_turn`); a watcher tick runs every `--tick-every` sessions. Variants:

* `shipped`: the insert check plus repeated capped passes (`AgentCache.relieve_pressure`);
* `tick only (before)`: one capped sweep per watcher tick, no insert check.

Printed: the peak anonymous memory of each variant divided by the budget (target ≤ 1.0 for
`shipped`). Each variant runs in a fresh subprocess, so the peaks do not mix. Memory is read after
each insert and its check: a transcript exists before it is cached, so between its load and its
insert the process holds up to one transcript (here about 320 KiB) more than the figure.

Part 2 — cost of an eviction. A real GatewayApp (echo agent, SQLite) answers `--turns` turns in
each of two sessions whose transcripts hold `--messages` messages with the same tool outputs:
one keeps its cache entry; the other's entry is evicted before every turn, so each of its turns
reloads the transcript from the store, and its turn is rewound afterwards (untimed), so every
reload reads those `--messages` messages plus the new one. Their turns alternate, so both see
the same machine load. Printed: mean turn time evicted / cached (target ≤ 1.5).

Run: `.venv/bin/python benchmarks/bench_memory.py [--part 1|2] [--sessions 5000] [--messages 200]
[--tool-kb 16] [--budget-mb 300] [--turns 100]` (both parts unless `--part` names one).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHIPPED, BEFORE = "shipped", "tick only (before)"


def rss_anon() -> int:
    """This process's anonymous resident memory, bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no RssAnon in /proc/self/status")


def transcript(session: int, messages: int, tool_kb: int) -> list[dict]:
    """`messages` load_transcript-style dicts; every tenth a tool output of `tool_kb` KiB."""
    out = []
    for n in range(messages):
        if n % 10 == 9:
            content = os.urandom(tool_kb * 512).hex()  # unique: never shared between sessions
            out.append({"role": "tool", "content": content, "tool_call_id": f"call_{session}_{n}"})
        else:
            out.append({"role": "user" if n % 2 == 0 else "assistant", "content": f"message {n} of {session}"})
    return out


def memory_run(variant: str, sessions: int, messages: int, tool_kb: int, budget_mb: int, tick_every: int) -> dict:
    """One variant in this process (called in a subprocess by `main`)."""
    from hermes_core.pipeline.agent_cache import AgentCache
    from hermes_core.pipeline.memory_budget import MemoryProbe

    # The process's own RssAnon (no cgroup root): other processes on the machine never count.
    probe = MemoryProbe(cgroup_root="/nonexistent-cgroup-root")
    cache = AgentCache(max_size=10**9, idle_ttl_secs=0, memory_high_mb=budget_mb, probe=probe)
    if variant == BEFORE:
        cache._check_pressure_on_insert = lambda key: None  # the gateway before the insert check
    peak = 0
    started = time.perf_counter()
    for i in range(sessions):
        entry = cache.put(f"agent:main:bench:dm:{i}", f"s{i}", transcript(i, messages, tool_kb))
        cache.begin_turn(entry)
        cache.end_turn(entry)
        if i % tick_every == tick_every - 1:
            (cache.relieve_pressure if variant == SHIPPED else cache.sweep_under_pressure)()
        peak = max(peak, rss_anon())
    return {"peak": peak, "entries": len(cache), "seconds": time.perf_counter() - started,
            "pressure_evictions": cache.stats.evictions.get("pressure", 0)}


async def eviction_run(messages: int, tool_kb: int, turns: int) -> dict[str, float]:
    """Mean turn seconds of a session whose cache entry is kept and of one whose entry is
    evicted before each turn, in one app, their turns alternating (so both see the same machine
    load)."""
    from hermes_core.agents import EchoAgent
    from hermes_core.app import GatewayApp
    from hermes_core.model import MessageEvent, SessionSource
    from hermes_core.sdk.adapter import BaseAdapter, SendResult
    from hermes_core.settings import GatewayConfig
    from hermes_core.types import AdapterSpec

    class Chat(BaseAdapter):
        spec = AdapterSpec(name="benchchat", label="Bench chat", pii_safe=True, max_message_length=4000)

        async def start(self):
            pass

        async def stop(self):
            pass

        async def send(self, target, text, *, reply_to=None, metadata=None):
            return SendResult(message_id="sent")

    variants = ("cached", "evicted")
    with tempfile.TemporaryDirectory() as tmp:
        config = GatewayConfig(home=Path(tmp) / "home", platforms={"benchchat": {"allow_all": True}})
        app = GatewayApp(config, adapters={"benchchat": Chat(None)}, agent=EchoAgent(), watcher=False)
        await app.start()
        try:
            sources, entries = {}, {}
            for number, variant in enumerate(variants, start=1):
                src = SessionSource("benchchat", str(number), chat_type="dm", user_id=f"u{number}", user_name="Ann")
                entry = await app.store.get_or_create_session(src)
                for message in transcript(number, messages, tool_kb):
                    await app.store.append_to_transcript(entry.session_id, message)
                sources[variant], entries[variant] = src, entry
            cache = app.runner.deps.agent_cache
            times: dict[str, list[float]] = {variant: [] for variant in variants}
            for n in range(turns + 5):
                for variant in variants:
                    entry = entries[variant]
                    if variant == "evicted":
                        cache.invalidate(entry.session_key)
                    started = time.perf_counter()
                    await app.runner.handle(MessageEvent(source=sources[variant], text=f"turn {n}",
                                                         message_id=f"{variant}{n}"))
                    await app.runner.join()
                    if n >= 5:  # the first turns warm up (the first one loads the transcript)
                        times[variant].append(time.perf_counter() - started)
                    if variant == "evicted":
                        # Untimed: the turn's two messages go (soft delete), so every reload
                        # reads the `messages` of the transcript as set up, plus the new one.
                        await app.store.rewind_session(entry.session_id, 1)
        finally:
            await app.stop()
    return {variant: statistics.fmean(times[variant]) for variant in variants}


def memory_part(args: argparse.Namespace) -> None:
    """Part 1: each variant in a subprocess; prints its peak against the budget."""
    print(f"part 1: {args.sessions} sessions × {args.messages} messages, a {args.tool_kb} KiB tool output every "
          f"tenth; budget {args.budget_mb} MiB; a watcher tick every {args.tick_every} sessions")
    budget = args.budget_mb * 2**20
    for variant in (SHIPPED, BEFORE):
        out = subprocess.run([sys.executable, __file__, "--variant", variant, "--sessions", str(args.sessions),
                              "--messages", str(args.messages), "--tool-kb", str(args.tool_kb),
                              "--budget-mb", str(args.budget_mb), "--tick-every", str(args.tick_every)],
                             capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        # KiB precision: /proc reports RssAnon in KiB, and the shipped peak sits just under the
        # budget, where a rounded "300 MiB = 1.00×" would not say on which side.
        verdict = (" — met" if r["peak"] <= budget else " — not met") if variant == SHIPPED else ""
        print(f"  {variant:20} peak anon {r['peak'] // 1024:9,} KiB = {r['peak'] / budget:6.3f}× the budget "
              f"({budget // 1024:,} KiB){verdict}; {r['entries']} entries left, "
              f"{r['pressure_evictions']} pressure evictions, {r['seconds']:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=5000)
    parser.add_argument("--messages", type=int, default=200, help="messages per transcript")
    parser.add_argument("--tool-kb", type=int, default=16, help="size of each tool output (KiB)")
    parser.add_argument("--budget-mb", type=int, default=300, help="agent.agent_cache.memory_high_mb")
    parser.add_argument("--tick-every", type=int, default=100, help="sessions between two watcher ticks")
    parser.add_argument("--turns", type=int, default=100, help="timed turns of each session of part 2")
    parser.add_argument("--part", type=int, choices=(1, 2), help="run only this part")
    parser.add_argument("--variant", help=argparse.SUPPRESS)  # a part-1 subprocess
    args = parser.parse_args()
    if args.variant:
        print(json.dumps(memory_run(args.variant, args.sessions, args.messages, args.tool_kb, args.budget_mb,
                                    args.tick_every)))
        return
    if args.part != 2:
        memory_part(args)
    if args.part != 1:
        means = asyncio.run(eviction_run(args.messages, args.tool_kb, args.turns))
        print(f"part 2: turn mean cached {means['cached'] * 1e3:.2f} ms, evicted before each turn "
              f"{means['evicted'] * 1e3:.2f} ms: evicted / cached = {means['evicted'] / means['cached']:.2f}× "
              f"(target ≤ 1.5×)")


if __name__ == "__main__":
    main()
