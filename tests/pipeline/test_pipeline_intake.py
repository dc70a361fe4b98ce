"""Durable intake (docs/behaviour.md §0 "nothing accepted is ever lost", §5 "the queue is durable … survives a
restart in order"): real store (SQLite and degraded), real GatewayApp."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from datetime import datetime, timedelta, timezone

from pipeline_helpers import KEY, BlockingAgent, Clock, RecordingAdapter, dm, say, start_app, until

from hermes_core.agents import EchoAgent
from hermes_core.model import MessageEvent, SessionSource
from hermes_core.model.events import event_from_dict, event_to_dict
from hermes_core.settings import GatewayConfig
from hermes_core.store import SessionStore


async def test_redelivered_over_long_message_gets_one_notice_also_after_restart(tmp_path):
    adapter = RecordingAdapter()
    app = await start_app(tmp_path, adapter, EchoAgent(), core={"max_input_chars": 10})
    long = MessageEvent(source=dm(), text="x" * 11, message_id="m9")
    await app.runner.handle(long)
    await app.runner.handle(MessageEvent(source=dm(), text="x" * 11, message_id="m9"))
    await app.runner.join()
    await app.stop()
    app = await start_app(tmp_path, adapter, EchoAgent(), core={"max_input_chars": 10})
    try:
        await app.runner.handle(MessageEvent(source=dm(), text="x" * 11, message_id="m9"))
        await app.runner.join()
        assert adapter.sent == [("100", "Message refused: it is 11 characters long and the limit is 10 characters "
                                        "(core.max_input_chars). Please shorten it.", "m9")]
    finally:
        await app.stop()


def _page_count(db) -> int:
    with closing(sqlite3.connect(db)) as conn:
        return conn.execute("PRAGMA page_count").fetchone()[0]


async def test_over_long_message_is_refused_before_its_text_is_written(tmp_path):
    # docs/behaviour.md §5 "Bad input": refused with a notice naming the limit; its text is never
    # written, so state.db does not grow by it (it used to: 2 MB of pages, freed but kept).
    adapter = RecordingAdapter()
    app = await start_app(tmp_path, adapter, EchoAgent(), core={"max_input_chars": 10})
    try:
        await say(app, dm(), "x" * 11, message_id="m1")  # the intake's pages exist from here on
        pages = _page_count(tmp_path / "state.db")
        await say(app, dm(), "y" * 2_000_000, message_id="m2")
        await say(app, dm(), "/queue " + "z" * 2_000_000, message_id="m3")
        assert _page_count(tmp_path / "state.db") == pages
        assert adapter.sent[1:] == [
            ("100", "Message refused: it is 2000000 characters long and the limit is 10 characters "
                    "(core.max_input_chars). Please shorten it.", "m2"),
            ("100", "Message refused: it is 2000000 characters long and the limit is 10 characters "
                    "(core.max_input_chars). Please shorten it.", "m3")]
        await say(app, dm(), "y" * 2_000_000, message_id="m2")  # redelivered: still accepted once
        assert len(adapter.sent) == 3
        assert await app.store.get_entry(KEY) is None  # nothing recorded
    finally:
        await app.stop()


async def test_over_long_message_waiting_at_a_restart_gets_its_notice_then(tmp_path):
    # docs/behaviour.md §5: the refusal waits behind the running turn; its intake row (no text,
    # only its length) survives a stop and the next start sends the same notice.
    agent = BlockingAgent()
    app = await start_app(tmp_path, RecordingAdapter(), agent, scheduler={"drain_timeout_s": 0.2},
                          core={"max_input_chars": 10})
    await app.runner.handle(MessageEvent(source=dm(), text="first", message_id="m1"))
    await until(lambda: agent.started == ["first"])
    await app.runner.handle(MessageEvent(source=dm(), text="y" * 50_000, message_id="m2"))
    await app.stop()
    with closing(sqlite3.connect(tmp_path / "state.db")) as conn:
        waiting = [json.loads(p) for (p,) in conn.execute("SELECT payload FROM inbound WHERE message_id = 'm2'")]
    assert [(e["text"], e["refused_length"]) for e in waiting] == [("", 50_000)]
    adapter = RecordingAdapter()
    app = await start_app(tmp_path, adapter, EchoAgent(), core={"max_input_chars": 10})
    try:
        await app.runner.join()
        assert adapter.sent == [("100", "echo: first", "m1"),  # the cut-off turn, resumed first
                                ("100", "Message refused: it is 50000 characters long and the limit is 10 "
                                        "characters (core.max_input_chars). Please shorten it.", "m2")]
        assert await app.store.pending_inbound() == []
    finally:
        await app.stop()


async def test_drain_timeout_keeps_running_and_queued_messages_and_answers_them_in_order(tmp_path):
    agent = BlockingAgent()
    app = await start_app(tmp_path, RecordingAdapter(), agent, scheduler={"drain_timeout_s": 0.2},
                          core={"busy_input_mode": "queue"})  # FIFO: "second" waits for "first"
    await app.runner.handle(MessageEvent(source=dm(), text="first", message_id="m1"))
    await app.runner.handle(MessageEvent(source=dm(), text="second", message_id="m2"))
    await until(lambda: agent.started == ["first"])
    await app.stop()  # the drain times out: "first" is cut off, "second" never started
    assert (tmp_path / ".clean_shutdown").is_file()

    adapter = RecordingAdapter()
    app = await start_app(tmp_path, adapter, EchoAgent())
    try:
        await app.runner.join()
        # Telegram-style redelivery of both ids after the restart: not answered again.
        await app.runner.handle(MessageEvent(source=dm(), text="first", message_id="m1"))
        await app.runner.handle(MessageEvent(source=dm(), text="second", message_id="m2"))
        await app.runner.join()
        assert adapter.sent == [("100", "echo: first", "m1"), ("100", "echo: second", "m2")]
        assert app.recovery.resumed == [KEY] and app.recovery.replayed == 1
        entry = await app.store.get_entry(KEY)
        assert entry.resume_pending is False
        assert [(m["role"], m["content"]) for m in await app.store.load_transcript(entry.session_id)] == [
            ("user", "first"), ("assistant", "echo: first"), ("user", "second"), ("assistant", "echo: second")]
        assert await app.store.pending_inbound() == []
    finally:
        await app.stop()


def test_event_round_trips_through_the_intake_encoding():
    event = MessageEvent(source=SessionSource("telegram", "-100", chat_type="group", user_id="7", thread_id="88"),
                         text="hi", message_id="55", media=[{"url": "file:1", "mime": "image/png", "size": 3}],
                         kind="user", received_at=datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc))
    data = event_to_dict(event)
    assert data["received_at"] == "2026-03-01T12:00:00+00:00"
    back = event_from_dict(data)
    assert (back.source, back.text, back.message_id, back.media, back.kind, back.received_at) == (
        event.source, "hi", "55", [{"url": "file:1", "mime": "image/png", "size": 3}], "user", event.received_at)


async def intake_cycle(store, clock):
    """Accept three events (one duplicate, one without id), finish one, read the rest."""
    ev = {"source": {"platform": "telegram", "chat_id": "5"}, "text": "a", "message_id": "m1",
          "media": [], "kind": "user", "received_at": "2026-03-01T12:00:00+00:00"}
    first = await store.accept_inbound_event("k", ev)
    assert await store.accept_inbound_event("k", dict(ev, text="a again")) is None
    second = await store.accept_inbound_event("k", dict(ev, text="b", message_id=None))
    third = await store.accept_inbound_event("k", dict(ev, text="c", message_id="m3"))
    assert first < second < third
    await store.finish_inbound(second)
    return first, third


async def test_intake_rows_survive_reopen_in_order_and_are_pruned_after_seven_days(tmp_path):
    for degraded in (False, True):
        home = tmp_path / ("degraded" if degraded else "sqlite")
        home.mkdir()
        if degraded:
            (home / "state.db").mkdir()  # SQLite cannot open a directory: degraded mode
        config = GatewayConfig(home=home)
        clock = Clock()
        async with SessionStore(config.sessions_dir, config, clock=clock) as store:
            assert store.degraded is degraded
            first, third = await intake_cycle(store, clock)
        async with SessionStore(config.sessions_dir, config, clock=clock) as store:
            rows = await store.pending_inbound()
            assert [(r["id"], r["state"], r["event"]["text"]) for r in rows] == [
                (first, "pending", "a"), (third, "pending", "c")]
            await store.finish_inbound(first)
            await store.finish_inbound(third)
            assert await store.pending_inbound() == []
            clock.now += timedelta(days=6, hours=23)
            assert await store.prune_inbound() == 0
            assert await store.accept_inbound("telegram", "5", "m1") is False  # still deduped
            clock.now += timedelta(hours=2)
            assert await store.prune_inbound() == 3
        async with SessionStore(config.sessions_dir, config, clock=clock) as store:
            # 7 days later the id is forgotten (module docstring of store.intake).
            assert await store.accept_inbound("telegram", "5", "m1") is True, degraded


async def test_message_arriving_during_shutdown_is_kept_and_answered_at_the_next_start(tmp_path):
    adapter = RecordingAdapter()
    app = await start_app(tmp_path, adapter, EchoAgent())
    assert await app.runner.drain(1.0) == []  # shutdown began: nothing runs any more
    await app.runner.handle(MessageEvent(source=dm(), text="late", message_id="m5"))
    await app.stop()
    assert adapter.sent == []
    app = await start_app(tmp_path, adapter, EchoAgent())
    try:
        await app.runner.join()
        assert adapter.sent == [("100", "echo: late", "m5")]
    finally:
        await app.stop()
