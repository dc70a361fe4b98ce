"""docs/behaviour.md §12: on the single-session path a message costs three commits — its durable
acceptance with the user message, the turn marker and the intake row 'running' (the session was
idle); the reply with its delivery obligation ('attempting'), the token counters, the end of the
marker and the intake row finished; the obligation 'delivered' — and each commit is one call to
the SQLite thread. A message for a busy session is accepted in a commit of its own first (four).
Counted on the real store (every call to aiosqlite's thread goes through `Connection._execute`),
not timed."""

from __future__ import annotations

from pipeline_helpers import ChatAdapter, dm, say, start_app

from hermes_core.agents.base import Agent, AgentReply
from hermes_core.model import TokenUsage


class CountedAgent(Agent):
    """Answers "ok <message>" and reports 7 prompt and 3 completion tokens per turn."""

    async def _generate(self, context, history, message, system_context):
        return AgentReply("ok " + message, TokenUsage(input_tokens=7, output_tokens=3))


async def test_a_message_costs_three_commits_each_one_call_to_the_sqlite_thread(tmp_path, monkeypatch,
                                                                                thread_calls):
    adapter = ChatAdapter()
    app = await start_app(tmp_path, adapter, CountedAgent())
    try:
        await say(app, dm(), "warm up", "m0")  # creates the session and fills the agent cache
        db = app.store._b().db
        calls = thread_calls(db)  # until monkeypatch.undo() below
        commits = db.commits
        for n in (1, 2, 3):
            await say(app, dm(), f"message {n}", f"m{n}")
        monkeypatch.undo()
        assert adapter.texts() == ["ok warm up", "ok message 1", "ok message 2", "ok message 3"]
        assert db.commits - commits == 3 * 3
        assert calls == ["_call_in_thread"] * (3 * 3)
        # nothing was left behind by the folded writes: every row is in its final state
        assert [tuple(r) for r in await db.fetchall("SELECT state, attempts FROM delivery_obligations")] == \
            [("delivered", 1)] * 4
        assert [r[0] for r in await db.fetchall("SELECT state FROM inbound ORDER BY id")] == ["done"] * 4
        assert await db.fetchval("SELECT count(*) FROM routes WHERE turn_started_ts IS NOT NULL") == 0
        # the counters went with the reply: four turns of 7 + 3 tokens, in the route, and so in what
        # the session's readers see (its row takes them when the route leaves it, schema 8)
        entry = await app.store.get_entry(app.store.session_key(dm()))
        assert (entry.input_tokens, entry.output_tokens, entry.last_prompt_tokens) == (28, 12, 7)
        assert tuple(await db.fetchone("SELECT input_tokens, output_tokens FROM sessions_now")) == (28, 12)
        info = await app.store.session_info(entry.session_id)
        assert (info["input_tokens"], info["output_tokens"]) == (28, 12)
    finally:
        await app.stop()


async def test_an_undo_is_three_writes_and_finishes_its_intake_row_once(tmp_path):
    # docs/behaviour.md §11, §12: `/undo` finishes its intake row in the transaction of its rewind,
    # which also owes its answer; the runner writes nothing more for that row. Three writes: its
    # acceptance, the rewind, the answer 'delivered'. An `/undo` that changed nothing did not
    # finish its row: the runner does, when its plain notice is sent.
    adapter = ChatAdapter()
    app = await start_app(tmp_path, adapter, CountedAgent())
    try:
        await say(app, dm(), "hello", "m1")
        db = app.store._b().db
        writes = db.writes
        await say(app, dm(), "/undo", "m2")
        assert adapter.texts() == ["ok hello", "Undid 1 turn(s) (2 message(s)), back to before \"hello\"."]
        assert db.writes - writes == 3
        await say(app, dm(), "/undo", "m3")
        assert adapter.texts()[2:] == ["Nothing to undo."]
        assert [tuple(r) for r in await db.fetchall("SELECT message_id, state FROM inbound ORDER BY id")] == [
            ("m1", "done"), ("m2", "done"), ("m3", "done")]
        assert [tuple(r) for r in await db.fetchall("SELECT content, state, attempts FROM delivery_obligations "
                                                    "ORDER BY id")] == [
            ("ok hello", "delivered", 1),
            ("Undid 1 turn(s) (2 message(s)), back to before \"hello\".", "delivered", 1)]
    finally:
        await app.stop()
