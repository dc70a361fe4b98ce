"""docs/behaviour.md §5 "acknowledgements are truthful", §12: once a turn's reply is recorded
(durable) the turn is only sending and writing down; a follow-up arriving then interrupts
nothing and is not told "Interrupting…" or "Queued": it is simply the next turn. Forced
interleaving: the adapter holds the first send open until the follow-up was accepted."""

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
