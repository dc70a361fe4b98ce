"""The service files of `deploy/` (docs/operations.md §6) agree with the gateway's settings: a
stop timeout longer than the drain, restart on failure, a volume for HERMES_HOME and a
healthcheck on `/healthz` at the metrics endpoint's address."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

from hermes_core.settings import GatewayConfig

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
DEFAULTS = GatewayConfig(home=ROOT / "nonexistent-home", platforms={})
HEALTHZ = f"http://{DEFAULTS.metrics.listen}:{DEFAULTS.metrics.port}/healthz"


def _seconds(text: str) -> float:
    match = re.fullmatch(r"(\d+)s?", text.strip())
    assert match, text
    return float(match.group(1))


def test_systemd_unit_restarts_on_failure_and_outlasts_the_drain():
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str
    unit.read(DEPLOY / "hermes-gateway.service")
    service = unit["Service"]
    assert service["Restart"] == "on-failure"
    assert service["KillSignal"] == "SIGTERM"
    assert service["ExecStart"].endswith("/hermes-gateway run")
    assert _seconds(service["TimeoutStopSec"]) > DEFAULTS.scheduler.drain_timeout_s
    assert service["UMask"] == "0077"
    assert "Environment" in service and "HERMES_HOME=/var/lib/hermes-gateway" in open(
        DEPLOY / "hermes-gateway.service").read()


def test_dockerfile_has_a_home_volume_and_a_healthz_healthcheck():
    text = (DEPLOY / "Dockerfile").read_text()
    assert 'VOLUME ["/data"]' in text and "HERMES_HOME=/data" in text
    assert "HERMES_METRICS__ENABLED=true" in text
    assert re.search(r"^HEALTHCHECK .*\n.*" + re.escape(HEALTHZ), text, flags=re.M)
    assert re.search(r'^CMD \["hermes-gateway", "run"\]$', text, flags=re.M)


def test_compose_mounts_the_home_checks_healthz_and_waits_longer_than_the_drain():
    text = (DEPLOY / "compose.yaml").read_text()
    assert "- hermes-home:/data" in text and "HERMES_HOME: /data" in text
    assert HEALTHZ in text.split("healthcheck:")[1]
    grace = re.search(r"stop_grace_period: (\S+)", text).group(1)
    assert _seconds(grace) > DEFAULTS.scheduler.drain_timeout_s
    assert "dockerfile: deploy/Dockerfile" in text


def test_readme_documents_the_deploy_files():
    readme = (ROOT / "README.md").read_text()
    for name in ("deploy/hermes-gateway.service", "deploy/Dockerfile", "deploy/compose.yaml"):
        assert name in readme
