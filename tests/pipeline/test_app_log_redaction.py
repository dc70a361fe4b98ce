"""`[redaction] enabled` routes the gateway's log lines through the `log`-scope redaction rules
while the app runs (docs/behaviour.md §7; docs/architecture.md §4: logs must not carry message PII)."""

from __future__ import annotations

import io
import logging

from hermes_core.agents import EchoAgent
from hermes_core.app import GatewayApp
from hermes_core.platforms.local import LocalAdapter
from hermes_core.settings import GatewayConfig

log = logging.getLogger("hermes_core.test_app_log_redaction")


def _app(home, enabled):
    adapter = LocalAdapter(stdin=io.StringIO(""), stdout=io.StringIO(), user="alice")
    config = GatewayConfig(home=home, platforms={"testchat": {"allow_all": True}}, redaction={"enabled": enabled})
    return GatewayApp(config, adapters=[adapter], agent=EchoAgent(), watcher=False)


async def test_log_lines_are_redacted_only_while_an_enabled_app_runs(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    app = _app(tmp_path / "on", enabled=True)
    await app.start()
    log.info("mail from bob@example.com")
    await app.stop()
    log.info("after stop carol@example.com")
    messages = [r.getMessage() for r in caplog.records if r.name == log.name]
    assert messages == ["mail from [email]", "after stop carol@example.com"]


async def test_disabled_redaction_leaves_log_lines_alone(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    app = _app(tmp_path / "off", enabled=False)
    await app.start()
    log.info("mail from bob@example.com")
    await app.stop()
    assert [r.getMessage() for r in caplog.records if r.name == log.name] == ["mail from bob@example.com"]
