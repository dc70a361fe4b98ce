"""Crash test: a real `hermes-gateway run` process on the Telegram plugin, killed with SIGKILL.

Updates written while the gateway is dead wait at Telegram (here: the fake) and are answered
after the restart; an update Telegram redelivers (its confirmation was lost with the process)
gets no second reply, because the inbound dedupe row is persisted in state.db. The gateway's log
file never contains the bot token.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
GATEWAY = Path(sys.executable).parent / "hermes-gateway"


def load(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


async def start_gateway(home: Path, token: str) -> asyncio.subprocess.Process:
    env = dict(os.environ, HERMES_HOME=str(home), HERMES_PLATFORMS__TELEGRAM__BOT_TOKEN=token)
    env.pop("HERMES_CONFIG", None)
    env.pop("HERMES_DISABLE_PLUGIN_AUTOLOAD", None)
    env.pop("HERMES_PLUGINS", None)
    return await asyncio.create_subprocess_exec(str(GATEWAY), "run", env=env,
                                                stdout=asyncio.subprocess.DEVNULL,
                                                stderr=asyncio.subprocess.PIPE)


async def wait_for_delivered(home: Path, count: int) -> None:
    """Poll state.db read-only until `count` delivery obligations are 'delivered'."""
    uri = (home / "state.db").resolve().as_uri() + "?mode=ro"
    for _ in range(600):
        conn = sqlite3.connect(uri, uri=True, timeout=5)
        try:
            if conn.execute("SELECT COUNT(*) FROM delivery_obligations WHERE state = 'delivered'"
                            ).fetchone()[0] >= count:
                return
        finally:
            conn.close()
        await asyncio.sleep(0.05)
    raise AssertionError(f"{count} deliveries were never recorded")


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
    first = await start_gateway(home, tg.token)
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
    second = await start_gateway(home, tg.token)
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
