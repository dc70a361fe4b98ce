"""Fixture tests of the pure mappings (docs/adapters.md §4.1–§4.3, samples W1–W7, traps W-T1…W-T10).

Every expected SessionSource field and session key below is copied literally from docs/adapters.md
§4.2 / §4.3. Keys are built by the core's key builder with the core's alias folding
(`canonical_with_aliases`, what the builtin `hermes_canonical_identity` runs), fed with the aliases
the event carries plus those the samples assume the store already holds (98765432109876 ↔
15551234567 and 44455566677788 ↔ 15557654321).
"""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path

import pytest

from hermes_core import build_session_key
from hermes_core.keys import canonical_with_aliases
from hermes_core.sdk import IdentityAlias, MalformedPayload, QueuedChange, SessionSource
from hermes_core.store.aliases import AliasMap
from hermes_whatsapp.bridge import lid_mappings
from hermes_whatsapp.bridge_mapping import group_subjects, map_bridge_event, mapping_update
from hermes_whatsapp.cloud_mapping import StatusReport, map_webhook
from hermes_whatsapp.jid import alias_pair

FIXTURES = Path(__file__).parent / "fixtures"
PHONE_NUMBER_ID = "109876543210001"
STORE_ALIASES = [IdentityAlias("whatsapp", "98765432109876", "15551234567", "sample"),
                 IdentityAlias("whatsapp", "44455566677788", "15557654321", "sample")]


def load(name: str):
    return json.loads((FIXTURES / f"{name}.json").read_text())


def key_of(source: SessionSource, aliases=(), **policy) -> str:
    """The session key the gateway builds, with `aliases` recorded in the alias store."""
    amap = AliasMap()
    for alias in aliases:
        amap.set(alias.platform, alias.alias_id, alias.canonical_id)
    return build_session_key(source, canonicalize=lambda p, k, v: canonical_with_aliases(p, k, v, amap.resolve),
                             **policy)


def group_names(jid: str) -> str | None:
    return {"120363025555555555@g.us": "Book Club"}.get(jid)


# (fixture, expected SessionSource fields, text handed to the gateway, session key) — docs/adapters.md
BRIDGE_SAMPLES = [
    ("w1_dm_pn",
     {"platform": "whatsapp", "chat_id": "15551234567@s.whatsapp.net", "chat_name": "Carol", "chat_type": "dm",
      "user_id": "15551234567@s.whatsapp.net", "user_name": "Carol", "message_id": "3EB0A1B2C3D4E5F60718"},
     "hello", "agent:main:whatsapp:dm:15551234567"),
    ("w2_dm_lid",
     {"platform": "whatsapp", "chat_id": "98765432109876@lid", "chat_name": "Carol", "chat_type": "dm",
      "user_id": "98765432109876@lid", "user_name": "Carol", "message_id": "3EB0F00DBABE00000001"},
     "are you there?", "agent:main:whatsapp:dm:15551234567"),
    ("w3_whatsmeow_group",
     {"platform": "whatsapp", "chat_id": "120363025555555555@g.us", "chat_name": "Book Club", "chat_type": "group",
      "user_id": "15557654321:3@s.whatsapp.net", "user_name": "Dave", "message_id": "3A1F2E3D4C5B6A79"},
     "me too", "agent:main:whatsapp:group:120363025555555555:15557654321"),
]

CLOUD_SAMPLES = [
    ("w5_cloud_dm",
     {"platform": "whatsapp_cloud", "chat_id": "US.13491208655302741918", "chat_name": "Sheena", "chat_type": "dm",
      "user_id": "16505551234", "user_name": "Sheena", "user_id_alt": "US.13491208655302741918",
      "message_id": "wamid.HBgLMTY1MDU1NTEyMzQVAgASGBQzQTRBNjU5OUFFRTAzODEwMTQ0RgA="},
     "Do you ship to Canada?", "agent:main:whatsapp_cloud:dm:US.13491208655302741918"),
    ("w6_cloud_group",
     {"platform": "whatsapp_cloud", "chat_id": "Y2FwaV9ncm91cDoxNzA1NTU1MDEzOToxMjAzNjM0MDQ2OTQyMzM4MjAZD",
      "chat_type": "group", "user_id": "16505551234", "user_name": "Sheena",
      "user_id_alt": "US.13491208655302741918", "message_id": "wamid.GRP0000000000000001"},
     "what time is the call?",
     "agent:main:whatsapp_cloud:group:Y2FwaV9ncm91cDoxNzA1NTU1MDEzOToxMjAzNjM0MDQ2OTQyMzM4MjAZD"
     ":US.13491208655302741918"),
    ("w7_cloud_username",
     {"platform": "whatsapp_cloud", "chat_id": "BR.1502576394655843", "chat_name": "Rafa", "chat_type": "dm",
      "user_id": "BR.1502576394655843", "user_name": "Rafa", "user_id_alt": "BR.1502576394655843",
      "message_id": "wamid.USR0000000000000001"},
     "oi, tudo bem?", "agent:main:whatsapp_cloud:dm:BR.1502576394655843"),
]


@pytest.mark.parametrize("name,fields,text,key", BRIDGE_SAMPLES, ids=[s[0] for s in BRIDGE_SAMPLES])
def test_bridge_sample_maps_to_documented_source_and_key(name, fields, text, key):
    [(source, event)] = map_bridge_event(load(name), group_names=group_names)
    assert source == SessionSource(**fields)  # "fields not shown are None / false"
    assert source.is_bot is False
    assert (event.source, event.text, event.message_id) == (source, text, fields["message_id"])
    assert key_of(source, STORE_ALIASES + event.aliases) == key


@pytest.mark.parametrize("name,fields,text,key", CLOUD_SAMPLES, ids=[s[0] for s in CLOUD_SAMPLES])
def test_cloud_sample_maps_to_documented_source_and_key(name, fields, text, key):
    batch = map_webhook(load(name), phone_number_id=PHONE_NUMBER_ID)
    [(source, event)] = batch.turns
    assert (batch.reports, batch.malformed) == ([], [])
    assert source == SessionSource(**fields)
    assert source.is_bot is False
    assert (event.text, event.message_id) == (text, fields["message_id"])
    assert key_of(source, event.aliases) == key


def test_w4_status_update_and_own_echo_produce_nothing_and_say_why(caplog):
    with caplog.at_level(logging.DEBUG, logger="hermes_whatsapp"):
        assert map_bridge_event(load("w4_status_and_echo")) == []
    reasons = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert reasons == [
        "whatsapp bridge message skipped: 3EB0STATUS000000001 is a Status update, broadcast list or channel post",
        "whatsapp bridge message skipped: 3EB0OURREPLY0000001 is the bot's own message (fromMe)"]


def test_w1_and_w2_share_one_key_from_the_first_message_without_a_stored_alias():
    # W-T1: the alias travels on the event (remoteJidAlt) and is recorded before keying.
    [(s1, e1)] = map_bridge_event(load("w1_dm_pn"))
    [(s2, e2)] = map_bridge_event(load("w2_dm_lid"))
    assert e1.aliases == e2.aliases == [IdentityAlias("whatsapp", "98765432109876", "15551234567", "remoteJidAlt")]
    assert key_of(s2, e2.aliases) == key_of(s1, e1.aliases) == "agent:main:whatsapp:dm:15551234567"
    # without the mapping the LID DM is a second, empty session (the upstream flip bug)
    assert key_of(s2) == "agent:main:whatsapp:dm:98765432109876"


def test_w3_member_addressed_by_lid_is_the_same_participant():
    [(source, event)] = map_bridge_event(load("w3_whatsmeow_group"), group_names=group_names)
    assert event.aliases == [IdentityAlias("whatsapp", "44455566677788", "15557654321", "SenderAlt")]
    by_lid = SessionSource(platform="whatsapp", chat_id="120363025555555555@g.us", chat_type="group",
                           user_id="44455566677788@lid")
    assert key_of(by_lid, event.aliases) == "agent:main:whatsapp:group:120363025555555555:15557654321"
    # the raw JIDs stay on the source (W-T6): replies go to the group JID
    assert (source.chat_id, source.user_id) == ("120363025555555555@g.us", "15557654321:3@s.whatsapp.net")


def test_w5_phone_is_an_alias_of_the_bsuid_so_a_phone_only_payload_keys_the_same_session():
    [(source, event)] = map_webhook(load("w5_cloud_dm")).turns
    assert event.aliases == [IdentityAlias("whatsapp_cloud", "16505551234", "US.13491208655302741918",
                                           "contacts.user_id")]
    old = load("w5_cloud_dm")  # a pre-BSUID payload: no user_id anywhere
    value = old["entry"][0]["changes"][0]["value"]
    del value["contacts"][0]["user_id"], value["messages"][0]["from_user_id"]
    [(phone_only, _)] = map_webhook(old).turns
    assert (phone_only.chat_id, phone_only.user_id, phone_only.user_id_alt) == ("16505551234", "16505551234", None)
    assert key_of(phone_only, event.aliases) == "agent:main:whatsapp_cloud:dm:US.13491208655302741918"


def test_group_setting_off_keys_the_group_alone():
    [(source, _)] = map_bridge_event(load("w3_whatsmeow_group"))
    assert key_of(source, group_sessions_per_user=False) == "agent:main:whatsapp:group:120363025555555555"


def _upsert(key: dict, message: dict | None = None, **extra) -> dict:
    item = {"key": {"fromMe": False, "id": "3EB0TEST", **key}, "pushName": "Carol",
            "messageTimestamp": 1767225600, **extra}
    if message is not None:
        item["message"] = message
    return {"type": "notify", "messages": [item]}


def test_wrapped_captioned_and_quoted_messages_are_read():
    wrapped = _upsert({"remoteJid": "15551234567@s.whatsapp.net"}, {"ephemeralMessage": {"message": {
        "viewOnceMessageV2": {"message": {"imageMessage": {"caption": "look", "mimetype": "image/jpeg"}}}}}})
    [(_, event)] = map_bridge_event(wrapped)
    assert (event.text, event.media) == ("look", [{"kind": "image", "mimetype": "image/jpeg"}])
    quoted = _upsert({"remoteJid": "15551234567@s.whatsapp.net"}, {"extendedTextMessage": {
        "text": "and this?", "contextInfo": {"stanzaId": "3EB0OLD", "participant": "15551234567@s.whatsapp.net",
                                             "quotedMessage": {"conversation": "the earlier one"}}}})
    [(_, event)] = map_bridge_event(quoted)
    assert (event.reply_to_message_id, event.reply_to_text, event.reply_to_author_id) == (
        "3EB0OLD", "the earlier one", "15551234567@s.whatsapp.net")


@pytest.mark.parametrize("payload,why", [
    (_upsert({"remoteJid": "120363111111111111@newsletter"}, {"conversation": "news"}), "channel post"),
    (_upsert({"remoteJid": "15551234567@s.whatsapp.net"}, {"reactionMessage": {"text": "👍"}}), "reactionMessage"),
    (_upsert({"remoteJid": "15551234567@s.whatsapp.net"}, {"protocolMessage": {"type": 3}}), "protocolMessage"),
    (_upsert({"remoteJid": "15551234567@s.whatsapp.net"}), "has no message"),
    (_upsert({"remoteJid": "15551234567@s.whatsapp.net"}, {"conversation": "  "}), "neither text nor media"),
    ({**_upsert({"remoteJid": "15551234567@s.whatsapp.net"}, {"conversation": "old"}), "type": "append"},
     "not new messages"),
    ({"type": "presence.update", "id": "15551234567@s.whatsapp.net"}, "not a message event"),
])
def test_non_turns_return_nothing_and_say_why(payload, why, caplog):
    with caplog.at_level(logging.DEBUG, logger="hermes_whatsapp"):
        assert map_bridge_event(payload) == []
    assert any(why in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("payload,field", [
    ("not an object", "event must be an object, got str"),
    ({"type": "notify", "messages": "x"}, "event.messages must be a list, got str"),
    ({"type": "message", "Info": {"Chat": 120363025555555555, "Sender": "1@s.whatsapp.net", "ID": "x"}},
     "event.Info.Chat must be a string, got int"),
    ({"type": "message", "Info": {"Chat": "\ud800@s.whatsapp.net", "Sender": "1@s.whatsapp.net", "ID": "x"}},
     "event.Info.Chat is not valid Unicode (lone surrogate)"),
    ({"type": "message", "Info": {"Sender": "1@s.whatsapp.net", "ID": "x"}}, "event.Info.Chat is missing"),
    ({"type": "message", "Info": {"Chat": "1@s.whatsapp.net", "Sender": "1@s.whatsapp.net", "ID": "x",
                                  "IsFromMe": "no"}}, "event.Info.IsFromMe must be a boolean, got str"),
])
def test_malformed_bridge_events_name_the_field(payload, field):
    with pytest.raises(MalformedPayload) as info:
        map_bridge_event(payload)
    assert str(info.value) == f"malformed payload: {field}"


def test_a_broken_message_in_an_upsert_is_skipped_and_the_others_kept(caplog):
    good = _upsert({"remoteJid": "15551234567@s.whatsapp.net"}, {"conversation": "fine"})["messages"][0]
    huge = copy.deepcopy(good)
    huge["messageTimestamp"] = 10 ** 30
    nokey = {"message": {"conversation": "x"}}
    [(_, event)] = map_bridge_event({"type": "notify", "messages": [huge, nokey, good]})
    assert event.text == "fine"
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        "skipping malformed whatsapp bridge message: malformed payload: event.messages[0].messageTimestamp "
        "is out of range (0..253402300799)",
        "skipping malformed whatsapp bridge message: malformed payload: event.messages[1].key is missing"]


def test_lone_surrogate_in_a_name_or_text_is_replaced_not_fatal():
    payload = _upsert({"remoteJid": "15551234567@s.whatsapp.net"}, {"conversation": "hi \udc80"})
    payload["messages"][0]["pushName"] = "Ca\ud800rol"
    [(source, event)] = map_bridge_event(payload)
    assert (source.user_name, event.text) == ("Ca\ufffdrol", "hi \ufffd")


def test_lid_mapping_update_and_group_events():
    assert mapping_update({"type": "lid-mapping.update", "lid": "98765432109876@lid",
                           "pn": "15551234567@s.whatsapp.net"}) == IdentityAlias(
        "whatsapp", "98765432109876", "15551234567", "lid-mapping.update")
    assert group_subjects({"type": "groups.update", "groups": [{"id": "1203@g.us", "subject": "Chess"}, "x"]}) == {
        "1203@g.us": "Chess"}


def test_alias_pair_picks_the_shortest_then_smallest_and_skips_odd_ids():
    assert alias_pair("98765432109876@lid", "+15551234567", "t") == IdentityAlias(
        "whatsapp", "98765432109876", "15551234567", "t")
    assert alias_pair("22222@lid", "11111@s.whatsapp.net", "t").canonical_id == "11111"
    assert alias_pair("15551234567:3@s.whatsapp.net", "15551234567@s.whatsapp.net", "t") is None
    assert alias_pair("a b@lid", "1555@s.whatsapp.net", "t") is None
    assert alias_pair(None, "1555@s.whatsapp.net", "t") is None


def test_lid_mapping_files_of_the_session_folder(tmp_path, caplog):
    # Baileys multi-file auth state: lid-mapping-<pn>.json holds the LID, <lid>_reverse.json the PN.
    (tmp_path / "lid-mapping-15551234567.json").write_text('"98765432109876"')
    (tmp_path / "lid-mapping-98765432109876_reverse.json").write_text('"15551234567"')
    (tmp_path / "lid-mapping-44455566677788_reverse.json").write_text('"15557654321"')
    (tmp_path / "lid-mapping-broken.json").write_text("{not json")
    (tmp_path / "creds.json").write_text("{}")
    assert lid_mappings(tmp_path) == [
        IdentityAlias("whatsapp", "98765432109876", "15551234567", "lid-mapping file"),
        IdentityAlias("whatsapp", "44455566677788", "15557654321", "lid-mapping file")]
    assert any("lid-mapping-broken.json skipped" in r.getMessage() for r in caplog.records)
    # W1 and W2 with only the files' aliases (no …Alt fields): one key
    w1, w2 = load("w1_dm_pn"), load("w2_dm_lid")
    del w1["messages"][0]["key"]["remoteJidAlt"], w2["messages"][0]["key"]["remoteJidAlt"]
    [(s1, _)], [(s2, _)] = map_bridge_event(w1), map_bridge_event(w2)
    assert key_of(s1, lid_mappings(tmp_path)) == key_of(s2, lid_mappings(tmp_path)) == \
        "agent:main:whatsapp:dm:15551234567"


# ---- Cloud API -------------------------------------------------------------------------------

def _cloud(value: dict) -> dict:
    return {"object": "whatsapp_business_account",
            "entry": [{"id": "102290129340398", "changes": [{"field": "messages", "value": {
                "messaging_product": "whatsapp",
                "metadata": {"display_phone_number": "15550783881", "phone_number_id": PHONE_NUMBER_ID},
                **value}}]}]}


def test_status_callbacks_are_reports_not_turns():
    body = _cloud({"statuses": [
        {"id": "wamid.S1", "status": "sent", "timestamp": "1767225700", "recipient_id": "16505551234"},
        {"id": "wamid.S1", "status": "delivered", "timestamp": "1767225701", "recipient_id": "16505551234"},
        {"id": "wamid.S1", "status": "read", "timestamp": "1767225702", "recipient_id": "16505551234"},
        {"id": "wamid.S2", "status": "failed", "timestamp": "1767225703", "recipient_id": "16505551234",
         "errors": [{"code": 131047, "title": "Re-engagement message",
                     "message": "Re-engagement message",
                     "error_data": {"details": "Message failed to send because more than 24 hours have passed "
                                               "since the customer last replied to this number."}}]}]})
    batch = map_webhook(body, phone_number_id=PHONE_NUMBER_ID)
    assert batch.turns == []
    assert batch.reports == [StatusReport("wamid.S1", "delivered"), StatusReport("wamid.S1", "delivered"),
                             StatusReport("wamid.S2", "failed", "WhatsApp error 131047: Re-engagement message", 131047)]


def test_cloud_skips_other_numbers_reactions_echo_fields_and_own_number():
    w5 = load("w5_cloud_dm")
    assert map_webhook(w5, phone_number_id="999").turns == []
    reaction = _cloud({"contacts": [{"profile": {"name": "S"}, "wa_id": "16505551234"}], "messages": [
        {"from": "16505551234", "id": "wamid.R", "timestamp": "1767225600", "type": "reaction",
         "reaction": {"message_id": "wamid.X", "emoji": "👍"}}]})
    assert map_webhook(reaction).turns == []
    echo = copy.deepcopy(w5)
    echo["entry"][0]["changes"][0]["field"] = "smb_message_echoes"
    assert map_webhook(echo).turns == []
    own = _cloud({"messages": [{"from": "15550783881", "id": "wamid.O", "timestamp": "1767225600", "type": "text",
                                "text": {"body": "from the business app"}}]})
    assert map_webhook(own).turns == []
    assert map_webhook({"object": "page", "entry": []}).turns == []


def test_cloud_reply_context_buttons_and_media():
    body = _cloud({"contacts": [{"profile": {"name": "Sheena"}, "wa_id": "16505551234",
                                 "user_id": "US.13491208655302741918"}],
                   "messages": [
                       {"from": "16505551234", "id": "wamid.Q", "timestamp": "1767225600", "type": "text",
                        "text": {"body": "this one"}, "context": {"from": "15550783881", "id": "wamid.BOT1"}},
                       {"from": "16505551234", "id": "wamid.B", "timestamp": "1767225601", "type": "interactive",
                        "interactive": {"type": "button_reply", "button_reply": {"id": "yes", "title": "Yes"}}},
                       {"from": "16505551234", "id": "wamid.I", "timestamp": "1767225602", "type": "image",
                        "image": {"id": "1234567890", "mime_type": "image/jpeg", "caption": "receipt"}}]})
    q, b, i = [event for _, event in map_webhook(body).turns]
    assert (q.text, q.reply_to_message_id, q.reply_to_author_id) == ("this one", "wamid.BOT1", "15550783881")
    assert b.text == "Yes"
    assert (i.text, i.media) == ("receipt", [{"kind": "image", "id": "1234567890", "mime_type": "image/jpeg"}])


def test_malformed_cloud_messages_are_named_and_the_rest_kept():
    body = _cloud({"contacts": [], "messages": [
        {"id": "wamid.1", "timestamp": "1767225600", "type": "text", "text": {"body": "no sender"}},
        {"from": 16505551234, "id": "wamid.2", "timestamp": "1767225600", "type": "text", "text": {"body": "x"}},
        {"from": "16505551234", "id": "wamid.3", "timestamp": "9" * 40, "type": "text", "text": {"body": "x"}},
        {"from": "16505551234", "id": "wamid.4", "timestamp": "1767225600", "type": "text", "text": "x"},
        {"from": "16505551234", "id": "wamid.5", "timestamp": "1767225600", "type": "text", "text": {"body": "ok"}},
    ], "statuses": [{"status": "failed"}]})
    batch = map_webhook(body)
    assert [e.text for _, e in batch.turns] == ["ok"]
    p = "body.entry[0].changes[0].value"
    assert batch.malformed == [
        f"{p}.messages[0].from is missing (and so is the sender's user_id)",
        f"{p}.messages[1].from must be a string, got int",
        f"{p}.messages[2].timestamp must be epoch seconds, got str",
        f"{p}.messages[3].text must be an object, got str",
        f"{p}.statuses[0].id is missing"]
    with pytest.raises(MalformedPayload, match=r"^malformed payload: body.entry must be a list, got dict$"):
        map_webhook({"object": "whatsapp_business_account", "entry": {}})


def test_edits_and_revokes_are_changes_naming_the_original():
    # docs/behaviour.md §5: an edit or a deletion names the original (`protocolMessage.key.id`),
    # routed as the original was; the edit also carries itself as a turn (its own id) for
    # edits_as_turns. Both used to be dropped (or, with edits_as_turns, the edit was a plain turn).
    dm = "15551234567@s.whatsapp.net"
    edit = _upsert({"remoteJid": dm, "id": "3EB0EDIT"}, {"editedMessage": {"message": {
        "protocolMessage": {"key": {"remoteJid": dm, "fromMe": True, "id": "3EB0ORIG"}, "type": 14,
                            "editedMessage": {"conversation": "hello, corrected"}}}}})
    [change] = map_bridge_event(edit)
    assert isinstance(change, QueuedChange)
    assert (change.message_id, change.text, change.kind, change.alternates) == ("3EB0ORIG", "hello, corrected", "edit", ())
    assert (change.source.chat_id, change.source.chat_type, change.source.user_id, change.source.message_id) == (
        dm, "dm", dm, "3EB0ORIG")
    assert (change.event.message_id, change.event.text) == ("3EB0EDIT", "hello, corrected")
    assert key_of(change.source) == "agent:main:whatsapp:dm:15551234567"

    bare = {"type": "message", "Info": {"Chat": dm, "Sender": dm, "ID": "3A1EDIT", "PushName": "Carol"},
            "Message": {"protocolMessage": {"key": {"remoteJID": dm, "ID": "3A1ORIG"}, "type": "MESSAGE_EDIT",
                                            "editedMessage": {"conversation": "fixed"}}}}
    [change] = map_bridge_event(bare)
    assert (change.message_id, change.text, change.event.message_id) == ("3A1ORIG", "fixed", "3A1EDIT")

    group, dave, admin = "120363025555555555@g.us", "15557654321:3@s.whatsapp.net", "15559990000@s.whatsapp.net"
    revoke = _upsert({"remoteJid": group, "id": "3EB0DEL", "participant": dave},
                     {"protocolMessage": {"key": {"remoteJid": group, "fromMe": True, "id": "3EB0GONE"}, "type": 0}})
    [change] = map_bridge_event(revoke, group_names=group_names)
    assert (change.message_id, change.text, change.event, change.kind) == ("3EB0GONE", None, None, "deletion")
    assert key_of(change.source) == "agent:main:whatsapp:group:120363025555555555:15557654321"
    assert change.alternates == ()
    by_admin = {"type": "message", "Info": {"Chat": group, "Sender": admin, "ID": "3A1DEL"},
                "Message": {"protocolMessage": {"key": {"remoteJID": group, "ID": "3A1GONE", "participant": dave},
                                                "type": "REVOKE"}}}
    [change] = map_bridge_event(by_admin)
    assert [key_of(s) for s in (change.source, *change.alternates)] == [
        "agent:main:whatsapp:group:120363025555555555:15559990000",
        "agent:main:whatsapp:group:120363025555555555:15557654321"]


def test_edits_and_revokes_carry_their_own_lid_phone_pairs():
    # docs/adapters.md §4.1, W-T1, W-T11: a change's `…Alt` fields are aliases as a message's are
    # (the adapter records them before it offers the change); they used to be dropped, so a change
    # that was the first to tell a pair missed an original queued under the other JID form.
    # The pairs are the platform reference's (98765432109876 ↔ 15551234567, 44455566677788 ↔ 15557654321).
    lid, pn = "98765432109876@lid", "15551234567@s.whatsapp.net"
    carol = IdentityAlias("whatsapp", "98765432109876", "15551234567", "remoteJidAlt")
    revoke = _upsert({"remoteJid": lid, "remoteJidAlt": pn, "id": "3EB0DEL"},
                     {"protocolMessage": {"key": {"remoteJid": lid, "fromMe": True, "id": "3EB0GONE"}, "type": 0}})
    [change] = map_bridge_event(revoke)
    assert (change.kind, change.aliases) == ("deletion", (carol,))
    assert key_of(change.source, change.aliases) == "agent:main:whatsapp:dm:15551234567"
    edit = _upsert({"remoteJid": lid, "remoteJidAlt": pn, "id": "3EB0EDIT"}, {"editedMessage": {"message": {
        "protocolMessage": {"key": {"remoteJid": lid, "fromMe": True, "id": "3EB0ORIG"}, "type": 14,
                            "editedMessage": {"conversation": "hello, corrected"}}}}})
    [change] = map_bridge_event(edit)
    assert (change.kind, change.aliases, change.event.aliases) == ("edit", (carol,), [carol])

    group, dave_lid, dave_pn = "120363025555555555@g.us", "44455566677788@lid", "15557654321:3@s.whatsapp.net"
    dave = IdentityAlias("whatsapp", "44455566677788", "15557654321", "participantAlt")
    revoke = _upsert({"remoteJid": group, "id": "3EB0DEL", "participant": dave_lid, "participantAlt": dave_pn},
                     {"protocolMessage": {"key": {"remoteJid": group, "fromMe": True, "id": "3EB0GONE"}, "type": 0}})
    [change] = map_bridge_event(revoke, group_names=group_names)
    assert (change.aliases, change.alternates) == ((dave,), ())
    assert key_of(change.source, change.aliases) == "agent:main:whatsapp:group:120363025555555555:15557654321"
    by_whatsmeow = {"type": "message", "Info": {"Chat": group, "Sender": dave_lid, "SenderAlt": dave_pn, "ID": "3A1EDIT"},
                    "Message": {"protocolMessage": {"key": {"remoteJID": group, "ID": "3A1ORIG"}, "type": "MESSAGE_EDIT",
                                                    "editedMessage": {"conversation": "fixed"}}}}
    [change] = map_bridge_event(by_whatsmeow, group_names=group_names)
    assert (change.kind, change.aliases) == ("edit", (IdentityAlias("whatsapp", "44455566677788", "15557654321",
                                                                    "SenderAlt"),))


@pytest.mark.parametrize("message,field", [
    ({"protocolMessage": {"type": 0}}, "event.messages[0].message.protocolMessage.key is missing"),
    ({"protocolMessage": {"type": 0, "key": {"remoteJid": "15551234567@s.whatsapp.net", "id": 7}}},
     "event.messages[0].message.protocolMessage.key.id must be a string, got int"),
    ({"protocolMessage": {"type": 14, "key": {}, "editedMessage": {"conversation": "x"}}},
     "event.messages[0].message.protocolMessage.key.id is missing"),
    ({"editedMessage": {"message": {"conversation": "x"}}},
     "event.messages[0].message.editedMessage.message.protocolMessage is missing (an edit names its original there)"),
])
def test_an_edit_or_revoke_without_its_original_is_malformed(message, field, caplog):
    assert map_bridge_event(_upsert({"remoteJid": "15551234567@s.whatsapp.net"}, message)) == []
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        f"skipping malformed whatsapp bridge message: malformed payload: {field}"]


def test_cloud_edits_and_revokes_are_changes_naming_the_original():
    # Meta delivers `edit` and `revoke` messages for Coexistence numbers (docs/adapters.md §4.3).
    contacts = [{"profile": {"name": "Sheena"}, "wa_id": "16505551234", "user_id": "US.13491208655302741918"}]
    body = _cloud({"contacts": contacts, "messages": [
        {"from": "16505551234", "id": "wamid.E1", "timestamp": "1767225600", "type": "edit",
         "edit": {"original_message_id": "wamid.ORIG", "message": {"type": "text", "text": {"body": "fixed"}}}},
        {"from": "16505551234", "id": "wamid.R1", "timestamp": "1767225601", "type": "revoke",
         "revoke": {"original_message_id": "wamid.GONE"}},
        {"from": "16505551234", "id": "wamid.R2", "timestamp": "1767225602", "type": "revoke", "revoke": {}},
    ]})
    batch = map_webhook(body)
    assert batch.turns == []
    edit, revoke = batch.changes
    assert (edit.message_id, edit.text, edit.event.message_id, edit.source.message_id) == (
        "wamid.ORIG", "fixed", "wamid.E1", "wamid.ORIG")
    assert (revoke.message_id, revoke.text, revoke.event) == ("wamid.GONE", None, None)
    assert {key_of(edit.source), key_of(revoke.source)} == {"agent:main:whatsapp_cloud:dm:US.13491208655302741918"}
    assert batch.malformed == [
        "body.entry[0].changes[0].value.messages[2].revoke.original_message_id is missing"]
