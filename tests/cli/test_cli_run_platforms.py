"""Which platforms `hermes-gateway run` starts (docs/operations.md §6): the configured tables,
plus the terminal platform when run on a terminal and no `[platforms.local]` table decides."""

from __future__ import annotations

import io

from hermes_core.cli import main as cli_main
from hermes_core.settings import GatewayConfig


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_keeps_local_beside_the_configured_platforms(tmp_path, monkeypatch):
    monkeypatch.setattr(cli_main.sys, "stdin", _Terminal())
    config = GatewayConfig(home=tmp_path, platforms={"telegram": {"enabled": True}})
    assert cli_main._with_terminal_platform(config).enabled_platforms() == ["local", "telegram"]
    assert config.enabled_platforms() == ["telegram"]  # the loaded config itself is not changed
    off = GatewayConfig(home=tmp_path, platforms={"telegram": {"enabled": True}, "local": {"enabled": False}})
    assert cli_main._with_terminal_platform(off).enabled_platforms() == ["telegram"]


def test_without_a_terminal_only_the_configured_platforms_run(tmp_path, monkeypatch):
    monkeypatch.setattr(cli_main.sys, "stdin", io.StringIO())
    config = GatewayConfig(home=tmp_path, platforms={"telegram": {"enabled": True}})
    assert cli_main._with_terminal_platform(config).enabled_platforms() == ["telegram"]


async def test_help_in_run_says_what_quit_does_there(tmp_path):
    """docs/behaviour.md §11 `/help`: the terminal's `/quit` line is true in `run` too, where the
    gateway goes on running after the terminal's input ended."""
    import asyncio
    import signal

    from hermes_core.testing.process import GATEWAY_SCRIPT, gateway_env

    proc = await asyncio.create_subprocess_exec(
        str(GATEWAY_SCRIPT), "run", env=gateway_env(tmp_path), stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    try:
        proc.stdin.write(b"/help\n/quit\n")
        await proc.stdin.drain()
        lines = []
        while not lines or not lines[-1].startswith("/quit"):
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            assert line, lines  # the output ended before /help's last line
            lines.append(line.decode().rstrip("\n"))
        assert lines[-1] == ("/quit — ends the input of this terminal (also /exit, or Ctrl-D): chat exits, "
                             "run goes on running")
        await asyncio.sleep(1)
        assert proc.returncode is None  # /quit did not end `run`, as the line says
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 60)
