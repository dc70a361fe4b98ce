"""docs/behaviour.md §12 "Three commits per message": a plain message for an idle session is
accepted in the transaction that begins its turn, and the reply's 'delivered' mark is recorded
off the session's path. What that must keep (§0, §5, §6): a redelivery still gets nothing, even
when it arrives while the first copy is being accepted; intake ids stay in arrival order; a write
that fails accepts nothing (the adapter is told through the raised error, the chat is told
nothing); a 'delivered' mark that cannot be written is logged and the reply re-sent, labelled,
at the next start."""

from __future__ import annotations

import asyncio
import logging
import sqlite3

import pytest
from pipeline_helpers import KEY, ChatAdapter, HeldAgent, dm, say, start_app

from hermes_core.agents.base import Agent, AgentReply
from hermes_core.model import MessageEvent, TokenUsage


class OkAgent(Agent):
    """Answers "ok <message>"."""

    async def _generate(self, context, history, message, system_context):
        return AgentReply("ok " + message, TokenUsage(input_tokens=1, output_tokens=1))


def event(text: str, message_id: str) -> MessageEvent:
    return MessageEvent(source=dm(), text=text, message_id=message_id)


async def intake(app) -> list[tuple[str, str]]:
    rows = await app.store._b().db.fetchall("SELECT message_id, state FROM inbound ORDER BY id")
    return [tuple(r) for r in rows]


async def user_messages(app) -> list[str]:
    entry = await app.store.get_entry(KEY)
    return [m["content"] for m in await app.store.load_transcript(entry.session_id) if m["role"] == "user"]


async def test_a_redelivery_to_an_idle_session_gets_nothing(tmp_path):
    adapter = ChatAdapter()
    app = await start_app(tmp_path, adapter, OkAgent())
    try:
        await say(app, dm(), "hello", "m1")
        assert app.store.continues_plainly(KEY) is True  # the next message is accepted with its turn
        await say(app, dm(), "hello", "m1")
        assert adapter.texts() == ["ok hello"]
        assert await intake(app) == [("m1", "done")]
        assert await user_messages(app) == ["hello"]
    finally:
        await app.stop()


async def test_two_copies_at_once_are_answered_once_with_no_acknowledgement(tmp_path):
    adapter = ChatAdapter()
    app = await start_app(tmp_path, adapter, OkAgent())
    try:
        await say(app, dm(), "first", "m0")
        # The second copy finds the first one's turn beginning: it waits for that acceptance, is a
        # duplicate then, and neither interrupts nor is told "Interrupting the current reply…".
        await asyncio.gather(app.runner.handle(event("again", "m1")), app.runner.handle(event("again", "m1")))
        await app.runner.join()
        assert adapter.texts() == ["ok first", "ok again"]
        assert await intake(app) == [("m0", "done"), ("m1", "done")]
        assert await user_messages(app) == ["first", "again"]
    finally:
        await app.stop()


async def test_a_message_during_the_folded_acceptance_is_accepted_after_it(tmp_path):
    agent = HeldAgent()
    agent.open("first")
    adapter = ChatAdapter()
    app = await start_app(tmp_path, adapter, agent, core={"busy_input_mode": "queue"})
    try:
        await say(app, dm(), "first", "m0")
        await asyncio.gather(app.runner.handle(event("one", "m1")), app.runner.handle(event("two", "m2")))
        # Both durable when handle returned, in arrival order: "one" began its turn, "two" waits.
        assert await intake(app) == [("m0", "done"), ("m1", "running"), ("m2", "pending")]
        assert agent.started == ["first", "one"]
        agent.open("one", "two")
        await app.runner.join()
        assert adapter.texts() == ["ok first", "ok one", "ok two"]
        assert await intake(app) == [("m0", "done"), ("m1", "done"), ("m2", "done")]
    finally:
        await app.stop()


async def test_a_failed_folded_write_accepts_nothing_and_tells_the_chat_nothing(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    adapter = ChatAdapter()
    app = await start_app(tmp_path, adapter, OkAgent())
    real = app.store.begin_turn

    async def full_disk(*args, accept_event=None, **kwargs):
        if accept_event is not None:
            raise sqlite3.OperationalError("database or disk is full")
        return await real(*args, accept_event=accept_event, **kwargs)

    try:
        await say(app, dm(), "first", "m0")
        app.store.begin_turn = full_disk
        with pytest.raises(sqlite3.OperationalError, match="database or disk is full"):
            await app.runner.handle(event("again", "m1"))
        await app.runner.join()
        assert adapter.texts() == ["ok first"]
        assert await intake(app) == [("m0", "done")]
        assert await user_messages(app) == ["first"]
        # Said once, by the adapter `handle` raised to (docs/operations.md §4), not by the runner too.
        assert [r.getMessage() for r in caplog.records
                if r.name == "hermes_core.pipeline.runner" and r.levelno >= logging.WARNING] == []
        # The platform delivers it again (it was never acknowledged): answered once.
        app.store.begin_turn = real
        await say(app, dm(), "again", "m1")
        assert adapter.texts() == ["ok first", "ok again"]
        assert await intake(app) == [("m0", "done"), ("m1", "done")]
    finally:
        await app.stop()


async def test_a_delivered_mark_that_cannot_be_written_is_logged_and_resent_labelled(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    adapter = ChatAdapter()
    app = await start_app(tmp_path, adapter, OkAgent())

    async def broken(*args, **kwargs):
        raise sqlite3.OperationalError("disk I/O error")

    try:
        app.store.finish_deliveries = broken
        await say(app, dm(), "hello", "m1")
        assert adapter.texts() == ["ok hello"]  # no error notice: the reply went out
        states = await app.store._b().db.fetchall("SELECT state FROM delivery_obligations")
        assert [r[0] for r in states] == ["attempting"]
        assert "was sent but its outcome could not be recorded (disk I/O error)" in caplog.text
    finally:
        await app.stop()
    again = ChatAdapter()
    app = await start_app(tmp_path, again, OkAgent())
    try:
        await app.runner.join()
        assert again.texts() == ["Recovered reply (may be a duplicate):\nok hello"]
    finally:
        await app.stop()
