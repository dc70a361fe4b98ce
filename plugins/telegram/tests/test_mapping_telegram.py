"""Fixture tests of `map_update` (docs/adapters.md §1.0, §1.1 samples T1–T7, traps TG-T1…TG-T10).

Every expected SessionSource field and session key below is copied literally from docs/adapters.md.
"""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path

import pytest

from hermes_core import SessionSource, build_session_key
from hermes_telegram.mapping import MalformedUpdate, map_update, migration_of, reply_anchor

FIXTURES = Path(__file__).parent / "fixtures"
BOT_ID = 7000000001


def load(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


# (fixture, expected SessionSource fields, text handed to the gateway, session key) — docs/adapters.md §1.1
SAMPLES = [
    ("t1_private_dm",
     {"platform": "telegram", "chat_id": "111222333", "chat_name": "Alice Ng", "chat_type": "dm",
      "user_id": "111222333", "user_name": "Alice Ng", "message_id": "42"},
     "hello", "agent:main:telegram:dm:111222333"),
    ("t2_basic_group_mention",
     {"platform": "telegram", "chat_id": "-4012345678", "chat_name": "Family", "chat_type": "group",
      "user_id": "222333444", "user_name": "Bob", "message_id": "77"},
     "@hermes_test_bot what's the plan?", "agent:main:telegram:group:-4012345678:222333444"),
    ("t3_supergroup_reply",
     {"platform": "telegram", "chat_id": "-1001234567890", "chat_name": "Ops Crew", "chat_type": "group",
      "user_id": "111222333", "user_name": "Alice Ng", "message_id": "7010"},
     "agreed, ship it", "agent:main:telegram:group:-1001234567890:111222333"),
    ("t4_forum_topic",
     {"platform": "telegram", "chat_id": "-1001987654321", "chat_name": "Research Lab", "chat_type": "group",
      "user_id": "111222333", "user_name": "Alice Ng", "thread_id": "17585", "chat_topic": "Deploys",
      "message_id": "5120"},
     "summarise this topic", "agent:main:telegram:group:-1001987654321:17585"),
    ("t5_forum_general_reply",
     {"platform": "telegram", "chat_id": "-1001987654321", "chat_name": "Research Lab", "chat_type": "group",
      "user_id": "222333444", "user_name": "Bob", "thread_id": "1", "message_id": "5200"},
     "@hermes_test_bot status?", "agent:main:telegram:group:-1001987654321:1"),
    ("t6_channel_post",
     {"platform": "telegram", "chat_id": "-1009876543210", "chat_name": "Hermes News", "chat_type": "channel",
      "user_id": "-1009876543210", "user_name": "Hermes News", "message_id": "310"},
     "#digest please", "agent:main:telegram:channel:-1009876543210:-1009876543210"),
    ("t7_private_topic",
     {"platform": "telegram", "chat_id": "111222333", "chat_name": "Alice Ng", "chat_type": "dm",
      "user_id": "111222333", "user_name": "Alice Ng", "thread_id": "88", "message_id": "91"},
     "new idea", "agent:main:telegram:dm:111222333:88"),
]


@pytest.mark.parametrize("fixture,fields,text,key", SAMPLES, ids=[s[0] for s in SAMPLES])
def test_sample_maps_to_documented_source_and_key(fixture, fields, text, key):
    result = map_update(load(fixture), bot_id=BOT_ID)
    assert result is not None
    source, event = result
    # "fields not shown are None / false"
    assert source == SessionSource(**fields)
    assert source.is_bot is False
    assert event.source is source
    assert event.text == text
    assert event.message_id == fields["message_id"]
    assert build_session_key(source) == key


def test_t3_reply_root_is_not_a_thread():
    source, _ = map_update(load("t3_supergroup_reply"))
    assert source.thread_id is None  # message_thread_id 7001 without is_topic_message (TG-T1)


def test_t5_general_reply_root_is_never_the_thread():
    source, _ = map_update(load("t5_forum_general_reply"))
    assert source.thread_id == "1"
    assert source.chat_topic is None  # reply root 5100 carries no forum_topic_created


def test_forum_message_without_thread_id_is_general():
    update = load("t5_forum_general_reply")
    del update["message"]["message_thread_id"]
    del update["message"]["reply_to_message"]
    source, _ = map_update(update)
    assert source.thread_id == "1"
    assert build_session_key(source) == "agent:main:telegram:group:-1001987654321:1"


def test_topic_name_from_config_when_no_creation_message():
    update = load("t4_forum_topic")
    del update["message"]["reply_to_message"]
    source, _ = map_update(update, topic_names={"-1001987654321": {"17585": "Deploys (cfg)"}})
    assert source.chat_topic == "Deploys (cfg)"
    assert source.thread_id == "17585"


def test_anonymous_admin_identity_comes_from_sender_chat():
    # TG-T3: from = GroupAnonymousBot 1087968824 (is_bot true), real sender = the group itself.
    update = load("t2_basic_group_mention")
    msg = update["message"]
    msg["from"] = {"id": 1087968824, "is_bot": True, "first_name": "Group", "username": "GroupAnonymousBot"}
    msg["sender_chat"] = {"id": -4012345678, "title": "Family", "type": "group"}
    source, _ = map_update(update)
    assert (source.user_id, source.user_name, source.is_bot) == ("-4012345678", "Family", False)
    assert build_session_key(source) == "agent:main:telegram:group:-4012345678:-4012345678"


def test_automatic_forward_identity_is_the_linked_channel():
    update = load("t3_supergroup_reply")
    msg = update["message"]
    msg["from"] = {"id": 777000, "is_bot": False, "first_name": "Telegram"}
    msg["sender_chat"] = {"id": -1009876543210, "title": "Hermes News", "type": "channel"}
    msg["is_automatic_forward"] = True
    source, _ = map_update(update)
    assert (source.user_id, source.user_name, source.is_bot) == ("-1009876543210", "Hermes News", False)


def test_caption_is_used_when_there_is_no_text():
    update = load("t1_private_dm")
    msg = update["message"]
    del msg["text"]
    msg["caption"] = "look at this"
    msg["photo"] = [{"file_id": "AgAD", "file_unique_id": "u1", "width": 90, "height": 90}]
    source, event = map_update(update)
    assert event.text == "look at this"
    assert event.media[0]["kind"] == "photo"
    assert event.media[0]["payload"][0]["file_id"] == "AgAD"
    assert event.media_group_id is None


def test_album_photos_carry_their_media_group_id():
    update = load("t1_private_dm")
    msg = update["message"]
    del msg["text"]
    msg["photo"] = [{"file_id": "AgAD", "file_unique_id": "u1", "width": 90, "height": 90}]
    msg["media_group_id"] = "13579246801357924"
    _source, event = map_update(update)
    assert event.media_group_id == "13579246801357924"


# ---- not for the agent: None, and the log says why ---------------------------------------

def test_bots_own_message_is_skipped(caplog):
    update = load("t1_private_dm")
    update["message"]["from"] = {"id": BOT_ID, "is_bot": True, "first_name": "Hermes"}
    with caplog.at_level(logging.DEBUG, logger="hermes_telegram.mapping"):
        assert map_update(update, bot_id=BOT_ID) is None
    assert "the bot's own message 42" in caplog.text


def test_service_message_is_skipped(caplog):
    update = {"update_id": 900000010, "message": {
        "message_id": 50, "date": 1767225700,
        "from": {"id": 222333444, "is_bot": False, "first_name": "Bob"},
        "chat": {"id": -4012345678, "title": "Family", "type": "group"},
        "new_chat_members": [{"id": 333, "is_bot": False, "first_name": "Carol"}]}}
    with caplog.at_level(logging.INFO, logger="hermes_telegram.mapping"):
        assert map_update(update) is None
    assert "service or empty message 50" in caplog.text
    assert "new_chat_members" in caplog.text


def test_edit_is_skipped_by_default(caplog):
    update = load("t1_private_dm")
    msg = update.pop("message")
    msg["edit_date"] = 1767225999
    update["edited_message"] = msg
    with caplog.at_level(logging.INFO, logger="hermes_telegram.mapping"):
        assert map_update(update) is None
    assert "edits_as_turns is off" in caplog.text


def test_edit_as_turn_gets_a_distinct_event_id():
    update = load("t6_channel_post")
    msg = update.pop("channel_post")
    msg["edit_date"] = 1767225999
    msg["text"] = "#digest please, now"
    update["edited_channel_post"] = msg
    source, event = map_update(update, edits_as_turns=True)
    assert source.message_id == "310"
    assert event.message_id == "310@1767225999"
    assert event.text == "#digest please, now"
    assert reply_anchor(event.message_id) == 310


def test_non_message_update_kind_is_skipped():
    update = {"update_id": 900000011, "callback_query": {"id": "1", "from": {"id": 1}, "chat_instance": "x"}}
    assert map_update(update) is None


def test_migration_service_messages_are_recognised_and_not_turns():
    old = {"update_id": 900000012, "message": {
        "message_id": 60, "date": 1767225800, "from": {"id": 222333444, "is_bot": False, "first_name": "Bob"},
        "chat": {"id": -4012345678, "title": "Family", "type": "group"}, "migrate_to_chat_id": -1004012345678}}
    new = {"update_id": 900000013, "message": {
        "message_id": 1, "date": 1767225800, "from": {"id": 222333444, "is_bot": False, "first_name": "Bob"},
        "chat": {"id": -1004012345678, "title": "Family", "type": "supergroup"},
        "migrate_from_chat_id": -4012345678}}
    assert migration_of(old) == ("-4012345678", "-1004012345678")
    assert migration_of(new) == ("-4012345678", "-1004012345678")
    assert map_update(old) is None and map_update(new) is None
    assert migration_of(load("t1_private_dm")) is None


# ---- malformed payloads: MalformedUpdate naming the field -----------------------------------

def _broken(mutate):
    update = copy.deepcopy(load("t4_forum_topic"))
    mutate(update)
    return update


@pytest.mark.parametrize("update,field", [
    ([1, 2], "update"),
    ({"message": {}}, "update.update_id"),
    ({"update_id": "900000004", "message": {}}, "update.update_id"),
    ({"update_id": 5, "mystery_kind": {}}, "update"),
    ({"update_id": 5, "message": "hello"}, "update.message"),
    (_broken(lambda u: u["message"].pop("message_id")), "message.message_id"),
    (_broken(lambda u: u["message"].pop("chat")), "message.chat"),
    (_broken(lambda u: u["message"]["chat"].__setitem__("id", "-1001987654321")), "message.chat.id"),
    (_broken(lambda u: u["message"]["chat"].__setitem__("type", "megagroup")), "message.chat.type"),
    (_broken(lambda u: u["message"]["from"].__setitem__("id", None) or u["message"]["from"].pop("id")),
     "message.from.id"),
    (_broken(lambda u: u["message"].__setitem__("text", 42)), "message.text"),
    (_broken(lambda u: u["message"].__setitem__("is_topic_message", "yes")), "message.is_topic_message"),
    (_broken(lambda u: u["message"].__setitem__("message_thread_id", "17585")), "message.message_thread_id"),
    (_broken(lambda u: u["message"].__setitem__("sender_chat", {"title": "x"})), "message.sender_chat.id"),
], ids=["not-object", "no-update_id", "str-update_id", "unknown-kind", "message-not-object",
        "no-message_id", "no-chat", "str-chat-id", "unknown-chat-type", "no-from-id",
        "int-text", "str-is_topic_message", "str-thread-id", "sender_chat-without-id"])
def test_malformed_update_names_the_field(update, field):
    with pytest.raises(MalformedUpdate) as info:
        map_update(update)
    assert info.value.field == field
    assert repr(field) in str(info.value)


@pytest.mark.parametrize("where", ["update_id", "message_id", "chat.id", "from.id"])
def test_integers_past_the_digit_limit_are_malformed_not_value_errors(where):
    # 10**5000 has more digits than Python converts to str (4300): str() raised a plain ValueError.
    huge = 10 ** 5000

    def put(update):
        target = update if where == "update_id" else update["message"]
        *parents, leaf = where.split(".")
        for parent in parents:
            target = target[parent]
        target[leaf] = huge

    with pytest.raises(MalformedUpdate) as info:
        map_update(_broken(put))
    field = "update.update_id" if where == "update_id" else f"message.{where}"
    assert info.value.field == field
    assert str(info.value).endswith(f"field {field!r} is out of range for a 64-bit integer")


def test_a_group_message_without_from_maps_with_an_unknown_sender():
    update = {"update_id": 900000010, "message": {
        "message_id": 55, "date": 1767225600, "text": "posted on behalf of nobody",
        "chat": {"id": -4012345678, "title": "Family", "type": "group"}}}
    source, event = map_update(update)
    assert source == SessionSource(platform="telegram", chat_id="-4012345678", chat_name="Family",
                                   chat_type="group", message_id="55")
    assert event.text == "posted on behalf of nobody"
    assert build_session_key(source) == "agent:main:telegram:group:-4012345678"


def test_a_service_update_without_from_is_skipped_not_malformed():
    update = {"update_id": 900000011, "message": {
        "message_id": 56, "date": 1767225600, "chat": {"id": -4012345678, "title": "Family", "type": "group"},
        "new_chat_title": "Family 2"}}
    assert map_update(update) is None


def test_malformed_update_carries_update_id():
    update = _broken(lambda u: u["message"].pop("chat"))
    with pytest.raises(MalformedUpdate) as info:
        map_update(update)
    assert info.value.update_id == 900000004
    assert str(info.value) == "telegram update 900000004: field 'message.chat' is missing"


def test_a_required_field_sent_as_null_is_named_null_not_missing():
    # The log line tells the operator what the platform sent: a field that is there as null
    # (`"chat": null`) is not a field left out.
    update = _broken(lambda u: u["message"].update(chat=None))
    with pytest.raises(MalformedUpdate) as info:
        map_update(update)
    assert str(info.value) == "telegram update 900000004: field 'message.chat' is null"


# ---- reply context and update id on the event (docs/adapters.md §1.1 T3: it belongs in the event) ----

def test_t3_reply_context_and_update_id_are_on_the_event():
    _, event = map_update(load("t3_supergroup_reply"))
    assert (event.reply_to_message_id, event.reply_to_text, event.reply_to_author_id,
            event.reply_to_author_name, event.platform_update_id) == (
        "7001", "shall we ship?", "222333444", "Bob", "900000003")


def test_t5_general_reply_has_reply_context():
    _, event = map_update(load("t5_forum_general_reply"))
    assert (event.reply_to_message_id, event.reply_to_text, event.reply_to_author_name) == (
        "5100", "deploy done", "Alice Ng")


def test_t4_topic_creation_message_is_not_a_reply():
    # TG-T2: the topic's creation service message rides along as reply_to_message.
    _, event = map_update(load("t4_forum_topic"))
    assert (event.reply_to_message_id, event.reply_to_text, event.platform_update_id) == (None, None, "900000004")


def test_a_malformed_reply_context_is_left_out_not_the_message(caplog):
    update = load("t3_supergroup_reply")
    update["message"]["reply_to_message"]["from"] = {"id": "not-a-number", "first_name": "Bob"}
    _, event = map_update(update)
    assert (event.text, event.reply_to_message_id) == ("agreed, ship it", None)
    assert ("reply context of 900000003 left out: telegram update 900000003: field "
            "'message.reply_to_message.from.id' must be an integer, got str") in caplog.text
    update["message"]["reply_to_message"] = "garbage"
    _, event = map_update(update)
    assert (event.text, event.reply_to_message_id) == ("agreed, ship it", None)


def test_malformed_update_is_the_sdk_malformed_payload():
    from hermes_core.sdk import MalformedPayload

    with pytest.raises(MalformedPayload) as info:
        map_update({"update_id": 5, "message": {"message_id": 1, "chat": {"id": "x", "type": "private"}}})
    assert (info.value.field, info.value.problem) == ("message.chat.id", "must be an integer, got str")
    assert str(info.value) == "telegram update 5: field 'message.chat.id' must be an integer, got str"
