"""Start-up recovery (seed §7 "startup recovery sequence", "stuck-loop detection"; docs/behaviour.md §6):
the `hermes_recovery_plan` hook decides, `hermes_on_session_recovered` hears about it, only fresh
interruptions auto-continue, and `restart_counts.json` suspends a session stuck across 3 restarts.
Real store, real plugin manager, real GatewayApp."""

from __future__ import annotations

import json
import logging
from datetime import timedelta

import pytest
from pipeline_helpers import KEY, Clock, RecordingAdapter, dm, until

from hermes_core import hookimpl
from hermes_core.agents import EchoAgent
from hermes_core.app import GatewayApp
from hermes_core.model import MessageEvent
from hermes_core.plugin_system import create_plugin_manager
from hermes_core.settings import GatewayConfig
from hermes_core.types import RecoveryPlan


class Planner:
    """Decides `action` for every failure and records what it was asked and told."""

    def __init__(self, action):
        self.action = action
        self.asked: list[tuple[str, str]] = []
        self.told: list[tuple[str, str, str]] = []

    @hookimpl
    def hermes_recovery_plan(self, session, failure):
        self.asked.append((session.session_key, failure))
        return RecoveryPlan(action=self.action, reason="test") if self.action else None

    @hookimpl
    async def hermes_on_session_recovered(self, session, plan):
        self.told.append((session.session_key, plan.action, plan.reason))


async def interrupted_home(home, clock):
    """A home whose last run was cut off while answering "first" (resume_pending, clean shutdown)."""
    app = GatewayApp(GatewayConfig(home=home, platforms={"testchat": {"allow_all": True}}), adapters={"testchat": RecordingAdapter()},
                     agent=EchoAgent(), watcher=False, clock=clock)
    await app.start()
    entry = await app.store.get_or_create_session(dm())
    await app.store.begin_turn(KEY, entry.session_id, {"role": "user", "content": "first"})
    await app.store.mark_resume_pending(KEY, "shutdown_timeout")
    await app.stop()
    return entry.session_id


async def restart(home, clock, planner=None, **config):
    pm, _ = create_plugin_manager(None)
    if planner is not None:
        pm.register(planner, name="planner")
    adapter = RecordingAdapter()
    app = GatewayApp(GatewayConfig(home=home, platforms={"testchat": {"allow_all": True}}, **config), pm=pm,
                     adapters={"testchat": adapter},
                     agent=EchoAgent(), watcher=False, clock=clock)
    await app.start()
    await app.runner.join()
    return app, adapter


async def test_default_plan_resumes_once_and_is_broadcast(tmp_path):
    clock = Clock()
    sid = await interrupted_home(tmp_path, clock)
    planner = Planner(None)  # defers to the core default (builtin/recovery.py)
    app, adapter = await restart(tmp_path, clock, planner)
    try:
        assert planner.asked == [(KEY, "shutdown_timeout")]
        assert planner.told == [(KEY, "resume", "shutdown_timeout")]
        assert adapter.sent == [("100", "echo: first", None)]
        entry = await app.store.get_entry(KEY)
        assert (entry.session_id, entry.resume_pending) == (sid, False)
    finally:
        await app.stop()
    app, adapter = await restart(tmp_path, clock, Planner(None))
    try:
        assert adapter.sent == []  # processed once
    finally:
        await app.stop()


async def test_reset_plan_starts_a_new_session_without_answering(tmp_path):
    clock = Clock()
    sid = await interrupted_home(tmp_path, clock)
    planner = Planner("reset")
    app, adapter = await restart(tmp_path, clock, planner)
    try:
        entry = await app.store.get_entry(KEY)
        assert entry.session_id != sid and entry.is_fresh_reset is True and entry.resume_pending is False
        assert adapter.sent == [] and planner.told == [(KEY, "reset", "test")]
    finally:
        await app.stop()


async def test_give_up_plan_clears_the_flag_and_keeps_the_session(tmp_path):
    clock = Clock()
    sid = await interrupted_home(tmp_path, clock)
    app, adapter = await restart(tmp_path, clock, Planner("give_up"))
    try:
        entry = await app.store.get_entry(KEY)
        assert (entry.session_id, entry.resume_pending, adapter.sent) == (sid, False, [])
    finally:
        await app.stop()


async def test_interruption_older_than_the_freshness_window_is_not_continued(tmp_path):
    clock = Clock()
    await interrupted_home(tmp_path, clock)
    clock.now += timedelta(seconds=3601)  # default gateway_auto_continue_freshness: 3600 s
    planner = Planner(None)
    app, adapter = await restart(tmp_path, clock, planner)
    try:
        assert (adapter.sent, planner.asked, app.recovery.stale) == ([], [], [KEY])
        entry = await app.store.get_entry(KEY)
        assert (entry.resume_pending, entry.resume_reason) == (True, "shutdown_timeout")
    finally:
        await app.stop()


@pytest.mark.parametrize("freshness", [0, -1])
async def test_freshness_zero_or_negative_means_no_limit(tmp_path, freshness):
    """docs/behaviour.md §6: `gateway_auto_continue_freshness <= 0` sets no freshness limit (as
    upstream): an interruption of a week ago still continues once."""
    clock = Clock()
    await interrupted_home(tmp_path, clock)
    clock.now += timedelta(days=7)
    app, adapter = await restart(tmp_path, clock, agent={"gateway_auto_continue_freshness": freshness})
    try:
        assert (adapter.sent, app.recovery.stale) == ([("100", "echo: first", None)], [])
        assert (await app.store.get_entry(KEY)).resume_pending is False
    finally:
        await app.stop()


async def test_session_counted_in_three_restarts_is_suspended(tmp_path, caplog):
    clock = Clock()
    sid = await interrupted_home(tmp_path, clock)
    # The drain of the run above interrupted nothing, so the file holds no key; a session seen
    # in 3 consecutive interrupted runs is written as 3.
    (tmp_path / "restart_counts.json").write_text(json.dumps({KEY: 3}))
    planner = Planner(None)
    caplog.set_level(logging.WARNING, "hermes_core.recovery.startup")
    caplog.clear()  # only what the restart logs
    app, adapter = await restart(tmp_path, clock, planner)
    try:
        assert planner.told == [(KEY, "give_up", "active across 3+ restarts: suspended")]
        # The core's reason is what the line says already: said once.
        assert [r.getMessage() for r in caplog.records if r.name == "hermes_core.recovery.startup"] == [
            f"session {KEY} was active across 3+ restarts; suspended"]
        assert app.recovery.suspended == [KEY] and adapter.sent == []
        assert not (tmp_path / "restart_counts.json").exists()
        entry = await app.store.get_entry(KEY)
        assert entry.suspended is True and entry.session_id == sid
    finally:
        await app.stop()


async def test_a_plugins_own_suspension_reason_is_added_to_the_warning(tmp_path, caplog):
    clock = Clock()
    await interrupted_home(tmp_path, clock)
    (tmp_path / "restart_counts.json").write_text(json.dumps({KEY: 3}))
    caplog.set_level(logging.WARNING, "hermes_core.recovery.startup")
    caplog.clear()  # only what the restart logs
    app, _adapter = await restart(tmp_path, clock, Planner("give_up"))
    try:
        assert [r.getMessage() for r in caplog.records if r.name == "hermes_core.recovery.startup"] == [
            f"session {KEY} was active across 3+ restarts; suspended (test)"]
    finally:
        await app.stop()


@pytest.mark.parametrize("restart_requested, reason", [(False, "shutdown_timeout"), (True, "restart_timeout")])
async def test_a_planned_restart_drains_with_restart_timeout(tmp_path, restart_requested, reason):
    """docs/behaviour.md §6: SIGTERM / Ctrl-C is `shutdown_timeout`; a planned restart (SIGUSR1,
    `hermes-gateway restart`) is `restart_timeout`."""
    import asyncio

    from hermes_core.agents.base import Agent

    class Blocking(Agent):
        async def _generate(self, context, history, message, system_context):
            await asyncio.Event().wait()

    cfg = GatewayConfig(home=tmp_path, platforms={"testchat": {"allow_all": True}}, scheduler={"drain_timeout_s": 0.1})
    app = GatewayApp(cfg, adapters={"testchat": RecordingAdapter()}, agent=Blocking(), watcher=False, clock=Clock())
    await app.start()
    await app.runner.handle(MessageEvent(source=dm(), text="stuck"))
    await until(lambda: app.runner.busy_sessions())
    await app.stop(restart=restart_requested)
    from hermes_core.store import SessionStore
    async with SessionStore(cfg.sessions_dir, cfg) as store:
        entry = await store.get_entry(KEY)
    assert (entry.resume_pending, entry.resume_reason) == (True, reason)


async def test_drain_interruption_is_counted_and_a_completed_turn_forgets_it(tmp_path):
    import asyncio

    from hermes_core.agents.base import Agent

    class Blocking(Agent):
        async def _generate(self, context, history, message, system_context):
            await asyncio.Event().wait()

    clock = Clock()
    cfg = GatewayConfig(home=tmp_path, platforms={"testchat": {"allow_all": True}}, scheduler={"drain_timeout_s": 0.1})
    app = GatewayApp(cfg, adapters={"testchat": RecordingAdapter()}, agent=Blocking(), watcher=False, clock=clock)
    await app.start()
    from hermes_core.model import MessageEvent
    await app.runner.handle(MessageEvent(source=dm(), text="stuck"))
    await until(lambda: app.runner.busy_sessions())
    await app.stop()
    assert json.loads((tmp_path / "restart_counts.json").read_text()) == {KEY: 1}
    app, adapter = await restart(tmp_path, clock)
    try:
        assert adapter.sent == [("100", "echo: stuck", None)]
        assert not (tmp_path / "restart_counts.json").exists()
    finally:
        await app.stop()


async def crashed_home(home, clock):
    """The state a crash mid-turn leaves: a marked turn, no reply, no `.clean_shutdown`."""
    from hermes_core.store import SessionStore

    config = GatewayConfig(home=home, platforms={"testchat": {"allow_all": True}})
    (home / ".clean_shutdown").unlink(missing_ok=True)  # the crashed run consumed it at its start
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        entry = await store.get_or_create_session(dm())
        await store.begin_turn(KEY, entry.session_id, {"role": "user", "content": "loop"})
    assert not (home / ".clean_shutdown").exists()


async def test_crash_interrupted_turn_counts_towards_the_stuck_loop(tmp_path):
    clock = Clock()
    await crashed_home(tmp_path, clock)
    (tmp_path / "restart_counts.json").write_text(json.dumps({KEY: 1}))
    app, adapter = await restart(tmp_path, clock)
    try:
        # Second consecutive interrupted run: counted (2), resumed, and the completed turn forgets it.
        assert app.recovery.resumed == [KEY] and adapter.sent == [("100", "echo: loop", None)]
        assert not (tmp_path / "restart_counts.json").exists()
    finally:
        await app.stop()

    await crashed_home(tmp_path, clock)
    (tmp_path / "restart_counts.json").write_text(json.dumps({KEY: 2}))
    planner = Planner(None)
    app, adapter = await restart(tmp_path, clock, planner)
    try:
        # Third: suspended instead of resumed (seed §7 "3+ restarts").
        assert (app.recovery.suspended, app.recovery.resumed, adapter.sent) == ([KEY], [], [])
        assert planner.told == [(KEY, "give_up", "active across 3+ restarts: suspended")]
        assert (await app.store.get_entry(KEY)).suspended is True
        assert not (tmp_path / "restart_counts.json").exists()
        # docs/behaviour.md §6: the user's next message gets a new session and is told, once
        await app.runner.handle(MessageEvent(source=dm(), text="hello again", message_id="m2"))
        await app.runner.join()
        await app.runner.handle(MessageEvent(source=dm(), text="and again", message_id="m3"))
        await app.runner.join()
        assert adapter.sent == [
            ("100", "The previous conversation was stopped after it failed 3 restarts in a row; "
                    "this is a new session.", None),
            ("100", "echo: hello again", "m2"),
            ("100", "echo: and again", "m3")]
        entry = await app.store.get_entry(KEY)
        assert (entry.auto_reset_reason, entry.pending_notice) == ("suspended", None)
    finally:
        await app.stop()


async def test_a_stop_suspension_is_not_told_as_a_stuck_loop(tmp_path):
    clock = Clock()
    app, adapter = await restart(tmp_path, clock)
    try:
        await app.store.get_or_create_session(dm())
        await app.store.suspend_session(KEY)  # what /stop does
        await app.runner.handle(MessageEvent(source=dm(), text="hi", message_id="m1"))
        await app.runner.join()
        assert adapter.sent == [("100", "echo: hi", "m1")]
    finally:
        await app.stop()
