"""Fixture tests of `map_payload` (docs/adapters.md §5.1, §5.2 samples G1–G6, traps G-T1…G-T7).

Every expected SessionSource field and session key below is copied literally from docs/adapters.md.
"""

from __future__ import annotations

import base64
import copy
import json
import logging
from pathlib import Path

import pytest

from hermes_core import build_session_key
from hermes_core.sdk import SessionSource
from hermes_core.sdk import IdentityAlias, MalformedPayload, QueuedChange
from hermes_signal.mapping import (event_ids, 
    identity_pairs,
    map_payload,
    quote_of,
    raw_group_id,
    render_mentions,
)

FIXTURES = Path(__file__).parent / "fixtures"
ACCOUNT = "+15559990000"
ACCOUNT_UUID = "5e4d3c2b-1a09-4f8e-9d7c-6b5a49382716"
ALICE = "7d1e2c3b-4a59-4687-9a0b-1c2d3e4f5a6b"
BOB = "0b9c8d7e-6f5a-4b3c-8d2e-1f0a9b8c7d6e"
GROUP_ID = "Pmpi+EfPWmsxiomLe9Nx2XF9HOE483p6iKiFj65iMwI="  # signal-cli's man page sample (v2, 44 chars)


def load(name: str):
    return json.loads((FIXTURES / f"{name}.json").read_text())


def sse_data(name: str) -> dict:
    """The JSON of the `data:` line of an SSE frame (no space after the colon, docs/adapters.md G2)."""
    (line,) = [l for l in (FIXTURES / f"{name}.sse").read_text().splitlines() if l.startswith("data:")]
    return json.loads(line[len("data:"):])


def mapped(payload, **kwargs):
    kwargs.setdefault("account", ACCOUNT)
    return map_payload(payload, **kwargs)


# (payload, expected SessionSource fields, text handed to the gateway, session key) — docs/adapters.md §5.2
SAMPLES = [
    ("g1_dm_jsonrpc", lambda: load("g1_dm_jsonrpc"), {},
     {"platform": "signal", "chat_id": ALICE, "chat_name": "Alice", "chat_type": "dm",
      "user_id": "+15551230001", "user_name": "Alice", "user_id_alt": ALICE, "message_id": "1767225600123"},
     "what's on my calendar?", "agent:main:signal:dm:7d1e2c3b-4a59-4687-9a0b-1c2d3e4f5a6b"),
    ("g2_hidden_number", lambda: sse_data("g2_hidden_number"), {},
     {"platform": "signal", "chat_id": BOB, "chat_name": "Bob", "chat_type": "dm",
      "user_id": BOB, "user_name": "Bob", "user_id_alt": BOB, "message_id": "1767225700456"},
     "ping", "agent:main:signal:dm:0b9c8d7e-6f5a-4b3c-8d2e-1f0a9b8c7d6e"),
    ("g3_note_to_self", lambda: load("g3_note_to_self"), {},
     {"platform": "signal", "chat_id": ACCOUNT_UUID, "chat_name": "Me", "chat_type": "dm",
      "user_id": "+15559990000", "user_name": "Me", "user_id_alt": ACCOUNT_UUID, "message_id": "1767225900000"},
     "remind me to call mum", "agent:main:signal:dm:5e4d3c2b-1a09-4f8e-9d7c-6b5a49382716"),
    ("g6_edited_message", lambda: load("g6_edited_message"), {},
     {"platform": "signal", "chat_id": ALICE, "chat_name": "Alice", "chat_type": "dm",
      "user_id": "+15551230001", "user_name": "Alice", "user_id_alt": ALICE, "message_id": "1767226200000"},
     "what's on my calendar tomorrow?", "agent:main:signal:dm:7d1e2c3b-4a59-4687-9a0b-1c2d3e4f5a6b"),
]


@pytest.mark.parametrize("name,payload,options,fields,text,key", SAMPLES, ids=[s[0] for s in SAMPLES])
def test_sample_maps_to_documented_source_and_key(name, payload, options, fields, text, key):
    result = mapped(payload(), **options)
    assert result is not None
    if isinstance(result, QueuedChange):  # G6: the edit as a turn of its own (edits_as_turns)
        result = result.event.source, result.event
    source, event = result
    # "fields not shown are None / false"
    assert source == SessionSource(**fields)
    assert source.is_bot is False
    assert event.source is source
    assert event.text == text
    assert build_session_key(source) == key


def test_event_message_id_carries_the_author():
    # G-T2: timestamps are unique per author only; the reply quote needs author + timestamp.
    _, g1 = mapped(load("g1_dm_jsonrpc"))
    _, g2 = mapped(sse_data("g2_hidden_number"))
    _, g3 = mapped(load("g3_note_to_self"))
    assert g1.message_id == "1767225600123:7d1e2c3b-4a59-4687-9a0b-1c2d3e4f5a6b"
    assert g2.message_id == "1767225700456:0b9c8d7e-6f5a-4b3c-8d2e-1f0a9b8c7d6e"
    assert g3.message_id == "1767225900000:5e4d3c2b-1a09-4f8e-9d7c-6b5a49382716"
    assert quote_of(g1.message_id) == (1767225600123, ALICE)
    assert quote_of("1767225600123") is None
    assert quote_of("abc:def") is None


def test_g2_number_appearing_later_keeps_the_dm_key():
    # G-T1: Bob shares his number later; the DM stays keyed on his UUID.
    payload = sse_data("g2_hidden_number")
    payload["envelope"]["sourceNumber"] = "+15551230002"
    payload["envelope"]["source"] = "+15551230002"
    source, _ = mapped(payload)
    assert (source.chat_id, source.user_id, source.user_id_alt) == (BOB, "+15551230002", BOB)
    assert build_session_key(source) == "agent:main:signal:dm:0b9c8d7e-6f5a-4b3c-8d2e-1f0a9b8c7d6e"


def test_envelope_with_only_a_number_is_resolved_to_the_known_uuid():
    payload = load("g1_dm_jsonrpc")
    envelope = payload["params"]["envelope"]
    envelope["sourceUuid"] = None
    aliases = {"+15551230001": ALICE}
    source, _ = mapped(payload, uuid_for_number=aliases.get)
    assert (source.chat_id, source.user_id, source.user_id_alt) == (ALICE, "+15551230001", ALICE)
    assert build_session_key(source) == "agent:main:signal:dm:7d1e2c3b-4a59-4687-9a0b-1c2d3e4f5a6b"
    # unknown number: the number stands in (the core's alias store folds it later)
    source, event = mapped(payload, uuid_for_number={}.get)
    assert (source.chat_id, source.user_id, source.user_id_alt) == ("+15551230001", "+15551230001", None)
    assert event.message_id == "1767225600123:+15551230001"


@pytest.mark.parametrize("name,payload", [
    ("g4_sync_to_other", lambda: load("g4_sync_to_other")),
    ("g5_typing", lambda: load("g5_typing_and_receipt")[0]),
    ("g5_receipt", lambda: load("g5_typing_and_receipt")[1]),
])
def test_not_a_turn(name, payload, caplog):
    caplog.set_level(logging.DEBUG, logger="hermes_signal.mapping")
    assert mapped(payload()) is None
    assert "signal envelope skipped" in caplog.text


def test_g5_is_a_batch_of_two_notifications():
    batch = load("g5_typing_and_receipt")
    assert isinstance(batch, list) and len(batch) == 2
    assert [mapped(item) for item in batch] == [None, None]


def test_g6_edit_is_a_change_of_the_original_message():
    # docs/behaviour.md §5 "Edits and deletions": the edit names the original by the SessionSource
    # and event message id G1 produced, so the gateway finds it if it is still queued.
    original_source, original = mapped(load("g1_dm_jsonrpc"))
    change = mapped(load("g6_edited_message"))
    assert isinstance(change, QueuedChange)
    assert change.source == original_source
    assert (change.message_id, change.text) == (original.message_id, "what's on my calendar tomorrow?")
    assert change.message_id == "1767225600123:" + ALICE
    assert change.event.message_id == "1767226200000:" + ALICE  # as a turn: the edit's own id


def test_an_edit_in_a_group_and_an_edit_of_note_to_self_keep_their_chat():
    in_group, _ = mapped(group_message())
    edit = load("g6_edited_message")
    edit["params"]["envelope"]["editMessage"]["targetSentTimestamp"] = 1767225600123
    edit["params"]["envelope"]["editMessage"]["dataMessage"]["groupInfo"] = {
        "groupId": GROUP_ID, "groupName": "Family", "revision": 5, "type": "DELIVER"}
    change = mapped(edit)
    assert change.source == in_group and change.message_id == "1767225600123:" + ALICE
    note, original = mapped(load("g3_note_to_self"))
    sync = load("g3_note_to_self")
    sent = sync["envelope"]["syncMessage"]["sentMessage"]
    sync["envelope"]["syncMessage"]["sentMessage"] = {
        key: sent[key] for key in ("destination", "destinationNumber", "destinationUuid") if key in sent}
    sync["envelope"]["syncMessage"]["sentMessage"]["editMessage"] = {
        "targetSentTimestamp": 1767225900000,
        "dataMessage": {"timestamp": 1767225999999, "message": "remind me to call dad", "expiresInSeconds": 0}}
    change = mapped(sync)
    assert (change.source, change.message_id, change.text) == (note, original.message_id, "remind me to call dad")


def test_a_remote_delete_is_a_change_without_text():
    # docs/behaviour.md §5: a deletion withdraws the original if still queued; never a turn.
    original_source, original = mapped(load("g1_dm_jsonrpc"))
    delete = load("g1_dm_jsonrpc")
    envelope = delete["params"]["envelope"]
    envelope["timestamp"] = 1767225655555
    envelope["dataMessage"] = {"timestamp": 1767225655555, "message": None,
                               "remoteDelete": {"timestamp": 1767225600123}}
    change = mapped(delete)
    assert change == QueuedChange(original_source, original.message_id, None, None)
    group_source, group_event = mapped(group_message())
    envelope["dataMessage"]["groupInfo"] = {"groupId": GROUP_ID, "groupName": "Family", "type": "DELIVER"}
    change = mapped(delete)
    assert (change.source, change.message_id, change.text) == (group_source, group_event.message_id, None)


@pytest.mark.parametrize("remote_delete,field,problem", [
    ({}, "envelope.dataMessage.remoteDelete.timestamp", "is missing"),
    ({"timestamp": "1767225600123"}, "envelope.dataMessage.remoteDelete.timestamp", "must be an integer, got str"),
    ("1767225600123", "envelope.dataMessage.remoteDelete", "must be an object, got str"),
])
def test_a_malformed_remote_delete_names_the_field(remote_delete, field, problem):
    payload = load("g1_dm_jsonrpc")
    payload["params"]["envelope"]["dataMessage"].update(message=None, remoteDelete=remote_delete)
    with pytest.raises(MalformedPayload) as info:
        mapped(payload)
    assert (info.value.field, info.value.problem) == (field, problem)


def test_note_to_self_echo_of_the_bots_own_reply_is_dropped():
    # G-T3: the bot's reply into Note to Self comes back as a sentMessage sync.
    assert mapped(load("g3_note_to_self"), own_sent={1767225900000}) is None
    assert mapped(load("g3_note_to_self"), own_sent={1}) is not None


def test_sync_into_a_group_is_not_a_turn():
    payload = load("g3_note_to_self")
    sent = payload["envelope"]["syncMessage"]["sentMessage"]
    sent.update(destination=None, destinationNumber=None, destinationUuid=None,
                groupInfo={"groupId": GROUP_ID, "groupName": "Family", "revision": 3, "type": "DELIVER"})
    assert mapped(payload) is None


def group_message(text="hello all", **data) -> dict:
    payload = load("g1_dm_jsonrpc")
    message = payload["params"]["envelope"]["dataMessage"]
    message["message"] = text
    message["groupInfo"] = {"groupId": GROUP_ID, "groupName": "Family", "revision": 5, "type": "DELIVER"}
    message.update(data)
    return payload


def test_group_message_keeps_the_group_id_byte_exact():
    source, event = mapped(group_message())
    assert source == SessionSource(
        platform="signal", chat_id="group:" + GROUP_ID, chat_id_alt=GROUP_ID, chat_name="Family",
        chat_type="group", user_id="+15551230001", user_name="Alice", user_id_alt=ALICE,
        message_id="1767225600123")
    # docs/adapters.md §5.1: "agent:main:signal:group:group:<groupId>:<sender UUID>"
    assert build_session_key(source) == \
        "agent:main:signal:group:group:Pmpi+EfPWmsxiomLe9Nx2XF9HOE483p6iKiFj65iMwI=:7d1e2c3b-4a59-4687-9a0b-1c2d3e4f5a6b"
    assert build_session_key(source, group_sessions_per_user=False) == \
        "agent:main:signal:group:group:Pmpi+EfPWmsxiomLe9Nx2XF9HOE483p6iKiFj65iMwI="
    assert event.text == "hello all"


def test_group_id_spellings_normalise_to_the_raw_id():
    # G-T4: raw, our "group:" chat id, and signal-cli-rest-api's "group." + base64(id)
    rest = "group." + base64.b64encode(GROUP_ID.encode()).decode()
    assert raw_group_id(GROUP_ID, "f") == GROUP_ID
    assert raw_group_id("group:" + GROUP_ID, "f") == GROUP_ID
    assert raw_group_id(rest, "f") == GROUP_ID
    source, _ = mapped(group_message(groupInfo={"groupId": rest, "groupName": "Family", "type": "DELIVER"}))
    assert (source.chat_id, source.chat_id_alt) == ("group:" + GROUP_ID, GROUP_ID)
    with pytest.raises(MalformedPayload) as info:
        raw_group_id("group.%%%", "envelope.dataMessage.groupInfo.groupId")
    assert info.value.field == "envelope.dataMessage.groupInfo.groupId"


def test_group_ids_differing_only_in_case_are_different_chats():
    lower = GROUP_ID.lower()
    a, _ = mapped(group_message())
    b, _ = mapped(group_message(groupInfo={"groupId": lower, "groupName": "Family", "type": "DELIVER"}))
    assert a.chat_id != b.chat_id and b.chat_id == "group:" + lower


@pytest.mark.parametrize("change,reason", [
    ({"groupInfo": {"groupId": GROUP_ID, "groupName": "Family", "revision": 6, "type": "UPDATE"}, "message": None},
     "group update"),
    ({"message": None, "reaction": {"emoji": "👍", "targetAuthorUuid": ALICE, "targetSentTimestamp": 1,
                                    "isRemove": False}}, "reaction"),
    ({"message": None}, "without text or attachments"),
    ({"message": "   "}, "without text or attachments"),
])
def test_g_t7_bodyless_data_messages_are_not_turns(change, reason, caplog):
    caplog.set_level(logging.DEBUG, logger="hermes_signal.mapping")
    payload = load("g1_dm_jsonrpc")
    payload["params"]["envelope"]["dataMessage"].update(change)
    assert mapped(payload) is None
    assert reason in caplog.text


def test_the_accounts_own_data_message_is_not_a_turn():
    payload = load("g1_dm_jsonrpc")
    payload["params"]["envelope"].update(sourceNumber=ACCOUNT, source=ACCOUNT, sourceUuid=ACCOUNT_UUID)
    assert mapped(payload) is None
    payload["params"]["envelope"].update(sourceNumber=None, source=ACCOUNT_UUID)
    assert mapped(payload, account_uuid=ACCOUNT_UUID) is None


def test_payload_for_another_account_is_skipped():
    payload = load("g1_dm_jsonrpc")
    payload["params"]["account"] = "+15550000001"
    assert mapped(payload) is None


def test_story_call_and_attachment_handling():
    payload = load("g1_dm_jsonrpc")
    envelope = payload["params"]["envelope"]
    story = copy.deepcopy(payload)
    del story["params"]["envelope"]["dataMessage"]
    story["params"]["envelope"]["storyMessage"] = {"allowsReplies": True}
    assert mapped(story) is None
    call = copy.deepcopy(story)
    del call["params"]["envelope"]["storyMessage"]
    call["params"]["envelope"]["callMessage"] = {"offerMessage": {"id": 1}}
    assert mapped(call) is None
    envelope["dataMessage"].update(message=None, attachments=[
        {"contentType": "image/jpeg", "filename": "cat.jpg", "id": "a1B2c3.jpg", "size": 52311,
         "width": 800, "height": 600, "caption": None, "uploadTimestamp": 1767225600000}])
    source, event = mapped(payload)
    assert event.text == ""
    assert event.media == [{"kind": "attachment", "id": "a1B2c3.jpg", "content_type": "image/jpeg",
                            "filename": "cat.jpg", "size": 52311}]


def test_subscription_wrapper_and_bare_object_map_alike():
    g1 = load("g1_dm_jsonrpc")
    bare = g1["params"]
    manual = {"jsonrpc": "2.0", "method": "receive", "params": {"subscription": 0, "result": bare}}
    assert mapped(bare)[0] == mapped(g1)[0] == mapped(manual)[0]
    assert map_payload({"jsonrpc": "2.0", "method": "receiveCall", "params": {}}) is None


def test_mentions_are_rendered_at_their_utf16_offsets():
    # G-T5: each mention is one U+FFFC; offsets count UTF-16 units (the emoji is 2).
    text = "😀 \ufffc and \ufffc: hi"
    mentions = [{"name": "+15551230002", "number": "+15551230002", "uuid": BOB, "start": 3, "length": 1},
                {"name": ACCOUNT, "number": ACCOUNT, "uuid": ACCOUNT_UUID, "start": 9, "length": 1}]
    assert render_mentions(text, mentions, "m") == "😀 @+15551230002 and @+15559990000: hi"
    source, event = mapped(group_message(text, mentions=mentions))
    assert event.text == "😀 @+15551230002 and @+15559990000: hi"


def test_mention_not_pointing_at_a_placeholder_is_left_and_logged(caplog):
    text = "hi \ufffc"
    assert render_mentions(text, [{"name": "x", "start": 0, "length": 1}], "envelope.dataMessage.mentions") == text
    assert "envelope.dataMessage.mentions[0] does not point at a placeholder" in caplog.text


def test_identity_pairs_collects_number_uuid_aliases():
    payload = group_message("\ufffc see quote", mentions=[{"name": "+15551230002", "number": "+15551230002",
                                                           "uuid": BOB, "start": 0, "length": 1}],
                            quote={"id": 1767225500000, "author": ACCOUNT, "authorNumber": ACCOUNT,
                                   "authorUuid": ACCOUNT_UUID, "text": "earlier"})
    assert identity_pairs(payload) == [("+15551230001", ALICE), (ACCOUNT, ACCOUNT_UUID), ("+15551230002", BOB)]
    assert identity_pairs(sse_data("g2_hidden_number")) == []  # hidden number: nothing to pair
    assert identity_pairs(load("g4_sync_to_other")) == [(ACCOUNT, ACCOUNT_UUID), ("+15551230001", ALICE)]
    assert identity_pairs("not a payload") == []


@pytest.mark.parametrize("mutate,field", [
    (lambda p: p["params"].pop("envelope"), "payload.envelope"),
    (lambda p: p["params"]["envelope"].update(sourceUuid=None, sourceNumber=None, source=None),
     "envelope.sourceUuid"),
    (lambda p: p["params"]["envelope"].update(sourceUuid=12345), "envelope.sourceUuid"),
    (lambda p: p["params"]["envelope"].update(sourceUuid="\ud800bad"), "envelope.sourceUuid"),
    (lambda p: p["params"]["envelope"].update(timestamp="1767225600123"), "envelope.timestamp"),
    (lambda p: p["params"]["envelope"]["dataMessage"].update(timestamp=10 ** 30), "envelope.dataMessage.timestamp"),
    (lambda p: p["params"]["envelope"]["dataMessage"].update(timestamp=True), "envelope.dataMessage.timestamp"),
    (lambda p: p["params"]["envelope"]["dataMessage"].pop("timestamp"), "envelope.dataMessage.timestamp"),
    (lambda p: p["params"]["envelope"]["dataMessage"].update(message=["x"]), "envelope.dataMessage.message"),
    (lambda p: p["params"]["envelope"]["dataMessage"].update(groupInfo="g"), "envelope.dataMessage.groupInfo"),
    (lambda p: p["params"]["envelope"]["dataMessage"].update(groupInfo={"type": "DELIVER"}),
     "envelope.dataMessage.groupInfo.groupId"),
    (lambda p: p["params"]["envelope"]["dataMessage"].update(mentions=[{"start": "0", "length": 1}]),
     "envelope.dataMessage.mentions[0].start"),
    (lambda p: p["params"]["envelope"]["dataMessage"].update(attachments=["x"]),
     "envelope.dataMessage.attachments[0]"),
    (lambda p: p.update(params=[1]), "payload.params"),
])
def test_malformed_payload_names_the_field(mutate, field):
    payload = load("g1_dm_jsonrpc")
    mutate(payload)
    with pytest.raises(MalformedPayload) as info:
        mapped(payload)
    assert info.value.field == field
    assert field in str(info.value)


def test_malformed_edit_and_sync_name_their_fields():
    edit = load("g6_edited_message")
    del edit["params"]["envelope"]["editMessage"]["targetSentTimestamp"]
    with pytest.raises(MalformedPayload) as info:
        mapped(edit)
    assert info.value.field == "envelope.editMessage.targetSentTimestamp"
    sync = load("g3_note_to_self")
    sync["envelope"]["syncMessage"]["sentMessage"]["timestamp"] = -5
    with pytest.raises(MalformedPayload) as info:
        mapped(sync)
    assert info.value.field == "envelope.syncMessage.sentMessage.timestamp"
    with pytest.raises(MalformedPayload) as info:
        mapped(["not", "an", "object"])
    assert info.value.field == "payload"


def test_lone_surrogates_in_names_and_text_are_replaced_not_fatal():
    payload = load("g1_dm_jsonrpc")
    payload["params"]["envelope"]["sourceName"] = "Al\ud800ice"
    payload["params"]["envelope"]["dataMessage"]["message"] = "hi \udcff"
    source, event = mapped(payload)
    assert source.user_name == "Al\ufffdice"
    assert event.text == "hi \ufffd"


def test_receive_error_without_envelope_is_skipped_with_a_warning(caplog):
    payload = {"account": ACCOUNT, "exception": {"message": "decryption failed", "type": "ProtocolInvalidMessageException"}}
    assert mapped(payload) is None
    assert "receive error (ProtocolInvalidMessageException)" in caplog.text


def test_events_carry_the_number_uuid_aliases_they_reveal():
    # The UUID is canonical for Signal (docs/behaviour.md §4): number → UUID.
    _, g1 = mapped(load("g1_dm_jsonrpc"))
    _, g2 = mapped(sse_data("g2_hidden_number"))
    assert g1.aliases == [IdentityAlias("signal", "+15551230001", ALICE, "signal envelope")]
    assert g2.aliases == []


def test_a_quote_fills_the_reply_context():
    payload = group_message("yes, that one", quote={
        "id": 1767225500000, "author": ACCOUNT, "authorNumber": ACCOUNT, "authorUuid": ACCOUNT_UUID,
        "text": "ask \ufffc about it", "mentions": [{"name": "+15551230002", "number": "+15551230002",
                                                    "uuid": BOB, "start": 4, "length": 1}],
        "attachments": []})
    _, event = mapped(payload)
    assert (event.reply_to_message_id, event.reply_to_text, event.reply_to_author_id) == (
        "1767225500000:" + ACCOUNT_UUID, "ask @+15551230002 about it", ACCOUNT_UUID)
    assert quote_of(event.reply_to_message_id) == (1767225500000, ACCOUNT_UUID)
    _, plain = mapped(load("g1_dm_jsonrpc"))
    assert (plain.reply_to_message_id, plain.reply_to_text, plain.reply_to_author_id) == (None, None, None)


def test_lone_surrogates_in_text_and_names_become_u_fffd():
    # docs/behaviour.md §7 "Untrusted metadata": lone surrogates become U+FFFD everywhere a source
    # or message is built. The mapping used to turn them into "?" (UTF-8 "replace"), unlike every
    # other platform; a surrogate pair split into two escapes is one emoji again.
    payload = load("g1_dm_jsonrpc")
    envelope = payload["params"]["envelope"]
    envelope["sourceName"] = "Al\udc00ice"
    envelope["dataMessage"]["message"] = "a\ud800b \ud83d\ude00"
    source, event = mapped(payload)
    assert event.text == "a\ufffdb \U0001F600"
    assert (source.user_name, source.chat_name) == ("Al\ufffdice", "Al\ufffdice")


def test_a_change_names_its_original_by_the_authors_uuid_and_number():
    # docs/adapters.md G-T9: G6 carries Alice's number and UUID; the original may have been
    # emitted under either (an envelope with only the number, before the UUID was known).
    change = mapped(load("g6_edited_message"))
    assert event_ids(change.source) == ["1767225600123:7d1e2c3b-4a59-4687-9a0b-1c2d3e4f5a6b",
                                        "1767225600123:+15551230001"]
