"""Conversation commands end to end (docs/behaviour.md §11; seed §3, §6): `/title`, `/new <title>`,
`/resume`, `/undo`, `/retry`, `/compress` and automatic compression, on a real GatewayApp with
the real SQLite store and the deterministic echo agent.

Literal texts: the replies documented in docs/behaviour.md §11 (`hermes_core.pipeline.commands`)
and the echo agent's reply and summary rules (`hermes_core.agents.echo`)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pipeline_helpers import KEY, ChatAdapter, Clock, dm

from hermes_core.agents import EchoAgent
from hermes_core.agents.base import AgentError
from hermes_core.app import GatewayApp
from hermes_core.markers import hookimpl
from hermes_core.model import MessageEvent
from hermes_core.settings import GatewayConfig

# Access control (docs/behaviour.md §9): every sender of the test platform is allowed.
ALLOW_TESTCHAT = {"testchat": {"allow_all": True}}


class HistoryEcho(EchoAgent):
    """The echo agent, remembering the (role, content) history each turn saw."""

    def __init__(self, fail_summary: bool = False):
        super().__init__()
        self.seen: list[list[tuple[str, str]]] = []
        self.system: list[str] = []
        self.fail_summary = fail_summary

    async def _generate(self, context, history: list[dict[str, Any]], message, system_context):
        self.seen.append([(m["role"], m["content"]) for m in history])
        self.system.append(system_context)
        return await super()._generate(context, history, message, system_context)

    async def _summarize(self, context, messages):
        if self.fail_summary:
            raise AgentError("summary backend down")
        return await super()._summarize(context, messages)


async def start(tmp_path, agent_impl=None, **config):
    clock = Clock()
    adapter = ChatAdapter()
    app = GatewayApp(GatewayConfig(home=tmp_path, platforms=ALLOW_TESTCHAT, **config),
                     adapters={"testchat": adapter},
                     agent=agent_impl or HistoryEcho(), watcher=False, clock=clock)
    await app.start()
    return app, adapter, clock


async def say(app, text, source=None, clock=None):
    if clock is not None:
        clock.now += timedelta(minutes=1)
    await app.runner.handle(MessageEvent(source=source or dm(), text=text))
    await app.runner.join()


async def current(app, key=KEY):
    return (await app.store.get_entry(key)).session_id


def contents(transcript):
    return [(m["role"], m["content"]) for m in transcript]


async def test_title_new_with_title_and_resume_list_and_switch(tmp_path):
    app, adapter, clock = await start(tmp_path)
    try:
        await say(app, "/title Trip", clock=clock)
        assert adapter.texts()[-1] == "No session yet: send a message to start one."
        await say(app, "plan the trip", clock=clock)
        first = await current(app)
        await say(app, "/title", clock=clock)
        assert adapter.texts()[-1] == "Nothing to name: write /title followed by the session's title."
        await say(app, "/title   Trip\nplanning  ", clock=clock)
        assert adapter.texts()[-1] == 'Session titled "Trip planning".'
        assert (await app.store.session_info(first))["title"] == "Trip planning"

        await say(app, "/new Groceries", clock=clock)
        second = await current(app)
        assert adapter.texts()[-1] == f'Started a new session "Groceries". Session id: {second}'
        await say(app, "milk and eggs", clock=clock)

        await say(app, "/resume", clock=clock)
        assert adapter.texts()[-1] == (
            "Your recent sessions:\n"
            "1. Groceries — 2026-03-01 12:06 UTC, 2 message(s) (current)\n"
            "2. Trip planning — 2026-03-01 12:02 UTC, 2 message(s)\n"
            "Switch with /resume <number>.")
        await say(app, "/resume 1", clock=clock)
        assert adapter.texts()[-1] == "Already in this session."
        await say(app, "/resume Nowhere", clock=clock)
        assert adapter.texts()[-1] == 'No session "Nowhere" to resume. Send /resume for the list.'
        await say(app, "/resume trip planning", clock=clock)
        assert adapter.texts()[-1] == f'Resumed "Trip planning". Session id: {first}'
        assert await current(app) == first
        await say(app, "and the hotel", clock=clock)
        # The resumed session's history reaches the agent again (the cache was rebuilt from the store).
        assert app.agent.seen[-1] == [("user", "plan the trip"), ("assistant", "echo: plan the trip")]
        info = await app.store.session_info(second)
        assert info["end_reason"] == "session_switch"
    finally:
        await app.stop()


async def test_resume_lists_only_the_requesters_own_sessions(tmp_path):
    app, adapter, clock = await start(tmp_path)
    ann, bob = dm(), dm(chat_id="200", user="u200", name="Bob")
    try:
        await say(app, "ann's secret", source=ann, clock=clock)
        await say(app, "bob's secret", source=bob, clock=clock)
        await say(app, "/new", source=bob, clock=clock)
        await say(app, "/resume", source=bob, clock=clock)
        assert adapter.texts()[-1] == ("Your recent sessions:\n"
                                       "1. (empty) — 2026-03-01 12:03 UTC, 0 message(s) (current)\n"
                                       "2. bob's secret — 2026-03-01 12:02 UTC, 2 message(s)\n"
                                       "Switch with /resume <number>.")
        ann_session = await current(app)
        await say(app, f"/resume {ann_session}", source=bob, clock=clock)
        assert adapter.texts()[-1] == f'No session "{ann_session}" to resume. Send /resume for the list.'
        await say(app, "/resume ²", source=bob, clock=clock)  # a digit to str.isdigit, not a number
        assert adapter.texts()[-1] == 'No session "²" to resume. Send /resume for the list.'
        await say(app, "/resume", clock=clock)
        assert adapter.texts()[-1] == "No earlier sessions to resume."
    finally:
        await app.stop()


async def test_resume_by_the_label_the_list_shows_for_an_untitled_session(tmp_path):
    # docs/behaviour.md §11: `/resume <text>` matches a title first, else the label the list shows
    # for an untitled session (its first user line, also in full when the list shortens it).
    app, adapter, clock = await start(tmp_path)
    long_line = "a very long first line " * 4
    try:
        await say(app, "/new hello world", clock=clock)  # a title equal to a later session's label
        titled = await current(app)
        await say(app, "/new", clock=clock)
        await say(app, "Hello   World", clock=clock)
        hello = await current(app)
        await say(app, "/new", clock=clock)
        await say(app, long_line, clock=clock)
        long_session = await current(app)
        await say(app, "/resume", clock=clock)
        assert adapter.texts()[-1] == (
            "Your recent sessions:\n"
            "1. a very long first line a very long first line a very long f… — 2026-03-01 12:05 UTC, "
            "2 message(s) (current)\n"
            "2. Hello World — 2026-03-01 12:03 UTC, 2 message(s)\n"
            "3. hello world — 2026-03-01 12:01 UTC, 0 message(s)\n"
            "Switch with /resume <number>.")
        await say(app, "/resume HELLO WORLD", clock=clock)  # the title wins over a newer label
        assert adapter.texts()[-1] == f'Resumed "hello world". Session id: {titled}'
        await say(app, "/title Greeting", clock=clock)
        await say(app, "/resume hello world", clock=clock)
        assert adapter.texts()[-1] == f'Resumed "Hello World". Session id: {hello}'
        assert await current(app) == hello
        await say(app, "/resume A very long first line a very long first line a very long f…", clock=clock)
        assert adapter.texts()[-1] == (
            'Resumed "a very long first line a very long first line a very long f…". '
            f"Session id: {long_session}")
        await say(app, "/resume hello world", clock=clock)
        await say(app, f"/resume {long_line}", clock=clock)
        assert adapter.texts()[-1] == (
            'Resumed "a very long first line a very long first line a very long f…". '
            f"Session id: {long_session}")
        await say(app, "/resume hello", clock=clock)  # a part of a label is no match
        assert adapter.texts()[-1] == 'No session "hello" to resume. Send /resume for the list.'
    finally:
        await app.stop()


async def test_resume_by_a_long_title_typed_whole_or_as_listed(tmp_path):
    # docs/behaviour.md §11: a title is kept to 100 characters ("…" marks the cut) and listed to
    # 60; `/resume` takes it typed whole, as stored or as the list shows it.
    app, adapter, clock = await start(tmp_path)
    long_title = "the quarterly report on pelican migration " * 4  # 168 characters
    try:
        await say(app, f"/new {long_title}", clock=clock)
        titled = await current(app)
        await say(app, "/new", clock=clock)
        stored = ("the quarterly report on pelican migration the quarterly report on pelican migration "
                  "the quarterly r…")
        listed = "The quarterly report on pelican migration the quarterly rep…"
        for typed in (long_title, stored, listed):
            await say(app, f"/resume {typed}", clock=clock)
            assert adapter.texts()[-1] == f'Resumed "{listed.lower()}". Session id: {titled}'
            assert await current(app) == titled
            await say(app, "/new", clock=clock)
    finally:
        await app.stop()


async def test_resume_that_loses_a_race_changes_nothing(tmp_path):
    app, adapter, clock = await start(tmp_path)
    try:
        await say(app, "one", clock=clock)
        first = await current(app)
        await say(app, "/new", clock=clock)
        second = await current(app)
        # While /resume awaits its listing, the key is moved on (another /new, forced here).
        real_listing = app.store.recent_sessions

        async def listing_then_new(owner, **kw):
            found = await real_listing(owner, **kw)
            await app.store.reset_session(KEY)
            return found

        app.store.recent_sessions = listing_then_new
        await say(app, "/resume 2", clock=clock)
        assert adapter.texts()[-1] == "The chat changed meanwhile; nothing was switched. Send /resume again."
        now = await current(app)
        assert now not in (first, second)  # the concurrent /new stands; nothing was switched back
    finally:
        await app.stop()


async def test_undo_rewinds_turns_counts_rewinds_and_the_agent_never_sees_them_again(tmp_path):
    app, adapter, clock = await start(tmp_path)
    try:
        await say(app, "/undo", clock=clock)
        assert adapter.texts()[-1] == "Nothing to undo."
        for text in ("u1", "u2", "u3"):
            await say(app, text, clock=clock)
        session = await current(app)
        await say(app, "/undo", clock=clock)
        assert adapter.texts()[-1] == 'Undid 1 turn(s) (2 message(s)), back to before "u3".'
        await say(app, "/undo many", clock=clock)
        assert adapter.texts()[-1] == "Write /undo, or /undo followed by the number of turns to undo."
        await say(app, "next", clock=clock)
        assert app.agent.seen[-1] == [("user", "u1"), ("assistant", "echo: u1"),
                                      ("user", "u2"), ("assistant", "echo: u2")]
        await say(app, "/undo 2", clock=clock)
        assert adapter.texts()[-1] == 'Undid 2 turn(s) (4 message(s)), back to before "u2".'
        assert contents(await app.store.load_transcript(session)) == [("user", "u1"), ("assistant", "echo: u1")]
        assert (await app.store.session_info(session))["rewind_count"] == 2
        for unusable in ("/undo 0", "/undo ²", "/undo -1"):
            await say(app, unusable, clock=clock)
            assert adapter.texts()[-1] == "Write /undo, or /undo followed by the number of turns to undo."
        await say(app, "/undo 9223372036854775808", clock=clock)  # past SQLite's integers: every turn
        await say(app, "/undo", clock=clock)
        assert adapter.texts()[-2:] == ['Undid 1 turn(s) (2 message(s)), back to before "u1".', "Nothing to undo."]
    finally:
        await app.stop()


async def test_a_command_name_ends_at_any_whitespace_not_only_a_space(tmp_path):
    # docs/behaviour.md §11: the name ends at the first whitespace; a chat app sends "/queue",
    # a line break and a message of several lines as one text.
    app, adapter, clock = await start(tmp_path)
    try:
        await say(app, "/queue\nline one\nline two", clock=clock)
        assert adapter.texts()[-1] == "echo: line one\nline two"
        await say(app, "/title\tTrip\nplanning", clock=clock)
        assert adapter.texts()[-1] == 'Session titled "Trip planning".'
        await say(app, "/undo@hermes_bot\n1", clock=clock)
        assert adapter.texts()[-1] == 'Undid 1 turn(s) (2 message(s)), back to before "line one line two".'
        await say(app, "/undo\u30001", clock=clock)  # an ideographic space
        assert adapter.texts()[-1] == "Nothing to undo."
    finally:
        await app.stop()


async def test_retry_runs_the_last_message_again_without_the_old_reply(tmp_path):
    app, adapter, clock = await start(tmp_path)
    try:
        await say(app, "/retry", clock=clock)
        assert adapter.texts()[-1] == "Nothing to retry."
        await say(app, "u1", clock=clock)
        await say(app, "u2", clock=clock)
        await say(app, "/retry", clock=clock)
        assert adapter.texts()[-2:] == ['Retrying "u2".', "echo: u2"]
        assert app.agent.seen[-1] == [("user", "u1"), ("assistant", "echo: u1")]
        session = await current(app)
        assert contents(await app.store.load_transcript(session)) == [
            ("user", "u1"), ("assistant", "echo: u1"), ("user", "u2"), ("assistant", "echo: u2")]
        assert (await app.store.session_info(session))["rewind_count"] == 1
        assert await app.store.count_turns(session) == 2
    finally:
        await app.stop()


async def test_retry_after_a_file_without_text_rewinds_nothing(tmp_path):
    # docs/behaviour.md §11: nothing to send again → "Nothing to retry.", and the turn stays.
    app, adapter, clock = await start(tmp_path)
    try:
        await say(app, "u1", clock=clock)
        await app.runner.handle(MessageEvent(source=dm(), text="", media=[{"type": "photo", "path": "/tmp/p.jpg"}]))
        await app.runner.join()
        session = await current(app)
        await say(app, "/retry", clock=clock)
        assert adapter.texts()[-1] == "Nothing to retry."
        assert contents(await app.store.load_transcript(session)) == [
            ("user", "u1"), ("assistant", "echo: u1"), ("user", ""), ("assistant", "echo: ")]
        assert (await app.store.session_info(session))["rewind_count"] == 0
    finally:
        await app.stop()


async def test_retry_after_stop_says_the_conversation_was_stopped_and_rewinds_nothing(tmp_path):
    app, adapter, clock = await start(tmp_path)
    try:
        await say(app, "u1", clock=clock)
        session = await current(app)
        await app.store.suspend_session(KEY)  # what /stop does once it stopped something
        await say(app, "/retry", clock=clock)
        assert adapter.texts()[-1] == ("Nothing to retry: the conversation was stopped. "
                                       "Your next message starts a new session.")
        assert contents(await app.store.load_transcript(session)) == [("user", "u1"), ("assistant", "echo: u1")]
    finally:
        await app.stop()


SUMMARY_OF_U1_U2 = ("Summary of the earlier conversation:\n"
                    "Summary of 4 earlier message(s). The user wrote: u1 | u2")


async def test_compress_replaces_the_older_part_by_the_agents_summary_and_keeps_the_tail(tmp_path):
    app, adapter, clock = await start(tmp_path, agent={"compression": {"keep_recent": 2}})
    try:
        await say(app, "/compress", clock=clock)
        assert adapter.texts()[-1] == "Nothing to compress yet."
        for text in ("u1", "u2", "u3"):
            await say(app, text, clock=clock)
        session = await current(app)
        await say(app, "/compress", clock=clock)
        assert adapter.texts()[-1] == ("Compressed the conversation: 4 earlier message(s) summarised, "
                                       "2 kept as they were.")
        assert await current(app) == session  # the session id stays
        assert contents(await app.store.load_transcript(session)) == [
            ("system", SUMMARY_OF_U1_U2), ("user", "u3"), ("assistant", "echo: u3")]
        # Nothing new before the tail: the summary is not summarised again (docs/behaviour.md §11).
        await say(app, "/compress", clock=clock)
        assert adapter.texts()[-1] == "Nothing to compress yet."
        assert contents(await app.store.load_transcript(session)) == [
            ("system", SUMMARY_OF_U1_U2), ("user", "u3"), ("assistant", "echo: u3")]
        await say(app, "u4", clock=clock)
        assert app.agent.seen[-1] == [("system", SUMMARY_OF_U1_U2), ("user", "u3"), ("assistant", "echo: u3")]
        await say(app, "/compress", clock=clock)
        assert adapter.texts()[-1] == ("Compressed the conversation: 3 earlier message(s) summarised, "
                                       "2 kept as they were.")
    finally:
        await app.stop()


async def test_undo_and_compress_answers_go_through_the_ledger_and_answers_that_change_nothing_do_not(tmp_path):
    # docs/behaviour.md §11, §6: the answer of a change is owed with it and marked once sent.
    app, adapter, clock = await start(tmp_path, agent={"compression": {"keep_recent": 2}})
    try:
        for text in ("/undo", "/compress"):
            await say(app, text, clock=clock)
        for text in ("u1", "u2", "u3"):
            await say(app, text, clock=clock)
        await say(app, "/undo", clock=clock)
        await say(app, "/compress", clock=clock)
        owed = [(ob["content"], ob["state"], ob["attempts"], ob["message_id"])
                for ob in await app.store.obligations_in("pending", "attempting", "delivered", "failed")]
        undone = 'Undid 1 turn(s) (2 message(s)), back to before "u3".'
        compressed = "Compressed the conversation: 2 earlier message(s) summarised, 2 kept as they were."
        assert [o[0] for o in owed] == ["echo: u1", "echo: u2", "echo: u3", undone, compressed]
        # Sent once each, carrying no transcript row (the answer is not part of the conversation).
        assert [o[1:] for o in owed[3:]] == [("delivered", 1, None), ("delivered", 1, None)]
        assert adapter.texts() == ["Nothing to undo.", "Nothing to compress yet.", "echo: u1", "echo: u2",
                                   "echo: u3", undone, compressed]
    finally:
        await app.stop()


async def test_a_failed_summary_leaves_the_transcript_untouched(tmp_path):
    app, adapter, clock = await start(tmp_path, HistoryEcho(fail_summary=True))
    app.config.agent.compression.keep_recent = 2
    try:
        for text in ("u1", "u2"):
            await say(app, text, clock=clock)
        session = await current(app)
        before = await app.store.load_transcript(session)
        await say(app, "/compress", clock=clock)
        assert adapter.texts()[-1] == "Could not compress the conversation; it is unchanged."
        assert await app.store.load_transcript(session) == before
    finally:
        await app.stop()


async def test_automatic_compression_when_the_prompt_exceeds_the_share_of_the_window(tmp_path):
    # echo counts whitespace tokens: the prompt of the third turn is u1 + echo: u1 + u2 + echo: u2
    # + u3 = 7 tokens > 0.5 × 12; the second's (4 tokens) is not.
    app, adapter, clock = await start(tmp_path, agent={"context_window": 12,
                                                       "compression": {"threshold": 0.5, "keep_recent": 2}})
    try:
        await say(app, "u1", clock=clock)
        await say(app, "u2", clock=clock)
        session = await current(app)
        assert len(await app.store.load_transcript(session)) == 4
        await say(app, "u3", clock=clock)
        assert adapter.texts() == ["echo: u1", "echo: u2", "echo: u3"]  # nothing said about it
        assert contents(await app.store.load_transcript(session)) == [
            ("system", SUMMARY_OF_U1_U2), ("user", "u3"), ("assistant", "echo: u3")]
        assert (await app.store.get_entry(KEY)).session_id == session
    finally:
        await app.stop()


class TopicInstructions:
    """A platform plugin's standing instructions for the test chat."""

    @hookimpl
    def hermes_chat_instructions(self, source):
        return "Answer in French." if source.chat_id == "100" else None


async def test_first_turn_after_new_reinjects_the_chat_instructions_once(tmp_path):
    app, adapter, clock = await start(tmp_path)
    app.pm.register(TopicInstructions(), name="topic-instructions")
    try:
        await say(app, "one", clock=clock)
        await say(app, "/new", clock=clock)
        assert (await app.store.get_entry(KEY)).is_fresh_reset is True
        await say(app, "two", clock=clock)
        await say(app, "three", clock=clock)
        marks = [prompt.endswith("\n\n## Chat Instructions\nAnswer in French.") for prompt in app.agent.system]
        assert marks == [False, True, False]
        assert (await app.store.get_entry(KEY)).is_fresh_reset is False
    finally:
        await app.stop()


async def test_invisible_character_before_the_slash_still_runs_the_command(tmp_path):
    # docs/behaviour.md §11: a zero-width space or BOM a keyboard or a copy-paste put before
    # `/undo` is unseen: the command runs, nothing reaches the agent; a visible space before the
    # slash leaves the text a message.
    app, adapter, _ = await start(tmp_path)
    try:
        await say(app, "u1")
        await say(app, "\u200b/undo")
        assert adapter.texts() == ["echo: u1", 'Undid 1 turn(s) (2 message(s)), back to before "u1".']
        await say(app, "u2")
        await say(app, "\ufeff\u200e/status")
        entry = await app.store.get_entry(KEY)
        assert adapter.texts()[-1] == (f"Session key: {KEY}\nSession id: {entry.session_id}\n"
                                       "Turns: 1\nTokens: 6 (input 2, output 4)")  # /undo keeps the usage
        await say(app, " /status")
        assert adapter.texts()[-1] == "echo:  /status"
        assert [m["content"] for m in await app.store.load_transcript(entry.session_id)] == [
            "u2", "echo: u2", " /status", "echo:  /status"]
    finally:
        await app.stop()
