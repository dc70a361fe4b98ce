"""Inputs that once broke the pipeline (docs/behaviour.md §0, §7): each test feeds the literal
input that did it."""

from __future__ import annotations

from pipeline_helpers import KEY, RecordingAdapter, dm, start_app

from hermes_core import hookimpl
from hermes_core.agents.base import Agent, AgentError
from hermes_core.agents.echo import EchoAgent
from hermes_core.model import MessageEvent, SessionSource


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
