"""Crash test: a real `hermes-gateway run` process on the Telegram plugin, killed with SIGKILL.

Updates written while the gateway is dead wait at Telegram (here: the fake) and are answered
after the restart; an update Telegram redelivers (its confirmation was lost with the process)
gets no second reply, because the inbound dedupe row is persisted in state.db. The gateway's log
file never contains the bot token.
"""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import pytest

from hermes_core.testing import start_gateway, wait_for_delivered

FIXTURES = Path(__file__).parent / "fixtures"


def load(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


@pytest.mark.slow
async def test_sigkill_then_restart_answers_pending_updates_once(tg, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    # The token comes from the environment only (never written to the config file).
    (home / "hermes.toml").write_text(
        "[platforms.telegram]\n"
        "enabled = true\n"
        "allow_all = true\n"
        f'base_url = "{tg.base_url}"\n'
        "poll_timeout = 1\n"
        'parse_mode = "plain"\n'
    )
    first = await start_gateway(home, HERMES_PLATFORMS__TELEGRAM__BOT_TOKEN=tg.token)
    try:
        await tg.push(load("t1_private_dm"))
        await tg.wait_for(lambda: len(tg.sent) == 1, timeout=30)
        # Kill only once the delivery ledger recorded the reply as delivered (docs/behaviour.md §6): a kill
        # while the send is still unconfirmed rightly re-sends it with the "Recovered reply"
        # prefix (tested in tests/pipeline/test_pipeline_ledger.py); this test is about dedupe.
        await wait_for_delivered(home, 1)
    finally:
        first.send_signal(signal.SIGKILL)
        await first.wait()
    assert first.returncode == -signal.SIGKILL

    # While the gateway is dead: Alice writes again, and Telegram redelivers the first update.
    await tg.push(load("t1_private_dm"), load("t7_private_topic"))
    # Debugging: the HTTP client's per-request lines reach gateway.log (they are kept out
    # otherwise, docs/operations.md §4) — and must not carry the token.
    log_before = (home / "gateway.log").read_text()
    assert "HTTP Request: POST" not in log_before
    second = await start_gateway(home, HERMES_PLATFORMS__TELEGRAM__BOT_TOKEN=tg.token, HERMES_LOG_LEVEL="DEBUG")
    try:
        await tg.wait_for(lambda: any(c.body.get("offset") == "900000009" for c in tg.calls_of("getUpdates")),
                          timeout=30)
        await tg.wait_for(lambda: len(tg.sent) == 2, timeout=30)
    finally:
        second.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(second.communicate(), 30)
    assert second.returncode == 0, stderr.decode()
    assert [(s["chat_id"], s.get("message_thread_id"), s["text"]) for s in tg.sent] == [
        ("111222333", None, "echo: hello"),
        ("111222333", "88", "echo: new idea"),
    ]
    log_text = (home / "gateway.log").read_text()
    assert "HTTP Request: POST" in log_text and "/bot<telegram-token>/getUpdates" in log_text
    assert tg.token not in log_text
    for path in home.rglob("*"):
        if path.is_file():
            assert tg.token.encode() not in path.read_bytes(), path
