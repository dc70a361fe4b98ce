"""Fixtures of the Discord plugin tests: the fake Discord (REST + gateway) and adapter factory."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest
import yarl

with warnings.catch_warnings():
    # discord.py imports the stdlib audioop (voice support, unused here) at import time.
    warnings.simplefilter("ignore", DeprecationWarning)
    import discord.gateway
    import discord.http

# The fake server lives next to the tests (tests are imported with --import-mode=importlib,
# so their folder is not on sys.path by itself).
sys.path.insert(0, str(Path(__file__).parent))

from fake_discord import FakeDiscord  # noqa: E402

from hermes_discord.adapter import DiscordAdapter  # noqa: E402


@pytest.fixture(autouse=True)
def isolated_hermes_home(tmp_path, monkeypatch):
    """HERMES_HOME in a temporary folder; discord.py's process-wide endpoints restored after
    every test (the adapter's `api_base` / `gateway_url` settings change them)."""
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "hermes-home"))
    monkeypatch.setattr(discord.http.Route, "BASE", discord.http.Route.BASE)
    monkeypatch.setattr(discord.gateway.DiscordWebSocket, "DEFAULT_GATEWAY",
                        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY)


@pytest.fixture
async def fake():
    """A running fake Discord on 127.0.0.1, with discord.py pointed at it."""
    async with FakeDiscord() as server:
        discord.http.Route.BASE = server.api_base
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(server.gateway_url)
        yield server


@pytest.fixture
async def make_adapter(fake):
    """`make_adapter(on_message=None, *, start=True, **settings)` → a DiscordAdapter on the fake;
    every adapter is stopped at teardown."""
    adapters = []

    async def factory(on_message=None, *, start=True, **overrides):
        settings = {"bot_token": fake.token, "connect_timeout": 10}
        settings.update(overrides)
        adapter = DiscordAdapter(settings, on_message=on_message)
        adapters.append(adapter)
        if start:
            await adapter.start()
        return adapter

    yield factory
    for adapter in adapters:
        await adapter.aclose()
