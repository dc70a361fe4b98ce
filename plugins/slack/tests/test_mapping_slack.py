"""Fixture tests of `classify` / `map_event` (docs/adapters.md §3.0, §3.1 samples S1–S7, traps S-T1…S-T10).

Every expected SessionSource field, message text and session key below is copied literally from
docs/adapters.md §3.1, with the lookups that section states.
"""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path

import pytest

from hermes_core import build_session_key
from hermes_core.sdk import MalformedPayload, SessionSource
from hermes_slack.mapping import ChannelFacts, Facts, classify, clean_text, lookup_keys, map_event
from hermes_slack.settings import SlackSettings

FIXTURES = Path(__file__).parent / "fixtures"


def load(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


# docs/adapters.md §3.1 "Lookups the samples assume".
FACTS = Facts(
    bot_user_id="U0BOT0001",
    bot_id="B0HERMES01",
    users={"U0ALICE01": "Alice", "U0BOB0002": "Bob", "U0CAROL03": "Carol"},
    channels={
        "C0GENERAL1": ChannelFacts("channel", "general", "Company-wide announcements"),
        "C0PRIVATE9": ChannelFacts("group", "release-crew", None),
        "G0LEGACY01": ChannelFacts("group", "leads", None),
        "G0MPIM0001": ChannelFacts("mpim", "mpdm-alice--bob--hermes-1", None),
    },
    # S2: the bot answered Alice's top-level mention 1767225700.000200 in a new thread.
    bot_threads={("C0GENERAL1", "1767225700.000200")},
)
# G0LEGACY01 is free-response and answers in the channel (S4's note).
SETTINGS = SlackSettings(channels={"G0LEGACY01": {"free_response": True, "reply_in_thread": False}})

SAMPLES = [
    ("s1_message_im",
     {"platform": "slack", "chat_id": "D0DMALICE1", "chat_name": "D0DMALICE1", "chat_type": "dm",
      "user_id": "U0ALICE01", "user_name": "Alice", "guild_id": "T0ACME001",
      "message_id": "1767225600.000100"},
     "hi, can you draft the release notes?", "agent:main:slack:dm:D0DMALICE1"),
    ("s2_thread_reply",
     {"platform": "slack", "chat_id": "C0GENERAL1", "chat_name": "general", "chat_type": "channel",
      "user_id": "U0BOB0002", "user_name": "Bob", "thread_id": "1767225700.000200",
      "chat_topic": "Company-wide announcements", "guild_id": "T0ACME001",
      "message_id": "1767225760.000300"},
     "it's the flaky e2e job again", "agent:main:slack:channel:C0GENERAL1:1767225700.000200"),
    ("s3_app_mention_private",
     {"platform": "slack", "chat_id": "C0PRIVATE9", "chat_name": "release-crew", "chat_type": "channel",
      "user_id": "U0BOB0002", "user_name": "Bob", "thread_id": "1767225790.000350",
      "guild_id": "T0ACME001", "message_id": "1767225800.000400"},
     "summarise this thread", "agent:main:slack:channel:C0PRIVATE9:1767225790.000350"),
    ("s4_legacy_private_group",
     {"platform": "slack", "chat_id": "G0LEGACY01", "chat_name": "leads", "chat_type": "channel",
      "user_id": "U0CAROL03", "user_name": "Carol", "guild_id": "T0ACME001",
      "message_id": "1767225850.000450"},
     "standup in 5", "agent:main:slack:channel:G0LEGACY01:U0CAROL03"),
    ("s5_mpim",
     {"platform": "slack", "chat_id": "G0MPIM0001", "chat_name": "mpdm-alice--bob--hermes-1",
      "chat_type": "group", "user_id": "U0ALICE01", "user_name": "Alice", "guild_id": "T0ACME001",
      "message_id": "1767225900.000500"},
     "book a room for the three of us", "agent:main:slack:group:G0MPIM0001:U0ALICE01"),
    ("s6_bot_message",
     {"platform": "slack", "chat_id": "C0GENERAL1", "chat_name": "general", "chat_type": "channel",
      "user_id": "B0JENKINS1", "user_name": "jenkins", "thread_id": "1767226000.000600",
      "chat_topic": "Company-wide announcements", "is_bot": True, "guild_id": "T0ACME001",
      "message_id": "1767226000.000600"},
     "Build #812 failed", "agent:main:slack:channel:C0GENERAL1:1767226000.000600"),
]


@pytest.mark.parametrize("fixture,fields,text,key", SAMPLES, ids=[s[0] for s in SAMPLES])
def test_sample_maps_to_documented_source_and_key(fixture, fields, text, key):
    result = map_event(load(fixture), FACTS, SETTINGS)
    assert result is not None
    source, event = result
    assert source == SessionSource(**fields)  # "fields not shown are None / false"
    assert event.source is source
    assert event.text == text
    assert event.message_id == fields["message_id"]
    assert build_session_key(source) == key


@pytest.mark.parametrize("fixture,addressed", [
    ("s1_message_im", True),            # DMs are always for the bot
    ("s2_thread_reply", True),          # a thread the bot takes part in
    ("s3_app_mention_private", True),   # a mention
    ("s4_legacy_private_group", True),  # a free-response channel
    ("s5_mpim", True),                  # the message mentions the bot
    ("s6_bot_message", False),          # top-level, unmentioned, not free-response
])
def test_which_samples_are_addressed_to_the_bot(fixture, addressed):
    result = classify(load(fixture), FACTS, SETTINGS)
    assert (result.ignore_reason is None) is addressed
    if not addressed:
        assert result.ignore_reason == "channel message without a mention of the bot"


def test_s7_edit_produces_nothing(caplog):
    with caplog.at_level(logging.DEBUG, logger="hermes_slack.mapping"):
        assert classify(load("s7_message_changed"), FACTS, SETTINGS) is None
    assert "slack event Ev0100000007 skipped: edit in C0GENERAL1 (edits_as_turns is off)" in caplog.text


def test_s7_edit_is_a_turn_with_its_own_id_when_edits_as_turns():
    settings = SlackSettings(edits_as_turns=True)
    source, event = map_event(load("s7_message_changed"), FACTS, settings)
    assert event.text == "why is CI red??"
    # the edited message's ts plus the edit's ts: never taken for a redelivery of the original
    assert event.message_id == "1767225700.000200@1767226100.000000"
    assert (source.user_id, source.user_name, source.thread_id) == ("U0ALICE01", "Alice", "1767225700.000200")
    assert build_session_key(source) == "agent:main:slack:channel:C0GENERAL1:1767225700.000200"


def test_link_preview_message_changed_is_not_an_edit():
    payload = load("s7_message_changed")
    payload["event"]["message"]["text"] = payload["event"]["previous_message"]["text"]
    assert classify(payload, FACTS, SlackSettings(edits_as_turns=True)) is None


def edited_starter() -> dict:
    """The message S7 edits, as it first arrived: Alice's top-level mention in #general."""
    payload = load("s2_thread_reply")
    event = payload["event"]
    event.update(user="U0ALICE01", text="<@U0BOT0001> why is CI red?", ts="1767225700.000200",
                 event_ts="1767225700.000200")
    del event["thread_ts"], event["parent_user_id"]
    return payload


def thread_reply_deleted() -> dict:
    """Bob deletes his S2 reply (Slack's `message_deleted`: the message as it was in `previous_message`)."""
    payload = load("s2_thread_reply")
    reply = payload["event"]
    payload["event"] = {"type": "message", "subtype": "message_deleted", "channel": "C0GENERAL1",
                        "channel_type": "channel", "hidden": True, "ts": "1767225765.000000",
                        "event_ts": "1767225765.000000", "deleted_ts": reply["ts"], "previous_message": reply}
    return payload


def test_with_changes_an_edit_is_read_whatever_edits_as_turns_says():
    # docs/behaviour.md §5: the adapter offers it to the gateway's queue with the original's
    # source and ts first.
    original = map_event(edited_starter(), FACTS, SETTINGS)
    result = classify(load("s7_message_changed"), FACTS, SETTINGS, changes=True)
    assert (result.change, result.event.text, result.event.message_id) == \
        ("edit", "why is CI red??", "1767225700.000200@1767226100.000000")
    assert result.source == original[0]
    assert result.source.message_id == "1767225700.000200"


def test_with_changes_a_deletion_carries_the_deleted_messages_source():
    result = classify(thread_reply_deleted(), FACTS, SETTINGS, changes=True)
    reply_source, _ = map_event(load("s2_thread_reply"), FACTS, SETTINGS)
    assert result.change == "deletion"
    assert result.source == reply_source
    assert build_session_key(result.source) == "agent:main:slack:channel:C0GENERAL1:1767225700.000200"
    assert classify(thread_reply_deleted(), FACTS, SETTINGS) is None  # without changes: not a turn
    assert lookup_keys(thread_reply_deleted()) == ("C0GENERAL1", "U0BOB0002", "1767225700.000200", "channel")


def test_with_changes_a_deletion_of_the_bots_own_message_is_nothing():
    payload = thread_reply_deleted()
    payload["event"]["previous_message"].update(user="U0BOT0001", bot_id="B0HERMES01")
    assert classify(payload, FACTS, SETTINGS, changes=True) is None


def test_event_id_and_thread_parent_are_kept_on_the_event():
    _, reply = map_event(load("s2_thread_reply"), FACTS, SETTINGS)
    assert (reply.platform_update_id, reply.reply_to_message_id, reply.reply_to_author_id,
            reply.reply_to_author_name) == ("Ev0100000003", "1767225700.000200", "U0ALICE01", "Alice")
    _, top = map_event(load("s1_message_im"), FACTS, SETTINGS)
    assert (top.platform_update_id, top.reply_to_message_id, top.reply_to_author_id) == ("Ev0100000001", None, None)


def test_s2_without_the_thread_memory_needs_a_mention():
    facts = Facts(bot_user_id="U0BOT0001", users=FACTS.users, channels=FACTS.channels)
    result = classify(load("s2_thread_reply"), facts, SETTINGS)
    assert result.ignore_reason == "thread the bot is not in without a mention of the bot"
    assert result.in_thread is True


def test_s3_and_its_message_event_are_one_message():
    # S-T1: the message.groups event of the same message: same chat, same message id, same key.
    mention = load("s3_app_mention_private")
    message = copy.deepcopy(mention)
    message["event_id"] = "Ev0100000099"
    message["event"]["type"] = "message"
    message["event"]["channel_type"] = "group"
    a, b = map_event(mention, FACTS, SETTINGS), map_event(message, FACTS, SETTINGS)
    assert (a[0].chat_id, a[1].message_id) == (b[0].chat_id, b[1].message_id) == ("C0PRIVATE9", "1767225800.000400")
    assert build_session_key(a[0]) == build_session_key(b[0])
    assert classify(message, FACTS, SETTINGS).ignore_reason is None  # mentioned in the text


def test_app_mention_without_a_known_channel_kind_falls_back_to_channel():
    # S-T4: no channel_type and no lookup: C… is read as a channel, never guessed private/mpim.
    facts = Facts(bot_user_id="U0BOT0001")
    source, _ = map_event(load("s3_app_mention_private"), facts, SETTINGS)
    assert (source.chat_type, source.chat_name, source.user_name) == ("channel", "C0PRIVATE9", None)


def test_top_level_channel_mention_is_its_own_thread_root():
    # S-T3: a top-level mention answered in a new thread is keyed by its own ts, exactly like
    # the replies that follow in that thread (S2).
    payload = load("s2_thread_reply")
    event = payload["event"]
    event.update(user="U0ALICE01", text="<@U0BOT0001> why is CI red?", ts="1767225700.000200")
    del event["thread_ts"], event["parent_user_id"]
    source, message = map_event(payload, FACTS, SETTINGS)
    assert source.thread_id == "1767225700.000200"
    assert message.text == "why is CI red?"
    assert build_session_key(source) == "agent:main:slack:channel:C0GENERAL1:1767225700.000200"


def test_thread_ts_equal_to_ts_is_not_a_reply():
    payload = load("s4_legacy_private_group")
    payload["event"]["thread_ts"] = payload["event"]["ts"]  # S-T2
    source, _ = map_event(payload, FACTS, SETTINGS)
    assert source.thread_id is None
    assert classify(payload, FACTS, SETTINGS).in_thread is False


def test_dm_and_mpim_top_level_messages_are_not_threads_even_with_reply_in_thread():
    settings = SlackSettings(reply_in_thread=True)
    assert map_event(load("s1_message_im"), FACTS, settings)[0].thread_id is None
    assert map_event(load("s5_mpim"), FACTS, settings)[0].thread_id is None


def test_bot_messages():
    # S-T6: an app's message has bot_id (and often user) but no subtype.
    payload = load("s2_thread_reply")
    payload["event"].update(bot_id="B0OTHER001", user="U0OTHERBOT")
    source, _ = map_event(payload, FACTS, SETTINGS)
    assert (source.user_id, source.is_bot) == ("U0OTHERBOT", True)


@pytest.mark.parametrize("change", [{"user": "U0BOT0001"}, {"bot_id": "B0HERMES01", "user": "U0SOMEONE"}])
def test_the_bots_own_messages_are_dropped(change, caplog):
    payload = load("s1_message_im")
    payload["event"].update(change)
    with caplog.at_level(logging.DEBUG, logger="hermes_slack.mapping"):
        assert classify(payload, FACTS, SETTINGS) is None
    assert "slack event Ev0100000001 skipped: the bot's own message 1767225600.000100" in caplog.text


@pytest.mark.parametrize("subtype", ["channel_join", "message_deleted", "channel_topic", "pinned_item"])
def test_service_subtypes_are_not_turns(subtype):
    payload = load("s4_legacy_private_group")
    payload["event"]["subtype"] = subtype
    assert classify(payload, FACTS, SETTINGS) is None


def test_thread_broadcast_is_a_thread_reply():
    payload = load("s2_thread_reply")
    payload["event"]["subtype"] = "thread_broadcast"
    source, _ = map_event(payload, FACTS, SETTINGS)
    assert source.thread_id == "1767225700.000200"


def test_file_share_without_text_is_a_turn_with_media():
    payload = load("s1_message_im")
    payload["event"].update(subtype="file_share", text="", files=[
        {"id": "F0FILE0001", "name": "notes.txt", "mimetype": "text/plain", "size": 12,
         "url_private": "https://files.slack.com/files-pri/T0ACME001-F0FILE0001/notes.txt"}])
    _, event = map_event(payload, FACTS, SETTINGS)
    assert event.text == ""
    assert event.media == [{"kind": "file", "id": "F0FILE0001", "name": "notes.txt", "mimetype": "text/plain",
                            "url_private": "https://files.slack.com/files-pri/T0ACME001-F0FILE0001/notes.txt",
                            "size": 12}]


@pytest.mark.parametrize("raw,expected", [
    ("<@U0BOT0001> summarise this thread", "summarise this thread"),
    ("hey <@U0BOT0001|hermes> ping <@U0ALICE01>", "hey ping <@U0ALICE01>"),
    ("see <#C0GENERAL1|general> and <!here>", "see #general and @here"),
    ("docs: <https://example.com/a?b=1&amp;c=2|the guide> or <https://example.com>",
     "docs: the guide (https://example.com/a?b=1&c=2) or https://example.com"),
    ("1 &lt; 2 &amp;&amp; 3 &gt; 2", "1 < 2 && 3 > 2"),
    ("!new standup notes", "/new standup notes"),
    ("!important: read this", "!important: read this"),
])
def test_text_is_decoded_for_the_agent(raw, expected):
    # S-T8: mentions, channel links, specials, links and &amp; &lt; &gt; escapes.
    assert clean_text(raw, "U0BOT0001", SlackSettings().bang_commands) == expected


@pytest.mark.parametrize("mutate,message", [
    (lambda p: p.pop("event"), "malformed payload: envelope.event is missing"),
    (lambda p: p.update(type="url_verification"), "malformed payload: envelope.type has unknown value 'url_verification'"),
    (lambda p: p["event"].update(type="brand_new_kind"), "malformed payload: event.type has unknown kind 'brand_new_kind'"),
    (lambda p: p["event"].update(ts=1767225600.0001), "malformed payload: event.ts must be a string, got float"),
    (lambda p: p["event"].update(ts="10" * 400), "malformed payload: event.ts is not a Slack timestamp ('<seconds>.<micro>')"),
    (lambda p: p["event"].update(user="U0\udcffBAD"), "malformed payload: event.user is not a Slack id (letters and digits only)"),
    (lambda p: p["event"].update(channel=12345), "malformed payload: event.channel must be a string, got int"),
    (lambda p: p["event"].update(channel_type="space"), "malformed payload: event.channel_type has unknown value 'space'"),
    (lambda p: p["event"].pop("user"), "malformed payload: event.user is missing (and there is no bot_id)"),
    (lambda p: p["event"].update(text=["hi"]), "malformed payload: event.text must be a string, got list"),
])
def test_malformed_payloads_name_the_field(mutate, message):
    payload = load("s1_message_im")
    mutate(payload)
    with pytest.raises(MalformedPayload) as info:
        classify(payload, FACTS, SETTINGS)
    assert str(info.value) == message


def test_lone_surrogates_in_text_are_replaced():
    payload = load("s1_message_im")
    payload["event"]["text"] = "caf\udce9 time"
    _, event = map_event(payload, FACTS, SETTINGS)
    assert event.text == "caf\N{REPLACEMENT CHARACTER} time"


def test_other_event_kinds_are_skipped():
    payload = load("s1_message_im")
    payload["event"] = {"type": "reaction_added", "user": "U0ALICE01", "reaction": "thumbsup"}
    assert classify(payload, FACTS, SETTINGS) is None


def test_lookup_keys():
    assert lookup_keys(load("s3_app_mention_private")) == ("C0PRIVATE9", "U0BOB0002", "1767225790.000350", None)
    assert lookup_keys(load("s1_message_im")) == ("D0DMALICE1", "U0ALICE01", None, "im")
    assert lookup_keys(load("s7_message_changed")) == ("C0GENERAL1", "U0ALICE01", None, "channel")
    assert lookup_keys({"event": "nope"}) == (None, None, None, None)
