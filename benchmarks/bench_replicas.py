"""Benchmark of several gateway replicas on one PostgreSQL (docs/architecture.md §7): messages per
second with 1, 2 and 4 `hermes-gateway run` replicas on one database against one gateway on
SQLite (state.db, the shipped store), as ratios measured in the same run; and the lease
overhead per turn (the fencing statement every write of a turn starts with).

Throughput: real gateway processes, a fake shared-ingress platform and an agent answering at
once, both on 127.0.0.1 in this process (the test fakes of plugins/postgres/tests/replicas).
`--sessions` chats are closed loops: each sends its next message when the previous one was
answered. After a warm-up message per chat, answered messages are counted for `--seconds`.
The PostgreSQL cluster is a throw-away one with `fsync = on` (durable like SQLite's FULL).

Lease overhead: one process, the real runner and store with the echo agent, one session at a
time (latency), on PostgreSQL with fencing and with a fence that checks nothing; the difference
is the cost of the leases per turn.

Run: `.venv/bin/python benchmarks/bench_replicas.py [--seconds 5] [--sessions 100] [--replicas 1 2 4]`
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FAKES = ROOT / "plugins" / "postgres" / "tests" / "replicas"
sys.path.insert(0, str(FAKES))

from replica_servers import FakePlatform, ScriptedAgent, serve  # noqa: E402

from hermes_core.agents import EchoAgent  # noqa: E402
from hermes_core.model import MessageEvent, SessionSource  # noqa: E402
from hermes_core.pipeline.deps import PipelineDeps  # noqa: E402
from hermes_core.pipeline.runner import GatewayRunner  # noqa: E402
from hermes_core.plugin_system.manager import create_plugin_manager  # noqa: E402
from hermes_core.sdk.adapter import BaseAdapter, SendResult  # noqa: E402
from hermes_core.settings import GatewayConfig  # noqa: E402
from hermes_core.store import SessionStore  # noqa: E402
from hermes_core.types import AdapterSpec  # noqa: E402
from hermes_postgres.backend import PostgresBackend  # noqa: E402
from hermes_postgres.cluster import ThrowawayCluster  # noqa: E402
from hermes_postgres.leases import Leases  # noqa: E402

GATEWAY = Path(sys.executable).parent / "hermes-gateway"


class LoopingPlatform(FakePlatform):
    """Each answer sent to a chat queues that chat's next message (a closed loop per chat)."""

    def __init__(self) -> None:
        super().__init__()
        self.next_number: dict[str, int] = {}
        self.answered = 0

    def say(self, chat: str) -> None:
        number = self.next_number.get(chat, 0)
        self.next_number[chat] = number + 1
        self.push(f"{chat}-m{number}", chat, f"hello s0-m{number}")

    async def send(self, request):
        response = await super().send(request)
        self.answered += 1
        self.say(self.sent[-1].chat)
        return response


def write_home(home: Path, name: str, base_url: str, postgres: bool) -> None:
    home.mkdir(parents=True)
    store = ('[store]\nbackend = "postgres"\nlease_ttl_s = 30\npoll_interval_s = 0.5\n' if postgres else "")
    (home / "hermes.toml").write_text(
        store + '[agent]\nbackend = "openai"\n[agent.openai]\n'
        f'base_url = "{base_url}/v1"\nmax_retries = 0\n'
        '[platforms.fake]\nenabled = true\nallow_all = true\nadapter = "replica_adapter:PolledAdapter"\n'
        f'base_url = "{base_url}"\nreplica = "{name}"\n')


async def gateways_rate(root: Path, replicas: int, dsn: str | None, sessions: int, seconds: float) -> float:
    """Messages per second of `replicas` gateways (PostgreSQL at `dsn`, or one on SQLite)."""
    platform, agent = LoopingPlatform(), ScriptedAgent()
    server, base_url = await serve(platform, agent)
    procs = []
    work = Path(tempfile.mkdtemp(dir=root))
    try:
        for i in range(replicas):
            home = work / f"r{i}"
            write_home(home, f"r{i}", base_url, dsn is not None)
            env = dict(os.environ, HERMES_HOME=str(home), PYTHONPATH=str(FAKES))
            if dsn is not None:
                env["HERMES_STORE__DSN"] = dsn
            procs.append(await asyncio.create_subprocess_exec(
                str(GATEWAY), "run", env=env, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL))
        while not all(platform.polled_by[f"r{i}"] for i in range(replicas)):
            await asyncio.sleep(0.05)
        chats = [f"bench{i}" for i in range(sessions)]
        for chat in chats:
            platform.say(chat)
        while platform.answered < sessions:  # warm-up: every session exists
            await asyncio.sleep(0.05)
        start_count, started = platform.answered, time.perf_counter()
        await asyncio.sleep(seconds)
        return (platform.answered - start_count) / (time.perf_counter() - started)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
        await server.cleanup()
        shutil.rmtree(work, ignore_errors=True)


class Unfenced(Leases):
    """The same statements without the lease check: what a turn costs without leases."""

    async def fence(self, conn, key):
        return None


class UnfencedBackend(PostgresBackend):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.leases = Unfenced(self.replica_id, self.leases.ttl_s)


class Chat(BaseAdapter):
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
            self.answered.set_result(text)
        return SendResult(message_id="sent")


async def turn_ms(root: Path, cluster: ThrowawayCluster, backend_class: type, turns: int) -> float:
    """Mean milliseconds of one turn (one session, one message at a time) in-process."""
    dsn = cluster.create_database()
    work = Path(tempfile.mkdtemp(dir=root))
    config = GatewayConfig(home=work / "home", platforms={"benchchat": {"allow_all": True}},
                           store={"backend": "postgres", "dsn": dsn})
    store = SessionStore(config.sessions_dir, config)
    backend = backend_class(dsn)
    await backend.open()
    store._backend = backend  # the engine under test, opened like SessionStore.open would
    store.cache_size = 0
    chat = Chat()
    pm, _report = create_plugin_manager(config)
    runner = GatewayRunner(PipelineDeps(config=config, store=store, pm=pm, agent=EchoAgent(),
                                        adapters={"benchchat": chat}))
    src = SessionSource("benchchat", "1", chat_type="dm", user_id="u1")
    try:
        times = []
        for number in range(turns + 5):
            chat.answered = asyncio.get_running_loop().create_future()
            started = time.perf_counter()
            await runner.handle(MessageEvent(source=src, text=f"hello {number}", message_id=f"m{number}"))
            await chat.answered
            if number >= 5:  # the first turns create the session and warm the pool
                times.append(time.perf_counter() - started)
        return statistics.fmean(times) * 1000
    finally:
        await runner.drain(5)
        await backend.close()
        shutil.rmtree(work, ignore_errors=True)
        cluster.drop_database(dsn)


async def run(args) -> None:
    root = Path(tempfile.mkdtemp(prefix="hermes-bench-"))
    root.chmod(0o755)  # the server runs as the postgres user under root
    cluster = ThrowawayCluster(root / "cluster", durable=True).start()
    try:
        sqlite = await gateways_rate(root, 1, None, args.sessions, args.seconds)
        rates = {}
        for replicas in args.replicas:
            dsn = cluster.create_database()
            rates[replicas] = await gateways_rate(root, replicas, dsn, args.sessions, args.seconds)
            cluster.drop_database(dsn)
        fenced = await turn_ms(root, cluster, PostgresBackend, args.turns)
        unfenced = await turn_ms(root, cluster, UnfencedBackend, args.turns)
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(f"{args.sessions} closed-loop sessions, {args.seconds:g} s measured per setup; PostgreSQL with fsync = on")
    print(f"{'setup':32} {'msg/s':>8} {'ratio':>7}")
    print(f"{'1 gateway, SQLite (baseline)':32} {sqlite:>8.1f} {1.0:>6.2f}×")
    for replicas, rate in rates.items():
        print(f"{f'{replicas} replica(s), PostgreSQL':32} {rate:>8.1f} {rate / sqlite:>6.2f}×")
    print()
    print(f"lease overhead per turn (one session, {args.turns} turns, echo agent, in-process):")
    print(f"  with fencing {fenced:.2f} ms, without {unfenced:.2f} ms: +{fenced - unfenced:.2f} ms "
          f"({fenced / unfenced:.2f}×)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="measured wall time per setup")
    parser.add_argument("--sessions", type=int, default=100, help="closed-loop chats")
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2, 4], help="replica counts on PostgreSQL")
    parser.add_argument("--turns", type=int, default=200, help="turns timed for the lease overhead")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
