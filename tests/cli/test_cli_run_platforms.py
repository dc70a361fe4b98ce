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
