"""Crash test: a real `hermes-gateway run` process on the Slack plugin (Socket Mode), killed with
SIGKILL.

Messages written while the gateway is dead stay with Slack (here: the fake holds every envelope
until it is acknowledged) and are answered after the restart; a message Slack sends again (its
ack was lost with the process) gets no second reply, because the inbound dedupe row is persisted
in state.db. The gateway's log never contains a token.
"""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import pytest

from hermes_core.testing import GATEWAY_SCRIPT, gateway_env, start_gateway, wait_for_delivered
from fake_slack import APP_TOKEN, BOT_TOKEN

TOKENS = {"HERMES_PLATFORMS__SLACK__BOT_TOKEN": BOT_TOKEN, "HERMES_PLATFORMS__SLACK__APP_TOKEN": APP_TOKEN}

FIXTURES = Path(__file__).parent / "fixtures"


def load(name: str, **event_changes) -> dict:
    payload = json.loads((FIXTURES / f"{name}.json").read_text())
    payload["event"].update(event_changes)
    return payload


@pytest.mark.slow
async def test_sigkill_then_restart_answers_held_messages_once(slack, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    # Tokens come from the environment only (never written to the config file).
    (home / "hermes.toml").write_text(
        "[platforms.slack]\n"
        "enabled = true\n"
        "allow_all = true\n"
        f'api_base_url = "{slack.api_url}"\n'
        "ping_interval = 1\n"
    )
    first = await start_gateway(home, **TOKENS)
    try:
        await slack.push(load("s1_message_im"))
        await slack.wait_for(lambda: len(slack.posted) == 1, timeout=30)
        await wait_for_delivered(home, 1)
    finally:
        first.send_signal(signal.SIGKILL)
        await first.wait()
    assert first.returncode == -signal.SIGKILL

    # While the gateway is dead Alice writes again, and Slack sends the first message once more.
    ts = "1767226900.000100"
    await slack.push(load("s1_message_im"), load("s1_message_im", ts=ts, event_ts=ts, text="still there?"))
    second = await start_gateway(home, **TOKENS)
    try:
        await slack.wait_for(lambda: len(slack.posted) == 2 and not slack.pending(), timeout=30)
    finally:
        second.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(second.communicate(), 30)
    assert second.returncode == 0, stderr.decode()
    assert [(p["channel"], p.get("thread_ts"), p["text"]) for p in slack.posted] == [
        ("D0DMALICE1", None, "echo: hi, can you draft the release notes?"),
        ("D0DMALICE1", None, "echo: still there?"),
    ]
    log_text = (home / "gateway.log").read_text()
    assert "slack adapter started (socket mode) as bot user U0BOT0001 of team T0ACME001" in log_text
    for path in home.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert BOT_TOKEN.encode() not in data and APP_TOKEN.encode() not in data, path
    listing = await asyncio.create_subprocess_exec(str(GATEWAY_SCRIPT), "plugins", "--json",
                                                   env=gateway_env(home, **TOKENS), stdout=asyncio.subprocess.PIPE)
    out, _ = await listing.communicate()
    assert [p["status"] for p in json.loads(out) if p["name"] == "slack"] == ["loaded"]
    assert BOT_TOKEN.encode() not in out and APP_TOKEN.encode() not in out
