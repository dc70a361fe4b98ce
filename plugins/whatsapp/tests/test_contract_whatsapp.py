"""The core's contract suites (hermes_core.testing) run against the WhatsApp plugin: both
adapters talk to their fakes on 127.0.0.1 (the bridge, the Graph API; webhooks signed as Meta)."""

from __future__ import annotations

import asyncio

import pytest

from fake_whatsapp import MetaPoster, bridge_settings, cloud_settings
from hermes_core.sdk import SessionSource
from hermes_core.testing import AdapterContract, PluginContract, RedactionContract, SessionKeyContract
from hermes_whatsapp import hooks
from hermes_whatsapp.bridge_adapter import WhatsAppAdapter
from hermes_whatsapp.cloud_adapter import WhatsAppCloudAdapter
from hermes_whatsapp.settings import WhatsAppCloudSettings, WhatsAppSettings


def dm_upsert(text: str, message_id: str = "3EB0CONTRACT0001") -> dict:
    return {"type": "notify", "messages": [{
        "key": {"remoteJid": "15551234567@s.whatsapp.net", "fromMe": False, "id": message_id},
        "messageTimestamp": 1767225600, "pushName": "Carol", "message": {"conversation": text}}]}


def cloud_dm(text: str, message_id: str = "wamid.CONTRACT0001") -> dict:
    return {"object": "whatsapp_business_account", "entry": [{"id": "102290129340398", "changes": [{
        "field": "messages", "value": {
            "messaging_product": "whatsapp",
            "metadata": {"display_phone_number": "15550783881", "phone_number_id": "109876543210001"},
            "contacts": [{"profile": {"name": "Sheena"}, "wa_id": "16505551234", "user_id": "US.13491208655302741918"}],
            "messages": [{"from": "16505551234", "from_user_id": "US.13491208655302741918", "id": message_id,
                          "timestamp": "1767225600", "type": "text", "text": {"body": text}}]}}]}]}


class TestWhatsAppPlugin(PluginContract):
    @pytest.fixture
    def plugin_name(self):
        return "whatsapp"


class TestWhatsAppBridgeAdapter(AdapterContract):
    @pytest.fixture
    def adapter_class(self):
        return WhatsAppAdapter

    @pytest.fixture
    def fake_transport(self, bridge):
        return bridge

    @pytest.fixture
    def adapter_settings(self, bridge):
        return WhatsAppSettings(**bridge_settings(bridge))

    @pytest.fixture
    def send_target(self):
        return SessionSource(platform="whatsapp", chat_id="98765432109876@lid", chat_type="dm",
                             user_id="98765432109876@lid")

    def sent_texts(self, adapter, fake_transport):
        return [body["message"] for body in fake_transport.sent]

    async def deliver_inbound(self, adapter, fake_transport, text):
        self._seq = fake_transport.push(dm_upsert(text))[0]

    def acknowledged(self, adapter, fake_transport):
        return fake_transport.acked >= self._seq

    def test_bridge_declares_its_limits_and_ingress(self, adapter_class):
        spec = adapter_class.spec
        # docs/adapters.md §0.4: chunk at 4096; §6: one leased receiver per bridge session.
        assert (spec.name, spec.max_message_length, spec.length_unit, spec.pii_safe, spec.ingress) == \
            ("whatsapp", 4096, "chars", True, "single_receiver")
        assert spec.capabilities == frozenset({"typing"})


class TestWhatsAppCloudAdapter(AdapterContract):
    @pytest.fixture
    def adapter_class(self):
        return WhatsAppCloudAdapter

    @pytest.fixture
    def fake_transport(self, graph):
        return graph

    @pytest.fixture
    def adapter_settings(self, graph):
        return WhatsAppCloudSettings(**cloud_settings(graph))

    @pytest.fixture
    def send_target(self):
        return SessionSource(platform="whatsapp_cloud", chat_id="US.13491208655302741918", chat_type="dm",
                             user_id="16505551234", user_id_alt="US.13491208655302741918")

    def sent_texts(self, adapter, fake_transport):
        return [body["text"]["body"] for body in fake_transport.sent]

    async def deliver_inbound(self, adapter, fake_transport, text):
        host, port = adapter.http_address
        self._poster = MetaPoster(f"http://{host}:{port}/whatsapp/webhook")
        self._task = asyncio.create_task(self._poster.deliver(cloud_dm(text)))

    def acknowledged(self, adapter, fake_transport):
        return 200 in self._poster.answers

    def test_cloud_declares_its_limits_and_ingress(self, adapter_class):
        spec = adapter_class.spec
        # docs/adapters.md §0.4: 4096 characters; §6: each webhook event is posted once.
        assert (spec.name, spec.max_message_length, spec.length_unit, spec.pii_safe, spec.ingress) == \
            ("whatsapp_cloud", 4096, "chars", True, "shared")
        assert spec.capabilities == frozenset({"typing", "webhook"})


class TestWhatsAppSessionKeys(SessionKeyContract):
    @pytest.fixture
    def platform(self):
        return "whatsapp"

    @pytest.fixture
    def key_plugin(self):
        return hooks


class TestWhatsAppCloudSessionKeys(SessionKeyContract):
    @pytest.fixture
    def platform(self):
        return "whatsapp_cloud"

    @pytest.fixture
    def key_plugin(self):
        return hooks


class TestWhatsAppRedaction(RedactionContract):
    @pytest.fixture
    def platform(self):
        return "whatsapp"

    @pytest.fixture
    def redaction_plugin(self):
        return hooks


class TestWhatsAppCloudRedaction(RedactionContract):
    @pytest.fixture
    def platform(self):
        return "whatsapp_cloud"

    @pytest.fixture
    def redaction_plugin(self):
        return hooks
