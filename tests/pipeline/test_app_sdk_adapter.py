"""What the core gives an SDK adapter (docs/plugins.md, docs/behaviour.md §4, §5): its data
directory before `start()`, its settings, an alias recorder, identity aliases recorded before the
session key is built, and the per-platform busy-input override of `AdapterSpec`."""

from __future__ import annotations

import stat

from pipeline_helpers import ChatAdapter, HeldAgent, RecordingAdapter, dm, start_app, until

from hermes_core.agents.echo import EchoAgent
from hermes_core.model import IdentityAlias, MessageEvent
from hermes_core.sdk import AdapterSpec


class DirAdapter(ChatAdapter):
    """Notes what it saw at `start()`."""

    def __init__(self):
        super().__init__()
        self.seen_at_start = None

    async def start(self):
        self.seen_at_start = (self.data_dir, self.data_dir.is_dir(), stat.S_IMODE(self.data_dir.stat().st_mode))


class QueueModeAdapter(ChatAdapter):
    spec = AdapterSpec(name="testchat", label="Test chat", pii_safe=True, max_message_length=4000,
                       busy_input_mode="queue")


async def test_adapter_gets_a_private_data_dir_before_start(tmp_path):
    adapter = DirAdapter()
    app = await start_app(tmp_path, adapter, EchoAgent())
    try:
        assert adapter.seen_at_start == (tmp_path / "testchat", True, 0o700)
    finally:
        await app.stop()


async def test_aliases_on_an_event_are_recorded_before_its_key(tmp_path):
    adapter = RecordingAdapter()
    app = await start_app(tmp_path, adapter, EchoAgent())
    try:
        await app.runner.handle(MessageEvent(source=dm(chat_id="100"), text="first", message_id="m1"))
        await app.runner.join()
        # The same person now writes from a new id and the mapping says so on the event.
        moved = MessageEvent(source=dm(chat_id="200", user="u200"), text="second", message_id="m2",
                             aliases=[IdentityAlias("testchat", "200", "100", "test-move"),
                                      IdentityAlias("testchat", "u200", "u100", "test-move")])
        await app.runner.handle(moved)
        await app.runner.join()
        routes = [e.session_key for e in await app.store.list_sessions()]
        assert routes == ["agent:main:testchat:dm:100"]
        assert app.pm.hook.hermes_canonical_identity(platform="testchat", kind="user", value="u200") == "u100"
        # Delivery keeps the raw id: the reply went to chat 200.
        assert adapter.sent[-1] == ("200", "echo: second", "m2")
    finally:
        await app.stop()


async def test_adapter_record_alias_reaches_the_store(tmp_path):
    adapter = ChatAdapter()
    app = await start_app(tmp_path, adapter, EchoAgent())
    try:
        await adapter.record_alias("-1004012345678", "-4012345678", source="migrate_to_chat_id")
        assert [(r["platform"], r["alias_id"], r["canonical_id"], r["source"])
                for r in await app.store.identity_aliases()] == [
            ("testchat", "-1004012345678", "-4012345678", "migrate_to_chat_id")]
        assert app.store.session_key(dm(chat_id="-1004012345678")) == "agent:main:testchat:dm:-4012345678"
    finally:
        await app.stop()


async def test_spec_busy_input_mode_overrides_the_core_setting(tmp_path):
    agent = HeldAgent()
    adapter = QueueModeAdapter()
    app = await start_app(tmp_path, adapter, agent)  # [core] busy_input_mode stays "interrupt"
    try:
        await app.runner.handle(MessageEvent(source=dm(), text="A", message_id="m1"))
        await until(lambda: agent.started == ["A"])
        await app.runner.handle(MessageEvent(source=dm(), text="B", message_id="m2"))
        agent.open("A", "B")
        await app.runner.join()
        assert agent.interrupted == []
        assert adapter.sent == [("ok A", "m1"), ("ok B", "m2")]
    finally:
        await app.stop()


class TypingAdapter(ChatAdapter):
    spec = AdapterSpec(name="testchat", label="Test chat", pii_safe=True, max_message_length=4000,
                       capabilities=frozenset({"typing"}))

    def __init__(self):
        super().__init__()
        self.typing: list[str] = []

    async def send_typing(self, target):
        self.typing.append(target.chat_id)


async def test_typing_indicator_runs_while_the_agent_answers_and_stops_after(tmp_path):
    agent = HeldAgent()
    adapter = TypingAdapter()
    app = await start_app(tmp_path, adapter, agent)
    try:
        await app.runner.handle(MessageEvent(source=dm(), text="A", message_id="m1"))
        await until(lambda: agent.started == ["A"] and adapter.typing == ["100"])
        assert adapter.sent == []  # still typing: nothing answered yet
        agent.open("A")
        await app.runner.join()
        assert adapter.sent == [("ok A", "m1")]
        assert adapter.typing == ["100"]  # refreshed every 4 s only; the turn took less
    finally:
        await app.stop()


async def test_no_typing_without_the_capability(tmp_path):
    adapter = TypingAdapter()
    adapter.spec = AdapterSpec(name="testchat", label="Test chat", max_message_length=4000)
    app = await start_app(tmp_path, adapter, EchoAgent())
    try:
        await app.runner.handle(MessageEvent(source=dm(), text="A", message_id="m1"))
        await app.runner.join()
        assert (adapter.sent, adapter.typing) == ([("echo: A", "m1")], [])
    finally:
        await app.stop()


async def test_a_failing_typing_indicator_is_logged_and_the_turn_goes_on(tmp_path, caplog):
    class BrokenTyping(TypingAdapter):
        async def send_typing(self, target):
            raise ConnectionError("platform down")

    adapter = BrokenTyping()
    app = await start_app(tmp_path, adapter, EchoAgent())
    try:
        await app.runner.handle(MessageEvent(source=dm(), text="A", message_id="m1"))
        await app.runner.join()
        assert adapter.sent == [("echo: A", "m1")]
        assert "testchat typing indicator failed (ConnectionError); the turn goes on without it" in caplog.text
    finally:
        await app.stop()


async def test_a_command_addressed_to_another_bot_is_not_handled(tmp_path, caplog):
    # docs/behaviour.md §11: `/cmd@name` naming another bot than the adapter's `bot_username`
    # is for that bot: not answered, not stored, no turn; ours (any case) and no suffix run.
    adapter = RecordingAdapter()
    adapter.bot_username = "hermes_test_bot"
    app = await start_app(tmp_path, adapter, EchoAgent())
    try:
        await adapter.emit(MessageEvent(source=dm(), text="hi", message_id="m1"))
        await app.runner.join()
        entry = await app.store.get_entry("agent:main:testchat:dm:100")
        with caplog.at_level("INFO", logger="hermes_core.sdk.adapter"):
            for n, text in enumerate(["/new@other_bot", "/undo@Other_Bot", "/queue@other_bot later"]):
                await adapter.emit(MessageEvent(source=dm(), text=text, message_id=f"x{n}"))
            await app.runner.join()
        assert adapter.sent == [("100", "echo: hi", "m1")]
        assert [r.getMessage() for r in caplog.records if r.name == "hermes_core.sdk.adapter"] == [
            "testchat message x0 in chat 100 not handled: its command is addressed to @other_bot, "
            "not to this bot (@hermes_test_bot)",
            "testchat message x1 in chat 100 not handled: its command is addressed to @Other_Bot, "
            "not to this bot (@hermes_test_bot)",
            "testchat message x2 in chat 100 not handled: its command is addressed to @other_bot, "
            "not to this bot (@hermes_test_bot)"]
        assert (await app.store.get_entry(entry.session_key)).session_id == entry.session_id
        assert [m["content"] for m in await app.store.load_transcript(entry.session_id)] == ["hi", "echo: hi"]
        await adapter.emit(MessageEvent(source=dm(), text="/undo@Hermes_Test_Bot", message_id="m2"))
        await adapter.emit(MessageEvent(source=dm(), text="/undo", message_id="m3"))
        await app.runner.join()
        assert [t for _, t, _ in adapter.sent[1:]] == [
            'Undid 1 turn(s) (2 message(s)), back to before "hi".', "Nothing to undo."]
    finally:
        await app.stop()


async def test_without_a_bot_username_a_command_suffix_is_ignored(tmp_path):
    # An adapter that has no username of its own (the terminal) keeps the documented rule:
    # the `@name` suffix is dropped, whatever it names.
    adapter = RecordingAdapter()
    app = await start_app(tmp_path, adapter, EchoAgent())
    try:
        await adapter.emit(MessageEvent(source=dm(), text="/new@other_bot", message_id="m1"))
        await app.runner.join()
        entry = await app.store.get_entry("agent:main:testchat:dm:100")
        assert adapter.sent == [("100", f"Started a new session. Session id: {entry.session_id}", "m1")]
    finally:
        await app.stop()
