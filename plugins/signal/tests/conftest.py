"""Fixtures of the Signal plugin tests: the fake signal-cli HTTP daemon and an adapter factory."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The fake daemon lives next to the tests (tests are imported with --import-mode=importlib, so
# their folder is not on sys.path by itself).
sys.path.insert(0, str(Path(__file__).parent))

from fake_signal import ACCOUNT, FakeSignalDaemon  # noqa: E402

from hermes_signal.adapter import SignalAdapter  # noqa: E402


@pytest.fixture(autouse=True)
def isolated_hermes_home(tmp_path, monkeypatch):
    """Point HERMES_HOME at a temporary folder, so no test reads or writes ~/.hermes."""
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "hermes-home"))


@pytest.fixture
async def daemon():
    """A running fake `signal-cli daemon --http` on 127.0.0.1 (keep-alive every 0.5 s)."""
    async with FakeSignalDaemon(keepalive=0.5) as server:
        yield server


@pytest.fixture
async def make_adapter(daemon):
    """`make_adapter(on_message=None, start=True, **settings)` → a SignalAdapter on the fake
    daemon (fast reconnects); every adapter is stopped at teardown."""
    adapters = []

    async def factory(on_message=None, *, start=True, **overrides):
        settings = {"account": ACCOUNT, "base_url": daemon.base_url, "reconnect_initial": 0.05,
                    "reconnect_max": 0.2, "stream_idle_timeout": 5.0}
        settings.update(overrides)
        adapter = SignalAdapter(settings, on_message=on_message)
        adapters.append(adapter)
        if start:
            await adapter.start()
        return adapter

    yield factory
    for adapter in adapters:
        await adapter.stop()
