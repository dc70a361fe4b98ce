"""Property test over random interleavings (docs/behaviour.md §0, §5, §10, §11): plain messages,
`/queue`, `/stop`, `/new`, `/undo`, `/retry`, wake-ups and turn completions, in every order
hypothesis finds, on a real GatewayApp with the real SQLite store. The agent's turns wait until
the test completes them, and the test waits after each step until the gateway is quiet (idle,
or blocked in the agent), so each example is one forced interleaving.

Properties:
* per-session FIFO — human messages first reach the agent in arrival order;
* exactly once — every accepted human message is recorded in a transcript or was dropped by a
  command that said so ("Dropped N queued message(s)."), never both, never run twice (except by
  `/retry`, which says so); no intake row is left over;
* wake-ups run only in the session they are bound to, and are never lost;
* the store is canonical — every agent call's history is exactly the session's active transcript
  before the new message, so no rewound message ever reaches the agent again.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pipeline_helpers import KEY, ChatAdapter, dm

from hermes_core.agents.base import Agent, AgentReply
from hermes_core.app import GatewayApp
from hermes_core.model import MessageEvent, TokenUsage
from hermes_core.settings import GatewayConfig

OPS = ("msg", "queue", "stop", "new", "undo", "retry", "wake", "complete")

# Access control (docs/behaviour.md §9): every sender of the test platform is allowed.
ALLOW_TESTCHAT = {"testchat": {"allow_all": True}}


class GatedAgent(Agent):
    """Each turn waits until the test completes it (`complete()`), or at once after `finish()`.
    An interrupted turn ends at once. Every call is recorded with the session id, the message,
    the history and the session's active transcript read from the store at that moment."""

    def __init__(self):
        super().__init__()
        self.store = None
        self.calls: list[dict] = []
        self.gate: asyncio.Event | None = None
        self.auto = False
        self.replies = 0

    def complete(self) -> None:
        if self.gate is not None:
            self.gate.set()

    def finish(self) -> None:
        self.auto = True
        self.complete()

    async def _generate(self, context, history, message, system_context):
        stored = await self.store.load_transcript(context.session_id)
        self.calls.append({"session_id": context.session_id, "message": message,
                           "history": [dict(m) for m in history], "stored": stored})
        if not self.auto:
            self.gate = asyncio.Event()
            try:
                await self.gate.wait()
            finally:
                self.gate = None
        self.replies += 1
        return AgentReply(f"r{self.replies}", TokenUsage(input_tokens=1, output_tokens=1))


async def settle(app, agent) -> None:
    """Until the gateway is quiet twice in a row: nothing queued or running and no notices in
    flight, or its only activity is a turn blocked in the agent."""
    quiet = 0
    for _ in range(4000):
        await asyncio.sleep(0.002)
        runner = app.runner
        idle = runner.pending() == 0 and not runner._side
        blocked = agent.gate is not None and not runner._side
        quiet = quiet + 1 if (idle or blocked) else 0
        if quiet >= 3:
            return
    raise AssertionError("the gateway never became quiet")


async def scenario(home: Path, mode: str, ops: list[str]) -> None:
    agent = GatedAgent()
    adapter = ChatAdapter()
    app = GatewayApp(GatewayConfig(home=home, platforms=ALLOW_TESTCHAT, core={"busy_input_mode": mode},
                                   agent={"context_window": 0}),
                     adapters={"testchat": adapter}, agent=agent, watcher=False)
    await app.start()
    agent.store = app.store
    human: list[str] = []          # accepted human texts, in arrival order
    bound: dict[str, str] = {}     # wake-up text -> the session id it is bound to
    try:
        for n, op in enumerate(ops):
            if op == "msg":
                human.append(f"m{n}")
                await app.runner.handle(MessageEvent(source=dm(), text=f"m{n}", message_id=f"id{n}"))
            elif op == "queue":
                human.append(f"q{n}")
                await app.runner.handle(MessageEvent(source=dm(), text=f"/queue q{n}", message_id=f"id{n}"))
            elif op in ("stop", "new", "undo", "retry"):
                await app.runner.handle(MessageEvent(source=dm(), text=f"/{op}", message_id=f"id{n}"))
            elif op == "wake":
                entry = await app.store.get_entry(KEY)
                if entry is not None:
                    bound[f"w{n}"] = entry.session_id
                    await app.background.post_wakeup(dm(), f"w{n}", session_id=entry.session_id)
            elif op == "complete":
                agent.complete()
            await settle(app, agent)
        agent.finish()
        await app.runner.join()
        assert await app.store.pending_inbound() == []
    finally:
        await app.stop()

    texts = adapter.texts()
    conn = sqlite3.connect(home / "state.db")
    try:
        rows = conn.execute("SELECT session_id, role, content FROM messages ORDER BY id").fetchall()
    finally:
        conn.close()

    # The store is canonical: each call's history is the active transcript without the new message.
    for call in agent.calls:
        stored = call["stored"]
        assert (stored[-1]["role"], stored[-1]["content"]) == ("user", call["message"]), call
        assert call["history"] == stored[:-1], call

    # Wake-ups: run only in their own session; never lost (recorded in their own transcript).
    for call in agent.calls:
        if call["message"] in bound:
            assert call["session_id"] == bound[call["message"]]
    for wake, session_id in bound.items():
        assert (session_id, "user", wake) in rows or (session_id, "system", wake) in rows

    # Exactly once, FIFO.
    recorded = [part for sid, role, content in rows if role == "user" and content not in bound
                for part in (content or "").split("\n")]
    dropped = sum(int(m) for t in texts for m in re.findall(r"Dropped (\d+) queued message", t))
    assert len(set(recorded)) + dropped == len(human)
    retried = [m for t in texts for m in re.findall(r'^Retrying "(.*)"\.$', t, flags=re.M)]
    seen = [part for call in agent.calls if call["message"] not in bound for part in call["message"].split("\n")]
    for text in set(seen):
        assert seen.count(text) <= 1 + retried.count(text), text
    first_seen = list(dict.fromkeys(seen))
    assert first_seen == [t for t in human if t in first_seen]


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(mode=st.sampled_from(["interrupt", "queue", "steer"]),
       ops=st.lists(st.sampled_from(OPS), min_size=1, max_size=14))
# The interleavings the rules are about, always tried: a wake-up queued behind /new and /stop, a
# merged burst dropped by /stop, an /undo and a /retry between turns.
@example(mode="interrupt", ops=["msg", "wake", "new", "complete"])
@example(mode="queue", ops=["msg", "wake", "stop", "msg", "complete"])
@example(mode="interrupt", ops=["msg", "queue", "msg", "msg", "stop", "complete"])
@example(mode="interrupt", ops=["msg", "complete", "msg", "complete", "undo", "msg", "retry", "complete"])
@example(mode="interrupt", ops=["msg", "stop", "wake", "retry"])
@example(mode="interrupt", ops=["new", "wake", "stop", "retry"])  # a stopped wake-up is never retried elsewhere
def test_random_interleavings_keep_fifo_exactly_once_binding_and_no_rewound_history(mode, ops):
    with tempfile.TemporaryDirectory() as home:
        asyncio.run(scenario(Path(home), mode, ops))
