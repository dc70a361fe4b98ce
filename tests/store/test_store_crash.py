"""Seed §7 / docs/behaviour.md §6: a gateway killed with SIGKILL mid-turn; the persisted turn marker makes
recover_interrupted_turns mark the session resume_pending ("restart_interrupted")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from hermes_core import GatewayConfig, SessionSource
from hermes_core.store import SessionStore

CHILD = textwrap.dedent("""
    import asyncio, sys, time
    from pathlib import Path
    from hermes_core import GatewayConfig, SessionSource
    from hermes_core.store import SessionStore

    async def main():
        config = GatewayConfig(home=Path(sys.argv[1]))
        store = SessionStore(config.sessions_dir, config)
        await store.open()
        entry = await store.get_or_create_session(SessionSource(platform="telegram", chat_id="777"))
        await store.append_to_transcript(entry.session_id, {"role": "user", "content": "first"})
        await store.append_to_transcript(entry.session_id, {"role": "assistant", "content": "first reply"})
        await store.begin_turn(entry.session_key, entry.session_id, {"role": "user", "content": "in flight"})
        print(entry.session_id, flush=True)
        await asyncio.sleep(3600)   # the agent is "thinking" when the process is killed

    asyncio.run(main())
""")


@pytest.mark.slow
async def test_sigkill_mid_turn_then_recover(tmp_path):
    home = tmp_path / "home"
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(home)], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        session_id = proc.stdout.readline().strip()
        assert session_id, "child did not start"
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()

    config = GatewayConfig(home=home)
    async with SessionStore(config.sessions_dir, config) as store:  # the dead holder's lock is gone
        assert [m["content"] for m in await store.load_transcript(session_id)] == [
            "first", "first reply", "in flight"]
        assert await store.recover_interrupted_turns(3600) == ["agent:main:telegram:dm:777"]
        entry = await store.get_or_create_session(SessionSource(platform="telegram", chat_id="777"))
        assert (entry.session_id, entry.resume_pending, entry.resume_reason) == (
            session_id, True, "restart_interrupted")
        assert await store.turn_markers() == []


UNCLOSED = textwrap.dedent("""
    import asyncio, sys
    from pathlib import Path
    from hermes_core import GatewayConfig, SessionSource
    from hermes_core.store import SessionStore

    async def main():
        config = GatewayConfig(home=Path(sys.argv[1]))
        store = SessionStore(config.sessions_dir, config)
        await store.open()
        entry = await store.get_or_create_session(SessionSource(platform="telegram", chat_id="888"))
        await store.append_to_transcript(entry.session_id, {"role": "user", "content": "left open"})
        print(entry.session_id, flush=True)
        # returns without store.close(): the process must still exit

    asyncio.run(main())
""")


@pytest.mark.slow
async def test_unclosed_store_does_not_hang_exit(tmp_path):
    home = tmp_path / "home"
    proc = subprocess.run([sys.executable, "-c", UNCLOSED, str(home)], capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 0, proc.stderr
    session_id = proc.stdout.strip()
    config = GatewayConfig(home=home)
    async with SessionStore(config.sessions_dir, config) as store:
        assert [m["content"] for m in await store.load_transcript(session_id)] == ["left open"]
