"""Inputs that once broke the pipeline (docs/behaviour.md §0, §7): each test feeds the literal
input that did it."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from pipeline_helpers import KEY, BlockingAgent, RecordingAdapter, dm, say, start_app

from hermes_core import hookimpl
from hermes_core.agents.base import Agent, AgentError, AgentReply
from hermes_core.agents.echo import EchoAgent
from hermes_core.model import MessageEvent, SessionSource, TokenUsage


async def test_lone_surrogates_in_name_title_and_file_name_are_stored_not_raised(tmp_path):
    # "Ann\ud800" made runner.handle raise UnicodeEncodeError at the intake write.
    adapter = RecordingAdapter()
    app = await start_app(tmp_path, adapter, EchoAgent())
    try:
        source = SessionSource("testchat", "100", chat_type="dm", user_id="u100", user_name="Ann\ud800",
                               chat_name="Team\udcff")
        await app.runner.handle(MessageEvent(source=source, text="/new Trip \ud83d notes", message_id="m1"))
        await app.runner.join()
        await app.runner.handle(MessageEvent(source=source, text="look", message_id="m2",
                                             media=[{"file_name": "photo\ud800.jpg", "mime_type": "image/jpeg"}]))
        await app.runner.join()
        entry = await app.store.get_entry(KEY)
        assert entry.display_name == "Team\ufffd"
        assert entry.origin.user_name == "Ann\ufffd"
        assert entry.origin.chat_name == "Team\ufffd"
        transcript = await app.store.load_transcript(entry.session_id)
        assert [m["content"] for m in transcript] == ["look", "echo: look"]
        assert adapter.texts()[-1] == "echo: look"
    finally:
        await app.stop()


def test_surrogates_in_media_and_ids_become_replacement_characters():
    event = MessageEvent(source=dm(), text="x", message_id="m\udc80",
                         media=[{"file_name": "a\ud800.pdf", "meta": ["\udfff"]}])
    assert event.message_id == "m\ufffd"
    assert event.media == [{"file_name": "a\ufffd.pdf", "meta": ["\ufffd"]}]


class _FailingBackend(Agent):
    """Fails like the OpenAI backend did when the model server answered 404."""

    async def _generate(self, context, history, message, system_context):
        raise AgentError("chat-completions request to http://10.0.0.1:8000/v1 failed: NotFoundError: "
                         "Error code: 404 - {'error': {'message': 'model not found'}}")


async def test_model_failure_gives_the_user_a_short_notice_and_the_operator_the_detail(tmp_path, caplog):
    adapter = RecordingAdapter()
    app = await start_app(tmp_path, adapter, _FailingBackend())
    try:
        with caplog.at_level("ERROR"):
            await app.runner.handle(MessageEvent(source=dm(), text="hi", message_id="m1"))
            await app.runner.join()
    finally:
        await app.stop()
    assert adapter.texts() == ["Sorry, I could not answer this message. Please try again later."]
    assert any("http://10.0.0.1:8000/v1" in r.getMessage() and "NotFoundError" in r.getMessage()
               for r in caplog.records)


async def test_failure_notice_is_configurable_and_a_hook_can_replace_it(tmp_path):
    adapter = RecordingAdapter()
    app = await start_app(tmp_path, adapter, _FailingBackend(),
                          core={"agent_failure_notice": "The assistant is unavailable right now."})
    try:
        await app.runner.handle(MessageEvent(source=dm(), text="hi", message_id="m1"))
        await app.runner.join()

        class Wording:
            @hookimpl
            def hermes_failure_notice(self, kind, source, error):
                return f"[{kind}] Our helper is resting, {source.user_name}." if kind == "agent_failed" else None

        app.pm.register(Wording(), name="wording")
        await app.runner.handle(MessageEvent(source=dm(), text="again", message_id="m2"))
        await app.runner.join()
    finally:
        await app.stop()
    assert adapter.texts() == ["The assistant is unavailable right now.",
                               "[agent_failed] Our helper is resting, Ann."]


async def test_a_broken_failure_notice_hook_falls_back_to_the_configured_text(tmp_path):
    adapter = RecordingAdapter()
    app = await start_app(tmp_path, adapter, _FailingBackend())

    class Broken:
        @hookimpl
        def hermes_failure_notice(self, kind, source, error):
            raise RuntimeError("wording service down")

    app.pm.register(Broken(), name="broken")
    try:
        await app.runner.handle(MessageEvent(source=dm(), text="hi", message_id="m1"))
        await app.runner.join()
    finally:
        await app.stop()
    assert adapter.texts() == ["Sorry, I could not answer this message. Please try again later."]


class _OddBackend(Agent):
    """Answers like a broken backend plugin would: `replies[message]` is the AgentReply."""

    def __init__(self, replies):
        super().__init__()
        self.replies = replies

    async def _generate(self, context, history, message, system_context):
        return self.replies[message]


async def _answer_hi(tmp_path, agent) -> tuple[list[str], list[dict]]:
    """A gateway with `agent` answers "hi" in the DM: the texts sent, then the transcript."""
    adapter = RecordingAdapter()
    app = await start_app(tmp_path, adapter, agent)
    try:
        await say(app, dm(), "hi", "m1")
        entry = await app.store.get_entry(KEY)
        transcript = await app.store.load_transcript(entry.session_id)
    finally:
        await app.stop()
    return adapter.texts(), transcript


async def _stored_entry(app, key=KEY):
    """The entry JSON the store keeps for `key` (routes.entry), read as older code reads it."""
    return json.loads(await app.store._b().db.fetchval("SELECT entry FROM routes WHERE session_key = ?", (key,)))


async def test_a_reply_with_a_lone_surrogate_is_stored_and_sent(tmp_path):
    # The reply was lost ("Sorry, this message could not be processed") at the SQLite write.
    agent = _OddBackend({"hi": AgentReply("ok \ud800", TokenUsage(), reasoning={"reasoning": "th\udc80ink"})})
    texts, transcript = await _answer_hi(tmp_path, agent)
    assert texts == ["ok \ufffd"]
    assert [(m["content"], m.get("reasoning")) for m in transcript] == [("hi", None), ("ok \ufffd", "th\ufffdink")]


async def test_nonsense_usage_is_not_counted_and_the_reply_is_kept(tmp_path, caplog):
    # 2**70 tokens made the entry unstorable (the reply was lost); a NaN cost was stored as null
    # and reset the session's cost to 0 at the next load.
    adapter = RecordingAdapter()
    agent = _OddBackend({
        "one": AgentReply("r1", TokenUsage(input_tokens=10, output_tokens=2, estimated_cost_usd=0.5)),
        "two": AgentReply("r2", TokenUsage(input_tokens=2**70, output_tokens=3, estimated_cost_usd=float("nan"))),
    })
    app = await start_app(tmp_path, adapter, agent)
    try:
        await say(app, dm(), "one", "m1")
        with caplog.at_level("WARNING"):
            await say(app, dm(), "two", "m2")
        stored = await _stored_entry(app)
        entry = await app.store.get_entry(KEY)
        transcript = await app.store.load_transcript(entry.session_id)
    finally:
        await app.stop()
    assert adapter.texts() == ["r1", "r2"]
    assert [m["content"] for m in transcript] == ["one", "r1", "two", "r2"]
    assert (stored["input_tokens"], stored["output_tokens"], stored["estimated_cost_usd"]) == (10, 5, 0.5)
    assert "'input_tokens' is 1180591620717411303424" in caplog.text
    assert "'estimated_cost_usd' is nan" in caplog.text


async def test_media_with_a_number_beyond_64_bits_is_accepted_as_before(tmp_path):
    # The standard encoder wrote it; orjson alone refused it and runner.handle raised.
    app = await start_app(tmp_path, RecordingAdapter(), BlockingAgent(), scheduler={"drain_timeout_s": 0})
    try:
        await app.runner.handle(MessageEvent(source=dm(), text="look", message_id="m1",
                                             media=[{"file_name": "a.bin", "file_size": 2**70}]))
        payload = await app.store._b().db.fetchval("SELECT payload FROM inbound")  # kept while the turn runs
    finally:
        await app.stop()
    assert json.loads(payload)["media"] == [{"file_name": "a.bin", "file_size": 1180591620717411303424}]


async def test_media_holding_a_datetime_is_refused_by_name_and_other_chats_go_on(tmp_path):
    adapter = RecordingAdapter()
    app = await start_app(tmp_path, adapter, EchoAgent())
    try:
        with pytest.raises(ValueError, match="inbound event is not JSON data: Object of type datetime"):
            await app.runner.handle(MessageEvent(source=dm(), text="look", message_id="m1",
                                                 media=[{"taken": datetime(2026, 1, 1)}]))
        await say(app, dm("200"), "hi", "m2")
    finally:
        await app.stop()
    assert adapter.sent == [("200", "echo: hi", "m2")]


async def test_a_received_at_given_as_text_is_stored_in_utc(tmp_path):
    # A plugin's text timestamp made runner.handle raise AttributeError.
    app = await start_app(tmp_path, RecordingAdapter(), BlockingAgent(), scheduler={"drain_timeout_s": 0})
    try:
        await app.runner.handle(MessageEvent(source=dm(), text="hi", message_id="m1",
                                             received_at="2026-03-01T21:00:00+09:00"))
        payload = await app.store._b().db.fetchval("SELECT payload FROM inbound")
    finally:
        await app.stop()
    assert json.loads(payload)["received_at"] == "2026-03-01T12:00:00+00:00"


async def test_a_reply_whose_reasoning_is_not_json_is_kept_without_it(tmp_path, caplog):
    # The reply was lost and the chat heard "Sorry, this message could not be processed".
    reasoning = {"reasoning_details": [{"at": datetime(2026, 1, 1)}]}
    agent = _OddBackend({"hi": AgentReply("ok", TokenUsage(), reasoning=reasoning)})
    with caplog.at_level("ERROR"):
        texts, transcript = await _answer_hi(tmp_path, agent)
    assert texts == ["ok"]
    assert [(m["role"], m["content"], "reasoning_details" in m) for m in transcript] == [
        ("user", "hi", False), ("assistant", "ok", False)]
    assert "kept without its reasoning: transcript message reasoning fields are not JSON-serialisable: " \
           "Object of type datetime is not JSON serializable" in caplog.text


async def test_a_session_whose_stored_counter_is_beyond_64_bits_is_still_answered(tmp_path):
    # The previous release stored such counters (the standard encoder wrote them); orjson alone
    # refused to write the entry back, so every later message of the session was lost.
    replies = {text: AgentReply("r " + text, TokenUsage(input_tokens=1)) for text in ("one", "two")}
    app = await start_app(tmp_path, RecordingAdapter(), _OddBackend(replies))
    try:
        await say(app, dm(), "one", "m1")
        stored = await _stored_entry(app)
        stored["input_tokens"] = 2**70
        await app.store._b().db.write_one("UPDATE routes SET entry = ? WHERE session_key = ?",
                                          (json.dumps(stored), KEY))
    finally:
        await app.stop()
    adapter = RecordingAdapter()
    app = await start_app(tmp_path, adapter, _OddBackend(replies))
    try:
        await say(app, dm(), "two", "m2")
        stored = await _stored_entry(app)
    finally:
        await app.stop()
    assert adapter.texts() == ["r two"]
    assert stored["input_tokens"] == 1180591620717411303425
