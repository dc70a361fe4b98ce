"""docs/behaviour.md §5 "acknowledgements are truthful", §12: once a turn's reply is recorded
(durable) the turn is only sending and writing down; a follow-up arriving then interrupts
nothing and is not told "Interrupting…" or "Queued": it is simply the next turn, answered once, in
order. Forced interleavings, no timing: the adapter holds the first send open until the follow-up
was accepted, or sends the next message from inside the send (a closed-loop user), or the store's
write of the reply or of the delivery is held until the test releases it."""

from __future__ import annotations

import asyncio

from pipeline_helpers import ChatAdapter, dm, start_app, until

from hermes_core.agents import EchoAgent
from hermes_core.model import MessageEvent


class HeldSendAdapter(ChatAdapter):
    """Records sends; the first one waits until the test releases it."""

    def __init__(self):
        super().__init__()
        self.sending = asyncio.Event()
        self.release = asyncio.Event()

    async def send(self, target, text, *, reply_to=None, metadata=None):
        if not self.sending.is_set():
            self.sending.set()
            await self.release.wait()
        return await super().send(target, text, reply_to=reply_to, metadata=metadata)


async def test_a_follow_up_while_the_answer_is_being_sent_is_just_the_next_turn(tmp_path):
    adapter = HeldSendAdapter()
    app = await start_app(tmp_path, adapter, EchoAgent())
    try:
        await app.runner.handle(MessageEvent(source=dm(), text="first", message_id="m1"))
        await until(adapter.sending.is_set)  # the reply is recorded and being sent
        await app.runner.handle(MessageEvent(source=dm(), text="second", message_id="m2"))
        for _ in range(5):
            await asyncio.sleep(0)
        adapter.release.set()
        await app.runner.join()
        assert adapter.sent == [("echo: first", "m1"), ("echo: second", "m2")]
    finally:
        await app.stop()


async def test_stop_after_the_answer_was_recorded_has_no_turn_to_stop(tmp_path):
    adapter = HeldSendAdapter()
    app = await start_app(tmp_path, adapter, EchoAgent())
    try:
        await app.runner.handle(MessageEvent(source=dm(), text="first", message_id="m1"))
        await until(adapter.sending.is_set)
        await app.runner.handle(MessageEvent(source=dm(), text="/stop", message_id="m2"))
        adapter.release.set()
        await app.runner.join()
        assert adapter.texts() == ["echo: first", "No active task to stop."]
    finally:
        await app.stop()


class CountingEchoAgent(EchoAgent):
    """The echo agent, counting the runner's `interrupt` calls."""

    def __init__(self):
        super().__init__()
        self.interrupts = 0

    def interrupt(self, session_key=None):
        self.interrupts += 1
        return super().interrupt(session_key)


class ClosedLoopAdapter(ChatAdapter):
    """A user who writes the next message the moment a reply reaches the chat: the send hands
    `msg<n+1>` to the gateway before it returns (so before the turn's job has written the
    delivery down and finished its intake row), up to `last`."""

    def __init__(self, last: int):
        super().__init__()
        self.last = last
        self.runner = None

    async def send(self, target, text, *, reply_to=None, metadata=None):
        result = await super().send(target, text, reply_to=reply_to, metadata=metadata)
        number = int(reply_to[1:])
        if text.startswith("echo: ") and number < self.last:
            await self.runner.handle(MessageEvent(source=dm(), text=f"msg{number + 1}", message_id=f"m{number + 1}"))
        return result


async def test_a_closed_loop_user_gets_each_reply_once_in_order_and_no_interrupt(tmp_path):
    adapter, agent = ClosedLoopAdapter(last=5), CountingEchoAgent()
    app = await start_app(tmp_path, adapter, agent)
    adapter.runner = app.runner
    try:
        await app.runner.handle(MessageEvent(source=dm(), text="msg1", message_id="m1"))
        await app.runner.join()
        assert adapter.sent == [(f"echo: msg{n}", f"m{n}") for n in range(1, 6)]
        assert agent.interrupts == 0
        assert await app.store.pending_inbound() == []
    finally:
        await app.stop()


async def test_a_message_while_the_delivery_is_written_down_is_the_next_turn(tmp_path):
    """The reply is sent; its 'delivered' write is held: it is written off the session's path
    (docs/behaviour.md §12), so the job has ended and the follow-up interrupts nothing, is told
    nothing and is answered while that write still waits; the write lands afterwards."""
    adapter, agent = ChatAdapter(), CountingEchoAgent()
    app = await start_app(tmp_path, adapter, agent)
    writing, release = asyncio.Event(), asyncio.Event()
    finish_deliveries = app.store.finish_deliveries

    async def held_finish_deliveries(*args, **kwargs):
        if not writing.is_set():
            writing.set()
            await release.wait()
        return await finish_deliveries(*args, **kwargs)

    app.store.finish_deliveries = held_finish_deliveries
    try:
        await app.runner.handle(MessageEvent(source=dm(), text="first", message_id="m1"))
        await until(writing.is_set)
        assert app.runner.busy_sessions() == []  # the first job has ended
        await app.runner.handle(MessageEvent(source=dm(), text="second", message_id="m2"))
        await until(lambda: len(adapter.sent) == 2)
        assert adapter.sent == [("echo: first", "m1"), ("echo: second", "m2")]
        assert agent.interrupts == 0
        release.set()
        await app.runner.join()
        states = await app.store._b().db.fetchall("SELECT state FROM delivery_obligations ORDER BY id")
        assert [r[0] for r in states] == ["delivered", "delivered"]
    finally:
        await app.stop()


async def test_an_interrupt_that_came_too_late_stops_trying_once_the_reply_is_recorded(tmp_path):
    """docs/behaviour.md §5: a follow-up arriving after the agent answered but before its reply
    is recorded is still told `Interrupting the current reply…` (the runner cannot know the
    reply is complete); the interrupt finds no agent call, and its retries end when the reply
    is recorded: nothing after that (the send, the bookkeeping, a compression summary) is
    interrupted. Retries every loop pass (`INTERRUPT_RETRY_S = 0`) so a missed stop shows at once."""
    adapter, agent = ChatAdapter(), CountingEchoAgent()
    app = await start_app(tmp_path, adapter, agent)
    app.runner.INTERRUPT_RETRY_S = 0
    recording, release_record = asyncio.Event(), asyncio.Event()
    delivering, release_delivery = asyncio.Event(), asyncio.Event()
    record_reply, finish_deliveries = app.store.record_reply, app.store.finish_deliveries

    async def held_record_reply(*args, **kwargs):
        if not recording.is_set():
            recording.set()
            await release_record.wait()
        return await record_reply(*args, **kwargs)

    async def held_finish_deliveries(*args, **kwargs):
        if not delivering.is_set():
            delivering.set()
            await release_delivery.wait()
        return await finish_deliveries(*args, **kwargs)

    app.store.record_reply, app.store.finish_deliveries = held_record_reply, held_finish_deliveries
    try:
        await app.runner.handle(MessageEvent(source=dm(), text="first", message_id="m1"))
        await until(recording.is_set)  # the agent has answered; the reply is not recorded yet
        await app.runner.handle(MessageEvent(source=dm(), text="second", message_id="m2"))
        await until(lambda: agent.interrupts > 0)  # the first try found no agent call
        release_record.set()
        await until(delivering.is_set)  # recorded and sent; the job is writing the delivery down
        tries = agent.interrupts
        for _ in range(20):
            await asyncio.sleep(0)
        assert agent.interrupts == tries
        release_delivery.set()
        await app.runner.join()
        assert adapter.sent == [("Interrupting the current reply…", "m2"), ("echo: first", "m1"),
                                ("echo: second", "m2")]
    finally:
        await app.stop()
