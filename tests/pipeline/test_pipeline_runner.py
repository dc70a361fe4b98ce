"""The gateway runner end to end in-process (and bad input): real store
(SQLite), real plugin manager, echo agent; a recording adapter stands in for the chat."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from pipeline_helpers import RecordingAdapter, dm, say, until

from hermes_core import hookimpl
from hermes_core.agents import EchoAgent
from hermes_core.agents.base import Agent, AgentError, AgentReply
from hermes_core.app import GatewayApp
from hermes_core.model import MessageEvent, SessionSource, TokenUsage
from hermes_core.plugin_system import create_plugin_manager
from hermes_core.settings import GatewayConfig


def group(user, name):
    return SessionSource("testchat", "-5", chat_type="group", chat_name="G", user_id=user, user_name=name)


# `/help` in these apps: no /restart, as nothing would start them again (docs/behaviour.md §11).
HELP_HERE = (
    "Commands:\n"
    "/new [title] — starts a new session (the old transcript is kept), optionally titled\n"
    "/reset — the same as /new\n"
    "/stop — stops the current reply and background work (your next message starts a new session)\n"
    "/queue <message> — runs a message as its own turn after the current one\n"
    "/resume [number | id | title | label] — lists your recent sessions, or switches to one\n"
    "/title <text> — names the current session\n"
    "/undo [n] — removes your last n turns and their replies (default 1)\n"
    "/retry — removes your last turn and sends that message again\n"
    "/compress — replaces the older part of the conversation by a summary\n"
    "/status — shows the session key, session id, turns, tokens and queued messages\n"
    "/help — shows this help")


async def make_app(tmp_path, agent=None, limit=None, **config):
    """Start a GatewayApp on the recording adapter; `config` are GatewayConfig overrides
    (`agent_settings` is passed as the `[agent]` table)."""
    config.setdefault("platforms", {"testchat": {"allow_all": True}})
    if "agent_settings" in config:
        config["agent"] = config.pop("agent_settings")
    cfg = GatewayConfig(home=tmp_path, **config)
    adapter = RecordingAdapter(limit)
    app = GatewayApp(cfg, adapters={"testchat": adapter}, agent=agent or EchoAgent(), watcher=False)
    await app.start()
    return app, adapter


async def test_turn_records_transcript_usage_and_delivers(tmp_path):
    app, adapter = await make_app(tmp_path)
    try:
        await say(app, dm(), "hello world", message_id="m1")
        assert adapter.sent == [("100", "echo: hello world", "m1")]
        key = app.store.session_key(dm())
        assert key == "agent:main:testchat:dm:100"
        entry = await app.store.get_entry(key)
        transcript = await app.store.load_transcript(entry.session_id)
        assert [(m["role"], m["content"]) for m in transcript] == [
            ("user", "hello world"), ("assistant", "echo: hello world")]
        assert transcript[0]["platform_message_id"] == "m1"
        assert (entry.input_tokens, entry.output_tokens, entry.total_tokens) == (2, 3, 5)
        assert await app.store.count_turns(entry.session_id) == 1
        assert await app.store.turn_markers() == []
    finally:
        await app.stop()


async def test_status_help_unknown_and_new(tmp_path):
    app, adapter = await make_app(tmp_path)
    try:
        await say(app, dm(), "/status")
        assert adapter.texts()[-1] == ("Session key: agent:main:testchat:dm:100\n"
                                       "No session yet: send a message to start one.")
        await say(app, dm(), "hi")
        first = (await app.store.get_entry("agent:main:testchat:dm:100")).session_id
        await say(app, dm(), "/status")
        assert adapter.texts()[-1] == (f"Session key: agent:main:testchat:dm:100\nSession id: {first}\n"
                                       "Turns: 1\nTokens: 3 (input 1, output 2)")
        await say(app, dm(), "/help")
        assert adapter.texts()[-1] == HELP_HERE
        await say(app, dm(), "/frobnicate now")
        assert adapter.texts()[-1] == ("Unknown command /frobnicate. Commands: /new, /reset, /stop, /queue, /resume, "
                                       "/title, /undo, /retry, /compress, /status, /help.")
        # docs/behaviour.md §11: the name is echoed cut to 60 characters, in one short message
        # (a 50,000-character name is no argument, so no length limit refused it).
        sent = len(adapter.sent)
        await say(app, dm(), "/" + "x" * 50_000)
        assert adapter.texts()[sent:] == ["Unknown command /" + "x" * 59 + "…. Commands: /new, /reset, /stop, "
                                          "/queue, /resume, /title, /undo, /retry, /compress, /status, /help."]
        # docs/behaviour.md §11: an invisible character after the name does not make a known
        # command unknown, and an unknown name is never echoed with invisible or control
        # characters in it.
        await say(app, dm(), "/status\u200b")
        assert adapter.texts()[-1] == (f"Session key: agent:main:testchat:dm:100\nSession id: {first}\n"
                                       "Turns: 1\nTokens: 3 (input 1, output 2)")
        await say(app, dm(), "/frob\u2060nicate\ufeff")
        assert adapter.texts()[-1] == ("Unknown command /frobnicate. Commands: /new, /reset, /stop, /queue, /resume, "
                                       "/title, /undo, /retry, /compress, /status, /help.")
        await say(app, dm(), "/frob\x1b[2J\x07")
        assert adapter.texts()[-1] == ("Unknown command /frob [2j. Commands: /new, /reset, /stop, /queue, /resume, "
                                       "/title, /undo, /retry, /compress, /status, /help.")
        await say(app, dm(), "/new")
        second = (await app.store.get_entry("agent:main:testchat:dm:100")).session_id
        assert second != first
        assert adapter.texts()[-1] == f"Started a new session. Session id: {second}"
        assert [m["content"] for m in await app.store.load_transcript(first)] == ["hi", "echo: hi"]
        assert await app.store.load_transcript(second) == []
        await say(app, dm(), "/reset")
        assert (await app.store.get_entry("agent:main:testchat:dm:100")).session_id not in (first, second)
    finally:
        await app.stop()


async def test_an_unknown_commands_log_line_names_it_inert_and_cut(tmp_path, caplog):
    # docs/behaviour.md §11: the name is a peer's text; the log line says it as the answer does,
    # one inert line cut to 60 characters, never a 50,000-character line or an escape sequence.
    app, adapter = await make_app(tmp_path)
    try:
        with caplog.at_level(logging.INFO, logger="hermes_core.pipeline.commands"):
            await say(app, dm(), "/" + "x" * 50_000)
            await say(app, dm(), "/frob\x1b[2J\x07")
        assert [r.getMessage() for r in caplog.records if r.getMessage().startswith("unknown command")] == [
            "unknown command /" + "x" * 59 + "… in agent:main:testchat:dm:100",
            "unknown command /frob [2j in agent:main:testchat:dm:100"]
    finally:
        await app.stop()


async def test_empty_ignored_too_long_refused_duplicates_dropped(tmp_path):
    app, adapter = await make_app(tmp_path, core={"max_input_chars": 10})
    try:
        await say(app, dm(), "")
        await say(app, dm(), "   \t ")
        assert adapter.sent == []
        assert await app.store.get_entry("agent:main:testchat:dm:100") is None
        await say(app, dm(), "x" * 11)
        assert adapter.texts() == ["Message refused: it is 11 characters long and the limit is 10 characters "
                                   "(core.max_input_chars). Please shorten it."]
        assert await app.store.get_entry("agent:main:testchat:dm:100") is None  # nothing recorded
        await say(app, dm(), "x" * 10, message_id="42")
        await say(app, dm(), "x" * 10, message_id="42")  # redelivered by the platform
        assert adapter.texts()[1:] == ["echo: " + "x" * 10]
        entry = await app.store.get_entry("agent:main:testchat:dm:100")
        assert await app.store.count_turns(entry.session_id) == 1
    finally:
        await app.stop()


async def test_shared_group_prefixes_sender_at_run_time(tmp_path):
    app, adapter = await make_app(tmp_path, group_sessions_per_user=False)
    try:
        await say(app, group("u1", "Alice"), "hi")
        await say(app, group("u2", "Bob"), "yo")
        assert adapter.texts() == ["echo: [Alice] hi", "echo: [Bob] yo"]
        entry = await app.store.get_entry("agent:main:testchat:group:-5")
        assert [m["content"] for m in await app.store.load_transcript(entry.session_id)] == [
            "[Alice] hi", "echo: [Alice] hi", "[Bob] yo", "echo: [Bob] yo"]
    finally:
        await app.stop()


async def test_reply_is_chunked_in_order(tmp_path):
    app, adapter = await make_app(tmp_path, limit=10)
    try:
        await say(app, dm(), "abcdefghijklmnop")  # reply "echo: abcdefghijklmnop" is 22 chars
        # The SDK's chunker breaks at the space first, then hard-splits the long word.
        assert adapter.sent == [("100", "echo: ", None), ("100", "abcdefghij", None), ("100", "klmnop", None)]
    finally:
        await app.stop()


class GatedAgent(Agent):
    """Blocks each turn until the test opens that message's gate; records start order."""

    def __init__(self):
        super().__init__()
        self.gates: dict[str, asyncio.Event] = {}
        self.started: list[str] = []

    def gate(self, message):
        return self.gates.setdefault(message, asyncio.Event())

    async def _generate(self, context, history, message, system_context):
        self.started.append(message)
        await self.gate(message).wait()
        if message == "explode":
            raise RuntimeError("backend bug")
        if message == "fail":
            raise AgentError("server said no")
        return AgentReply("ok " + message, TokenUsage(input_tokens=1, output_tokens=2))


async def test_one_turn_at_a_time_per_session_sessions_concurrent(tmp_path):
    agent = GatedAgent()
    # queue mode: a2 waits for a1 (interrupt mode is covered by test_pipeline_busy_*).
    app, adapter = await make_app(tmp_path, agent=agent, core={"busy_input_mode": "queue"})
    try:
        a, b = dm("1", "u1"), dm("2", "u2")
        for source, text in ((a, "a1"), (a, "a2"), (b, "b1")):
            await app.runner.handle(MessageEvent(source=source, text=text))
        await until(lambda: set(agent.started) == {"a1", "b1"})
        assert "a2" not in agent.started  # a2 waits for a1: same session
        agent.gate("b1").set()
        await until(lambda: adapter.texts("2") == ["ok b1"])
        assert "a2" not in agent.started
        agent.gate("a1").set()
        await until(lambda: "a2" in agent.started)
        agent.gate("a2").set()
        await app.runner.join()
        assert adapter.texts("1") == ["ok a1", "ok a2"]
    finally:
        await app.stop()


async def test_a_store_failing_while_a_failed_job_is_reported_keeps_the_sessions_queue_going(tmp_path):
    """A job fails and the store fails too as the chat is told (a server store out of reach):
    the notice is still sent, and the message queued behind it in the same session still runs.
    The failure escaped the worker's error handling, which ended the worker with the queue."""
    from hermes_core.store import StoreError

    agent = GatedAgent()
    app, adapter = await make_app(tmp_path, agent=agent, core={"busy_input_mode": "queue"})
    real_get_entry = app.store.get_entry
    outage = {"on": False}

    async def get_entry(key):
        if outage["on"]:
            outage["on"] = False  # one failed read: the store is back for the next job
            raise StoreError("PostgreSQL store db:5432/hermes cannot be reached")
        return await real_get_entry(key)

    try:
        await app.runner.handle(MessageEvent(source=dm("1", "u1"), text="explode"))
        await app.runner.handle(MessageEvent(source=dm("1", "u1"), text="fine"))
        await until(lambda: agent.started == ["explode"])
        app.store.get_entry = get_entry
        outage["on"] = True
        agent.gate("explode").set()
        agent.gate("fine").set()
        await until(lambda: len(adapter.texts("1")) == 2)
        assert adapter.texts("1") == ["Sorry, this message could not be processed. Please try again later.",
                                      "ok fine"]
    finally:
        app.store.get_entry = real_get_entry
        await app.stop()


async def test_failing_session_does_not_stop_others(tmp_path):
    agent = GatedAgent()
    app, adapter = await make_app(tmp_path, agent=agent)
    try:
        for message in ("explode", "fail", "fine"):
            agent.gate(message).set()
        await say(app, dm("1", "u1"), "explode")
        await say(app, dm("2", "u2"), "fail")
        await say(app, dm("3", "u3"), "fine")
        await say(app, dm("1", "u1"), "fine")
        assert adapter.texts("1") == ["Sorry, this message could not be processed. Please try again later.",
                                      "ok fine"]
        assert adapter.texts("2") == ["Sorry, I could not answer this message. Please try again later."]
        assert adapter.texts("3") == ["ok fine"]
        entry = await app.store.get_entry("agent:main:testchat:dm:2")
        # The failed turn recorded the user message only; the turn marker was ended (the user
        # was told) and no reply was invented.
        assert [m["role"] for m in await app.store.load_transcript(entry.session_id)] == ["user"]
        assert entry.total_tokens == 0
    finally:
        await app.stop()


async def test_drain_timeout_marks_running_turn_resume_pending(tmp_path, caplog):
    agent = GatedAgent()
    app, adapter = await make_app(tmp_path, agent=agent, scheduler={"drain_timeout_s": 0.05})
    await app.runner.handle(MessageEvent(source=dm(), text="slow"))
    await until(lambda: agent.started == ["slow"])
    caplog.set_level(logging.INFO, "hermes_core.app")
    caplog.clear()  # only what the stop logs
    await app.stop()
    assert (tmp_path / ".clean_shutdown").is_file()
    # docs/operations.md §4: the drain and the sessions it cut off are logged.
    assert [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "hermes_core.app"] == [
        ("INFO", "stopping: 1 turn(s) running, the drain waits up to 0.05 s for them"),
        ("WARNING", "stop: the drain timed out after 0.05 s; turn(s) cut off and marked for resumption "
                    "(shutdown_timeout): agent:main:testchat:dm:100")]
    # Reopen the store alone: the interrupted session is marked for resumption.
    from hermes_core.store import SessionStore

    async with SessionStore(app.config.sessions_dir, app.config) as store:
        entry = await store.get_entry("agent:main:testchat:dm:100")
        assert entry.resume_pending is True and entry.resume_reason == "shutdown_timeout"


class Observer:
    def __init__(self):
        self.events: list[tuple[str, Any]] = []

    @hookimpl
    async def hermes_session_reset(self, entry, reason):
        self.events.append(("reset", reason))

    @hookimpl
    def hermes_session_finalized(self, entry):
        self.events.append(("finalized", entry.session_id))

    @hookimpl
    def hermes_after_deliver(self, delivery, outcome):
        self.events.append(("delivered", delivery.kind))

    @hookimpl
    def hermes_startup(self, app):
        self.events.append(("startup", None))

    @hookimpl
    def hermes_shutdown(self, app):
        self.events.append(("shutdown", None))


async def test_lifecycle_hooks_are_broadcast(tmp_path):
    pm, _ = create_plugin_manager(None)
    observer = Observer()
    pm.register(observer, name="observer")
    cfg = GatewayConfig(home=tmp_path, platforms={"testchat": {"allow_all": True}})
    adapter = RecordingAdapter()
    app = GatewayApp(cfg, pm=pm, adapters=[adapter], agent=EchoAgent(), watcher=False)
    await app.start()
    await say(app, dm(), "hi")
    old = (await app.store.get_entry("agent:main:testchat:dm:100")).session_id
    await say(app, dm(), "/new")
    await app.stop()
    assert observer.events == [("startup", None), ("delivered", "reply"), ("finalized", old),
                               ("reset", "new"), ("delivered", "notice"), ("shutdown", None)]
    assert adapter.started and adapter.stopped


async def test_agent_timeout_stops_the_turn_and_says_so(tmp_path):
    agent = GatedAgent()  # the gate is never opened: the turn would block forever
    app, adapter = await make_app(tmp_path, agent=agent, agent_settings={"gateway_timeout": 1})
    try:
        await say(app, dm(), "stuck")
        assert adapter.texts() == ["The agent did not answer within 1 seconds; the turn was stopped."]
        assert agent.busy is False
        entry = await app.store.get_entry("agent:main:testchat:dm:100")
        assert [m["role"] for m in await app.store.load_transcript(entry.session_id)] == ["user"]
        assert await app.store.turn_markers() == []
    finally:
        await app.stop()


class Shouting:
    """A deployment-style wrapper on the delivery plan: re-formats every chunk."""

    @hookimpl(wrapper=True)
    def hermes_plan_delivery(self, delivery):
        plan = yield
        plan.chunks = [c.upper() for c in plan.chunks]
        return plan


class Veto:
    def __init__(self):
        self.errors = []

    @hookimpl(wrapper=True)
    def hermes_plan_delivery(self, delivery):
        plan = yield
        if delivery.kind == "reply":
            plan.veto, plan.reason = True, "policy"
        return plan

    @hookimpl
    def hermes_on_delivery_error(self, delivery, error):
        self.errors.append((delivery.text, str(error)))


async def test_help_lists_restart_where_something_restarts_the_gateway(tmp_path):
    """docs/behaviour.md §11: `/help` lists what works where it is asked: `/restart` only in a
    gateway that something starts again (`hermes-gateway run`'s supervisor)."""
    cfg = GatewayConfig(home=tmp_path, platforms={"testchat": {"allow_all": True}})
    adapter = RecordingAdapter()
    app = GatewayApp(cfg, adapters={"testchat": adapter}, agent=EchoAgent(), watcher=False, on_restart=lambda: None)
    await app.start()
    try:
        await say(app, dm(), "/help")
        assert adapter.texts()[-1].split("\n")[-2:] == ["/help — shows this help",
                                                       "/restart — restarts the gateway (admins only)"]
        await say(app, dm(), "/frobnicate")
        assert adapter.texts()[-1] == ("Unknown command /frobnicate. Commands: /new, /reset, /stop, /queue, /resume, "
                                       "/title, /undo, /retry, /compress, /status, /help, /restart.")
    finally:
        await app.stop()


async def _app_with(tmp_path, plugin):
    pm, _ = create_plugin_manager(None)
    pm.register(plugin, name="deployment:test")
    adapter = RecordingAdapter()
    app = GatewayApp(GatewayConfig(home=tmp_path, platforms={"testchat": {"allow_all": True}}), pm=pm, adapters=[adapter],
                     agent=EchoAgent(), watcher=False)
    await app.start()
    return app, adapter


async def test_delivery_plan_wrapper_reformats_what_is_sent(tmp_path):
    app, adapter = await _app_with(tmp_path, Shouting())
    try:
        await say(app, dm(), "quiet please")
        assert adapter.texts() == ["ECHO: QUIET PLEASE"]
        entry = await app.store.get_entry("agent:main:testchat:dm:100")
        # The transcript keeps the agent's reply; only the delivery was re-formatted.
        assert (await app.store.load_transcript(entry.session_id))[-1]["content"] == "echo: quiet please"
    finally:
        await app.stop()


async def test_vetoed_reply_is_not_sent_and_observers_hear_why(tmp_path):
    veto = Veto()
    app, adapter = await _app_with(tmp_path, veto)
    try:
        await say(app, dm(), "secret")
        await say(app, dm(), "/help")
        assert adapter.texts() == [HELP_HERE]  # only the notice, which the veto lets through
        assert veto.errors == [("echo: secret", "vetoed: policy")]
        assert await app.store.turn_markers() == []
    finally:
        await app.stop()
