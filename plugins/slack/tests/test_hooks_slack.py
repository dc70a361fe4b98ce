"""The Slack plugin's hookimpls through a real plugin manager: settings schema and platform notes."""

from __future__ import annotations

import pytest

from hermes_core import GatewayConfig
from hermes_core.sdk import SessionContext, SessionSource
from hermes_core.plugin_system.manager import create_plugin_manager
from hermes_core.plugin_system.settings import PluginSettingsError, validate_plugin_settings
from hermes_slack import hooks
from hermes_slack.settings import SlackChannelSettings, SlackSettings


def validated(tmp_path, table: dict):
    config = GatewayConfig(home=tmp_path, platforms={"slack": table})
    pm, _ = create_plugin_manager(config)
    assert pm.get_plugin("slack") is hooks
    return validate_plugin_settings(pm, config)["slack"]


def test_settings_table_is_validated_into_the_plugin_model(tmp_path):
    settings = validated(tmp_path, {
        "enabled": True, "bot_token": "xoxb-1-SECRETBOT", "app_token": "xapp-1-SECRETAPP", "allow_all": True,
        "home_channel": "C0GENERAL1", "channels": {"G0LEGACY01": {"free_response": True, "reply_in_thread": False}}})
    assert isinstance(settings, SlackSettings)
    assert settings.bot_token.get_secret_value() == "xoxb-1-SECRETBOT"
    assert "SECRETBOT" not in repr(settings) and "SECRETAPP" not in repr(settings)
    assert (settings.mode, settings.reply_in_thread, settings.home_channel, settings.allow_all) == \
        ("socket", True, "C0GENERAL1", True)
    assert settings.channels == {"G0LEGACY01": SlackChannelSettings(free_response=True, reply_in_thread=False)}
    assert settings.replies_in_thread("G0LEGACY01") is False and settings.replies_in_thread("C0GENERAL1") is True


@pytest.mark.parametrize("table,named", [
    ({"bot_token": "xoxb-1-SECRETVALUE", "app_tokn": "xapp-1-x"}, "app_tokn"),
    ({"bot_token": "xoxb-1-SECRETVALUE", "channels": {"C1": {"free_respons": True}}}, "free_respons"),
    ({"bot_token": "xoxb-1-SECRETVALUE", "mode": "rtm"}, "mode"),
])
def test_bad_settings_are_named_and_secrets_not_echoed(tmp_path, table, named):
    with pytest.raises(PluginSettingsError) as info:
        validated(tmp_path, dict(table, enabled=True))
    assert named in str(info.value)
    assert "SECRETVALUE" not in str(info.value)


def context(**source) -> SessionContext:
    return SessionContext(source=SessionSource(platform="slack", **source))


def test_platform_notes_for_a_thread():
    pm, _ = create_plugin_manager(None)
    pm.register(hooks, name="slack")
    notes = [line for lines in pm.hook.hermes_platform_notes(
        context=context(chat_id="C0GENERAL1", chat_type="channel", thread_id="1767225700.000200")) for line in lines]
    assert notes == [
        "Platform: Slack. Replies use Slack mrkdwn: *bold*, _italic_, ~strike~, `code`, ``` blocks; "
        "long replies are split into messages of up to 4000 characters.",
        "Mention a person as <@USER_ID> (ids as they appear in messages); @here and @channel are not sent.",
        "You see only the messages addressed to you; you cannot read the channel history, pins or "
        "files unless a tool for it is loaded.",
        "Message ids (Slack ts values) are not shown to you; your reply goes into the thread of the "
        "message you are answering, or inline where there is no thread.",
        "This conversation is a Slack thread; everyone who replies in it shares it.",
    ]


def test_platform_notes_only_for_slack():
    assert hooks.hermes_platform_notes(SessionContext(source=SessionSource(platform="telegram", chat_id="1"))) is None
    assert len(hooks.hermes_platform_notes(context(chat_id="D0DMALICE1", chat_type="dm"))) == 4


def test_plugins_json_lists_slack_without_secrets(tmp_path, monkeypatch):
    import json

    from typer.testing import CliRunner

    from hermes_core.cli.plugins import plugins_app

    secrets = {"BOT_TOKEN": "xoxb-1-SECRETBOTTOKEN", "APP_TOKEN": "xapp-1-SECRETAPPTOKEN",
               "SIGNING_SECRET": "SECRETSIGNINGSECRET0"}
    home = tmp_path / "home"
    home.mkdir()
    # one secret in the file (discouraged but accepted), the others in the environment
    (home / "hermes.toml").write_text('[platforms.slack]\nenabled = true\nsigning_secret = "SECRETSIGNINGSECRET0"\n')
    monkeypatch.setenv("HERMES_HOME", str(home))
    monkeypatch.setenv("HERMES_PLATFORMS__SLACK__BOT_TOKEN", secrets["BOT_TOKEN"])
    monkeypatch.setenv("HERMES_PLATFORMS__SLACK__APP_TOKEN", secrets["APP_TOKEN"])
    monkeypatch.delenv("HERMES_CONFIG", raising=False)
    monkeypatch.delenv("HERMES_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    result = CliRunner().invoke(plugins_app, ["--json"])
    assert result.exit_code == 0, result.output
    rows = {(row["name"], row["group"]): row for row in json.loads(result.output)}
    row = rows[("slack", "hermes_core.plugins")]
    assert (row["status"], row["distribution"], row["module"]) == ("loaded", "hermes-gateway-slack",
                                                                   "hermes_slack.hooks")
    assert row["hooks"] == ["hermes_platform_notes", "hermes_settings_schema"]
    assert "SECRET" not in result.output


def test_home_channel_and_pseudonymised_ids_in_the_session_context(tmp_path):
    # pii_safe=True: with [redaction] on, Slack user and channel ids reach the prompt as
    # pseudonyms (user_<12 hex of sha256>, <12 hex>; docs/behaviour.md §7), routing keeps them raw.
    from hermes_core.pipeline.context import build_session_context, build_session_context_prompt

    config = GatewayConfig(home=tmp_path, redaction={"enabled": True}, platforms={"slack": {
        "enabled": True, "home_channel": "C0GENERAL1", "home_channel_name": "general"}})
    pm, _ = create_plugin_manager(config)
    dm = SessionSource(platform="slack", chat_id="D0DMALICE1", chat_type="dm", user_id="U0ALICE01")
    prompt = build_session_context_prompt(build_session_context(dm, config, pm=pm), redact_pii=True, pm=pm)
    lines = prompt.splitlines()
    assert '**Source:** Slack ("DM with user_c40e8a8b3822")' in lines  # sha256("U0ALICE01")[:12]
    assert '  - slack: "general" (ID: "07f8abac5a7c")' in lines  # sha256("C0GENERAL1")[:12]
    assert '- `"origin"` → Back to this chat ("f2a65322b02d")' in lines  # sha256("D0DMALICE1")[:12]
    assert "U0ALICE01" not in prompt and "C0GENERAL1" not in prompt and "D0DMALICE1" not in prompt


def test_every_common_platform_key_is_accepted(tmp_path):
    # The keys every [platforms.<id>] table takes (home_channel, access lists, …): each one, with
    # a value other than its default, reaches the plugin's settings model unchanged.
    from hermes_core.sdk import PlatformSettings

    table = {}
    for name, field in PlatformSettings.model_fields.items():
        if name == "allowed_roles":
            continue  # Slack has no roles: an entry there is refused (docs/behaviour.md §9)
        default = field.get_default(call_default_factory=True)
        # An id list holds an id of this platform's form, a Slack id, and the home channel a
        # conversation id (docs/behaviour.md §9).
        table[name] = (not default) if isinstance(default, bool) else (["C0GENERAL1"] if name == "allowed_chats" else ["U0ALICE01"]) if isinstance(default, list) \
            else "C0GENERAL1" if name == "home_channel" else f"value of {name}"
    settings = validated(tmp_path, {**table, "bot_token": "xoxb-1-SECRETBOT"})
    assert {name: getattr(settings, name) for name in table} == table
    assert settings.home_channel == "C0GENERAL1" and settings.enabled is True


@pytest.mark.parametrize("url,problem", [
    ("notaurl/", "platforms.slack.api_base_url must start with http:// or https://"),
    ("http://127.0.0.1:9/api", "platforms.slack.api_base_url must end with '/'"),
])
def test_an_api_base_url_that_is_not_an_http_url_is_refused_at_load(tmp_path, url, problem):
    # docs/operations.md §1: doctor's `plugins` row fails when an enabled platform's settings do
    # not load; "notaurl/" used to load, pass doctor and fail only when `run` called auth.test.
    with pytest.raises(PluginSettingsError) as info:
        validated(tmp_path, {"enabled": True, "bot_token": "xoxb-1-SECRETVALUE", "api_base_url": url})
    assert f"invalid settings in [platforms.slack]: {problem}" in str(info.value)
    assert "SECRETVALUE" not in str(info.value)


def test_access_lists_take_slack_ids_in_any_case(tmp_path):
    # docs/adapters.md §3.0: Slack sends ids in upper case (`U…`/`W…` users, `B…` bots, `C…`,
    # `D…`, `G…` conversations); a lower-case id means the same one.
    settings = validated(tmp_path, {"allowed_users": ["u0alice01", "U0BOB0002", "W0123ABCD", "USLACKBOT"],
                                    "admin_users": ["u0alice01"], "allowed_chats": ["c0general1", "G0LEGACY01", "D1"]})
    assert (settings.allowed_users, settings.admin_users, settings.allowed_chats) == (
        ["U0ALICE01", "U0BOB0002", "W0123ABCD", "USLACKBOT"], ["U0ALICE01"], ["C0GENERAL1", "G0LEGACY01", "D1"])


@pytest.mark.parametrize("key,entry,never", [
    ("allowed_users", "@alice", "a Slack user"),
    ("admin_users", "ursula", "a Slack user"),
    ("allowed_users", "alice@example.com", "a Slack user"),
    ("allowed_chats", "#general", "a Slack conversation"),
    ("allowed_chats", "general", "a Slack conversation"),
])
def test_an_access_entry_that_is_no_slack_id_is_refused_and_named(tmp_path, key, entry, never):
    with pytest.raises(PluginSettingsError) as info:
        validated(tmp_path, {"enabled": True, "bot_token": "xoxb-1", "app_token": "xapp-1", key: [entry]})
    assert f"platforms.slack.{key}: {entry!r} can never match {never}: write a" in str(info.value)


@pytest.mark.parametrize("key,entry,expected", [
    ("allowed_users", "<@U0123ABCD>", "U0123ABCD"),
    ("admin_users", "<@u0123abcd>", "U0123ABCD"),
    ("allowed_users", "<@W0123ABCD|alice>", "W0123ABCD"),
    ("allowed_chats", "<#C0123ABCD>", "C0123ABCD"),
    ("allowed_chats", "<#C0123ABCD|general>", "C0123ABCD"),
])
def test_a_mention_in_an_access_list_is_read_as_its_id(tmp_path, key, entry, expected):
    # docs/adapters.md S-T8: Slack writes a mention as `<@U…>` / `<#C…|name>`, one id each
    # (docs/behaviour.md §9): pasted from a message, it is read as that id.
    assert getattr(validated(tmp_path, {key: [entry]}), key) == [expected]


@pytest.mark.parametrize("key,entry,never", [
    ("allowed_users", "<#C0123ABCD>", "a Slack user"),
    ("allowed_chats", "<@U0123ABCD>", "a Slack conversation"),
    ("allowed_users", "<@alice>", "a Slack user"),
])
def test_a_mention_of_another_kind_is_refused(tmp_path, key, entry, never):
    with pytest.raises(PluginSettingsError) as info:
        validated(tmp_path, {"enabled": True, "bot_token": "xoxb-1", "app_token": "xapp-1", key: [entry]})
    assert f"platforms.slack.{key}: {entry!r} can never match {never}: write a" in str(info.value)


@pytest.mark.parametrize("entry,expected", [("c0general1", "C0GENERAL1"), ("<#C0GENERAL1|general>", "C0GENERAL1"),
                                            ("D0DMALICE1", "D0DMALICE1")])
def test_home_channel_is_read_as_a_conversation_id(tmp_path, entry, expected):
    # docs/behaviour.md §9: the home channel is a conversation id, read by the chat id rule.
    assert validated(tmp_path, {"home_channel": entry}).home_channel == expected


def test_a_home_channel_that_is_no_conversation_id_is_refused_and_named(tmp_path):
    with pytest.raises(PluginSettingsError) as info:
        validated(tmp_path, {"enabled": True, "bot_token": "xoxb-1", "app_token": "xapp-1", "home_channel": "#general"})
    assert str(info.value) == (
        "invalid settings in [platforms.slack]: platforms.slack.home_channel: '#general' can never match "
        "a Slack conversation: write a conversation id (channel details, Channel ID: C0123ABCD; D… for a DM, "
        "G… for a legacy private channel or group DM), not a #channel name")


def test_per_channel_tables_are_keyed_by_conversation_ids(tmp_path):
    # docs/configuration.md §5: `[platforms.slack.channels.<channel id>]`; the adapter looks a
    # channel up by the id Slack sends (upper case), so a lower-case id or a mention is read as it.
    settings = validated(tmp_path, {"channels": {"c0general1": {"free_response": True},
                                                 "<#G0LEGACY01|leads>": {"reply_in_thread": False}}})
    assert settings.channels == {"C0GENERAL1": SlackChannelSettings(free_response=True),
                                 "G0LEGACY01": SlackChannelSettings(reply_in_thread=False)}
    assert settings.channel("C0GENERAL1").free_response is True and settings.replies_in_thread("G0LEGACY01") is False


@pytest.mark.parametrize("key", ["general", "#general"])
def test_a_per_channel_table_that_names_no_conversation_is_refused_and_named(tmp_path, key):
    with pytest.raises(PluginSettingsError) as info:
        validated(tmp_path, {"enabled": True, "bot_token": "xoxb-1", "app_token": "xapp-1",
                             "channels": {key: {"free_response": True}}})
    assert str(info.value) == (
        f"invalid settings in [platforms.slack]: platforms.slack.channels: {key!r} can never match a Slack "
        "conversation: write a conversation id (channel details, Channel ID: C0123ABCD; D… for a DM, G… for "
        "a legacy private channel or group DM), not a #channel name")


def test_two_per_channel_tables_of_one_conversation_are_refused(tmp_path):
    with pytest.raises(PluginSettingsError) as info:
        validated(tmp_path, {"enabled": True, "bot_token": "xoxb-1", "app_token": "xapp-1",
                             "channels": {"C0GENERAL1": {"free_response": True}, "c0general1": {"free_response": False}}})
    assert str(info.value) == ("invalid settings in [platforms.slack]: platforms.slack.channels: 'C0GENERAL1' and "
                               "'c0general1' are the same Slack conversation (C0GENERAL1): keep one table")

