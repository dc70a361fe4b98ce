"""The core's contract suites (hermes_core.testing.contract) run against the Slack plugin."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest
from fake_slack import adapter_settings, post_event

from hermes_core.sdk import SessionSource
from hermes_core.testing.contract import (
    AdapterContract,
    PluginContract,
    RedactionContract,
    SessionKeyContract,
)
from hermes_slack import hooks
from hermes_slack.adapter import SlackAdapter
from hermes_slack.settings import SlackSettings

FIXTURES = Path(__file__).parent / "fixtures"


class TestSlackPlugin(PluginContract):
    @pytest.fixture
    def plugin_name(self):
        return "slack"


class TestSlackAdapter(AdapterContract):
    @pytest.fixture
    def adapter_class(self):
        return SlackAdapter

    @pytest.fixture
    def fake_transport(self, slack):
        return slack

    @pytest.fixture
    def adapter_settings(self, slack):
        return SlackSettings.model_validate(adapter_settings(slack))

    @pytest.fixture
    def send_target(self):
        return SessionSource(platform="slack", chat_id="D0DMALICE1", chat_type="dm", user_id="U0ALICE01")

    def sent_texts(self, adapter, fake_transport):
        return [message["text"] for message in fake_transport.posted]

    def test_slack_declares_its_limits_and_ingress(self, adapter_class):
        spec = adapter_class.spec
        # docs/adapters.md §0.4: keep a message within 4000 characters; user ids are redactable;
        # §6: Socket Mode gives each event to one connection, HTTP posts it once.
        assert (spec.max_message_length, spec.length_unit, spec.pii_safe, spec.ingress) == \
            (4000, "chars", True, "shared")
        assert spec.capabilities == frozenset({"threads", "typing", "edit", "webhook"})

    # The acknowledgement rule (Socket Mode): an envelope is acked only after `emit` returned;
    # a refused one stays unacknowledged and Slack sends it again.
    async def deliver_inbound(self, adapter, fake_transport, text):
        fake_transport.redeliver_after = 0.5
        envelope = json.loads((FIXTURES / "s1_message_im.json").read_text())
        envelope["event"]["text"] = text
        (self.envelope_id,) = await fake_transport.push(envelope)

    def acknowledged(self, adapter, fake_transport):
        return self.envelope_id in fake_transport.acks


class TestSlackAdapterOverHttp(TestSlackAdapter):
    """The same contract with the HTTP Events API: the 2xx answer is the acknowledgement, and
    Slack retries a request that was not answered 2xx (`X-Slack-Retry-Num`)."""

    @pytest.fixture
    def adapter_settings(self, slack):
        return SlackSettings.model_validate(adapter_settings(slack, mode="http"))

    async def deliver_inbound(self, adapter, fake_transport, text):
        envelope = json.loads((FIXTURES / "s1_message_im.json").read_text())
        envelope["event"]["text"] = text
        host, port = adapter.http_address
        self.answers: list[int] = []

        async def slack_delivery():
            for retry in range(4):  # the first delivery and Slack's three retries
                try:
                    status, _ = await post_event(f"http://{host}:{port}/slack/events", envelope,
                                                 retry_num=retry or None)
                except aiohttp.ClientError:
                    return  # the adapter stopped
                self.answers.append(status)
                if 200 <= status < 300:
                    return
                await asyncio.sleep(0.5)

        self.delivery = asyncio.create_task(slack_delivery())

    def acknowledged(self, adapter, fake_transport):
        return any(200 <= status < 300 for status in self.answers)


class TestSlackSessionKeys(SessionKeyContract):
    @pytest.fixture
    def platform(self):
        return "slack"

    @pytest.fixture
    def key_plugin(self):
        return hooks


class TestSlackRedaction(RedactionContract):
    @pytest.fixture
    def platform(self):
        return "slack"

    @pytest.fixture
    def redaction_plugin(self):
        return hooks
