"""Fixtures for the session-store tests: a temp HERMES_HOME, the kit's hand-moved UTC clock, an open store."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from hermes_core import GatewayConfig, SessionSource
from hermes_core.store import SessionStore
from hermes_core.testing import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    """The test kit's hand-moved clock (`advance(seconds)`), at 2026-03-01 12:00 UTC."""
    return FakeClock(current=datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc))


@pytest.fixture
def config(tmp_path) -> GatewayConfig:
    return GatewayConfig(home=tmp_path / "home")


@pytest.fixture
async def store(config, clock):
    s = SessionStore(config.sessions_dir, config, clock=clock)
    await s.open()
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
def dm() -> SessionSource:
    return SessionSource(platform="telegram", chat_id="12345", chat_type="dm", user_id="9", user_name="Alice")


@pytest.fixture(autouse=True)
def no_leaked_sqlite_threads():
    """Every store a test opens must be closed: no aiosqlite worker thread may outlive the test
    (docs/architecture.md §7: an unclosed connection is how a gateway hangs at exit)."""
    import threading

    before = set(threading.enumerate())
    yield
    leaked = [t for t in threading.enumerate()
              if t not in before and "_connection_worker_thread" in t.name]
    for thread in leaked:
        thread.join(timeout=5)
    assert [t.name for t in leaked if t.is_alive()] == []
