"""Fixtures of the WhatsApp plugin tests: the fake bridge, the fake Graph API and adapter factories."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The fakes live next to the tests (tests are imported with --import-mode=importlib, so their
# folder is not on sys.path by itself).
sys.path.insert(0, str(Path(__file__).parent))

from fake_whatsapp import FakeBridge, FakeGraph, bridge_settings, cloud_settings  # noqa: E402

from hermes_whatsapp.bridge_adapter import WhatsAppAdapter  # noqa: E402
from hermes_whatsapp.cloud_adapter import WhatsAppCloudAdapter  # noqa: E402


@pytest.fixture(autouse=True)
def isolated_hermes_home(tmp_path, monkeypatch):
    """Point HERMES_HOME at a temporary folder, so no test reads or writes ~/.hermes."""
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "hermes-home"))


@pytest.fixture
async def bridge():
    """A running fake WhatsApp bridge on 127.0.0.1."""
    async with FakeBridge() as server:
        yield server


@pytest.fixture
async def graph():
    """A running fake Graph API on 127.0.0.1."""
    async with FakeGraph() as server:
        yield server


@pytest.fixture
async def make_bridge_adapter(bridge):
    """`make_bridge_adapter(on_message=None, start=True, **settings)` → a started WhatsAppAdapter
    on the fake bridge; every adapter is stopped at teardown."""
    adapters = []

    async def factory(on_message=None, *, start=True, **overrides):
        adapter = WhatsAppAdapter(bridge_settings(bridge, **overrides), on_message=on_message)
        adapters.append(adapter)
        if start:
            await adapter.start()
        return adapter

    yield factory
    for adapter in adapters:
        await adapter.stop()


@pytest.fixture
async def make_cloud_adapter(graph):
    """`make_cloud_adapter(on_message=None, start=True, **settings)` → a WhatsAppCloudAdapter
    sending to the fake Graph API, its webhook on a free port; stopped at teardown."""
    adapters = []

    async def factory(on_message=None, *, start=True, **overrides):
        adapter = WhatsAppCloudAdapter(cloud_settings(graph, **overrides), on_message=on_message)
        adapters.append(adapter)
        if start:
            await adapter.start()
        return adapter

    yield factory
    for adapter in adapters:
        await adapter.stop()
