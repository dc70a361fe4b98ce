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
