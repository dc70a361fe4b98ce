"""Background work and wake-ups bound to a session (docs/behaviour.md §10; seed §8 "clearing"):
`app.background` (`hermes_core.sdk.SessionWork`) on a real GatewayApp with the real store, the
echo agent and a recording chat. The work units are coroutines the test finishes by hand, so
every interleaving is forced, not timed.

Literal texts: the `/stop` and `/new` replies (docs/behaviour.md §11) and the echo agent's
`echo: <message>` rule."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from pipeline_helpers import KEY, ChatAdapter, Clock, dm, until

from hermes_core.agents import EchoAgent
from hermes_core.app import GatewayApp
from hermes_core.model import MessageEvent
from hermes_core.sdk import SessionWork
from hermes_core.settings import GatewayConfig

# Access control (docs/behaviour.md §9): every sender of the test platform is allowed.
ALLOW_TESTCHAT = {"testchat": {"allow_all": True}}


async def start(tmp_path, **config):
    clock = Clock()
    adapter = ChatAdapter()
    app = GatewayApp(GatewayConfig(home=tmp_path, platforms=ALLOW_TESTCHAT, **config),
                     adapters={"testchat": adapter},
                     agent=EchoAgent(), watcher=False, clock=clock)
    await app.start()
    return app, adapter, clock


async def say(app, text):
    await app.runner.handle(MessageEvent(source=dm(), text=text))
    await app.runner.join()


async def work_until(gate: asyncio.Event, result: str | None):
    await gate.wait()
    return result


def contents(transcript):
    return [(m["role"], m["content"]) for m in transcript]


async def test_a_completion_wakes_its_own_session_and_the_answer_is_delivered(tmp_path):
    app, adapter, _ = await start(tmp_path)
    try:
        assert isinstance(app.background, SessionWork)
        await say(app, "start the report")
        session = (await app.store.get_entry(KEY)).session_id
        gate = asyncio.Event()
        handle = await app.background.start(dm(), work_until(gate, "report ready"), name="report")
        assert (handle.session_key, handle.session_id) == (KEY, session)
        assert app.background.active(KEY)
        gate.set()
        await until(lambda: adapter.texts()[-1:] == ["echo: report ready"])
        await app.runner.join()
        assert not app.background.active(KEY)
        assert contents(await app.store.load_transcript(session))[-2:] == [
            ("user", "report ready"), ("assistant", "echo: report ready")]
        assert await app.store.pending_inbound() == []
    finally:
        await app.stop()


async def test_stop_with_only_background_work_running_says_stopped_and_is_idempotent(tmp_path):
    app, adapter, _ = await start(tmp_path)
    try:
        await say(app, "hello")
        handle = await app.background.start(dm(), work_until(asyncio.Event(), "never"), name="crawl")
        await say(app, "/stop")
        assert adapter.texts()[-1] == "Stopped. Your next message starts a new session."
        await asyncio.gather(handle.task, return_exceptions=True)
        assert handle.task.cancelled() and handle.stopped
        assert not app.background.active(KEY)
        await say(app, "/stop")
        assert adapter.texts()[-1] == "No active task to stop."
        assert adapter.texts() == ["echo: hello", "Stopped. Your next message starts a new session.",
                                   "No active task to stop."]  # the stopped work posted nothing
    finally:
        await app.stop()


async def test_new_stops_the_work_and_a_wake_up_of_the_old_session_stays_there(tmp_path):
    app, adapter, _ = await start(tmp_path)
    try:
        await say(app, "first")
        old = (await app.store.get_entry(KEY)).session_id
        handle = await app.background.start(dm(), work_until(asyncio.Event(), "never"), name="crawl")
        await say(app, "/new")
        new = (await app.store.get_entry(KEY)).session_id
        await asyncio.gather(handle.task, return_exceptions=True)
        assert handle.task.cancelled()
        # A scheduled notify+wake bound to the old session arrives after /new.
        assert await app.background.post_wakeup(dm(), "reminder: call Bob", session_id=old)
        await app.runner.join()
        assert adapter.texts() == ["echo: first", f"Started a new session. Session id: {new}"]  # nothing delivered
        assert await app.store.load_transcript(new) == []
        # The stopped unit came back as a completion with status "interrupted" (seed §8), kept
        # in its own session like the reminder.
        assert contents(await app.store.load_transcript(old)) == [
            ("user", "first"), ("assistant", "echo: first"),
            ("system", "Background work 'crawl' was stopped (status=interrupted)."),
            ("system", "reminder: call Bob")]
        # Unbound, the wake-up belongs to the current session and runs there.
        await app.background.post_wakeup(dm(), "reminder: buy milk")
        await app.runner.join()
        assert adapter.texts()[-1] == "echo: reminder: buy milk"
        assert contents(await app.store.load_transcript(new)) == [
            ("user", "reminder: buy milk"), ("assistant", "echo: reminder: buy milk")]
    finally:
        await app.stop()


async def test_a_stopped_unit_that_returns_its_partial_output_reports_it_with_status_interrupted(tmp_path):
    app, adapter, _ = await start(tmp_path)

    async def crawl(found: list[str]) -> str:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            return "\n".join(found)  # what it had when it was stopped
        return "done"

    try:
        await say(app, "hello")
        session = (await app.store.get_entry(KEY)).session_id
        handle = await app.background.start(dm(), crawl(["page 1", "page 2"]), name="crawl")
        await say(app, "/stop")
        await asyncio.gather(handle.task, return_exceptions=True)
        await app.runner.join()
        assert adapter.texts() == ["echo: hello", "Stopped. Your next message starts a new session."]
        assert contents(await app.store.load_transcript(session))[-1] == (
            "system", "Background work 'crawl' was stopped (status=interrupted).\npage 1\npage 2")
        assert await app.store.pending_inbound() == []
    finally:
        await app.stop()


async def test_pruning_keeps_the_route_of_a_session_with_running_work(tmp_path):
    app, adapter, clock = await start(tmp_path, session_store_max_age_days=1)
    try:
        await say(app, "hello")
        gate = asyncio.Event()
        await app.background.start(dm(), work_until(gate, None), name="sync")
        clock.now += timedelta(days=3)
        assert await app.store.prune_old_entries() == 0
        assert await app.store.get_entry(KEY) is not None
        gate.set()
        await until(lambda: not app.background.active(KEY))
        assert await app.store.prune_old_entries() == 1
        assert await app.store.get_entry(KEY) is None
    finally:
        await app.stop()
