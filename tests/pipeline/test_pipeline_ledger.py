"""The delivery ledger across crashes (docs/behaviour.md §6; seed §7 "crash recovery"): a reply saved but
not confirmed as sent is re-sent exactly once, with the literal prefix when the send may have
happened; 'delivered' is never re-sent; silence markers; give-up rules; the sweep clears
resume_pending. Real store (SQLite), real subprocess killed with SIGKILL."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from pipeline_helpers import KEY, RecordingAdapter, dm, say

from hermes_core.agents import EchoAgent
from hermes_core.agents.base import Agent, AgentReply
from hermes_core.app import GatewayApp
from hermes_core.model import MessageEvent, TokenUsage
from hermes_core.settings import GatewayConfig
from hermes_core.store.journal import read_journal

SCRIPT = str(Path(__file__).with_name("crash_gateway_script.py"))


async def run_script(home: Path, mode: str, *messages: str) -> tuple[int, list[dict], str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, SCRIPT, str(home), mode, *messages,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode, [json.loads(line) for line in out.decode().splitlines()], err.decode()


def ledger_rows(home: Path) -> list[tuple]:
    if (home / "state.db").is_dir():  # degraded mode: the ledger's rows are in the journal
        last: dict[int, dict] = {}
        for tx in read_journal(home / "sessions").transactions:
            last.update((ob["id"], ob) for ob in tx.put.get("delivery_obligations", []))
        return [(ob["content"], ob["state"], ob["attempts"]) for _, ob in sorted(last.items())]
    conn = sqlite3.connect(home / "state.db")
    try:
        return conn.execute("SELECT content, state, attempts FROM delivery_obligations ORDER BY id").fetchall()
    finally:
        conn.close()


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "degraded"])
async def test_sigkill_during_send_resends_once_with_the_recovered_prefix(tmp_path, backend):
    if backend == "degraded":
        (tmp_path / "state.db").mkdir()  # SQLite cannot open a directory: the journaled engine
    code, sent, err = await run_script(tmp_path, "kill-in-send", "hello:m1")
    assert code == -signal.SIGKILL, err
    assert sent == []
    # The reply was saved with its obligation, marked attempting, then the process died.
    assert ledger_rows(tmp_path) == [("echo: hello", "attempting", 1)]

    # Restart; Telegram-style redelivery of the same message id comes in too.
    code, sent, err = await run_script(tmp_path, "serve", "hello:m1")
    assert code == 0, err
    assert sent == [{"chat": "100", "text": "Recovered reply (may be a duplicate):\necho: hello", "reply_to": "m1"}]
    assert ledger_rows(tmp_path) == [("echo: hello", "delivered", 2)]

    # Delivered is never re-sent; the redelivered id is still not answered.
    code, sent, err = await run_script(tmp_path, "serve", "hello:m1", "next:m2")
    assert code == 0, err
    assert sent == [{"chat": "100", "text": "echo: next", "reply_to": "m2"}]


@pytest.mark.slow
async def test_sigkill_during_the_send_of_a_turn_accepted_with_its_message_resends_once(tmp_path):
    # docs/behaviour.md §12: the second message found its session idle, so its acceptance was the
    # write that began its turn; the kill lands in its send, before 'delivered' is recorded.
    code, sent, err = await run_script(tmp_path, "kill-in-second-send", "one:m1", "two:m2")
    assert code == -signal.SIGKILL, err
    assert sent == [{"chat": "100", "text": "echo: one", "reply_to": "m1"}]
    assert ledger_rows(tmp_path) == [("echo: one", "delivered", 1), ("echo: two", "attempting", 1)]

    # Restart with the platform redelivering the unacknowledged m2: the owed reply is re-sent
    # once, labelled; m2 itself is a duplicate and is not answered again.
    code, sent, err = await run_script(tmp_path, "serve", "two:m2")
    assert code == 0, err
    assert sent == [{"chat": "100", "text": "Recovered reply (may be a duplicate):\necho: two", "reply_to": "m2"}]
    assert ledger_rows(tmp_path) == [("echo: one", "delivered", 1), ("echo: two", "delivered", 2)]
    conn = sqlite3.connect(tmp_path / "state.db")
    try:
        assert conn.execute("SELECT message_id, state FROM inbound ORDER BY id").fetchall() == [
            ("m1", "done"), ("m2", "done")]
    finally:
        conn.close()


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "degraded"])
async def test_sigkill_after_the_send_before_the_recorder_wrote_resends_once(tmp_path, backend):
    # docs/behaviour.md §12 "'delivered' off the session's path": the reply went out, then the
    # process died in the outcome recorder's write; the obligation stays 'attempting', so the
    # next start sends it again once, labelled, and a third start sends nothing.
    if backend == "degraded":
        (tmp_path / "state.db").mkdir()
    code, sent, err = await run_script(tmp_path, "kill-in-record", "hello:m1")
    assert code == -signal.SIGKILL, err
    assert sent == [{"chat": "100", "text": "echo: hello", "reply_to": "m1"}]
    assert ledger_rows(tmp_path) == [("echo: hello", "attempting", 1)]

    code, sent, err = await run_script(tmp_path, "serve")
    assert code == 0, err
    assert sent == [{"chat": "100", "text": "Recovered reply (may be a duplicate):\necho: hello", "reply_to": "m1"}]
    assert ledger_rows(tmp_path) == [("echo: hello", "delivered", 2)]

    code, sent, err = await run_script(tmp_path, "serve")
    assert code == 0, err
    assert sent == []


async def start_app(home: Path, adapter=None, agent=None, clock=None, **config):
    cfg = GatewayConfig(home=home, platforms={"testchat": {"allow_all": True}}, **config)
    app = GatewayApp(cfg, adapters={"testchat": adapter or RecordingAdapter()}, agent=agent or EchoAgent(),
                     watcher=False, **({"clock": clock} if clock else {}))
    await app.start()
    await app.runner.join()
    return app


async def test_pending_obligation_is_resent_plainly_and_clears_resume_pending(tmp_path):
    # A previous run recorded the reply (pending) and stopped before sending it; the session is
    # also flagged resume_pending: the sweep delivers, and does not answer a second time.
    app = await start_app(tmp_path)
    entry = await app.store.get_or_create_session(dm())
    await app.store.begin_turn(KEY, entry.session_id, {"role": "user", "content": "q"})
    await app.store.record_reply(KEY, entry.session_id, {"role": "assistant", "content": "saved answer"},
                                 origin=dm(), content="saved answer", reply_to="m7")
    await app.store.mark_resume_pending(KEY, "restart_interrupted")
    await app.stop()
    adapter = RecordingAdapter()
    agent = EchoAgent()
    app = await start_app(tmp_path, adapter=adapter, agent=agent)
    try:
        assert adapter.sent == [("100", "saved answer", "m7")]
        assert (await app.store.get_entry(KEY)).resume_pending is False
        assert [m["content"] for m in await app.store.load_transcript(entry.session_id)] == ["q", "saved answer"]
        assert app.recovery.redeliveries == [1] and app.recovery.resumed == []
    finally:
        await app.stop()


async def test_reply_persisted_but_never_in_the_ledger_is_sent_once_with_the_notice(tmp_path):
    """seed §7, docs/behaviour.md §6: a crash between saving the reply and recording it for
    delivery; the unclean start adopts it and sends it once with the recovered-reply notice."""
    app = await start_app(tmp_path)
    entry = await app.store.get_or_create_session(dm())
    await app.store.begin_turn(KEY, entry.session_id, {"role": "user", "content": "q"})
    await app.store.append_to_transcript(entry.session_id, {"role": "assistant", "content": "saved answer"})
    await app.stop()
    (tmp_path / ".clean_shutdown").unlink()  # the state a crash leaves
    adapter = RecordingAdapter()
    app = await start_app(tmp_path, adapter=adapter)
    try:
        assert adapter.sent == [("100", "Recovered reply (may be a duplicate):\nsaved answer", None)]
        assert app.recovery.resumed == []
    finally:
        await app.stop()
    adapter = RecordingAdapter()
    app = await start_app(tmp_path, adapter=adapter)
    try:
        assert adapter.sent == []
    finally:
        await app.stop()


async def test_obligation_given_up_after_three_attempts_or_a_day(tmp_path):
    app = await start_app(tmp_path)
    entry = await app.store.get_or_create_session(dm())
    tired = await app.store.record_reply(KEY, entry.session_id, None, origin=dm(), content="tried thrice")
    for _ in range(3):
        await app.store.start_delivery(tired)
    old = await app.store.record_reply(KEY, entry.session_id, None, origin=dm(), content="too old")
    await app.stop()
    later = app.clock() + timedelta(hours=25)
    adapter = RecordingAdapter()
    app = await start_app(tmp_path, adapter=adapter, clock=lambda: later)
    try:
        assert adapter.sent == []
        states = {r["content"]: (r["state"], r["last_error"])
                  for r in await app.store.obligations_in("abandoned")}
        assert states == {"tried thrice": ("abandoned", "gave up after 3 attempts"),
                          "too old": ("abandoned", "older than 24 h")}
        assert old == tired + 1
    finally:
        await app.stop()


class SilentAgent(Agent):
    async def _generate(self, context, history, message, system_context):
        return AgentReply(" [silent] ", TokenUsage(input_tokens=1, output_tokens=1))


async def test_silence_marker_owes_a_notice_to_humans_and_nothing_to_internal_turns(tmp_path):
    adapter = RecordingAdapter()
    app = await start_app(tmp_path, adapter=adapter, agent=SilentAgent())
    try:
        await say(app, dm(), "anything to say?", message_id="m1")
        assert adapter.sent == [("100", "(The agent chose not to reply to this message.)", "m1")]
        await app.runner.handle(MessageEvent(source=dm(), text="background job finished", kind="internal"))
        await app.runner.join()
        assert len(adapter.sent) == 1
        rows = await app.store.obligations_in("pending", "attempting", "delivered", "failed", "abandoned")
        assert [(r["content"], r["state"], r["internal"]) for r in rows] == [
            ("(The agent chose not to reply to this message.)", "delivered", 0)]
        entry = await app.store.get_entry(KEY)
        assert [m["content"] for m in await app.store.load_transcript(entry.session_id)] == [
            "anything to say?", " [silent] ", "background job finished", " [silent] "]
        assert await app.store.turn_markers() == []
    finally:
        await app.stop()


async def test_failed_send_stays_owed_and_is_sent_at_the_next_start(tmp_path):
    class FlakyAdapter(RecordingAdapter):
        async def send(self, target, text, *, reply_to=None, metadata=None):
            raise ConnectionError("network down")

    app = await start_app(tmp_path, adapter=FlakyAdapter())
    await say(app, dm(), "hi", message_id="m1")
    assert ledger_rows(tmp_path) == [("echo: hi", "failed", 1)]
    await app.stop()
    adapter = RecordingAdapter()
    app = await start_app(tmp_path, adapter=adapter)
    try:
        assert adapter.sent == [("100", "echo: hi", "m1")]
        assert ledger_rows(tmp_path) == [("echo: hi", "delivered", 2)]
    finally:
        await app.stop()


async def test_the_outcomes_of_sends_that_came_in_together_are_one_write(tmp_path, caplog):
    # docs/behaviour.md §12 "'delivered' off the session's path": three sessions' outcomes queued
    # while nothing records yet go into one commit; a write that fails names every obligation.
    from hermes_core.model import SessionSource
    from hermes_core.pipeline.ledger import OutcomeRecorder
    from hermes_core.store import SessionStore
    from hermes_core.store.records import SentOutcome

    config = GatewayConfig(home=tmp_path)
    spawned: list[asyncio.Task] = []

    def spawn(coro):
        spawned.append(asyncio.ensure_future(coro))
        return spawned[-1]

    async with SessionStore(config.sessions_dir, config) as store:
        obligations = []
        for chat in ("1", "2", "3"):
            source = SessionSource("telegram", chat, chat_type="dm", user_id=chat)
            key = store.session_key(source)
            entry = await store.get_or_create_session(source)
            await store.begin_turn(key, entry.session_id, {"role": "user", "content": "q"})
            obligations.append((key, await store.record_reply(key, entry.session_id, {"role": "assistant",
                                                                                        "content": "a"},
                                                              origin=source, content="a", sending=True)))
        recorder = OutcomeRecorder(store, spawn)
        commits = store._b().db.commits
        for key, ob in obligations:
            recorder.add(key, SentOutcome(ob, True, sent_ids=(f"sent-{ob}",)))
        await asyncio.gather(*spawned)
        assert len(spawned) == 1
        assert store._b().db.commits - commits == 1
        assert [o["state"] for o in await store.obligations_in("delivered")] == ["delivered"] * 3

        async def broken(outcomes):
            raise sqlite3.OperationalError("disk I/O error")

        store.finish_deliveries = broken
        recorder.add("agent:main:telegram:dm:1", SentOutcome(obligations[0][1], False, "HTTP 502"))
        recorder.add("agent:main:telegram:dm:2", SentOutcome(obligations[1][1], True))
        await asyncio.gather(*spawned)
        assert len(spawned) == 2
        assert [r.getMessage() for r in caplog.records if "could not be recorded" in r.getMessage()] == [
            f"obligation {obligations[0][1]} of agent:main:telegram:dm:1 was sent but its outcome could not be "
            "recorded (disk I/O error); it is sent again, labelled as a possible duplicate, when the session is "
            "next recovered (at the next start)",
            f"obligation {obligations[1][1]} of agent:main:telegram:dm:2 was sent but its outcome could not be "
            "recorded (disk I/O error); it is sent again, labelled as a possible duplicate, when the session is "
            "next recovered (at the next start)"]


def hold_outcome_writes(app) -> list[asyncio.Event]:
    """Hold each write of the outcome recorder (`store.finish_deliveries`) until its event is set:
    one event per write, in the order the writes began."""
    writes: list[asyncio.Event] = []
    finish_deliveries = app.store.finish_deliveries

    async def held_finish_deliveries(outcomes):
        writes.append(release := asyncio.Event())
        await release.wait()
        return await finish_deliveries(outcomes)

    app.store.finish_deliveries = held_finish_deliveries
    return writes


async def test_a_delivered_reply_is_recorded_even_when_the_drain_times_out(tmp_path):
    # docs/behaviour.md §6 (drain timeout) and §12 "'delivered' off the session's path": the drain
    # cuts off the turns still running, not the record of a reply already sent; a graceful stop
    # leaves it 'delivered', so the next start does not send it again as a possible duplicate.
    from pipeline_helpers import HeldAgent, until

    adapter, agent = RecordingAdapter(), HeldAgent()
    agent.let_interrupted_end.set()
    app = await start_app(tmp_path, adapter, agent, scheduler={"drain_timeout_s": 0.2})
    writes = hold_outcome_writes(app)
    agent.open("a")
    await app.runner.handle(MessageEvent(source=dm("100", "u100"), text="a", message_id="m1"))
    await app.runner.handle(MessageEvent(source=dm("200", "u200"), text="b", message_id="m2"))
    await until(lambda: writes and agent.started == ["a", "b"])
    stopping = asyncio.create_task(app.stop())
    await until(lambda: agent.interrupted == ["b"])  # the drain timed out and cut b's turn off
    writes[0].set()
    await stopping
    assert adapter.texts() == ["ok a"]
    assert ledger_rows(tmp_path) == [("ok a", "delivered", 1)]


async def test_a_failure_report_that_comes_before_the_outcome_is_written_is_applied(tmp_path):
    # docs/behaviour.md §6 "Delivery reports": the sent ids reach the obligation with the outcome,
    # which is written off the session's path (§12). A report that comes first waits for that
    # write and is applied after it: a 'failed' is not lost behind the 'delivered'.
    from pipeline_helpers import until

    adapter = RecordingAdapter()
    app = await start_app(tmp_path, adapter)
    writes = hold_outcome_writes(app)
    try:
        await app.runner.handle(MessageEvent(source=dm("100", "u100"), text="a", message_id="m1"))
        await until(lambda: writes)
        assert adapter.sent == [("100", "echo: a", "m1")]
        report = asyncio.create_task(adapter.report_delivery("1", "failed", "Message undeliverable"))
        await asyncio.sleep(0.1)
        assert not report.done()  # it found no obligation yet and waits for the write
        writes[0].set()
        assert await report == 1
        conn = sqlite3.connect(tmp_path / "state.db")
        try:
            assert conn.execute("SELECT content, state, last_error, sent_ids FROM delivery_obligations").fetchall() \
                == [("echo: a", "failed", "Message undeliverable", '["1"]')]
        finally:
            conn.close()
        # A report about a message no obligation sent changes nothing, and waits for nothing.
        async with asyncio.timeout(1):
            assert await adapter.report_delivery("999", "failed", "x") is None
    finally:
        for release in writes:
            release.set()
        await app.stop()


async def test_a_stuck_outcome_write_does_not_hold_the_stop_up(tmp_path, caplog):
    # docs/behaviour.md §6 "Drain timeout": the record of replies already sent gets at most
    # drain_timeout_s more after the drain; one it did not write stays 'attempting' (sent again,
    # labelled, at the next start).
    from pipeline_helpers import until

    adapter = RecordingAdapter()
    app = await start_app(tmp_path, adapter, scheduler={"drain_timeout_s": 0.2})
    writes = hold_outcome_writes(app)  # never released
    await app.runner.handle(MessageEvent(source=dm("100", "u100"), text="a", message_id="m1"))
    await until(lambda: writes)
    async with asyncio.timeout(5):
        await app.stop()
    assert adapter.texts() == ["echo: a"]
    assert ledger_rows(tmp_path) == [("echo: a", "attempting", 1)]
    # The process ends with the write (its task is cancelled, nothing more is logged): the stop
    # says what it left unrecorded.
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "recorded" in r.getMessage()] \
        == ["stop: the outcome of sent reply(ies) 1 was not recorded within 0.2 s more; they stay 'attempting' "
            "and are sent again at the next start, labelled as possible duplicates"]


async def test_a_report_waits_for_the_outcomes_written_before_it_not_for_later_ones(tmp_path):
    # docs/behaviour.md §6 "Delivery reports": a report that finds no obligation waits for the
    # outcomes queued when it came (at most 10 s), not for the ones other chats queue after it:
    # under steady traffic the recorder is never idle, and the webhook request carrying the
    # report would be held the whole 10 s.
    from pipeline_helpers import until

    adapter = RecordingAdapter()
    app = await start_app(tmp_path, adapter)
    writes = hold_outcome_writes(app)
    try:
        await app.runner.handle(MessageEvent(source=dm("100", "u100"), text="a", message_id="m1"))
        await until(lambda: len(writes) == 1)
        report = asyncio.create_task(adapter.report_delivery("1", "failed", "Message undeliverable"))
        await asyncio.sleep(0.05)
        # Another chat's reply is sent meanwhile: its outcome is queued behind the write going on.
        await app.runner.handle(MessageEvent(source=dm("200", "u200"), text="b", message_id="m2"))
        await until(lambda: len(adapter.sent) == 2)
        writes[0].set()
        await until(lambda: len(writes) == 2)  # the later outcome's write is going on, held
        async with asyncio.timeout(2):
            assert await report == 1
        assert ledger_rows(tmp_path) == [("echo: a", "failed", 1), ("echo: b", "attempting", 1)]
    finally:
        for release in writes:
            release.set()
        await app.stop()


async def test_an_outcome_write_that_fails_after_the_stop_is_logged_and_resent_once(tmp_path, caplog):
    # docs/behaviour.md §6 "Drain timeout": the stop does not wait for a stuck write past
    # drain_timeout_s; when that write fails later (the store is closed by then), the log line
    # still names the obligation and who sends it again, and the next start sends it once, labelled.
    from pipeline_helpers import until

    adapter = RecordingAdapter()
    app = await start_app(tmp_path, adapter, scheduler={"drain_timeout_s": 0.2})
    writes = hold_outcome_writes(app)
    await app.runner.handle(MessageEvent(source=dm("100", "u100"), text="a", message_id="m1"))
    await until(lambda: writes)
    await app.stop()
    writes[0].set()
    await asyncio.wait({app.runner._outcomes.task}, timeout=5)
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == [
        "obligation 1 of agent:main:testchat:dm:100 was sent but its outcome could not be recorded (the session "
        "store is not open (call await store.open())); it is sent again, labelled as a possible duplicate, when "
        "the session is next recovered (at the next start)"]
    again = RecordingAdapter()
    app = await start_app(tmp_path, again)
    await app.stop()
    assert again.texts() == ["Recovered reply (may be a duplicate):\necho: a"]
    assert ledger_rows(tmp_path) == [("echo: a", "delivered", 2)]


class HeldSecondChunk(RecordingAdapter):
    """Splits replies into chunks of 10 characters; the send of each reply's second chunk waits
    for `release` (a later chunk of a long reply still going out when the platform reports on
    the first)."""

    def __init__(self):
        super().__init__(limit=10)
        self.release = asyncio.Event()

    async def send(self, target, text, *, reply_to=None, metadata=None):
        if reply_to is None:  # the first chunk answers the trigger, the later ones do not
            await self.release.wait()
        return await super().send(target, text, reply_to=reply_to, metadata=metadata)


async def test_a_failure_report_about_a_chunk_that_comes_while_a_later_chunk_is_sent_is_applied(tmp_path):
    # docs/behaviour.md §6 "Delivery reports": chunk 1's 'failed' comes before chunk 2's send
    # returns, so the send's outcome is not even queued: the report waits for the send to end
    # and its outcome to be written, then is applied; the 'delivered' of the send does not stand.
    from pipeline_helpers import until

    adapter = HeldSecondChunk()
    app = await start_app(tmp_path, adapter)
    try:
        await app.runner.handle(MessageEvent(source=dm("100", "u100"), text="abcdefghij", message_id="m1"))
        await until(lambda: adapter.sent == [("100", "echo: ", "m1")])
        report = asyncio.create_task(adapter.report_delivery("1", "failed", "Message undeliverable"))
        await asyncio.sleep(0.1)
        assert not report.done()  # it waits for the send that sent message 1
        adapter.release.set()
        async with asyncio.timeout(2):
            assert await report == 1
        conn = sqlite3.connect(tmp_path / "state.db")
        try:
            assert conn.execute("SELECT content, state, last_error, sent_ids FROM delivery_obligations").fetchall() \
                == [("echo: abcdefghij", "failed", "Message undeliverable", '["1","2"]')]
        finally:
            conn.close()
        assert app.runner._outcomes.sending == 0  # the send ended: nothing kept about it
    finally:
        adapter.release.set()
        await app.stop()


async def test_a_report_about_a_send_in_progress_waits_at_most_the_report_wait(tmp_path, monkeypatch):
    # docs/behaviour.md §6 "Delivery reports": the wait is bounded (10 s; shortened here), so a
    # send that does not end cannot hold the platform's request; a cancelled send keeps nothing.
    from pipeline_helpers import until

    from hermes_core.pipeline.runner import GatewayRunner

    monkeypatch.setattr(GatewayRunner, "REPORT_WAIT_S", 0.2)
    adapter = HeldSecondChunk()
    app = await start_app(tmp_path, adapter, scheduler={"drain_timeout_s": 0.2})
    await app.runner.handle(MessageEvent(source=dm("100", "u100"), text="abcdefghij", message_id="m1"))
    await until(lambda: len(adapter.sent) == 1)
    async with asyncio.timeout(2):
        assert await adapter.report_delivery("1", "failed", "Message undeliverable") is None
    assert app.runner._outcomes.sending == 1
    await app.stop()  # the drain times out and cancels the turn in its send
    assert app.runner._outcomes.sending == 0
    assert ledger_rows(tmp_path) == [("echo: abcdefghij", "attempting", 1)]


async def test_a_report_that_finds_its_obligation_unchanged_waits_for_nothing(tmp_path):
    # docs/behaviour.md §6 "Delivery reports": only a report that finds no obligation waits for
    # the outcomes being written; a 'read' of a reply already 'delivered' found its obligation
    # (nothing to change) and returns at once, even while another reply's outcome is held.
    from pipeline_helpers import until

    adapter = RecordingAdapter()
    app = await start_app(tmp_path, adapter)
    await say(app, dm("100", "u100"), "a", "m1")
    await app.runner._outcomes.flush()
    writes = hold_outcome_writes(app)
    try:
        await app.runner.handle(MessageEvent(source=dm("200", "u200"), text="b", message_id="m2"))
        await until(lambda: writes)
        async with asyncio.timeout(1):
            assert await adapter.report_delivery("1", "delivered") is None
        assert ledger_rows(tmp_path) == [("echo: a", "delivered", 1), ("echo: b", "attempting", 1)]
    finally:
        for release in writes:
            release.set()
        await app.stop()


def hold_outcome_writes_of_every_store(monkeypatch) -> list[asyncio.Event]:
    """`hold_outcome_writes` for the stores an app opens later (its `start` opens the store and
    runs the start-up sweep): every `SessionStore.finish_deliveries`, the write of a send's
    outcome, waits until its event is set."""
    from hermes_core.store import SessionStore

    writes: list[asyncio.Event] = []
    finish_deliveries = SessionStore.finish_deliveries

    async def held_finish_deliveries(self, outcomes):
        writes.append(release := asyncio.Event())
        await release.wait()
        return await finish_deliveries(self, outcomes)

    monkeypatch.setattr(SessionStore, "finish_deliveries", held_finish_deliveries)
    return writes


async def _release_every(writes: list[asyncio.Event]) -> None:
    """Let every outcome write held by `hold_outcome_writes_of_every_store` through, now and as
    they come, until cancelled."""
    while True:
        for release in writes:
            release.set()
        await asyncio.sleep(0.01)


async def test_a_failure_report_about_a_start_up_re_send_is_applied(tmp_path, monkeypatch):
    # docs/behaviour.md §6 "Delivery reports": the start-up sweep re-sends an obligation a crash
    # left 'attempting' through the same outcome recorder as a live reply; the platform's report
    # on the re-sent message (a WhatsApp status callback), coming before the outcome is written,
    # waits for that write and is applied after it: the 'failed' is not lost behind 'delivered'.
    from pipeline_helpers import until

    app = await start_app(tmp_path)
    entry = await app.store.get_or_create_session(dm())
    await app.store.begin_turn(KEY, entry.session_id, {"role": "user", "content": "q"})
    await app.store.record_reply(KEY, entry.session_id, {"role": "assistant", "content": "saved answer"},
                                 origin=dm(), content="saved answer", reply_to="m7", sending=True)
    await app.stop()
    writes = hold_outcome_writes_of_every_store(monkeypatch)
    adapter = RecordingAdapter()
    cfg = GatewayConfig(home=tmp_path, platforms={"testchat": {"allow_all": True}})
    app = GatewayApp(cfg, adapters={"testchat": adapter}, agent=EchoAgent(), watcher=False)
    await app.start()
    try:
        await until(lambda: writes)
        assert adapter.sent == [("100", "Recovered reply (may be a duplicate):\nsaved answer", "m7")]
        report = asyncio.create_task(adapter.report_delivery("1", "failed", "Message undeliverable"))
        await asyncio.sleep(0.1)
        assert not report.done()  # it found no obligation yet and waits for the outcome's write
        writes[0].set()
        async with asyncio.timeout(2):
            assert await report == 1
        conn = sqlite3.connect(tmp_path / "state.db")
        try:
            assert conn.execute("SELECT content, state, attempts, last_error, sent_ids FROM delivery_obligations"
                                ).fetchall() == [("saved answer", "failed", 2, "Message undeliverable", '["1"]')]
        finally:
            conn.close()
    finally:
        for release in writes:
            release.set()
        await app.stop()


async def test_a_report_about_a_pending_notice_waits_for_its_outcome(tmp_path, monkeypatch):
    # docs/behaviour.md §6 "Delivery reports": the stuck-loop notice owed to a chat is sent
    # through the outcome recorder like the turn's reply after it, so a report on the notice's
    # message that comes before its outcome is written is applied after that write.
    from pipeline_helpers import until

    app = await start_app(tmp_path)
    await app.store.get_or_create_session(dm())
    await app.store.suspend_session(KEY, reason="stuck_loop")
    await app.stop()
    writes = hold_outcome_writes_of_every_store(monkeypatch)
    adapter = RecordingAdapter()
    app = await start_app(tmp_path, adapter)
    try:
        await app.runner.handle(MessageEvent(source=dm(), text="hello again", message_id="m2"))
        # The turn goes on while the notice's outcome write is held: its reply may be sent too.
        await until(lambda: adapter.sent and writes)
        assert adapter.sent[0] == ("100", "The previous conversation was stopped after it failed 3 restarts in a "
                                          "row; this is a new session.", None)
        report = asyncio.create_task(adapter.report_delivery("1", "failed", "Message undeliverable"))
        await asyncio.sleep(0.1)
        assert not report.done()  # it found no obligation yet and waits for the outcome's write
        # The turn's reply went out meanwhile: its outcome is written with the notice's or right
        # after it (as the recorder's flush found them), and the report may wait for that write
        # too (the outcomes queued when it came). From here on every held write is let through.
        releaser = asyncio.create_task(_release_every(writes))
        async with asyncio.timeout(2):
            assert await report == 1
        await app.runner.join()
        assert adapter.texts()[1:] == ["echo: hello again"]

        def ledger() -> list[tuple]:
            conn = sqlite3.connect(tmp_path / "state.db")
            try:
                return conn.execute("SELECT content, state, last_error, sent_ids FROM delivery_obligations "
                                    "ORDER BY id").fetchall()
            finally:
                conn.close()
        await until(lambda: ledger()[-1][1] == "delivered")
        releaser.cancel()
        assert ledger() == [
            ("The previous conversation was stopped after it failed 3 restarts in a row; this is a new "
             "session.", "failed", "Message undeliverable", '["1"]'),
            ("echo: hello again", "delivered", None, '["2"]')]
    finally:
        for release in writes:
            release.set()
        await app.stop()
