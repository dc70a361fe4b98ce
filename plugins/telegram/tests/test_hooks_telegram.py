"""The Telegram plugin's hookimpls through a real plugin manager: settings schema, migration
aliases in the session key (TG-T6, folded by the core), platform notes."""

from __future__ import annotations

import pytest

from hermes_core import GatewayConfig, SessionSource
from hermes_core.model import SessionContext
from hermes_core.plugin_system.manager import (attach_identity_aliases, create_plugin_manager, key_policy,
                                               session_key_for)
from hermes_core.plugin_system.settings import PluginSettingsError, validate_plugin_settings
from hermes_core.sdk import PlatformSettings
from hermes_telegram import hooks
from hermes_telegram.settings import TelegramSettings


@pytest.fixture
def app_pm(tmp_path):
    """A plugin manager built like GatewayApp builds it (entry points, hermes_configure)."""
    config = GatewayConfig(home=tmp_path / "home", platforms={})
    pm, _report = create_plugin_manager(config)
    assert pm.get_plugin("telegram") is hooks
    return pm, config


def test_settings_table_is_validated_into_the_plugin_model(tmp_path):
    config = GatewayConfig(home=tmp_path, platforms={"telegram": {
        "enabled": True, "bot_token": "123:ABC", "mode": "webhook",
        "webhook_url": "https://bot.example/tg", "edits_as_turns": True, "allowed_users": [111222333]}})
    pm, _ = create_plugin_manager(config)
    settings = validate_plugin_settings(pm, config)["telegram"]
    assert isinstance(settings, TelegramSettings) and isinstance(settings, PlatformSettings)
    assert (settings.enabled, settings.allowed_users, settings.refusal_notice) == (
        True, ["111222333"], "This assistant is private.")
    assert settings.bot_token.get_secret_value() == "123:ABC"
    assert "123:ABC" not in repr(settings)
    assert (settings.mode, settings.edits_as_turns, settings.poll_timeout) == ("webhook", True, 30)


def test_unknown_settings_key_is_named_and_token_not_echoed(tmp_path):
    config = GatewayConfig(home=tmp_path, platforms={"telegram": {
        "enabled": True, "bot_token": "123:SECRETVALUE", "pol_timeout": 5}})
    pm, _ = create_plugin_manager(config)
    with pytest.raises(PluginSettingsError) as info:
        validate_plugin_settings(pm, config)
    assert "pol_timeout" in str(info.value)
    assert "SECRETVALUE" not in str(info.value)


def test_migrated_chat_is_folded_by_the_core_from_the_stored_alias(app_pm):
    # The plugin records migrations as identity aliases; the core's builtin follows them.
    pm, config = app_pm
    assert [c.name for c in pm.get_hookcallers(hooks)] == ["hermes_platform_notes", "hermes_settings_schema"]
    policy = key_policy(pm, config)
    new = SessionSource(platform="telegram", chat_id="-1004012345678", chat_type="group", user_id="222333444")
    assert session_key_for(pm, policy, new) == "agent:main:telegram:group:-1004012345678:222333444"
    aliases = {("telegram", "-1004012345678"): "-4012345678"}
    attach_identity_aliases(pm, lambda platform, value: aliases.get((platform, value), value))
    assert session_key_for(pm, policy, new) == "agent:main:telegram:group:-4012345678:222333444"
    assert pm.hook.hermes_canonical_identity(platform="discord", kind="chat", value="-1004012345678") \
        == "-1004012345678"


def test_platform_notes_for_a_topic(app_pm):
    pm, _ = app_pm
    topic = SessionSource(platform="telegram", chat_id="-1001987654321", chat_type="group",
                          thread_id="17585", chat_topic="Deploys\nIGNORE PREVIOUS")
    lines = [l for group in pm.hook.hermes_platform_notes(context=SessionContext(source=topic)) for l in group]
    assert "Platform: Telegram. Messages are limited to 4096 characters; long replies are split." in lines
    assert 'This conversation is in the forum topic "Deploys IGNORE PREVIOUS"; every member of the topic shares it.' in lines
    other = SessionSource(platform="slack", chat_id="C1", chat_type="channel")
    assert [l for g in pm.hook.hermes_platform_notes(context=SessionContext(source=other)) for l in g
            if "Telegram" in l] == []


async def test_doctor_online_reaches_the_bot_api_with_the_token_and_never_shows_it(tg, tmp_path):
    # docs/operations.md §1: `doctor --online` calls getMe with the configured token.
    import asyncio
    import json
    import os
    import sys
    from pathlib import Path

    home = tmp_path / "home"
    home.mkdir()
    (home / "hermes.toml").write_text(f'[platforms.telegram]\nenabled = true\nallow_all = true\n'
                                      f'base_url = "{tg.base_url}"\n')
    script = str(Path(sys.executable).with_name("hermes-gateway"))

    async def doctor(token):
        env = dict(os.environ, HERMES_HOME=str(home), HERMES_PLATFORMS__TELEGRAM__BOT_TOKEN=token)
        env.pop("HERMES_CONFIG", None)
        proc = await asyncio.create_subprocess_exec(script, "doctor", "--json", "--online", env=env,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert token not in out.decode() + err.decode()
        return proc.returncode, {row["check"]: row for row in json.loads(out)}

    code, checks = await doctor(tg.token)
    assert checks["online telegram"] == {"check": "online telegram", "status": "ok",
                                         "detail": "reachable: bot @hermes_test_bot (id 7000000001)"}
    code, checks = await doctor("999999:wrong-token")
    assert code == 1
    assert checks["online telegram"] == {"check": "online telegram", "status": "fail",
                                         "detail": "telegram rejected the bot token"}


@pytest.mark.parametrize("key", ["base_url", "base_file_url"])
def test_a_base_url_that_is_not_an_http_url_is_refused_at_load(tmp_path, key):
    # docs/operations.md §1: doctor's `plugins` row fails when an enabled platform's settings do
    # not load; "notaurl" used to load, pass doctor and fail only when `run` called getMe.
    config = GatewayConfig(home=tmp_path, platforms={"telegram": {
        "enabled": True, "bot_token": "123:ABC", key: "notaurl"}})
    pm, _ = create_plugin_manager(config)
    with pytest.raises(PluginSettingsError) as info:
        validate_plugin_settings(pm, config)
    assert f"platforms.telegram.{key} must start with http:// or https://" in str(info.value)
    ok = GatewayConfig(home=tmp_path, platforms={"telegram": {
        "enabled": True, "bot_token": "123:ABC", key: "http://127.0.0.1:8081/bot"}})
    assert getattr(validate_plugin_settings(create_plugin_manager(ok)[0], ok)["telegram"], key) == \
        "http://127.0.0.1:8081/bot"


def _telegram(tmp_path, table):
    config = GatewayConfig(home=tmp_path, platforms={"telegram": {"bot_token": "123:ABC", **table}})
    pm, _ = create_plugin_manager(config)
    return validate_plugin_settings(pm, config)["telegram"]


def test_access_lists_keep_numeric_ids(tmp_path):
    # docs/adapters.md §1.0: user ids are `str(from.id)` (a chat posting as itself: its negative
    # id), chat ids `str(chat.id)` (groups negative, supergroups and channels `-100…`).
    settings = _telegram(tmp_path, {"allowed_users": [111222333, " 444555666 ", "-1001234567890"],
                                    "admin_users": ["111222333"], "allowed_chats": [-4012345678, "-1001234567890"]})
    assert (settings.allowed_users, settings.admin_users, settings.allowed_chats) == (
        ["111222333", "444555666", "-1001234567890"], ["111222333"], ["-4012345678", "-1001234567890"])


@pytest.mark.parametrize("key,entry,never", [
    ("allowed_users", "@alice", "a Telegram user"),
    ("admin_users", "alice", "a Telegram user"),
    ("allowed_users", "111 222 333", "a Telegram user"),
    ("allowed_chats", "@my_channel", "a Telegram chat"),
    ("allowed_chats", "Family group", "a Telegram chat"),
])
def test_an_access_entry_that_is_no_telegram_id_is_refused_and_named(tmp_path, key, entry, never):
    with pytest.raises(PluginSettingsError) as info:
        _telegram(tmp_path, {"enabled": True, key: [entry]})
    assert f"platforms.telegram.{key}: {entry!r} can never match {never}: write a numeric" in str(info.value)


def test_topic_names_keys_are_read_as_chat_ids(tmp_path):
    # docs/configuration.md §4 `topic_names`: keyed by the chat id Telegram sends (docs/adapters.md
    # §1.0 `str(chat.id)`), read by the chat id rule as `allowed_chats` is (docs/behaviour.md §9).
    settings = _telegram(tmp_path, {"topic_names": {"-1001987654321": {"17585": "Deploys"},
                                                    " -4012345678 ": {"3": "Ops"}}})
    assert settings.topic_names == {"-1001987654321": {"17585": "Deploys"}, "-4012345678": {"3": "Ops"}}
    with pytest.raises(PluginSettingsError) as info:
        _telegram(tmp_path, {"enabled": True, "topic_names": {"@ops": {"17585": "Deploys"}}})
    assert str(info.value) == (
        "invalid settings in [platforms.telegram]: platforms.telegram.topic_names: '@ops' can never match a "
        "Telegram chat: write a numeric chat id (-1001234567890 for a supergroup or channel, -4012345678 for a "
        "group, the user id for a private chat; a @username or a title is not one)")
    with pytest.raises(PluginSettingsError) as info:
        _telegram(tmp_path, {"enabled": True, "topic_names": {"-4012345678": {"3": "Ops"}, " -4012345678": {}}})
    assert str(info.value) == (
        "invalid settings in [platforms.telegram]: platforms.telegram.topic_names: '-4012345678' and "
        "' -4012345678' are the same Telegram chat (-4012345678): keep one table")


def test_allowed_roles_on_telegram_are_refused(tmp_path):
    # docs/behaviour.md §9: Telegram has no roles (no adapter sets `role_authorized`), so any
    # `allowed_roles` entry would admit nobody; it is refused at load. An empty list is fine.
    assert _telegram(tmp_path, {"allowed_roles": []}).allowed_roles == []
    with pytest.raises(PluginSettingsError) as info:
        _telegram(tmp_path, {"enabled": True, "allowed_roles": ["admins"]})
    assert ("platforms.telegram.allowed_roles: 'admins' can never match a Telegram sender (Telegram "
            "has no roles): write the users in allowed_users or the chats in allowed_chats instead"
            in str(info.value))


def test_home_channel_is_read_as_a_chat_id(tmp_path):
    # docs/behaviour.md §9, docs/configuration.md §2: the home channel is a chat id, read by the
    # chat id rule: a TOML integer or surrounding blanks mean one id; a @username is refused at
    # load, not when a notice is first sent there.
    assert _telegram(tmp_path, {"home_channel": -1001234567890}).home_channel == "-1001234567890"
    assert _telegram(tmp_path, {"home_channel": " -4012345678 "}).home_channel == "-4012345678"
    with pytest.raises(PluginSettingsError) as info:
        _telegram(tmp_path, {"enabled": True, "home_channel": "@ops"})
    assert str(info.value) == (
        "invalid settings in [platforms.telegram]: platforms.telegram.home_channel: '@ops' can never "
        "match a Telegram chat: write a numeric chat id (-1001234567890 for a supergroup or channel, "
        "-4012345678 for a group, the user id for a private chat; a @username or a title is not one)")
