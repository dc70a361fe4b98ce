"""The WhatsApp plugin's hookimpls through a real plugin manager: settings schema (both tables),
platform notes, `plugins --json` without secrets; adapter start errors name the setting."""

from __future__ import annotations

import json

import pytest

from hermes_core import GatewayConfig
from hermes_core.plugin_system.manager import create_plugin_manager
from hermes_core.plugin_system.settings import PluginSettingsError, validate_plugin_settings
from hermes_core.sdk import SessionContext, SessionSource
from hermes_whatsapp import hooks
from hermes_whatsapp.cloud_adapter import WhatsAppCloudAdapter, WhatsAppCloudStartError
from hermes_whatsapp.settings import WhatsAppCloudSettings, WhatsAppSettings

SECRET = "EAAG-SECRETPART-token"


def validated(tmp_path, platforms):
    config = GatewayConfig(home=tmp_path, platforms=platforms)
    pm, _ = create_plugin_manager(config)
    assert pm.get_plugin("whatsapp") is hooks
    return validate_plugin_settings(pm, config)


def test_both_tables_accept_the_common_and_their_own_keys(tmp_path):
    settings = validated(tmp_path, {
        "whatsapp": {"enabled": True, "bridge_url": "http://127.0.0.1:3000/", "session_dir": "~/baileys_auth",
                     "allowed_users": ["15551234567"], "home_channel": "120363025555555555@g.us",
                     "home_channel_name": "Book Club", "bridge_token": "b-SECRETPART"},
        "whatsapp_cloud": {"enabled": True, "access_token": SECRET, "app_secret": "s", "verify_token": "v",
                           "phone_number_id": 109876543210001, "allowed_chats": ["US.13491208655302741918"],
                           "home_channel": "US.13491208655302741918"}})
    bridge, cloud = settings["whatsapp"], settings["whatsapp_cloud"]
    assert isinstance(bridge, WhatsAppSettings) and isinstance(cloud, WhatsAppCloudSettings)
    assert (bridge.bridge_url, bridge.session_dir, bridge.home_channel, bridge.allowed_users) == (
        "http://127.0.0.1:3000", "~/baileys_auth", "120363025555555555@g.us", ["15551234567"])
    assert (cloud.phone_number_id, cloud.graph_base_url, cloud.http_port, cloud.http_path) == (
        "109876543210001", "https://graph.facebook.com/v23.0", 8443, "/whatsapp/webhook")
    assert cloud.access_token.get_secret_value() == SECRET and SECRET not in repr(cloud)
    assert "SECRETPART" not in repr(bridge)


@pytest.mark.parametrize("platform,table,named", [
    ("whatsapp", {"enabled": True, "brige_url": "http://127.0.0.1:3000"}, "brige_url"),
    ("whatsapp", {"enabled": True, "bridge_url": "127.0.0.1:3000"}, "http://"),
    ("whatsapp_cloud", {"enabled": True, "phone_number": "15550783881"}, "phone_number"),
    ("whatsapp_cloud", {"enabled": True, "phone_number_id": "+1 555 078 3881"}, "must be digits"),
    ("whatsapp_cloud", {"enabled": True, "http_path": "webhook"}, "must start with '/'"),
])
def test_bad_settings_are_named(tmp_path, platform, table, named):
    with pytest.raises(PluginSettingsError) as info:
        validated(tmp_path, {platform: table})
    assert named in str(info.value)


BRIDGE_USERS = ("a phone number with its country code (+1 555 123 4567), a JID (15551234567@s.whatsapp.net), "
                "a LID (…@lid) or a business-scoped user id (US.13491208655302741918)")
BRIDGE_CHATS = ("a group JID (120363025555555555@g.us), a phone number with its country code (+1 555 123 4567), "
                "a JID or LID of a DM, or a Cloud API group id or business-scoped user id (US.13491208655302741918)")
CLOUD_USERS = ("a phone number with its country code (+1 555 123 4567; a phone JID such as "
               "15551234567@s.whatsapp.net is read as its number) or a business-scoped user id "
               "(US.13491208655302741918); the Cloud API never sends a LID or a group JID")
CLOUD_CHATS = ("a Cloud API group id (the group_id of its webhooks), a business-scoped user id "
               "(US.13491208655302741918) or a phone number with its country code (+1 555 123 4567); "
               "the Cloud API never sends a group JID (…@g.us) or a LID")


@pytest.mark.parametrize("platform", ["whatsapp", "whatsapp_cloud"])
def test_user_lists_take_phone_numbers_as_people_write_them(tmp_path, platform):
    # docs/behaviour.md §9: a phone number in `allowed_users` / `admin_users` is kept as the
    # digits a sender's id has (bridge `15551234567@s.whatsapp.net`, Cloud `wa_id`
    # `15551234567`); a BSUID is kept, its country code in upper case.
    table = {"allowed_users": ["+1 555 123 4567", "+1-555-123-4567", "+1 (555) 123-4567", "+15551234567",
                               "1.555.123.4567", "US.13491208655302741918", "us.ENT.1349120865"],
             "admin_users": "+44 20 7946 0958, 447700900123"}
    settings = validated(tmp_path, {platform: table})[platform]
    assert settings.allowed_users == ["15551234567", "15551234567", "15551234567", "15551234567",
                                      "15551234567", "US.13491208655302741918", "US.ENT.1349120865"]
    assert settings.admin_users == ["442079460958", "447700900123"]


def test_bridge_user_lists_keep_jids_of_the_whatsapp_servers(tmp_path):
    # docs/adapters.md §4.0: `<user>[_<agent>][:<device>]@<server>`, users on s.whatsapp.net,
    # c.us, lid, hosted, hosted.lid; compared in their canonical form (seed §4), so kept as written.
    entries = ["15551234567@s.whatsapp.net", "15551234567:12@s.whatsapp.net", "15551234567@c.us",
               "98765432109876@lid", "98765432109876_1:3@lid", "15550001111@hosted", "15557654321:3"]
    assert validated(tmp_path, {"whatsapp": {"allowed_users": entries}})["whatsapp"].allowed_users == entries


def test_cloud_user_lists_read_a_phone_jid_as_its_number(tmp_path):
    # docs/adapters.md §4.3: a Cloud sender is its `wa_id` (phone digits) or its BSUID; a phone
    # JID's user part is that number (§4.0 "PN"), so it means exactly one `wa_id`.
    table = {"allowed_users": ["15551234567@s.whatsapp.net", "+15551234567:12@s.whatsapp.net", "15551234567@c.us"]}
    settings = validated(tmp_path, {"whatsapp_cloud": table})["whatsapp_cloud"]
    assert settings.allowed_users == ["15551234567", "15551234567", "15551234567"]


@pytest.mark.parametrize("platform,key,entry,never,accepted", [
    ("whatsapp", "allowed_users", "Carol Smith", "a WhatsApp sender", BRIDGE_USERS),
    ("whatsapp", "admin_users", "+1 555 CALL NOW", "a WhatsApp sender", BRIDGE_USERS),
    ("whatsapp", "allowed_users", "carol@example.com", "a WhatsApp sender", BRIDGE_USERS),
    ("whatsapp", "admin_users", "15551234567@example.com", "a WhatsApp sender", BRIDGE_USERS),
    ("whatsapp", "allowed_users", "120363025555555555@g.us", "a WhatsApp sender", BRIDGE_USERS),
    ("whatsapp", "allowed_users", "carol", "a WhatsApp sender", BRIDGE_USERS),
    ("whatsapp_cloud", "allowed_users", "+1 555 123 4567 ext. 2", "a WhatsApp Cloud API sender", CLOUD_USERS),
    ("whatsapp_cloud", "admin_users", "carol@example.com", "a WhatsApp Cloud API sender", CLOUD_USERS),
    ("whatsapp_cloud", "allowed_users", "98765432109876@lid", "a WhatsApp Cloud API sender", CLOUD_USERS),
    ("whatsapp_cloud", "allowed_users", "120363025555555555@g.us", "a WhatsApp Cloud API sender", CLOUD_USERS),
])
def test_a_user_entry_that_can_never_match_is_refused_and_named(tmp_path, platform, key, entry, never, accepted):
    with pytest.raises(PluginSettingsError) as info:
        validated(tmp_path, {platform: {"enabled": True, key: [entry]}})
    assert str(info.value) == (f"invalid settings in [platforms.{platform}]: platforms.{platform}.{key}: "
                               f"{entry!r} can never match {never}: write {accepted}")


def test_bridge_allowed_chats_take_group_jids_group_ids_and_phone_numbers(tmp_path):
    # docs/adapters.md §4.0: a bridge chat is a group JID (`120363…@g.us`, old ones
    # `<creator>-<timestamp>@g.us`) or a DM's JID, keyed without the server.
    table = {"allowed_chats": ["120363025555555555@g.us", "120363025555555555", "15551234567-1600000000",
                               "15551234567-1600000000@g.us", "+1 555 123 4567", "98765432109876@lid",
                               "Y2FwaV9ncm91cDoxNzA1NTU1MDEzOToxMjAzNjM0MDQ2OTQyMzM4MjAZD", "US.13491208655302741918"]}
    settings = validated(tmp_path, {"whatsapp": table})["whatsapp"]
    assert settings.allowed_chats == ["120363025555555555@g.us", "120363025555555555", "15551234567-1600000000",
                                      "15551234567-1600000000@g.us", "15551234567", "98765432109876@lid",
                                      "Y2FwaV9ncm91cDoxNzA1NTU1MDEzOToxMjAzNjM0MDQ2OTQyMzM4MjAZD",
                                      "US.13491208655302741918"]


def test_cloud_allowed_chats_take_group_ids_bsuids_and_phone_numbers(tmp_path):
    # docs/adapters.md §4.3: a Cloud chat is a `group_id`, a DM's BSUID or its `from` digits.
    table = {"allowed_chats": ["Y2FwaV9ncm91cDoxNzA1NTU1MDEzOToxMjAzNjM0MDQ2OTQyMzM4MjAZD", "US.13491208655302741918",
                               "+1 555 123 4567", "15551234567@s.whatsapp.net"]}
    settings = validated(tmp_path, {"whatsapp_cloud": table})["whatsapp_cloud"]
    assert settings.allowed_chats == ["Y2FwaV9ncm91cDoxNzA1NTU1MDEzOToxMjAzNjM0MDQ2OTQyMzM4MjAZD",
                                      "US.13491208655302741918", "15551234567", "15551234567"]


@pytest.mark.parametrize("platform,entry,never,accepted", [
    ("whatsapp", "Family chat", "a WhatsApp chat", BRIDGE_CHATS),
    ("whatsapp", "family@example.com", "a WhatsApp chat", BRIDGE_CHATS),
    ("whatsapp", "status@broadcast", "a WhatsApp chat", BRIDGE_CHATS),
    ("whatsapp_cloud", "+1 555 123 4567 ext. 2", "a WhatsApp Cloud API chat", CLOUD_CHATS),
    ("whatsapp_cloud", "120363025555555555@g.us", "a WhatsApp Cloud API chat", CLOUD_CHATS),
    ("whatsapp_cloud", "98765432109876@lid", "a WhatsApp Cloud API chat", CLOUD_CHATS),
])
def test_a_chat_entry_that_can_never_match_is_refused_and_named(tmp_path, platform, entry, never, accepted):
    with pytest.raises(PluginSettingsError) as info:
        validated(tmp_path, {platform: {"enabled": True, "allowed_chats": [entry]}})
    assert str(info.value) == (f"invalid settings in [platforms.{platform}]: platforms.{platform}.allowed_chats: "
                               f"{entry!r} can never match {never}: write {accepted}")


async def test_cloud_start_names_the_missing_setting_never_a_value():
    adapter = WhatsAppCloudAdapter({"access_token": SECRET, "app_secret": "s", "phone_number_id": "1"})
    with pytest.raises(WhatsAppCloudStartError) as info:
        await adapter.start()
    assert str(info.value) == ("platforms.whatsapp_cloud.verify_token is not set "
                               "(set HERMES_PLATFORMS__WHATSAPP_CLOUD__VERIFY_TOKEN)")
    assert await adapter.health() == {"ok": False, "listening": False, "malformed": 0}


def test_platform_notes(tmp_path):
    pm, _ = create_plugin_manager(GatewayConfig(home=tmp_path, platforms={}))

    def notes(source):
        return [line for group in pm.hook.hermes_platform_notes(context=SessionContext(source=source))
                for line in group]

    dm = SessionSource(platform="whatsapp", chat_id="15551234567@s.whatsapp.net", chat_type="dm")
    assert notes(dm) == [
        "Platform: WhatsApp. Replies are plain text with WhatsApp's own markup (*bold*, _italic_, "
        "~strike~, ```code```); Markdown headings, tables and links in brackets are shown literally. "
        "Replies longer than 4096 characters are split into several messages.",
        "You cannot read the chat's history, search it, or see media, reactions or status updates "
        "beyond what is in this conversation; quoting a message is a reply, not a thread.",
    ]
    group = SessionSource(platform="whatsapp_cloud", chat_id="Y2FwaV9ncm91cDo", chat_type="group")
    assert notes(group)[2:] == [
        "This is a WhatsApp Business number: you can only answer within 24 hours of the user's last "
        "message; after that a reply cannot be delivered.",
        "This is a WhatsApp group: every member sees your replies. Members are mentioned as @ followed "
        "by their number; you cannot mention people yourself."]
    assert [l for l in notes(SessionSource(platform="signal", chat_id="x", chat_type="dm")) if "WhatsApp" in l] == []


def test_plugins_json_lists_whatsapp_without_secrets(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from hermes_core.cli.plugins import plugins_app

    home = tmp_path / "home"
    home.mkdir()
    (home / "hermes.toml").write_text("[platforms.whatsapp]\nenabled = true\n\n"
                                      "[platforms.whatsapp_cloud]\nenabled = true\nphone_number_id = \"1\"\n")
    monkeypatch.setenv("HERMES_HOME", str(home))
    monkeypatch.setenv("HERMES_PLATFORMS__WHATSAPP_CLOUD__ACCESS_TOKEN", SECRET)
    monkeypatch.setenv("HERMES_PLATFORMS__WHATSAPP_CLOUD__APP_SECRET", "app-SECRETPART")
    monkeypatch.setenv("HERMES_PLATFORMS__WHATSAPP__BRIDGE_TOKEN", "bridge-SECRETPART")
    monkeypatch.delenv("HERMES_CONFIG", raising=False)
    monkeypatch.delenv("HERMES_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    result = CliRunner().invoke(plugins_app, ["--json"])
    assert result.exit_code == 0, result.output
    rows = {(row["name"], row["group"]): row for row in json.loads(result.output)}
    row = rows[("whatsapp", "hermes_core.plugins")]
    assert (row["status"], row["distribution"], row["module"]) == ("loaded", "hermes-gateway-whatsapp",
                                                                   "hermes_whatsapp.hooks")
    assert row["hooks"] == ["hermes_platform_notes", "hermes_settings_schema"]
    assert "SECRETPART" not in result.output


def test_home_channel_is_read_by_each_tables_chat_id_rule(tmp_path):
    # docs/behaviour.md §9: the home channel is a chat id, read as an `allowed_chats` entry of
    # its table: a written number as its digits, a Cloud phone JID as its number.
    settings = validated(tmp_path, {"whatsapp": {"home_channel": "+1 555 123 4567"},
                                    "whatsapp_cloud": {"home_channel": "15551234567@s.whatsapp.net"}})
    assert (settings["whatsapp"].home_channel, settings["whatsapp_cloud"].home_channel) == ("15551234567",
                                                                                            "15551234567")


@pytest.mark.parametrize("platform,entry,never,accepted", [
    ("whatsapp", "family@example.com", "a WhatsApp chat", BRIDGE_CHATS),
    ("whatsapp_cloud", "120363025555555555@g.us", "a WhatsApp Cloud API chat", CLOUD_CHATS),
])
def test_a_home_channel_that_can_never_be_a_chat_is_refused_and_named(tmp_path, platform, entry, never, accepted):
    with pytest.raises(PluginSettingsError) as info:
        validated(tmp_path, {platform: {"enabled": True, "home_channel": entry}})
    assert str(info.value) == (f"invalid settings in [platforms.{platform}]: platforms.{platform}.home_channel: "
                               f"{entry!r} can never match {never}: write {accepted}")
