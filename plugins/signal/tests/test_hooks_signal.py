"""The Signal plugin's hookimpls through a real plugin manager: settings schema, platform notes."""

from __future__ import annotations

import pytest

from hermes_core import GatewayConfig
from hermes_core.plugin_system.manager import create_plugin_manager
from hermes_core.plugin_system.settings import PluginSettingsError, validate_plugin_settings
from hermes_core.sdk import SessionContext, SessionSource
from hermes_signal import hooks
from hermes_signal.settings import SignalSettings


def validated(tmp_path, table):
    config = GatewayConfig(home=tmp_path, platforms={"signal": table})
    pm, _ = create_plugin_manager(config)
    assert pm.get_plugin("signal") is hooks
    return validate_plugin_settings(pm, config)["signal"]


def test_settings_table_accepts_the_common_and_signal_keys(tmp_path):
    settings = validated(tmp_path, {
        "enabled": True, "account": "+15559990000", "base_url": "http://localhost:8080/",
        "allowed_users": ["+15551230001", "0b9c8d7e-6f5a-4b3c-8d2e-1f0a9b8c7d6e"], "home_channel": "group:Pmpi+EfPWmsxiomLe9Nx2XF9HOE483p6iKiFj65iMwI=",
        "edits_as_turns": True})
    assert isinstance(settings, SignalSettings)
    assert (settings.account, settings.base_url, settings.edits_as_turns, settings.home_channel) == (
        "+15559990000", "http://localhost:8080", True,
        "group:Pmpi+EfPWmsxiomLe9Nx2XF9HOE483p6iKiFj65iMwI=")
    assert settings.allowed_users == ["+15551230001", "0b9c8d7e-6f5a-4b3c-8d2e-1f0a9b8c7d6e"]
    assert (settings.stream_idle_timeout, settings.reconnect_max, settings.ignore_stories) == (45.0, 30.0, True)


@pytest.mark.parametrize("table,named", [
    ({"enabled": True, "account": "+15559990000", "acount": "+1"}, "acount"),
    ({"enabled": True, "account": "15559990000"}, "E.164"),
    ({"enabled": True, "account": "+15559990000", "base_url": "127.0.0.1:8080"}, "http://"),
])
def test_bad_settings_are_named(tmp_path, table, named):
    with pytest.raises(PluginSettingsError) as info:
        validated(tmp_path, table)
    assert named in str(info.value)


def test_platform_notes(tmp_path):
    pm, _ = create_plugin_manager(GatewayConfig(home=tmp_path, platforms={}))

    def notes(source):
        return [line for group in pm.hook.hermes_platform_notes(context=SessionContext(source=source))
                for line in group]

    dm = SessionSource(platform="signal", chat_id="7d1e2c3b-4a59-4687-9a0b-1c2d3e4f5a6b", chat_type="dm")
    group = SessionSource(platform="signal", chat_id="group:abc=", chat_type="group")
    assert notes(dm) == [
        "Platform: Signal. Replies are sent as plain text (Markdown is shown literally); "
        "replies longer than 2000 bytes are split into several messages.",
        "Mentions arrive in the text as @ followed by the person's number or id; you cannot "
        "mention people yourself, and you cannot read the chat's history, attachments or "
        "reactions beyond what is in this conversation.",
        "Message ids (Signal timestamps) are not shown to you; your reply quotes the message you "
        "are answering.",
    ]
    assert notes(group)[-1] == "This is a Signal group: every member sees your replies."
    other = SessionSource(platform="telegram", chat_id="1", chat_type="dm")
    assert [l for l in notes(other) if "Signal" in l] == []


def test_home_channel_and_pseudonymised_ids_in_the_session_context(tmp_path):
    # pii_safe=True: numbers and UUIDs are redactable; the pseudonym is of the canonical id (the
    # UUID), a group's keeps its "group:" prefix (docs/behaviour.md §7).
    from hermes_core.pipeline.context import build_session_context, build_session_context_prompt

    group_id = "Pmpi+EfPWmsxiomLe9Nx2XF9HOE483p6iKiFj65iMwI="
    config = GatewayConfig(home=tmp_path, redaction={"enabled": True}, platforms={"signal": {
        "enabled": True, "account": "+15559990000", "home_channel": "group:" + group_id,
        "home_channel_name": "family"}})
    pm, _ = create_plugin_manager(config)
    dm = SessionSource(platform="signal", chat_id="7d1e2c3b-4a59-4687-9a0b-1c2d3e4f5a6b", chat_type="dm",
                       user_id="+15551230001", user_id_alt="7d1e2c3b-4a59-4687-9a0b-1c2d3e4f5a6b")
    prompt = build_session_context_prompt(build_session_context(dm, config, pm=pm), redact_pii=True, pm=pm)
    lines = prompt.splitlines()
    # sha256("7d1e2c3b-…-1c2d3e4f5a6b")[:12] and sha256(group id)[:12]
    assert '**User ID:** "user_cceb2ad38c67"' in lines
    assert '  - signal: "family" (ID: "group:9ec4db73fda5")' in lines
    assert "+15551230001" not in prompt and "7d1e2c3b" not in prompt and group_id not in prompt


def test_every_common_platform_key_is_accepted(tmp_path):
    # The keys every [platforms.<id>] table takes (home_channel, access lists, …): each one, with
    # a value other than its default, reaches the plugin's settings model unchanged.
    from hermes_core.sdk import PlatformSettings

    table = {}
    for name, field in PlatformSettings.model_fields.items():
        if name == "allowed_roles":
            continue  # Signal has no roles: an entry there is refused (docs/behaviour.md §9)
        default = field.get_default(call_default_factory=True)
        # An id list holds an id of this platform's form, a number, and the home channel a chat id
        # (docs/behaviour.md §9).
        table[name] = (not default) if isinstance(default, bool) else ["+15551230001"] if isinstance(default, list) \
            else "group:Pmpi+EfPWmsxiomLe9Nx2XF9HOE483p6iKiFj65iMwI=" if name == "home_channel" else f"value of {name}"
    settings = validated(tmp_path, {**table, "account": "+15559990000"})
    assert {name: getattr(settings, name) for name in table} == table
    assert settings.home_channel == "group:Pmpi+EfPWmsxiomLe9Nx2XF9HOE483p6iKiFj65iMwI=" and settings.enabled is True


def test_access_lists_read_numbers_uuids_and_group_ids_as_signal_cli_sends_them(tmp_path):
    # docs/adapters.md §5.1: a sender is `sourceNumber` (E.164) or `sourceUuid` (lower case); a
    # group chat is `group:<id>` (raw id in `chat_id_alt`); signal-cli-rest-api writes a group
    # as "group." + base64(<id>).
    group = "Pmpi+EfPWmsxiomLe9Nx2XF9HOE483p6iKiFj65iMwI="
    rest = "group.UG1waStFZlBXbXN4aW9tTGU5TngyWEY5SE9FNDgzcDZpS2lGajY1aU13ST0="
    settings = validated(tmp_path, {
        "allowed_users": ["+1 555 123 0001", "+1 (555) 123-0002", "+15551230003",
                          "0B9C8D7E-6F5A-4B3C-8D2E-1F0A9B8C7D6E"],
        "admin_users": ["+44 20 7946 0958"],
        "allowed_chats": ["group:" + group, group, rest, "+1 555 123 0001", "0B9C8D7E-6F5A-4B3C-8D2E-1F0A9B8C7D6E"]})
    assert settings.allowed_users == ["+15551230001", "+15551230002", "+15551230003",
                                      "0b9c8d7e-6f5a-4b3c-8d2e-1f0a9b8c7d6e"]
    assert settings.admin_users == ["+442079460958"]
    assert settings.allowed_chats == ["group:" + group, group, "group:" + group, "+15551230001",
                                      "0b9c8d7e-6f5a-4b3c-8d2e-1f0a9b8c7d6e"]


@pytest.mark.parametrize("key,entry,never", [
    ("allowed_users", "15551230001", "a Signal sender"),
    ("admin_users", "alice.01", "a Signal sender"),
    ("allowed_users", "+1 555 CALL NOW", "a Signal sender"),
    ("allowed_chats", "Family", "a Signal chat"),
    ("allowed_chats", "group:not a group", "a Signal chat"),
])
def test_an_access_entry_that_is_no_signal_id_is_refused_and_named(tmp_path, key, entry, never):
    with pytest.raises(PluginSettingsError) as info:
        validated(tmp_path, {"enabled": True, "account": "+15559990000", key: [entry]})
    assert f"platforms.signal.{key}: {entry!r} can never match {never}: write a" in str(info.value)


def test_home_channel_is_read_as_a_chat_id(tmp_path):
    # docs/behaviour.md §9: the home channel is a chat id, read by the chat id rule:
    # signal-cli-rest-api's group form as `group:<id>`, a written number as `+<digits>`.
    group = "Pmpi+EfPWmsxiomLe9Nx2XF9HOE483p6iKiFj65iMwI="
    rest = "group.UG1waStFZlBXbXN4aW9tTGU5TngyWEY5SE9FNDgzcDZpS2lGajY1aU13ST0="
    assert validated(tmp_path, {"home_channel": rest}).home_channel == "group:" + group
    assert validated(tmp_path, {"home_channel": "+1 555 123 0001"}).home_channel == "+15551230001"
    with pytest.raises(PluginSettingsError) as info:
        validated(tmp_path, {"enabled": True, "account": "+15559990000", "home_channel": "Family"})
    assert str(info.value) == (
        "invalid settings in [platforms.signal]: platforms.signal.home_channel: 'Family' can never match "
        "a Signal chat: write a group id (group:Pmpi+EfPWmsxiomLe9Nx2XF9HOE483p6iKiFj65iMwI=, the id alone, "
        "or signal-cli-rest-api's group.… form), or for a DM the person's number with + and its country "
        "code or ACI UUID, not a group's name")
