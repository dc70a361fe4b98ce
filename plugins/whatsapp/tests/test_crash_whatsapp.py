"""Crash tests: a real `hermes-gateway run` process on the WhatsApp plugin, killed with SIGKILL.

Bridge: messages that arrive while the gateway is dead stay at the bridge (nothing acknowledged
them) and are answered, once each, after the restart. Cloud API: Meta's retries of a webhook the
dead gateway could not take are answered once the gateway is back.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
from pathlib import Path

import pytest

from hermes_core.testing import start_gateway, wait_for_delivered
from fake_whatsapp import ACCESS_TOKEN, APP_SECRET, PHONE_NUMBER_ID, VERIFY_TOKEN, MetaPoster

FIXTURES = Path(__file__).parent / "fixtures"


def upsert(chat: str, text: str, message_id: str, name: str) -> dict:
    return {"type": "notify", "messages": [{
        "key": {"remoteJid": chat, "fromMe": False, "id": message_id}, "messageTimestamp": 1767225600,
        "pushName": name, "message": {"conversation": text}}]}


async def stop(process: asyncio.subprocess.Process) -> bytes:
    process.send_signal(signal.SIGTERM)
    _, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, stderr.decode()
    return stderr


@pytest.mark.slow
async def test_sigkill_then_restart_answers_what_the_bridge_kept(bridge, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "hermes.toml").write_text(
        "[platforms.whatsapp]\n"
        "enabled = true\n"
        "allow_all = true\n"
        f'bridge_url = "{bridge.base_url}"\n'
        "poll_timeout = 1.0\n"
        "reconnect_initial = 0.05\n"
        "reconnect_max = 0.5\n"
    )
    first = await start_gateway(home)
    try:
        bridge.push(upsert("15551234567@s.whatsapp.net", "before the crash", "3EB0K1", "Carol"))
        await bridge.wait_for(lambda: len(bridge.sent) == 1, timeout=30)
        await wait_for_delivered(home, 1)
    finally:
        first.send_signal(signal.SIGKILL)
        await first.wait()
    assert first.returncode == -signal.SIGKILL

    # While the gateway is dead, Dave and Erin write; the bridge keeps both messages.
    bridge.push(upsert("15557654321@s.whatsapp.net", "while you were down", "3EB0K2", "Dave"),
                upsert("15559998888@s.whatsapp.net", "me too", "3EB0K3", "Erin"))
    second = await start_gateway(home)
    try:
        await bridge.wait_for(lambda: len(bridge.sent) == 3, timeout=30)
        await wait_for_delivered(home, 3)
    finally:
        await stop(second)
    assert sorted((b["chatId"], b["message"]) for b in bridge.sent) == sorted([
        ("15551234567@s.whatsapp.net", "echo: before the crash"),
        ("15557654321@s.whatsapp.net", "echo: while you were down"),
        ("15559998888@s.whatsapp.net", "echo: me too")])
    assert bridge.pending == []  # the clean stop acknowledged everything


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
async def test_sigkill_then_meta_retries_reach_the_restarted_gateway(graph, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    port = free_port()
    (home / "hermes.toml").write_text(
        "[platforms.whatsapp_cloud]\n"
        "enabled = true\n"
        "allow_all = true\n"
        f'phone_number_id = "{PHONE_NUMBER_ID}"\n'
        f'graph_base_url = "{graph.base_url}"\n'
        f"http_port = {port}\n"
    )
    # secrets come from the environment, as the README advises
    secrets = {"HERMES_PLATFORMS__WHATSAPP_CLOUD__ACCESS_TOKEN": ACCESS_TOKEN,
               "HERMES_PLATFORMS__WHATSAPP_CLOUD__APP_SECRET": APP_SECRET,
               "HERMES_PLATFORMS__WHATSAPP_CLOUD__VERIFY_TOKEN": VERIFY_TOKEN}
    poster = MetaPoster(f"http://127.0.0.1:{port}/whatsapp/webhook", retry_s=0.2, attempts=200)
    first = await start_gateway(home, **secrets)
    try:
        assert await poster.deliver(json.loads((FIXTURES / "w5_cloud_dm.json").read_text())) == 200
        await graph.wait_for(lambda: len(graph.sent) == 1, timeout=30)
        await wait_for_delivered(home, 1)
    finally:
        first.send_signal(signal.SIGKILL)
        await first.wait()
    assert first.returncode == -signal.SIGKILL
    # Meta keeps retrying the next notification while nobody listens.
    answered = len(poster.answers)
    retrying = asyncio.create_task(poster.deliver(json.loads((FIXTURES / "w7_cloud_username.json").read_text())))
    await asyncio.sleep(0.5)
    second = await start_gateway(home, **secrets)
    try:
        assert await asyncio.wait_for(retrying, 60) == 200
        await graph.wait_for(lambda: len(graph.sent) == 2, timeout=30)
        await wait_for_delivered(home, 2)
    finally:
        stderr = await stop(second)
    assert 0 in poster.answers[answered:]  # the dead gateway refused connections meanwhile
    assert [b["text"]["body"] for b in graph.sent] == ["echo: Do you ship to Canada?", "echo: oi, tudo bem?"]
    for secret in (ACCESS_TOKEN, APP_SECRET, VERIFY_TOKEN):
        assert secret.encode() not in stderr
