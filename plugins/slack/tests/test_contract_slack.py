"""The core's contract suites (hermes_core.testing.contract) run against the Slack plugin."""

from __future__ import annotations

import pytest
from fake_slack import adapter_settings

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
