"""Shared pieces of the CLI subprocess tests: the installed `hermes-gateway` script, an
environment that isolates it from the caller's HERMES_* settings, and ways to run it."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hermes_core.testing.process import GATEWAY_SCRIPT, gateway_env  # noqa: F401  (gateway_env: for the CLI tests)

SCRIPT = str(GATEWAY_SCRIPT)
"""The console script of the venv running the tests."""


def bound_by_file_modes() -> list[str]:
    """The command prefix under which `hermes-gateway` obeys file modes: none for a user other
    than root; as root (whom modes do not stop), `setpriv` dropping the capabilities that
    override them. Skips the test when root has no `setpriv`."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: file modes cannot be made to bind")
    return [setpriv, "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search,-fowner", "--"]


def run(args: list[str], env: dict[str, str], cwd: Path, stdin: str | None = None, *,
        prefix: list[str] | None = None) -> tuple[int, str, str]:
    """Run `hermes-gateway *args` to its end (60 s at most) in `cwd` with `env`; `stdin` is the
    text fed to it (None: no input at all); `prefix` goes before the script (e.g.
    `bound_by_file_modes()`). Returns (exit code, stdout, stderr)."""
    proc = subprocess.run([*(prefix or []), SCRIPT, *args], env=env, cwd=cwd, input=stdin,
                          stdin=None if stdin is not None else subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60)
    return proc.returncode, proc.stdout, proc.stderr


async def chat(home: Path, stdin: str, **extra: str) -> tuple[int, str, str]:
    """Run `hermes-gateway chat` on `home` with `stdin` typed in, to its end (60 s at most);
    `extra` are more environment variables. Returns (exit code, stdout, stderr)."""
    proc = await asyncio.create_subprocess_exec(
        SCRIPT, "chat", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=gateway_env(home, **extra))
    out, err = await asyncio.wait_for(proc.communicate(stdin.encode()), 60)
    return proc.returncode, out.decode(), err.decode()


async def start_published_chat(home: Path, **extra: str) -> asyncio.subprocess.Process:
    """Start `hermes-gateway chat` on `home` (`extra`: more environment variables), have it
    answer "hello", and return once its first status snapshot can be read (docs/operations.md
    §2). stdin, stdout and stderr are pipes; the caller ends (or kills) the process."""
    from hermes_core.ops.status import read_status

    proc = await asyncio.create_subprocess_exec(
        SCRIPT, "chat", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=gateway_env(home, **extra))
    proc.stdin.write(b"hello\n")
    await proc.stdin.drain()
    assert await asyncio.wait_for(proc.stdout.readline(), 60) == b"echo: hello\n"
    for _ in range(1200):  # the first snapshot is written as the gateway finishes starting
        if read_status(home).get("stale") is False:
            return proc
        await asyncio.sleep(0.05)
    proc.kill()
    raise AssertionError(f"the chat on {home} published no status snapshot")


async def start_openai_chat(home: Path, base_url: str, *, command: str = "chat",
                            **extra: str) -> asyncio.subprocess.Process:
    """Start `hermes-gateway chat` (or `command`, e.g. `run`, which chats on the terminal platform
    too) on `home` with the `openai` agent (no retries) talking to the chat-completions server
    at `base_url`; stdin, stdout and stderr are pipes. `extra` are more environment variables.
    The caller writes the input and ends (or kills) the process."""
    return await asyncio.create_subprocess_exec(
        SCRIPT, command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=gateway_env(home, HERMES_AGENT__BACKEND="openai", HERMES_AGENT__OPENAI__MAX_RETRIES="0",
                        HERMES_AGENT__OPENAI__BASE_URL=base_url, **extra))
