"""Fixtures of the Slack plugin tests: the fake Slack (Web API + Socket Mode) and an adapter factory."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The fake server lives next to the tests (tests are imported with --import-mode=importlib, so
# their folder is not on sys.path by itself).
sys.path.insert(0, str(Path(__file__).parent))

from fake_slack import FakeSlack, adapter_settings  # noqa: E402

from hermes_slack.adapter import SlackAdapter  # noqa: E402


@pytest.fixture(autouse=True)
def isolated_hermes_home(tmp_path, monkeypatch):
    """Point HERMES_HOME at a temporary folder, so no test reads or writes ~/.hermes."""
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "hermes-home"))
    for name in ("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
async def slack():
    """A running fake Slack on 127.0.0.1."""
    async with FakeSlack() as server:
        yield server


@pytest.fixture
async def make_adapter(slack, tmp_path):
    """`make_adapter(on_message=None, *, start=True, **settings)` → a SlackAdapter on the fake
    with its data directory in tmp_path; every adapter is stopped at teardown."""
    adapters = []

    async def factory(on_message=None, *, start=True, data_dir=None, **overrides):
        adapter = SlackAdapter(adapter_settings(slack, **overrides), on_message=on_message,
                               data_dir=data_dir or tmp_path / "slack-data")
        adapter.data_dir.mkdir(parents=True, exist_ok=True)
        adapters.append(adapter)
        if start:
            await adapter.start()
        return adapter

    yield factory
    for adapter in adapters:
        await adapter.stop()
