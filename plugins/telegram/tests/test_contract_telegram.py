"""The core's contract suites (hermes_core.testing.contract) run against the Telegram plugin."""

from __future__ import annotations

import pytest

from hermes_core.testing.contract import (
    AdapterContract,
    PluginContract,
    RedactionContract,
    SessionKeyContract,
)
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


class TestTelegramSessionKeys(SessionKeyContract):
    @pytest.fixture
    def platform(self):
        return "telegram"

    @pytest.fixture
    def key_plugin(self):
        return hooks

    # The kit's check compares two *different users in the same DM chat id* and expects "same
    # key ⇔ shared"; by SPEC.md §4 a DM key is its chat id and a DM is never shared, so the
    # builtins alone fail it too (not Telegram-specific). strict: remove once the kit is fixed.
    @pytest.mark.xfail(strict=True, reason="contract kit: DM case contradicts SPEC.md §4 (core builtins fail it too)")
    def test_key_and_shared_predicate_agree(self, key_pm, platform):
        super().test_key_and_shared_predicate_agree(key_pm, platform)


class TestTelegramRedaction(RedactionContract):
    @pytest.fixture
    def platform(self):
        return "telegram"

    @pytest.fixture
    def redaction_plugin(self):
        return hooks
