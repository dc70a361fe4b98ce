"""`[metrics] enabled`: `/metrics`, `/healthz`, `/readyz` of a real gateway on 127.0.0.1
(docs/operations.md §3), scraped over HTTP while messages go through the real pipeline."""

from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.request

import pytest
from pipeline_helpers import KEY, RecordingAdapter, dm

from hermes_core.agents import EchoAgent
from hermes_core.app import GatewayApp
from hermes_core.model import MessageEvent
from hermes_core.ops import http as ops_http
from hermes_core.settings import GatewayConfig


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


class GatedAdapter(RecordingAdapter):
    """Its start waits until the test opens `gate`: the gateway is up but not ready."""

    def __init__(self):
        super().__init__()
        self.gate = asyncio.Event()

    async def start(self):
        await self.gate.wait()
        self.started = True


def _config(home, **kw):
    # testchat lets everybody in (docs/behaviour.md §9): these tests count what gets through.
    return GatewayConfig(home=home, platforms={"testchat": {"allow_all": True}},
                         metrics={"enabled": True, "port": 0}, **kw)


async def test_readyz_is_503_until_adapters_are_up_and_metrics_count_by_platform_and_outcome(tmp_path):
    adapter = GatedAdapter()
    app = GatewayApp(_config(tmp_path, core={"max_input_chars": 20}), adapters=[adapter], agent=EchoAgent(),
                     watcher=False)
    starting = asyncio.create_task(app.start())
    while app._health is None:  # the endpoints come up first of all
        await asyncio.sleep(0.01)
    base = f"http://127.0.0.1:{app._health.port}"
    assert app._health.listen == "127.0.0.1"
    assert await asyncio.to_thread(_get, base + "/readyz") == (503, "not ready\n")
    assert await asyncio.to_thread(_get, base + "/healthz") == (200, "ok\n")
    adapter.gate.set()
    await starting
    try:
        assert await asyncio.to_thread(_get, base + "/readyz") == (200, "ready\n")
        source = dm(user="u-secret-42")
        await app.runner.handle(MessageEvent(source=source, text="hello", message_id="m1"))
        await app.runner.handle(MessageEvent(source=source, text="hello", message_id="m1"))  # redelivered
        await app.runner.handle(MessageEvent(source=source, text="x" * 21, message_id="m2"))  # too long
        await app.runner.join()
        await app._status.publish("running")  # the gauges follow the status snapshot
        code, text = await asyncio.to_thread(_get, base + "/metrics")
        assert code == 200
        lines = set(text.splitlines())
        for line in ('hermes_messages_total{outcome="accepted",platform="testchat"} 2.0',
                     'hermes_messages_total{outcome="deduplicated",platform="testchat"} 1.0',
                     'hermes_messages_total{outcome="refused",platform="testchat"} 1.0',
                     'hermes_turns_total{outcome="completed",platform="testchat"} 1.0',
                     'hermes_turn_duration_seconds_count{outcome="completed",platform="testchat"} 1.0',
                     # the echo reply and the refusal notice
                     'hermes_deliveries_total{outcome="delivered",platform="testchat"} 2.0',
                     'hermes_ledger_backlog 0.0', 'hermes_queue_depth 0.0', 'hermes_busy_sessions 0.0',
                     'hermes_store_degraded 0.0', 'hermes_ready 1.0', 'hermes_agent_cache_entries 1.0',
                     'hermes_platform_up{platform="testchat"} 1.0'):
            assert line in lines, line
        # Labels carry platform and outcome only: no session key, user id or text.
        assert KEY not in text and "u-secret-42" not in text and "hello" not in text
        assert await asyncio.to_thread(_get, base + "/other") == (404, "not found: /metrics, /healthz, /readyz\n")
    finally:
        await app.stop()
    assert app._health is None
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(base + "/healthz", timeout=5)  # the port is released


async def test_healthz_is_503_while_the_event_loop_is_blocked(tmp_path, monkeypatch):
    monkeypatch.setattr(ops_http, "STALE_AFTER_S", 0.5)
    app = GatewayApp(_config(tmp_path), adapters=[RecordingAdapter()], agent=EchoAgent(), watcher=False)
    await app.start()
    try:
        base = f"http://127.0.0.1:{app._health.port}"
        probe = asyncio.get_running_loop().run_in_executor(None, lambda: (time.sleep(1.5), _get(base + "/healthz"))[1])
        time.sleep(3)  # the event loop is stuck: no heartbeat for 3 s
        assert await probe == (503, "event loop stalled\n")
        await asyncio.sleep(1.2)  # beating again
        assert await asyncio.to_thread(_get, base + "/healthz") == (200, "ok\n")
    finally:
        await app.stop()


async def test_metrics_off_by_default_serve_nothing(tmp_path):
    app = GatewayApp(GatewayConfig(home=tmp_path, platforms={}), adapters=[RecordingAdapter()],
                     agent=EchoAgent(), watcher=False)
    await app.start()
    try:
        assert app._health is None and app.metrics.enabled is False
    finally:
        await app.stop()


async def test_a_sender_refused_by_access_control_is_counted_denied(tmp_path):
    config = GatewayConfig(home=tmp_path, platforms={"testchat": {"allowed_users": ["someone-else"]}},
                           metrics={"enabled": True, "port": 0})
    app = GatewayApp(config, adapters=[RecordingAdapter()], agent=EchoAgent(), watcher=False)
    await app.start()
    try:
        await app.runner.handle(MessageEvent(source=dm(user="u-stranger"), text="hello", message_id="m1"))
        await app.runner.join()
        _code, text = await asyncio.to_thread(_get, f"http://127.0.0.1:{app._health.port}/metrics")
        lines = set(text.splitlines())
        assert 'hermes_messages_total{outcome="denied",platform="testchat"} 1.0' in lines
        assert not any(line.startswith('hermes_messages_total{outcome="accepted"') for line in lines)
    finally:
        await app.stop()
