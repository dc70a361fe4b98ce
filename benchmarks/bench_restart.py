"""Benchmark of the first reply after a restart on a large home (docs/behaviour.md §3, §8).

A home of at least `--mb` megabytes (default 300: sessions with long transcripts, indexed by
FTS5) is built once and shut down cleanly. Each variant then starts a real GatewayApp on a fresh
copy of it (a restart), hands it one message as soon as `start()` returned, and times the reply:

* `shipped`: the watcher runs as shipped (its first tick at start; the FTS integrity check is
  deferred to a later idle tick);
* `check at start (before)`: the same plus a housekeeping pass that runs the FTS integrity
  check at the first tick, as the gateway did before the check was deferred;
* `no housekeeping`: no watcher at all — the baseline.

Variants alternate over `--repeat` rounds (a noisy neighbour hits all alike); medians are shown
with their ratio to the baseline. Target: `shipped` / `no housekeeping` close to 1.

Run: `.venv/bin/python benchmarks/bench_restart.py [--mb 300] [--repeat 3] [--dir DIR]`
(building the home takes a minute or two; use a real disk, `--dir`, not tmpfs).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from hermes_core.agents import EchoAgent
from hermes_core.app import GatewayApp
from hermes_core.markers import hookimpl
from hermes_core.model import MessageEvent, SessionSource
from hermes_core.plugin_system.manager import create_plugin_manager
from hermes_core.sdk.adapter import BaseAdapter, SendResult
from hermes_core.settings import GatewayConfig
from hermes_core.types import AdapterSpec

SHIPPED, AT_START, BASELINE = "shipped", "check at start (before)", "no housekeeping"
VARIANTS = (SHIPPED, AT_START, BASELINE)
SESSIONS = 2_000
MESSAGE_CHARS = 2_000
WORDS = [f"w{n:05d}" for n in range(20_000)]


class AnsweringChat(BaseAdapter):
    """Resolves `answered` at the first send."""

    spec = AdapterSpec(name="benchchat", label="Bench chat", pii_safe=True, max_message_length=4000)

    def __init__(self):
        super().__init__(None)
        self.answered: asyncio.Future | None = None

    async def start(self):
        pass

    async def stop(self):
        pass

    async def send(self, target, text, *, reply_to=None, metadata=None):
        if self.answered is not None and not self.answered.done():
            self.answered.set_result(time.perf_counter())
        return SendResult(message_id="sent")


class CheckAtFirstTick:
    """The housekeeping of before: the FTS integrity check at the watcher's first tick."""

    def __init__(self):
        self.done = False

    @hookimpl
    async def hermes_housekeeping(self, ctx):
        if not self.done:
            self.done = True
            return await ctx.store.check_fts()
        return None


def config_for(home: Path) -> GatewayConfig:
    return GatewayConfig(home=home, platforms={"benchchat": {"allow_all": True}})


def build_home(home: Path, megabytes: int) -> float:
    """Create the schema with a real start and stop, then bulk-insert transcripts until the
    home holds `megabytes` MB; returns its size in MB."""
    async def start_stop():
        app = GatewayApp(config_for(home), adapters={"benchchat": AnsweringChat()}, agent=EchoAgent(), watcher=False)
        await app.start()
        await app.stop()
    asyncio.run(start_stop())
    rng = random.Random(7)
    db = home / "state.db"
    conn = sqlite3.connect(db)
    try:
        sessions = [f"20260101_000000_{n:08x}" for n in range(SESSIONS)]
        n = 0
        while db.stat().st_size / 1e6 < megabytes:
            rows = []
            for _ in range(5_000):
                text = " ".join(rng.choice(WORDS) for _ in range(MESSAGE_CHARS // 7))
                rows.append((sessions[n % SESSIONS], "user" if n % 2 == 0 else "assistant", text,
                             "2026-01-01T00:00:00+00:00"))
                n += 1
            with conn:
                conn.executemany("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)", rows)
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # so the file's size is the home's
    finally:
        conn.close()
    return sum(p.stat().st_size for p in home.rglob("*") if p.is_file()) / 1e6


async def first_reply(home: Path, variant: str) -> float:
    """Start a gateway on `home`, send one message at once, return seconds until its reply."""
    config = config_for(home)
    pm, _report = create_plugin_manager(config)
    if variant == AT_START:
        pm.register(CheckAtFirstTick(), name="bench:check-at-start")
    chat = AnsweringChat()
    app = GatewayApp(config, pm=pm, adapters={"benchchat": chat}, agent=EchoAgent(), watcher=variant != BASELINE)
    await app.start()
    try:
        chat.answered = asyncio.get_running_loop().create_future()
        source = SessionSource("benchchat", "1", chat_type="dm", user_id="u1", user_name="Ann")
        sent = time.perf_counter()
        await app.runner.handle(MessageEvent(source=source, text="hello after the restart", message_id="m1"))
        return await chat.answered - sent
    finally:
        await app.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=300, help="size of the home to build (MB)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (variants alternate)")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()), help="where homes are built")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        built = Path(tmp) / "built"
        started = time.perf_counter()
        size = build_home(built, args.mb)
        print(f"home of {size:.0f} MB built in {time.perf_counter() - started:.0f} s")
        times: dict[str, list[float]] = {v: [] for v in VARIANTS}
        for round_no in range(args.repeat):
            order = VARIANTS if round_no % 2 == 0 else tuple(reversed(VARIANTS))
            for variant in order:
                home = Path(tmp) / f"restart-{round_no}-{VARIANTS.index(variant)}"
                shutil.copytree(built, home)
                times[variant].append(asyncio.run(first_reply(home, variant)))
                shutil.rmtree(home)
    base = statistics.median(times[BASELINE])
    print(f"{'variant':26} {'median s':>9} {'/ ' + BASELINE:>20}")
    for variant in VARIANTS:
        median = statistics.median(times[variant])
        print(f"{variant:26} {median:>9.3f} {median / base:>19.2f}×")


if __name__ == "__main__":
    main()
