"""The Discord plugin's hookimpls through a real plugin manager: the settings table (common keys,
unknown keys, secret hygiene) and the platform notes."""

from __future__ import annotations

import pytest

from hermes_core import GatewayConfig, SessionSource
from hermes_core.model import SessionContext
from hermes_core.plugin_system.manager import create_plugin_manager
from hermes_core.plugin_system.settings import PluginSettingsError, validate_plugin_settings
from hermes_discord import hooks
from hermes_discord.settings import DiscordSettings

TOKEN = "MTIwMDAwMDAwMDAwMDAwMDAwMA.Gxyz12.SECRETPARTOFTHETOKEN"


def validated(tmp_path, table: dict):
    config = GatewayConfig(home=tmp_path, platforms={"discord": table})
    pm, _ = create_plugin_manager(config)
    assert pm.get_plugin("discord") is hooks
    return validate_plugin_settings(pm, config)["discord"]


def test_settings_table_is_validated_into_the_plugin_model(tmp_path):
    settings = validated(tmp_path, {
        "enabled": True, "bot_token": TOKEN, "allowed_roles": [1400000000000000001],
        "home_channel": "1100000000000000010", "home_channel_name": "general", "allow_bots": True,
        "edits_as_turns": True, "allowed_mentions": "users", "api_base": "http://127.0.0.1:9/api/v10/"})
    assert isinstance(settings, DiscordSettings)
    assert settings.bot_token.get_secret_value() == TOKEN
    assert TOKEN not in repr(settings)
    assert settings.allowed_roles == ["1400000000000000001"]  # a TOML integer id is an id all the same
    assert (settings.home_channel, settings.home_channel_name, settings.allow_bots, settings.edits_as_turns) == \
        ("1100000000000000010", "general", True, True)
    assert (settings.allowed_mentions, settings.api_base, settings.message_content,
            settings.max_ratelimit_timeout) == ("users", "http://127.0.0.1:9/api/v10", True, 30.0)


def test_unknown_settings_key_is_named_and_token_not_echoed(tmp_path):
    with pytest.raises(PluginSettingsError) as info:
        validated(tmp_path, {"enabled": True, "bot_token": TOKEN, "alowed_roles": ["1"]})
    assert "alowed_roles" in str(info.value)
    assert "SECRETPART" not in str(info.value)


@pytest.mark.parametrize("table,key", [
    ({"max_ratelimit_timeout": 5}, "max_ratelimit_timeout"),
    ({"gateway_url": "http://127.0.0.1/gw"}, "gateway_url"),
    ({"allowed_mentions": "everyone"}, "allowed_mentions"),
])
def test_bad_values_are_refused_with_the_key(tmp_path, table, key):
    with pytest.raises(PluginSettingsError) as info:
        validated(tmp_path, {"enabled": True, "bot_token": TOKEN, **table})
    assert key in str(info.value)
    assert "SECRETPART" not in str(info.value)


def notes(source: SessionSource) -> list[str]:
    pm, _ = create_plugin_manager(None)
    pm.register(hooks, name="discord")
    return [line for group in pm.hook.hermes_platform_notes(context=SessionContext(source=source))
            for line in (group or ())]


def test_platform_notes_for_a_thread():
    thread = SessionSource(platform="discord", chat_id="1100000000000000012", chat_type="group",
                           thread_id="1100000000000000030", chat_name="Hermes Lab / #support / Bug: login loop")
    lines = notes(thread)
    assert lines[0] == ("Platform: Discord. Messages are limited to 2000 characters; long replies are split "
                        "into several messages.")
    assert ("Mention syntax: <@USER_ID> for a user, <#CHANNEL_ID> for a channel, <@&ROLE_ID> for a role "
            "(raw Discord ids). Your replies never notify @everyone, @here or a role.") in lines
    assert ("You only see the messages sent to you in this conversation: you cannot read the channel "
            "history, pinned messages, other channels or attachments' contents, nor react to messages, "
            "unless a tool for it is available.") in lines
    # where the per-turn message id is given: nowhere the agent sees, and the reply answers it
    assert ("Message ids are not shown to you; each reply is posted as a Discord reply to the message "
            "you are answering.") in lines
    assert lines[-1] == ("This conversation is a Discord thread (or forum post); every member of the thread "
                         "shares it and your replies are posted in the thread.")
    assert not any("Bug: login loop" in line for line in lines)  # names stay in the core's neutralised section


def test_platform_notes_for_a_dm_and_not_for_other_platforms():
    dm = SessionSource(platform="discord", chat_id="1600000000000000001", chat_type="dm")
    assert notes(dm)[-1] == "This conversation is a direct message with one user."
    assert notes(SessionSource(platform="slack", chat_id="C1", chat_type="channel")) == []


def test_plugins_json_lists_discord_without_secrets(tmp_path, monkeypatch):
    import json

    from typer.testing import CliRunner

    from hermes_core.cli.plugins import plugins_app

    home = tmp_path / "home"
    home.mkdir()
    (home / "hermes.toml").write_text("[platforms.discord]\nenabled = true\n")
    monkeypatch.setenv("HERMES_HOME", str(home))
    monkeypatch.setenv("HERMES_PLATFORMS__DISCORD__BOT_TOKEN", TOKEN)
    monkeypatch.delenv("HERMES_CONFIG", raising=False)
    monkeypatch.delenv("HERMES_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    result = CliRunner().invoke(plugins_app, ["--json"])
    assert result.exit_code == 0, result.output
    rows = {(row["name"], row["group"]): row for row in json.loads(result.output)}
    row = rows[("discord", "hermes_core.plugins")]
    assert (row["status"], row["distribution"], row["module"]) == ("loaded", "hermes-gateway-discord",
                                                                   "hermes_discord.hooks")
    assert row["hooks"] == ["hermes_platform_notes", "hermes_settings_schema", "hermes_shutdown"]
    assert "SECRETPART" not in result.output


def test_home_channel_and_raw_ids_in_the_session_context_even_with_redaction(tmp_path):
    # pii_safe=False (docs/behaviour.md §7): Discord ids stay raw, mentions need them.
    from hermes_core.pipeline.context import build_session_context, build_session_context_prompt

    config = GatewayConfig(home=tmp_path, redaction={"enabled": True}, platforms={"discord": {
        "enabled": True, "home_channel": "1100000000000000010", "home_channel_name": "general"}})
    pm, _ = create_plugin_manager(config)
    dm = SessionSource(platform="discord", chat_id="1600000000000000001", chat_type="dm",
                       user_id="1300000000000000001")
    prompt = build_session_context_prompt(build_session_context(dm, config, pm=pm), redact_pii=True, pm=pm)
    lines = prompt.splitlines()
    assert '**Source:** Discord ("DM with 1300000000000000001")' in lines
    assert '**User ID:** "1300000000000000001"' in lines
    assert '  - discord: "general" (ID: "1100000000000000010")' in lines
    assert '- `"discord"` → Home channel ("general")' in lines


def test_every_common_platform_key_is_accepted(tmp_path):
    # The keys every [platforms.<id>] table takes (home_channel, access lists, …): each one, with
    # a value other than its default, reaches the plugin's settings model unchanged.
    from hermes_core.sdk import PlatformSettings

    table = {}
    for name, field in PlatformSettings.model_fields.items():
        default = field.get_default(call_default_factory=True)
        # An id list holds an id of this platform's form, a snowflake, and the home channel a
        # channel's (docs/behaviour.md §9).
        table[name] = (not default) if isinstance(default, bool) else ["1300000000000000001"] if isinstance(default, list) \
            else "1100000000000000010" if name == "home_channel" else f"value of {name}"
    settings = validated(tmp_path, {**table, "bot_token": TOKEN})
    assert {name: getattr(settings, name) for name in table} == table
    assert settings.home_channel == "1100000000000000010" and settings.enabled is True


def test_access_lists_keep_snowflakes(tmp_path):
    # docs/adapters.md §2.0: `user_id = author.id`, `chat_id` = the channel id (decimal strings).
    settings = validated(tmp_path, {"allowed_users": [1300000000000000001, " 1300000000000000002"],
                                    "admin_users": ["1300000000000000001"], "allowed_chats": ["1100000000000000010"]})
    assert (settings.allowed_users, settings.admin_users, settings.allowed_chats) == (
        ["1300000000000000001", "1300000000000000002"], ["1300000000000000001"], ["1100000000000000010"])


@pytest.mark.parametrize("key,entry,never", [
    ("allowed_users", "alice#1234", "a Discord user"),
    ("admin_users", "alice", "a Discord user"),
    ("allowed_users", "@alice", "a Discord user"),
    ("allowed_chats", "#general", "a Discord channel"),
])
def test_an_access_entry_that_is_no_snowflake_is_refused_and_named(tmp_path, key, entry, never):
    with pytest.raises(PluginSettingsError) as info:
        validated(tmp_path, {"enabled": True, "bot_token": "x", key: [entry]})
    assert f"platforms.discord.{key}: {entry!r} can never match {never}: write a numeric" in str(info.value)


def test_allowed_roles_keep_role_snowflakes_and_refuse_a_role_name(tmp_path):
    # docs/behaviour.md §9: Discord sends role ids (`member.roles`, snowflakes); a role's name
    # never equals one, so it is refused at load instead of matching nobody in silence.
    settings = validated(tmp_path, {"allowed_roles": [1200000000000000100, " 1200000000000000101"]})
    assert settings.allowed_roles == ["1200000000000000100", "1200000000000000101"]
    for entry in ("Moderators", "@Moderators"):
        with pytest.raises(PluginSettingsError) as info:
            validated(tmp_path, {"enabled": True, "bot_token": "x", "allowed_roles": [entry]})
        assert (f"platforms.discord.allowed_roles: {entry!r} can never match a Discord role: write a "
                "numeric role id (Server Settings, Roles, Copy Role ID: 1200000000000000100; the "
                "server id for @everyone), not a role name") in str(info.value)


@pytest.mark.parametrize("key,entry,expected", [
    ("allowed_users", "<@1300000000000000001>", "1300000000000000001"),
    ("admin_users", "<@!1300000000000000001>", "1300000000000000001"),
    ("allowed_chats", "<#1100000000000000010>", "1100000000000000010"),
    ("allowed_roles", "<@&1200000000000000100>", "1200000000000000100"),
])
def test_a_mention_in_an_access_list_is_read_as_its_id(tmp_path, key, entry, expected):
    # Discord writes mentions as `<@id>` / `<@!id>` (user), `<#id>` (channel), `<@&id>` (role)
    # (docs/adapters.md D-T7): each names exactly one id (docs/behaviour.md §9).
    assert getattr(validated(tmp_path, {key: [entry]}), key) == [expected]


@pytest.mark.parametrize("key,entry,never", [
    ("allowed_users", "<@&1200000000000000100>", "a Discord user"),
    ("allowed_chats", "<@1300000000000000001>", "a Discord channel"),
    ("allowed_roles", "<#1100000000000000010>", "a Discord role"),
    ("allowed_users", "<@alice>", "a Discord user"),
])
def test_a_mention_of_another_kind_is_refused(tmp_path, key, entry, never):
    with pytest.raises(PluginSettingsError) as info:
        validated(tmp_path, {"enabled": True, "bot_token": "x", key: [entry]})
    assert f"platforms.discord.{key}: {entry!r} can never match {never}: write a numeric" in str(info.value)


def test_home_channel_is_read_as_a_channel_id(tmp_path):
    # docs/behaviour.md §9: the home channel is a channel snowflake, read by the chat id rule (a
    # channel mention as its id); a #channel name is refused at load.
    assert validated(tmp_path, {"home_channel": "<#1100000000000000010>"}).home_channel == "1100000000000000010"
    assert validated(tmp_path, {"home_channel": 1100000000000000010}).home_channel == "1100000000000000010"
    with pytest.raises(PluginSettingsError) as info:
        validated(tmp_path, {"enabled": True, "bot_token": "x", "home_channel": "#general"})
    assert str(info.value) == (
        "invalid settings in [platforms.discord]: platforms.discord.home_channel: '#general' can never "
        "match a Discord channel: write a numeric channel id (Developer Mode, Copy Channel ID: "
        "1100000000000000010; for a thread, its parent channel's), not a #channel name")
