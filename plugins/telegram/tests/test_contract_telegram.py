"""The core's contract suites (hermes_core.testing.contract) run against the Telegram plugin."""

from __future__ import annotations

import pytest

from hermes_core.testing import AdapterContract, PluginContract, RedactionContract, SessionKeyContract
from hermes_telegram import hooks
from hermes_telegram.adapter import TelegramAdapter
from hermes_telegram.settings import TelegramSettings


class TestTelegramPlugin(PluginContract):
    @pytest.fixture
    def plugin_name(self):
        return "telegram"


class TestTelegramAdapter(AdapterContract):
    @pytest.fixture
    def adapter_class(self):
        return TelegramAdapter

    @pytest.fixture
    def fake_transport(self, tg):
        return tg

    @pytest.fixture
    def adapter_settings(self, tg):
        return TelegramSettings(bot_token=tg.token, base_url=tg.base_url, poll_timeout=1)

    def sent_texts(self, adapter, fake_transport):
        return [body["text"] for body in fake_transport.sent]

    ACK_UPDATE_ID = 900000900

    async def deliver_inbound(self, adapter, fake_transport, text):
        await fake_transport.push({"update_id": self.ACK_UPDATE_ID, "message": {
            "message_id": 4242, "date": 1767225600, "chat": {"id": 111222333, "type": "private", "first_name": "Alice"},
            "from": {"id": 111222333, "is_bot": False, "first_name": "Alice"}, "text": text}})

    def acknowledged(self, adapter, fake_transport):
        # Telegram: a getUpdates asking for an offset above the update confirms it.
        return any(int(call.body.get("offset") or 0) > self.ACK_UPDATE_ID
                   for call in fake_transport.calls_of("getUpdates"))


class TestTelegramSessionKeys(SessionKeyContract):
    @pytest.fixture
    def platform(self):
        return "telegram"

    @pytest.fixture
    def key_plugin(self):
        return hooks


class TestTelegramRedaction(RedactionContract):
    @pytest.fixture
    def platform(self):
        return "telegram"

    @pytest.fixture
    def redaction_plugin(self):
        return hooks
