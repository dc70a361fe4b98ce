"""Crash test: a real `hermes-gateway run` process on the Discord plugin, killed with SIGKILL.

The restarted gateway opens a new gateway session (IDENTIFY; a killed process cannot RESUME) and
answers new messages; a message delivered again (here: the fake dispatches the first message's
id once more in the new session) gets no second reply, because the inbound dedupe row is
persisted in state.db. The endpoints come from the `api_base` / `gateway_url` settings, the token
only from the environment, and neither the gateway's log file nor any file under HERMES_HOME
contains the token.
"""

from __future__ import annotations

import asyncio
import signal

import pytest

from hermes_core.testing import start_gateway, wait_for_delivered
from samples_discord import sample
from fake_discord import DM_ID



@pytest.mark.slow
async def test_sigkill_then_restart_identifies_anew_and_answers_once(fake, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "hermes.toml").write_text(
        "[platforms.discord]\n"
        "enabled = true\n"
        "allow_all = true\n"
        f'api_base = "{fake.api_base}"\n'
        f'gateway_url = "{fake.gateway_url}"\n'
    )
    first = await start_gateway(home, HERMES_PLATFORMS__DISCORD__BOT_TOKEN=fake.token)
    try:
        await fake.wait_for(lambda: len(fake.identifies) == 1 and fake.connected, timeout=30)
        await fake.message(sample("d3_dm"))
        await fake.wait_for(lambda: len(fake.sent) == 1, timeout=30)
        # Kill once the ledger recorded the reply as delivered (docs/behaviour.md §6): this test is
        # about a new session and dedupe, not about re-sending an unconfirmed reply.
        await wait_for_delivered(home, 1)
    finally:
        first.send_signal(signal.SIGKILL)
        await first.wait()
    assert first.returncode == -signal.SIGKILL

    second = await start_gateway(home, HERMES_PLATFORMS__DISCORD__BOT_TOKEN=fake.token)
    try:
        await fake.wait_for(lambda: len(fake.identifies) == 2 and fake.connected, timeout=30)
        await fake.message(sample("d3_dm"))
        await fake.message(dict(sample("d3_dm"), id="1500000000000000701", content="after the crash"))
        await fake.wait_for(lambda: len(fake.sent) == 2, timeout=30)
        await wait_for_delivered(home, 2)
    finally:
        second.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(second.communicate(), 30)
    assert second.returncode == 0, stderr.decode()
    assert [(s["channel_id"], s["content"]) for s in fake.sent] == [
        (DM_ID, "echo: can you check my PR?"),
        (DM_ID, "echo: after the crash"),
    ]
    assert fake.resumes == []
    log_text = (home / "gateway.log").read_text()
    assert "discord adapter started as hermes" in log_text
    assert fake.token not in log_text
    for path in home.rglob("*"):
        if path.is_file():
            assert fake.token.encode() not in path.read_bytes(), path
