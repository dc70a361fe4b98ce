"""The core's contract suites (hermes_core.testing) run against the Discord plugin."""

from __future__ import annotations

import pytest

from hermes_core.testing import AdapterContract, PluginContract, RedactionContract, SessionKeyContract
from hermes_discord import hooks
from hermes_discord.adapter import DiscordAdapter
from hermes_discord.settings import DiscordSettings


class TestDiscordPlugin(PluginContract):
    @pytest.fixture
    def plugin_name(self):
        return "discord"


class TestDiscordAdapter(AdapterContract):
    @pytest.fixture
    def adapter_class(self):
        return DiscordAdapter

    @pytest.fixture
    def fake_transport(self, fake):
        return fake

    @pytest.fixture
    def adapter_settings(self, fake):
        return DiscordSettings(bot_token=fake.token, api_base=fake.api_base, gateway_url=fake.gateway_url,
                               connect_timeout=10)

    @pytest.fixture
    async def adapter(self, adapter_class, adapter_settings, fake_transport):
        # `stop` leaves sending open (the gateway drains after stopping adapters); `aclose`
        # closes discord.py's HTTP session.
        adapter = adapter_class(adapter_settings)
        yield adapter
        await adapter.aclose()

    def sent_texts(self, adapter, fake_transport):
        return [body["content"] for body in fake_transport.sent]

    async def deliver_inbound(self, adapter, fake_transport, text):
        # The acknowledgement rule has nothing to check here: Discord's gateway takes no
        # acknowledgement and never redelivers an event, so the adapter offers a refused message
        # again itself (test_adapter_discord.py::test_emit_refusals_are_retried_and_the_message_arrives_once).
        pytest.skip("Discord gateway events are not acknowledged; refusals are retried by the adapter")

    def test_discord_declares_its_limits_and_ingress(self, adapter_class):
        spec = adapter_class.spec
        # docs/adapters.md §0.4: 2000 characters; docs/behaviour.md §7: never redacted;
        # §6: every gateway connection of a bot receives every event.
        assert (spec.max_message_length, spec.length_unit, spec.pii_safe, spec.ingress) == \
            (2000, "chars", False, "single_receiver")
        assert spec.capabilities == frozenset({"threads", "typing", "edit"})


class TestDiscordSessionKeys(SessionKeyContract):
    @pytest.fixture
    def platform(self):
        return "discord"

    @pytest.fixture
    def key_plugin(self):
        return hooks


class TestDiscordRedaction(RedactionContract):
    @pytest.fixture
    def platform(self):
        return "discord"

    @pytest.fixture
    def redaction_plugin(self):
        return hooks
