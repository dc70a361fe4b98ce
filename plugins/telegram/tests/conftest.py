"""Fixtures of the Telegram plugin tests: the fake Bot API server and adapter factory."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The fake server lives next to the tests (tests are imported with --import-mode=importlib,
# so their folder is not on sys.path by itself).
sys.path.insert(0, str(Path(__file__).parent))

from fake_telegram import FakeTelegram  # noqa: E402

from hermes_telegram.adapter import TelegramAdapter  # noqa: E402
from hermes_telegram.aliases import ChatAliasStore  # noqa: E402


def pytest_configure(config):
    # PTB 22's own RetryAfter.__init__ reads its deprecated int `retry_after` (PTB >= 22.2), so the
    # deprecation fires inside the library on every 429; the adapter already reads both forms.
    config.addinivalue_line(
        "filterwarnings", "ignore:.*retry_after.*:telegram.warnings.PTBDeprecationWarning")


@pytest.fixture(autouse=True)
def isolated_hermes_home(tmp_path, monkeypatch):
    """Point HERMES_HOME at a temporary folder and reset the plugin's alias store, so no test
    reads or writes ~/.hermes."""
    from hermes_telegram import hooks

    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "hermes-home"))
    monkeypatch.setitem(hooks._state, "store", None)
    yield


@pytest.fixture
async def tg():
    """A running fake Telegram Bot API on 127.0.0.1."""
    async with FakeTelegram() as server:
        yield server


@pytest.fixture
def alias_store(tmp_path):
    return ChatAliasStore(tmp_path / "telegram" / "chat_aliases.json")


@pytest.fixture
async def make_adapter(tg, alias_store):
    """`make_adapter(on_message=None, **settings)` → a started TelegramAdapter on the fake
    (polling, 1 s long polls); every adapter is stopped at teardown."""
    adapters = []

    async def factory(on_message=None, *, start=True, **overrides):
        settings = {"bot_token": tg.token, "base_url": tg.base_url, "poll_timeout": 1}
        settings.update(overrides)
        adapter = TelegramAdapter(settings, on_message=on_message, alias_store=alias_store)
        adapters.append(adapter)
        if start:
            await adapter.start()
        return adapter

    yield factory
    for adapter in adapters:
        await adapter.stop()
