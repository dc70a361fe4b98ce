"""Busy input (seed §8, docs/behaviour.md §5, including edits and deletions of queued messages) end to end
in-process: real GatewayApp, real SQLite store, a recording adapter for the chat and an agent
whose turns the test opens (and whose interrupted turns the test lets end), so every
interleaving below is forced, not timed.

Literal texts: the acknowledgements and command replies chosen in `hermes_core.pipeline.busy`,
the interrupted-turn notice of `pipeline.turn`."""

from __future__ import annotations

from dataclasses import replace

from pipeline_helpers import KEY, ChatAdapter, HeldAgent, dm, start_app, until

from hermes_core.model import MessageEvent, SessionSource
from hermes_core.model.events import INTERNAL


async def make_app(tmp_path, agent, **config):
    adapter = ChatAdapter()
    return await start_app(tmp_path, adapter, agent, **config), adapter


async def send(app, text, message_id=None, **kw):
    await app.runner.handle(MessageEvent(source=dm(), text=text, message_id=message_id, **kw))


async def test_burst_interrupts_the_running_turn_and_merges_into_one_turn(tmp_path):
    agent = HeldAgent()
    app, adapter = await make_app(tmp_path, agent)
    try:
        await send(app, "A", "m1")
        await until(lambda: agent.started == ["A"])
        await send(app, "B", "m2")
        await until(lambda: agent.interrupted == ["A"])
        await send(app, "C", "m3")
        assert app.runner.queue_depth(KEY) == 1  # one burst in the slot
        agent.open("B\nC")
        agent.let_interrupted_end.set()
        await app.runner.join()

        assert agent.started == ["A", "B\nC"]
        # Once per burst: B got the notice, C (merged) none; the interrupted turn adds nothing.
        assert adapter.sent == [("Interrupting the current reply…", "m2"), ("ok B\nC", "m3")]
        entry = await app.store.get_entry(KEY)
        assert [(m["role"], m["content"]) for m in await app.store.load_transcript(entry.session_id)] == [
            ("user", "A"), ("user", "B\nC"), ("assistant", "ok B\nC")]
        assert await app.store.pending_inbound() == []
    finally:
        await app.stop()


async def test_burst_from_two_media_messages_appends_media_and_skips_empty_text(tmp_path):
    agent = HeldAgent()
    app, adapter = await make_app(tmp_path, agent)
    try:
        await send(app, "A", "m1")
        await until(lambda: agent.started == ["A"])
        photo1, photo2 = {"path": "/tmp/p1.jpg", "mime_type": "image/jpeg"}, {"path": "/tmp/p2.jpg"}
        await send(app, "", "m2", media=[photo1])
        await until(lambda: agent.interrupted == ["A"])
        await send(app, "look", "m3", media=[photo2])
        seen = []
        original = app.runner._run_job

        async def spy(key, job):
            if job.event is not None and not job.event.is_command:
                seen.append(job.merged_event().media)
            return await original(key, job)

        app.runner._run_job = spy
        agent.open("look")
        agent.let_interrupted_end.set()
        await app.runner.join()
        assert agent.started == ["A", "look"]
        assert seen == [[photo1, photo2]]
    finally:
        await app.stop()


async def test_queue_command_three_times_gives_three_turns_in_order(tmp_path):
    agent = HeldAgent()
    app, adapter = await make_app(tmp_path, agent)
    try:
        await send(app, "A", "m1")
        await until(lambda: agent.started == ["A"])
        for n in (1, 2, 3):
            await send(app, f"/queue q{n}", f"q{n}")
        await until(lambda: len(adapter.sent) == 3)
        assert sorted(adapter.sent) == [("Queued (position 1).", "q1"), ("Queued (position 2).", "q2"),
                                        ("Queued (position 3).", "q3")]
        assert agent.interrupted == []  # /queue never interrupts
        agent.open("A", "q1", "q2", "q3")
        await app.runner.join()
        assert agent.started == ["A", "q1", "q2", "q3"]
        assert adapter.sent[3:] == [("ok A", "m1"), ("ok q1", "q1"), ("ok q2", "q2"), ("ok q3", "q3")]
    finally:
        await app.stop()


async def test_follow_up_during_a_queued_turn_waits_instead_of_interrupting(tmp_path):
    agent = HeldAgent()
    app, adapter = await make_app(tmp_path, agent)
    try:
        await send(app, "/queue Q", "m1")
        await until(lambda: agent.started == ["Q"])
        await send(app, "B", "m2")
        await send(app, "C", "m3")
        await until(lambda: len(adapter.sent) == 1)
        assert adapter.sent == [("Queued (position 1).", "m2")]  # once per burst, truthful
        agent.open("Q", "B\nC")
        await app.runner.join()
        assert agent.interrupted == [] and agent.started == ["Q", "B\nC"]
        assert adapter.texts()[1:] == ["ok Q", "ok B\nC"]
    finally:
        await app.stop()


async def test_empty_queue_command_is_rejected_idle_and_busy(tmp_path):
    agent = HeldAgent()
    app, adapter = await make_app(tmp_path, agent)
    rejection = "Nothing to queue: write /queue followed by your message (or attach a file)."
    try:
        await send(app, "/queue", "m1")
        await app.runner.join()
        assert adapter.sent == [(rejection, "m1")]
        await send(app, "A", "m2")
        await until(lambda: agent.started == ["A"])
        await send(app, "/queue   ", "m3")
        await until(lambda: len(adapter.sent) == 2)
        assert adapter.sent[1] == (rejection, "m3")
        assert app.runner.queue_depth(KEY) == 0
        agent.open("A")
        await app.runner.join()
        assert agent.started == ["A"]
        assert await app.store.pending_inbound() == []
    finally:
        await app.stop()


async def test_new_clears_queued_human_messages_and_the_bound_wake_up_stays_in_its_own_session(tmp_path):
    agent = HeldAgent()
    agent.let_interrupted_end.set()
    app, adapter = await make_app(tmp_path, agent)
    try:
        await send(app, "A", "m1")
        await until(lambda: agent.started == ["A"])
        first = (await app.store.get_entry(KEY)).session_id
        await send(app, "wake: job done", kind=INTERNAL)
        await send(app, "/queue X", "m2")
        await send(app, "/queue Y", "m3")
        await until(lambda: len(adapter.sent) == 2)  # the two "Queued" acknowledgements
        agent.open("wake: job done")
        await send(app, "/new", "m4")
        await app.runner.join()

        assert agent.started == ["A"]  # X and Y never reach the agent, nor does the wake-up
        second = (await app.store.get_entry(KEY)).session_id
        assert second != first
        assert adapter.texts()[2:] == [f"Started a new session. Session id: {second}\nDropped 2 queued message(s)."]
        # The wake-up survived /new but belongs to the first session (accepted while it was
        # current): it does not run in the new one; its text is kept in its own transcript.
        assert await app.store.load_transcript(second) == []
        assert [m["content"] for m in await app.store.load_transcript(first)] == ["A", "wake: job done"]
        assert await app.store.pending_inbound() == []  # the cleared rows are finished
    finally:
        await app.stop()


async def test_a_wake_up_longer_than_the_input_limit_runs_and_is_not_refused(tmp_path):
    # docs/behaviour.md §5, §10: `max_input_chars` limits what people send; a wake-up is the
    # gateway's own event (a background unit's result), so the chat was told "Message refused"
    # about a message it never sent, and the result was lost to the agent.
    agent = HeldAgent()
    app, adapter = await make_app(tmp_path, agent, core={"max_input_chars": 10})
    try:
        await send(app, "hi", "m1")
        await until(lambda: agent.started == ["hi"])
        agent.open("hi")
        await until(lambda: len(adapter.sent) == 1)
        await send(app, "wake: the job's long result", kind=INTERNAL)
        await until(lambda: agent.started == ["hi", "wake: the job's long result"])
        agent.open("wake: the job's long result")
        await app.runner.join()
        assert adapter.texts() == ["ok hi", "ok wake: the job's long result"]
        await send(app, "twelve chars", "m2")
        await app.runner.join()
        assert adapter.texts()[-1] == ("Message refused: it is 12 characters long and the limit is 10 characters "
                                       "(core.max_input_chars). Please shorten it.")
    finally:
        await app.stop()


async def test_stop_suspends_and_drops_the_follow_up(tmp_path):
    agent = HeldAgent()
    app, adapter = await make_app(tmp_path, agent)
    try:
        await send(app, "/stop", "s0")
        await app.runner.join()
        assert adapter.sent == [("No active task to stop.", "s0")]
        await send(app, "A", "m1")
        await until(lambda: agent.started == ["A"])
        first = (await app.store.get_entry(KEY)).session_id
        await send(app, "B", "m2")  # interrupts A, waits in the slot …
        await until(lambda: agent.interrupted == ["A"])
        await send(app, "/stop", "m3")  # … and is dropped
        assert app.runner.queue_depth(KEY) == 1  # only the /stop itself
        agent.let_interrupted_end.set()
        await app.runner.join()
        assert (await app.store.get_entry(KEY)).suspended is True
        assert agent.started == ["A"]
        assert ("Stopped. Your next message starts a new session.\nDropped 1 queued message(s).", "m3") \
            in adapter.sent

        agent.open("C")
        await send(app, "C", "m4")
        await app.runner.join()
        entry = await app.store.get_entry(KEY)
        assert entry.session_id != first
        assert (entry.suspended, entry.was_auto_reset, entry.auto_reset_reason) == (False, True, "suspended")
        assert agent.started == ["A", "C"]
        assert adapter.sent[-1] == ("ok C", "m4")
        assert await app.store.pending_inbound() == []
    finally:
        await app.stop()


async def test_queue_mode_keeps_fifo_one_turn_each_without_notices(tmp_path):
    agent = HeldAgent()
    app, adapter = await make_app(tmp_path, agent, core={"busy_input_mode": "queue"})
    try:
        await send(app, "A", "m1")
        await until(lambda: agent.started == ["A"])
        await send(app, "B", "m2")
        await send(app, "C", "m3")
        assert app.runner.queue_depth(KEY) == 2
        agent.open("A", "B", "C")
        await app.runner.join()
        assert agent.interrupted == []
        assert agent.started == ["A", "B", "C"]
        assert adapter.sent == [("ok A", "m1"), ("ok B", "m2"), ("ok C", "m3")]
    finally:
        await app.stop()


async def test_status_reports_the_queue_depth_while_a_turn_runs(tmp_path):
    agent = HeldAgent()
    app, adapter = await make_app(tmp_path, agent)
    try:
        await send(app, "/queue q1", "q1")  # runs at once: nothing to wait for, no acknowledgement
        await until(lambda: agent.started == ["q1"])
        await send(app, "B", "m2")
        await send(app, "C", "m3")
        await send(app, "/queue q2", "q2")
        await until(lambda: len(adapter.sent) == 2)
        assert sorted(adapter.sent) == [("Queued (position 1).", "m2"), ("Queued (position 2).", "q2")]
        sid = (await app.store.get_entry(KEY)).session_id
        await send(app, "/status", "st")  # answered now, not after the running turn
        await until(lambda: len(adapter.sent) == 3)
        assert adapter.sent[2] == (f"Session key: {KEY}\nSession id: {sid}\nTurns: 1\n"
                                   "Tokens: 0 (input 0, output 0)\nQueued: 2", "st")
        agent.open("q1", "B\nC", "q2")
        await app.runner.join()
        assert agent.started == ["q1", "B\nC", "q2"]
        assert app.runner.queue_depth(KEY) == 0
    finally:
        await app.stop()


# ---- edits and deletions of still-queued messages (docs/behaviour.md §5 last bullet) -----------------------

async def test_edit_and_delete_of_queued_messages(tmp_path):
    agent = HeldAgent()
    app, adapter = await make_app(tmp_path, agent)
    runner = app.runner
    try:
        await send(app, "A", "m1")
        await until(lambda: agent.started == ["A"])
        await send(app, "B", "m2")
        await until(lambda: agent.interrupted == ["A"])
        await send(app, "C", "m3")
        await send(app, "D", "m4")
        await send(app, "/queue q1", "m5")
        assert await runner.edit_queued(dm(), "m1", "A2") is False  # running already: not queued
        assert await runner.edit_queued(dm(), "m9", "?") is False  # unknown
        assert await runner.edit_queued(dm(), "m2", "B edited") is True
        assert await runner.withdraw_queued(dm(), "m3") is True
        assert await runner.withdraw_queued(dm(), "m3") is False  # already withdrawn
        assert await runner.edit_queued(dm(), "m5", "/queue q1 fixed") is True
        # Durable: the intake holds the edited texts, the withdrawn row is finished.
        pending = [r["event"]["text"] for r in await app.store.pending_inbound()]
        assert pending == ["A", "B edited", "D", "/queue q1 fixed"]
        assert runner.queue_depth(KEY) == 2  # the burst (B, D) and q1

        agent.open("B edited\nD", "q1 fixed")
        agent.let_interrupted_end.set()
        await runner.join()
        assert agent.started == ["A", "B edited\nD", "q1 fixed"]
        assert adapter.texts()[-2:] == ["ok B edited\nD", "ok q1 fixed"]
        assert await app.store.pending_inbound() == []
    finally:
        await app.stop()


async def test_withdrawing_the_first_message_of_a_burst_keeps_the_rest(tmp_path):
    agent = HeldAgent()
    app, adapter = await make_app(tmp_path, agent)
    try:
        await send(app, "A", "m1")
        await until(lambda: agent.started == ["A"])
        await send(app, "B", "m2")
        await until(lambda: agent.interrupted == ["A"])
        await send(app, "C", "m3")
        assert await app.runner.withdraw_queued(dm(), "m2") is True
        assert await app.runner.edit_queued(dm(), "m3", "") is True  # emptied: withdrawn too
        assert app.runner.queue_depth(KEY) == 0
        await app.runner.handle(MessageEvent(source=dm(), text="E", message_id="m6"))
        agent.open("E")
        agent.let_interrupted_end.set()
        await app.runner.join()
        assert agent.started == ["A", "E"]
        assert await app.store.pending_inbound() == []
    finally:
        await app.stop()


async def test_a_change_finds_its_message_in_a_per_user_group_only_when_it_names_no_other_sender(tmp_path):
    # docs/behaviour.md §5 "Edits and deletions": a change naming no sender (a Discord deletion)
    # is looked for in every queue of its chat, by chat and message id, so a per-user group's
    # message is found without its author (it used to find nothing: that key needs the author);
    # a change naming another sender never reaches it.
    agent = HeldAgent()
    app, adapter = await make_app(tmp_path, agent, core={"busy_input_mode": "queue"})
    ann = SessionSource("testchat", "g1", chat_type="group", user_id="u100", user_name="Ann")
    bob = replace(ann, user_id="u200", user_name="Bob")
    no_author = replace(ann, user_id=None, user_name=None)
    try:
        for text, message_id in (("A", "m1"), ("B", "m2"), ("C", "m3")):
            await app.runner.handle(MessageEvent(source=ann, text=text, message_id=message_id))
        await until(lambda: agent.started == ["A"])
        assert app.runner.queue_depth("agent:main:testchat:group:g1:u100") == 2
        assert await app.runner.withdraw_queued(bob, "m2") is False
        assert await app.runner.edit_queued(bob, "m3", "C by Bob") is False
        assert await app.runner.withdraw_queued(replace(no_author, chat_id="g2"), "m2") is False
        assert await app.runner.withdraw_queued(no_author, "m2") is True
        assert app.runner.queue_depth("agent:main:testchat:group:g1:u100") == 1
        agent.open("A", "C")
        await app.runner.join()
        assert agent.started == ["A", "C"]
        assert adapter.texts() == ["ok A", "ok C"]
    finally:
        agent.let_interrupted_end.set()  # a failed assertion must not hold the stop forever
        await app.stop()
