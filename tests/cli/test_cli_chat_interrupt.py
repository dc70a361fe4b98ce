"""Ctrl-C in `hermes-gateway chat` during a long agent turn: the first one says at once what
happens (one line on stderr), a second one quits immediately with exit code 130; either way the
interrupted turn is answered at the next start. Real subprocesses of the console script, SIGINT,
and the `openai` agent against a chat-completions server on 127.0.0.1 that never answers
(`tests/cli/conftest.py`)."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
from cli_helpers import SCRIPT, chat, gateway_env, start_openai_chat

from hermes_core.cli.chat import STOPPING_BUSY

pytestmark = pytest.mark.slow


async def _start_blocked_turn(home: Path, server, drain_timeout_s: str):
    proc = await start_openai_chat(home, server.base_url, HERMES_SCHEDULER__DRAIN_TIMEOUT_S=drain_timeout_s)
    proc.stdin.write(b"a long question\n")
    await proc.stdin.drain()
    await asyncio.wait_for(server.started.wait(), 60)  # the turn is running, the server stalls
    return proc


async def _restart_answers(home: Path) -> str:
    code, out, _err = await chat(home, "")
    assert code == 0
    return out


def test_stopping_line_text():
    assert STOPPING_BUSY.format(seconds=10.0) == (
        "Stopping… the running reply has 10 s to finish, otherwise it resumes at the next start "
        "(press Ctrl-C again to quit now)")


async def test_second_ctrl_c_quits_at_once_with_130(tmp_path, chat_completions_server):
    # a drain of 10 minutes: only the second Ctrl-C can end this process within the test
    proc = await _start_blocked_turn(tmp_path, chat_completions_server, "600")
    try:
        proc.send_signal(signal.SIGINT)
        line = await asyncio.wait_for(proc.stderr.readline(), 30)
        assert line.decode() == STOPPING_BUSY.format(seconds=600) + "\n"
        assert proc.returncode is None  # still draining the running turn
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), 30) == 130
        assert await proc.stderr.read() == b""
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    # the promise of the line: the next start (echo agent) answers the interrupted turn
    assert await _restart_answers(tmp_path) == "echo: a long question\n"


async def test_one_ctrl_c_drains_then_marks_the_turn_for_resumption(tmp_path, chat_completions_server):
    proc = await _start_blocked_turn(tmp_path, chat_completions_server, "0.5")
    try:
        proc.send_signal(signal.SIGINT)
        line = await asyncio.wait_for(proc.stderr.readline(), 30)
        assert line.decode() == STOPPING_BUSY.format(seconds=0.5) + "\n"
        assert await asyncio.wait_for(proc.wait(), 30) == 0
        assert await proc.stdout.read() == b""
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert await _restart_answers(tmp_path) == "echo: a long question\n"


async def test_sigterm_stops_a_chat_whose_stderr_nobody_reads(tmp_path):
    # A chat started by a script that has gone away: its stderr is a pipe with no reader, so the
    # "Stopping…" line fails with EPIPE. The stop must happen anyway (it used to raise in the
    # signal handler before the stop was set, and the chat ran on after SIGTERM).
    read_end, write_end = os.pipe()
    proc = await asyncio.create_subprocess_exec(
        SCRIPT, "chat", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=write_end,
        env=gateway_env(tmp_path))
    os.close(write_end)
    try:
        proc.stdin.write(b"hello\n")
        await proc.stdin.drain()
        assert await asyncio.wait_for(proc.stdout.readline(), 60) == b"echo: hello\n"
        os.close(read_end)
        read_end = None
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    finally:
        if read_end is not None:
            os.close(read_end)
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
