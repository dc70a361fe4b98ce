"""`busy_input_mode = "steer"`, photo albums as one turn in every busy mode, and reasoning fields
kept in transcripts (docs/behaviour.md §3, §5, §11), end to end on a real GatewayApp with the real
store. The agents' turns wait for gates the test opens, so every interleaving is forced.

Literal texts: the acknowledgements of `hermes_core.pipeline.busy`."""

from __future__ import annotations

import asyncio

import pytest
from pipeline_helpers import KEY, ChatAdapter, HeldAgent, dm, start_app, until

from hermes_core.agents.base import Agent, AgentReply
from hermes_core.model import MessageEvent, TokenUsage
from hermes_core.store import StoreError


class SteerAgent(Agent):
    """Each turn waits for its message's gate, then takes the follow-ups handed to it (unless
    `takes` is False) and answers "ok <message> + <follow-ups>" with a reasoning field."""

    can_steer = True

    def __init__(self, takes: bool = True):
        super().__init__()
        self.takes = takes
        self.gates: dict[str, asyncio.Event] = {}
        self.started: list[str] = []

    def open(self, *messages: str) -> None:
        for message in messages:
            self.gates.setdefault(message, asyncio.Event()).set()

    async def _generate(self, context, history, message, system_context):
        self.started.append(message)
        await self.gates.setdefault(message, asyncio.Event()).wait()
        steers = self._take_steers(context.session_key) if self.takes else []
        return AgentReply("ok " + " + ".join([message, *steers]), TokenUsage(input_tokens=1, output_tokens=1),
                          reasoning={"reasoning_content": f"thinking about {message}",
                                     "reasoning_details": [{"type": "reasoning.text", "text": message}]})


async def make_app(tmp_path, agent, mode):
    adapter = ChatAdapter()
    app = await start_app(tmp_path, adapter, agent, core={"busy_input_mode": mode})
    return app, adapter


async def send(app, text="", message_id=None, **kw):
    await app.runner.handle(MessageEvent(source=dm(), text=text, message_id=message_id, **kw))


async def transcript(app):
    entry = await app.store.get_entry(KEY)
    return [(m["role"], m["content"]) for m in await app.store.load_transcript(entry.session_id)]


async def test_steer_hands_the_follow_up_to_the_running_turn(tmp_path):
    agent = SteerAgent()
    app, adapter = await make_app(tmp_path, agent, "steer")
    try:
        await send(app, "plan a trip", "m1")
        await until(lambda: agent.started == ["plan a trip"])
        await send(app, "by train", "m2")
        await until(lambda: adapter.texts() == ["Added to the current reply."])
        agent.open("plan a trip")
        await app.runner.join()
        assert agent.started == ["plan a trip"]  # one turn
        assert adapter.texts() == ["Added to the current reply.", "ok plan a trip + by train"]
        assert await transcript(app) == [("user", "plan a trip"), ("user", "by train"),
                                         ("assistant", "ok plan a trip + by train")]
        assert await app.store.pending_inbound() == []
    finally:
        await app.stop()


async def test_a_taken_follow_up_is_recorded_with_the_reply_or_not_at_all(tmp_path):
    agent = SteerAgent()
    app, adapter = await make_app(tmp_path, agent, "steer")
    backend = app.store._b()

    async def refused(*args, **kwargs):
        raise StoreError("state.db refused the reply (test)")

    try:
        await send(app, "plan a trip", "m1")
        await until(lambda: agent.started == ["plan a trip"])
        await send(app, "by train", "m2")
        await until(lambda: adapter.texts() == ["Added to the current reply."])
        backend.record_reply = refused  # the reply's transaction fails
        agent.open("plan a trip")
        await app.runner.join()
        # docs/behaviour.md §12: the follow-up the turn took is written in the reply's transaction,
        # so it did not reach the transcript without the reply
        assert await transcript(app) == [("user", "plan a trip")]
    finally:
        await app.stop()


async def test_a_handed_over_follow_up_the_turn_did_not_take_runs_next_as_its_own_turn(tmp_path):
    agent = SteerAgent(takes=False)
    app, adapter = await make_app(tmp_path, agent, "steer")
    try:
        await send(app, "A", "m1")
        await until(lambda: agent.started == ["A"])
        await send(app, "B", "m2")
        await until(lambda: adapter.texts() == ["Added to the current reply."])
        agent.open("A", "B")
        await app.runner.join()
        assert agent.started == ["A", "B"]
        assert adapter.texts() == ["Added to the current reply.", "ok A", "ok B"]
        assert await transcript(app) == [("user", "A"), ("assistant", "ok A"), ("user", "B"), ("assistant", "ok B")]
        assert await app.store.pending_inbound() == []
    finally:
        await app.stop()


async def test_steer_with_an_agent_that_cannot_steer_falls_back_to_queue_and_says_so(tmp_path):
    agent = HeldAgent()
    app, adapter = await make_app(tmp_path, agent, "steer")
    try:
        await send(app, "A", "m1")
        await until(lambda: agent.started == ["A"])
        await send(app, "B", "m2")
        await until(lambda: len(adapter.texts()) == 1)
        assert adapter.texts() == ["Queued (position 1): this assistant cannot take a message while it replies."]
        await send(app, "C", "m3")
        await until(lambda: len(adapter.texts()) == 2)
        assert adapter.texts()[1] == "Queued (position 2)."
        agent.open("A", "B", "C")
        await app.runner.join()
        assert agent.started == ["A", "B", "C"]  # nothing interrupted, one turn each
        assert adapter.texts()[2:] == ["ok A", "ok B", "ok C"]
    finally:
        await app.stop()


PHOTO = {"kind": "photo", "mime_type": "image/jpeg"}


@pytest.mark.parametrize("mode", ["queue", "interrupt", "steer"])
async def test_a_photo_album_sent_during_a_turn_is_one_turn_in_every_busy_mode(tmp_path, mode):
    agent = HeldAgent()
    app, adapter = await make_app(tmp_path, agent, mode)
    try:
        await send(app, "A", "m1")
        await until(lambda: agent.started == ["A"])
        agent.let_interrupted_end.set()
        await send(app, "our holiday", "p1", media=[dict(PHOTO, path="1.jpg")], media_group_id="album-9")
        for n in (2, 3):
            await send(app, "", f"p{n}", media=[dict(PHOTO, path=f"{n}.jpg")], media_group_id="album-9")
        assert app.runner.queue_depth(KEY) == 1
        agent.open("A", "our holiday")
        await app.runner.join()
        assert agent.started[-1] == "our holiday"
        assert agent.started.count("our holiday") == 1
        assert await app.store.pending_inbound() == []
    finally:
        await app.stop()


async def test_an_album_sent_to_an_idle_session_is_one_turn(tmp_path):
    agent = HeldAgent()
    app, adapter = await make_app(tmp_path, agent, "interrupt")
    agent.open("our holiday")
    try:
        await send(app, "our holiday", "p1", media=[dict(PHOTO, path="1.jpg")], media_group_id="album-9")
        for n in (2, 3):  # the parts after the first arrive while its job waits for them
            await send(app, "", f"p{n}", media=[dict(PHOTO, path=f"{n}.jpg")], media_group_id="album-9")
        await app.runner.join()
        assert agent.started == ["our holiday"]
        assert adapter.texts() == ["ok our holiday"]
        assert await app.store.pending_inbound() == []
    finally:
        await app.stop()


async def test_reasoning_fields_stay_in_the_transcript_through_undo_and_compression(tmp_path):
    agent = SteerAgent()
    adapter = ChatAdapter()
    app = await start_app(tmp_path, adapter, agent)
    agent.open("one", "two", "three")
    try:
        for text in ("one", "two", "three"):
            await send(app, text)
            await app.runner.join()
        await send(app, "/undo")
        await app.runner.join()
        entry = await app.store.get_entry(KEY)
        replies = [m for m in await app.store.load_transcript(entry.session_id) if m["role"] == "assistant"]
        assert [(m["content"], m["reasoning_content"], m["reasoning_details"]) for m in replies] == [
            ("ok one", "thinking about one", [{"type": "reasoning.text", "text": "one"}]),
            ("ok two", "thinking about two", [{"type": "reasoning.text", "text": "two"}])]
        stored = await app.store.load_transcript(entry.session_id)
        # A rewrite (what /compress does with the tail) keeps them as given.
        await app.store.rewrite_transcript(entry.session_id, stored[2:])
        assert await app.store.load_transcript(entry.session_id) == stored[2:]
        assert stored[3]["reasoning_content"] == "thinking about two"
    finally:
        await app.stop()
