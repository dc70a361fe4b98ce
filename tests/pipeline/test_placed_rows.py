"""docs/behaviour.md §5: the runner remembers which intake rows it placed in a queue, so that a
replica sweep of a shared store never places one twice; it forgets each row once the row is
finished in the store (at once without a sweep; with one, at the sweep's next read of the open
rows, `forget_settled`), so a long-running gateway does not keep an id per message it ever
answered."""

from __future__ import annotations

from pipeline_helpers import ChatAdapter, HeldAgent, dm, say, start_app

from hermes_core.model import MessageEvent


async def intake_ids(app) -> list[tuple[int, str]]:
    rows = await app.store._b().db.fetchall("SELECT id, state FROM inbound ORDER BY id")
    return [tuple(r) for r in rows]


async def answered_mix(app, agent) -> None:
    """A plain message, a command, then two messages queued behind a running turn."""
    agent.open("hello")
    await say(app, dm(), "hello", "m1")
    await say(app, dm(), "/status", "m2")
    await app.runner.handle(MessageEvent(source=dm(), text="long one", message_id="m3"))
    await app.runner.handle(MessageEvent(source=dm(), text="queued", message_id="m4"))
    agent.open("long one", "queued")
    await app.runner.join()


async def test_a_finished_row_is_forgotten_at_once_without_a_sweep(tmp_path):
    agent = HeldAgent()
    app = await start_app(tmp_path, ChatAdapter(), agent, core={"busy_input_mode": "queue"})
    try:
        await answered_mix(app, agent)
        rows = await intake_ids(app)
        assert [state for _, state in rows] == ["done", "done", "done", "done"]
        assert [app.runner.placed(i) for i, _ in rows] == [False, False, False, False]
    finally:
        await app.stop()


async def test_with_a_sweep_a_finished_row_stays_placed_until_the_sweep_forgets_it(tmp_path):
    agent = HeldAgent()
    app = await start_app(tmp_path, ChatAdapter(), agent, core={"busy_input_mode": "queue"})

    async def admit(key: str, inbound_id: int) -> bool:  # as a replica holding every session
        return True

    app.runner.admit = admit
    try:
        await answered_mix(app, agent)
        rows = await intake_ids(app)
        assert [state for _, state in rows] == ["done", "done", "done", "done"]
        # A sweep's read begun before these rows were finished may still return them.
        assert [app.runner.placed(i) for i, _ in rows] == [True, True, True, True]
        app.runner.forget_settled()
        assert [app.runner.placed(i) for i, _ in rows] == [False, False, False, False]
    finally:
        await app.stop()
