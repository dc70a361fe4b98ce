"""Fixtures of the Telegram plugin tests: the fake Bot API server and adapter factory."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The fake server lives next to the tests (tests are imported with --import-mode=importlib,
# so their folder is not on sys.path by itself).
sys.path.insert(0, str(Path(__file__).parent))

from fake_telegram import FakeTelegram  # noqa: E402

from hermes_core.testing import FakeGateway  # noqa: E402
from hermes_telegram.adapter import TelegramAdapter  # noqa: E402


def pytest_configure(config):
    # PTB 22's own RetryAfter.__init__ reads its deprecated int `retry_after` (PTB >= 22.2), so the
    # deprecation fires inside the library on every 429; the adapter already reads both forms.
    config.addinivalue_line(
        "filterwarnings", "ignore:.*retry_after.*:telegram.warnings.PTBDeprecationWarning")


@pytest.fixture(autouse=True)
def isolated_hermes_home(tmp_path, monkeypatch):
    """Point HERMES_HOME at a temporary folder, so no test reads or writes ~/.hermes."""
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "hermes-home"))
    yield


@pytest.fixture
async def tg():
    """A running fake Telegram Bot API on 127.0.0.1."""
    async with FakeTelegram() as server:
        yield server


@pytest.fixture
def data_dir(tmp_path):
    """The adapter's data directory (`HERMES_HOME/telegram/` in a gateway)."""
    path = tmp_path / "hermes-home" / "telegram"
    path.mkdir(parents=True)
    return path


@pytest.fixture
async def make_adapter(tg, data_dir):
    """`make_adapter(gateway=None, **settings)` → a started TelegramAdapter on the fake (polling,
    1 s long polls), attached to `gateway` (a `hermes_core.testing.FakeGateway`; a new one when
    None, reachable as `adapter.test_gateway`) or to a plain inbound handler; every adapter is
    stopped at teardown."""
    adapters = []

    async def factory(gateway=None, *, start=True, **overrides):
        settings = {"bot_token": tg.token, "base_url": tg.base_url, "poll_timeout": 1}
        settings.update(overrides)
        adapter = TelegramAdapter(settings, data_dir=data_dir)
        if gateway is None:
            gateway = FakeGateway()
        if isinstance(gateway, FakeGateway):
            gateway.attach(adapter)
        else:
            adapter.bind(gateway)
        adapter.test_gateway = gateway
        adapters.append(adapter)
        if start:
            await adapter.start()
        return adapter

    yield factory
    for adapter in adapters:
        await adapter.stop()
