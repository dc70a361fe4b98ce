"""Crash test: a real `hermes-gateway run` process on the Signal plugin, killed with SIGKILL.

Messages sent while the gateway is dead are not lost: with no event stream open, the daemon
(`--receive-mode=on-connection`; here the fake) keeps them, and they are answered, once each,
after the restart.
"""

from __future__ import annotations

import asyncio
import signal

import pytest

from hermes_core.testing import start_gateway, wait_for_delivered
from fake_signal import ACCOUNT

ALICE = "7d1e2c3b-4a59-4687-9a0b-1c2d3e4f5a6b"
BOB = "0b9c8d7e-6f5a-4b3c-8d2e-1f0a9b8c7d6e"
CAROL = "1a2b3c4d-5e6f-4a1b-8c2d-3e4f5a6b7c8d"


def dm(timestamp: int, text: str, uuid: str, name: str) -> dict:
    return {"envelope": {"source": uuid, "sourceNumber": None, "sourceUuid": uuid, "sourceName": name,
                         "sourceDevice": 1, "timestamp": timestamp,
                         "dataMessage": {"timestamp": timestamp, "message": text}},
            "account": ACCOUNT}


@pytest.mark.slow
async def test_sigkill_then_restart_answers_what_the_daemon_kept(daemon, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "hermes.toml").write_text(
        "[platforms.signal]\n"
        "enabled = true\n"
        "allow_all = true\n"
        f'account = "{ACCOUNT}"\n'
        f'base_url = "{daemon.base_url}"\n'
        "reconnect_initial = 0.05\n"
        "reconnect_max = 0.5\n"
    )
    first = await start_gateway(home)
    try:
        await daemon.push(dm(1767225600123, "before the crash", ALICE, "Alice"))
        await daemon.wait_for(lambda: len(daemon.sent) == 1, timeout=30)
        # Kill once the ledger recorded the reply as delivered: this test is about input kept
        # by the daemon, not about re-sending an unconfirmed reply.
        await wait_for_delivered(home, 1)
    finally:
        first.send_signal(signal.SIGKILL)
        await first.wait()
    assert first.returncode == -signal.SIGKILL
    await daemon.wait_for(lambda: daemon.open_streams == 0)

    # While the gateway is dead, Bob and Carol write; the daemon keeps both messages.
    await daemon.push(dm(1767225700456, "while you were down", BOB, "Bob"),
                      dm(1767225700789, "me too", CAROL, "Carol"))
    second = await start_gateway(home)
    try:
        await daemon.wait_for(lambda: len(daemon.sent) == 3, timeout=30)
        await wait_for_delivered(home, 3)
    finally:
        second.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(second.communicate(), 30)
    assert second.returncode == 0, stderr.decode()
    assert sorted((p["recipient"][0], p["message"]) for p in daemon.sent) == sorted([
        (ALICE, "echo: before the crash"), (BOB, "echo: while you were down"), (CAROL, "echo: me too")])
    assert daemon.pending == []
    assert [r for r in daemon.stream_requests] == [{"account": ACCOUNT}, {"account": ACCOUNT}]
