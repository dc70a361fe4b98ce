"""The busy-input queue is durable (docs/behaviour.md §5 "the queue is durable: it lives in the inbound
table and survives a restart in order"; seed §8): queued messages, waiting bursts and bursts
merged just before a crash replay after a restart in order, exactly once, on both store
backends (SQLite and the degraded files). Real GatewayApp, real stores."""

from __future__ import annotations

import asyncio

import pytest
from pipeline_helpers import KEY, BlockingAgent, ChatAdapter, HeldAgent, dm, until
from pipeline_helpers import start_app as start_gateway

from hermes_core.agents import EchoAgent
from hermes_core.model import MessageEvent
from hermes_core.model.events import event_to_dict
from hermes_core.settings import GatewayConfig
from hermes_core.store import SessionStore


def make_home(tmp_path, degraded):
    home = tmp_path / ("degraded" if degraded else "sqlite")
    home.mkdir()
    if degraded:
        (home / "state.db").mkdir()  # SQLite cannot open a directory: degraded mode
    return home


async def start_app(home, agent, adapter=None, **config):
    adapter = adapter or ChatAdapter()
    return await start_gateway(home, adapter, agent, **config), adapter


@pytest.mark.parametrize("degraded", [False, True], ids=["sqlite", "degraded"])
async def test_queued_messages_and_waiting_burst_replay_in_order_exactly_once(tmp_path, degraded):
    home = make_home(tmp_path, degraded)
    agent = BlockingAgent()
    app, adapter = await start_app(home, agent, scheduler={"drain_timeout_s": 0.2})
    assert app.store.degraded is degraded
    for text, mid in (("/queue A", "m1"), ("B", "m2"), ("C", "m3"), ("/queue q1", "m4"), ("D", "m5")):
        await app.runner.handle(MessageEvent(source=dm(), text=text, message_id=mid))
        if mid == "m1":
            await until(lambda: agent.started == ["A"])
    # A /queue turn is never interrupted: B+C wait as one burst, then q1, then D on its own.
    await until(lambda: len(adapter.sent) == 3)
    assert sorted(adapter.sent) == [("Queued (position 1).", "m2"), ("Queued (position 2).", "m4"),
                                    ("Queued (position 3).", "m5")]
    assert app.runner.queue_depth(KEY) == 3
    await app.stop()  # the drain times out: A is cut off, the queue was never started

    app, adapter = await start_app(home, EchoAgent())
    try:
        await app.runner.join()
        assert adapter.sent == [("echo: A", "m1"), ("echo: B\nC", "m3"), ("echo: q1", "m4"), ("echo: D", "m5")]
        assert app.recovery.resumed == [KEY]
        entry = await app.store.get_entry(KEY)
        assert [(m["role"], m["content"]) for m in await app.store.load_transcript(entry.session_id)] == [
            ("user", "A"), ("assistant", "echo: A"), ("user", "B\nC"), ("assistant", "echo: B\nC"),
            ("user", "q1"), ("assistant", "echo: q1"), ("user", "D"), ("assistant", "echo: D")]
        assert await app.store.pending_inbound() == []
    finally:
        await app.stop()

    app, adapter = await start_app(home, EchoAgent())  # a further start owes nothing
    try:
        await app.runner.join()
        assert adapter.sent == []
        assert app.recovery.replayed == 0
    finally:
        await app.stop()


async def test_a_stop_lets_the_running_reply_finish_and_starts_nothing_queued(tmp_path, caplog):
    """docs/behaviour.md §6: the drain gives the running turn its time; what is queued behind it
    does not start (the stop said so) and runs once at the next start."""
    home = make_home(tmp_path, False)
    agent = HeldAgent()
    app, adapter = await start_app(home, agent, scheduler={"drain_timeout_s": 30})
    await app.runner.handle(MessageEvent(source=dm(), text="/queue A", message_id="m1"))
    await until(lambda: agent.started == ["A"])
    await app.runner.handle(MessageEvent(source=dm(), text="/queue B", message_id="m2"))
    await until(lambda: ("Queued (position 1).", "m2") in adapter.sent)
    stopping = asyncio.create_task(app.stop())
    await until(lambda: app.runner._closed)
    agent.open("A", "B")
    await asyncio.wait_for(stopping, 30)
    assert agent.started == ["A"]  # B never started, although its gate was open
    assert adapter.sent == [("Queued (position 1).", "m2"), ("ok A", "m1")]
    assert (f"shutdown: 1 queued message(s) in {KEY} were not processed; they stay in the intake and run at "
            "the next start") in caplog.text

    app, adapter = await start_app(home, EchoAgent())
    try:
        await app.runner.join()
        assert adapter.sent == [("echo: B", "m2")]
        assert app.recovery.resumed == []  # A was answered: nothing to resume
    finally:
        await app.stop()


def _event(text, mid):
    return event_to_dict(MessageEvent(source=dm(), text=text, message_id=mid))


@pytest.mark.parametrize("degraded", [False, True], ids=["sqlite", "degraded"])
async def test_burst_merged_just_before_a_crash_replays_once_and_is_not_merged_again(tmp_path, degraded):
    home = make_home(tmp_path, degraded)
    config = GatewayConfig(home=home, platforms={"testchat": {"allow_all": True}})
    async with SessionStore(config.sessions_dir, config) as store:
        assert store.degraded is degraded
        b = await store.accept_inbound_event(KEY, _event("B", "m2"))
        c = await store.accept_inbound_event(KEY, _event("C", "m3"))
        d = await store.accept_inbound_event(KEY, _event("D", "m4"))
        merged = dict(_event("B\nC", "m3"), merged_from=[b, c])
        await store.merge_inbound(b, merged, [c])
        # …and the process died before the merged turn began.
    async with SessionStore(config.sessions_dir, config) as store:
        rows = await store.pending_inbound()
        assert [(r["id"], r["event"]["text"]) for r in rows] == [(b, "B\nC"), (d, "D")]
        # The absorbed row keeps its dedupe id: a redelivery of C is not a new message.
        assert await store.accept_inbound_event(KEY, _event("C", "m3")) is None

    app, adapter = await start_app(home, EchoAgent())
    try:
        await app.runner.join()
        # The merged row is sealed: D (a later burst) is not folded into it.
        assert adapter.sent == [("echo: B\nC", "m3"), ("echo: D", "m4")]
        assert await app.store.pending_inbound() == []
    finally:
        await app.stop()


async def test_messages_cleared_by_new_are_never_replayed(tmp_path):
    """A /new that cleared queued messages finished their intake rows at once: however the
    process ends, a restart does not bring them back, and the /new is answered exactly once."""
    home = make_home(tmp_path, False)
    agent = BlockingAgent()
    app, first_adapter = await start_app(home, agent, scheduler={"drain_timeout_s": 0.2})
    await app.runner.handle(MessageEvent(source=dm(), text="/queue A", message_id="m1"))
    await until(lambda: agent.started == ["A"])
    await app.runner.handle(MessageEvent(source=dm(), text="/queue X", message_id="m2"))
    await app.runner.handle(MessageEvent(source=dm(), text="/new", message_id="m3"))
    # Already when handle() returns: X's row is finished, the /new is durable.
    assert "X" not in [r["event"]["text"] for r in await app.store.pending_inbound()]
    await app.stop()

    app, adapter = await start_app(home, EchoAgent())
    try:
        await app.runner.join()
        sent = first_adapter.sent + adapter.sent
        entry = await app.store.get_entry(KEY)
        assert [t for t, _ in sent if t.startswith("Started a new session.")] == [
            f"Started a new session. Session id: {entry.session_id}\nDropped 1 queued message(s)."]
        assert agent.started == ["A"]
        assert not any("X" in t for t, _ in sent)
        assert await app.store.pending_inbound() == []
    finally:
        await app.stop()
