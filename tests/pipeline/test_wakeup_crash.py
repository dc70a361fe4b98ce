"""A bound wake-up queued behind `/new` when the gateway is killed with SIGKILL
(docs/behaviour.md §5, §10, §12): after the restart the durable intake replays `/new` and the
wake-up in their order; the wake-up does not run in the new session, its text is kept in its own
session's transcript, nothing of it is delivered, and no intake row is left. Real subprocess,
real SQLite, real SIGKILL."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

import pytest
from pipeline_helpers import KEY, ChatAdapter

from hermes_core.agents import EchoAgent
from hermes_core.app import GatewayApp
from hermes_core.settings import GatewayConfig

SCRIPT = str(Path(__file__).with_name("wakeup_crash_script.py"))

# Access control (docs/behaviour.md §9): every sender of the test platform is allowed.
ALLOW_TESTCHAT = {"testchat": {"allow_all": True}}


@pytest.mark.slow
async def test_sigkill_with_a_bound_wake_up_queued_behind_new(tmp_path):
    proc = await asyncio.create_subprocess_exec(sys.executable, SCRIPT, str(tmp_path),
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        assert line, (await proc.stderr.read()).decode()
        first = json.loads(line)["session_id"]
        proc.send_signal(signal.SIGKILL)
        assert await asyncio.wait_for(proc.wait(), 30) == -signal.SIGKILL
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()

    adapter = ChatAdapter()
    app = GatewayApp(GatewayConfig(home=tmp_path, platforms=ALLOW_TESTCHAT), adapters={"testchat": adapter},
                     agent=EchoAgent(), watcher=False)
    await app.start()
    try:
        await app.runner.join()
        second = (await app.store.get_entry(KEY)).session_id
        assert second != first
        assert adapter.texts() == [f"Started a new session. Session id: {second}"]
        assert [m["content"] for m in await app.store.load_transcript(first)] == ["A", "wake: report ready"]
        assert await app.store.load_transcript(second) == []
        assert await app.store.pending_inbound() == []
    finally:
        await app.stop()
