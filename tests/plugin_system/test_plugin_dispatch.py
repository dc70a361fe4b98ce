"""call_broadcast (docs/architecture.md §4): pluggy order, subset args, isolation, timeout.

Tests named `test_hook_<hook>` are the per-hook tests the hookspec coverage test looks for.
"""

import asyncio
import logging

from hermes_core.markers import hookimpl
from hermes_core.plugin_system import create_plugin_manager
from hermes_core.plugin_system.dispatch import HookTimeout, call_broadcast


def _pm():
    pm, _ = create_plugin_manager(None)
    return pm


async def test_hook_hermes_session_finalized():
    pm = _pm()
    calls = []

    class First:
        @hookimpl
        def hermes_session_finalized(self, entry):
            calls.append(("first", entry))
            return "sync"

    class Second:
        @hookimpl
        async def hermes_session_finalized(self, entry):
            await asyncio.sleep(0)
            calls.append(("second", entry))
            return "async"

    pm.register(First(), name="first")
    pm.register(Second(), name="second")
    results = await call_broadcast(pm, "hermes_session_finalized", timeout=5, entry="E")
    # pluggy calls the last registered first.
    assert results == [("second", "async"), ("first", "sync")]
    assert calls == [("second", "E"), ("first", "E")]


async def test_hook_hermes_after_deliver(caplog):
    pm = _pm()
    seen = []

    class Broken:
        @hookimpl
        async def hermes_after_deliver(self, delivery, outcome):
            raise ValueError("observer bug")

    class Fine:
        @hookimpl
        def hermes_after_deliver(self, delivery, outcome):
            seen.append(outcome)

    pm.register(Fine(), name="fine")
    pm.register(Broken(), name="broken")
    with caplog.at_level(logging.ERROR):
        results = await call_broadcast(pm, "hermes_after_deliver", timeout=5, delivery="d", outcome="o")
    assert [name for name, _ in results] == ["broken", "fine"]
    assert isinstance(results[0][1], ValueError)
    assert results[1] == ("fine", None)
    assert seen == ["o"]
    assert "plugin broken failed in hermes_after_deliver: ValueError: observer bug" in caplog.text


async def test_hook_hermes_housekeeping():
    pm = _pm()

    class Slow:
        @hookimpl
        async def hermes_housekeeping(self, ctx):
            await asyncio.Event().wait()  # never finishes

    class Quick:
        @hookimpl
        async def hermes_housekeeping(self, ctx):
            return "swept"

    pm.register(Quick(), name="quick")
    pm.register(Slow(), name="slow")
    results = await call_broadcast(pm, "hermes_housekeeping", timeout=0.05, ctx=object())
    assert isinstance(results[0][1], HookTimeout)
    assert str(results[0][1]) == "slow.hermes_housekeeping did not finish within 0.05s"
    assert results[1] == ("quick", "swept")


async def test_hook_hermes_session_reset():
    pm = _pm()

    class Subset:
        @hookimpl
        def hermes_session_reset(self, reason):  # does not take `entry`
            return reason

    pm.register(Subset(), name="subset")
    results = await call_broadcast(pm, "hermes_session_reset", timeout=5, entry="E", reason="new")
    assert results == [("subset", "new")]


async def test_plugin_own_timeout_error_is_not_reported_as_hook_timeout():
    pm = _pm()

    class Raises:
        @hookimpl
        async def hermes_shutdown(self, app):
            raise TimeoutError("upstream api timed out")

    pm.register(Raises(), name="raises")
    results = await call_broadcast(pm, "hermes_shutdown", timeout=5, app=None)
    error = results[0][1]
    assert type(error) is TimeoutError and str(error) == "upstream api timed out"


def test_tracing_logs_names_and_types_never_values(monkeypatch, caplog):
    from hermes_core.model.source import SessionSource
    from hermes_core.types import KeyPolicy

    monkeypatch.setenv("HERMES_TRACE_PLUGINS", "1")
    pm, _ = create_plugin_manager(None)
    source = SessionSource(platform="signal", chat_id="+4915112345678", chat_type="dm", user_id="+4915112345678")
    with caplog.at_level(logging.INFO, logger="hermes_core.plugin_system.manager"):
        key = pm.hook.hermes_session_key(source=source, policy=KeyPolicy())
    assert key == "agent:main:signal:dm:+4915112345678"
    assert "hook hermes_session_key -> [builtin:session_keys] (source: SessionSource, policy: KeyPolicy)" in caplog.text
    assert "hook hermes_session_key done: str" in caplog.text
    assert "4915112345678" not in caplog.text
