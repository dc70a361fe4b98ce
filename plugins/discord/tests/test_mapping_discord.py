"""Fixture tests of `map_message` (docs/adapters.md §2.0, §2.1 samples D1–D6, traps D-T1…D-T10).

The fixtures are the samples of docs/adapters.md §2.1 verbatim (gateway frame plus the channel
the adapter resolves); every expected SessionSource field and session key below is copied
literally from there. Lookups the samples assume: bot user id 1200000000000000000, guild
1100000000000000001 named "Hermes Lab", role allow-list {1400000000000000001}.
"""

from __future__ import annotations

import copy
import logging

import pytest

from hermes_core import SessionSource, build_session_key
from hermes_discord.channels import ChannelInfo
from hermes_discord.mapping import MalformedPayload, map_message, strip_bot_mention
from samples_discord import load

BOT_ID = "1200000000000000000"
GUILDS = {"1100000000000000001": "Hermes Lab"}
ALLOWED_ROLES = {"1400000000000000001"}


def map_sample(name: str, *, channel_from: str | None = None, **overrides):
    """Map a fixture with the lookups of docs/adapters.md §2.1 (D4/D5 are in D1's channel)."""
    sample = load(name)
    holder = load(channel_from) if channel_from else sample
    channel = ChannelInfo.from_payload(holder["channel_from_cache"]) if "channel_from_cache" in holder else None
    parent = ChannelInfo.from_payload(holder["parent_from_cache"]) if "parent_from_cache" in holder else None
    data = sample["event"]["d"]
    kwargs = dict(bot_id=BOT_ID, channel=channel, parent=parent,
                  guild_name=GUILDS.get(data.get("guild_id")), allowed_roles=ALLOWED_ROLES)
    kwargs.update(overrides)
    return map_message(data, **kwargs)


# (fixture, channel holder, expected SessionSource fields, text handed to the gateway, key)
SAMPLES = [
    ("d1_guild_text_role", None,
     {"platform": "discord", "chat_id": "1100000000000000010", "chat_name": "Hermes Lab / #general",
      "chat_type": "group", "user_id": "1300000000000000001", "user_name": "Ali",
      "chat_topic": "Ask the agent here", "guild_id": "1100000000000000001",
      "message_id": "1500000000000000001", "role_authorized": True},
     "what changed today?", "agent:main:discord:group:1100000000000000010:1300000000000000001"),
    ("d2_forum_post", None,
     {"platform": "discord", "chat_id": "1100000000000000012",
      "chat_name": "Hermes Lab / #support / Bug: login loop", "chat_type": "group",
      "user_id": "1300000000000000001", "user_name": "Alice", "thread_id": "1100000000000000030",
      "chat_topic": "Post one bug per thread. Include logs.", "guild_id": "1100000000000000001",
      "parent_chat_id": "1100000000000000012", "message_id": "1100000000000000030"},
     "login loops after the update", "agent:main:discord:group:1100000000000000012:1100000000000000030"),
    ("d3_dm", None,
     {"platform": "discord", "chat_id": "1600000000000000001", "chat_name": "alice", "chat_type": "dm",
      "user_id": "1300000000000000001", "user_name": "Alice", "message_id": "1500000000000000004"},
     "can you check my PR?", "agent:main:discord:dm:1600000000000000001"),
    ("d4_webhook", "d1_guild_text_role",
     {"platform": "discord", "chat_id": "1100000000000000010", "chat_name": "Hermes Lab / #general",
      "chat_type": "group", "user_id": "1700000000000000001", "user_name": "CI Hook",
      "chat_topic": "Ask the agent here", "is_bot": True, "guild_id": "1100000000000000001",
      "message_id": "1500000000000000005"},
     "build #812 failed", "agent:main:discord:group:1100000000000000010:1700000000000000001"),
    ("d6_group_dm", None,
     {"platform": "discord", "chat_id": "1600000000000000003", "chat_name": "weekend plans",
      "chat_type": "group", "user_id": "1300000000000000002", "user_name": "bobk",
      "message_id": "1500000000000000007"},
     "any ideas?", "agent:main:discord:group:1600000000000000003:1300000000000000002"),
]


@pytest.mark.parametrize("fixture,holder,fields,text,key", SAMPLES, ids=[s[0] for s in SAMPLES])
def test_sample_maps_to_documented_source_and_key(fixture, holder, fields, text, key):
    result = map_sample(fixture, channel_from=holder)
    assert result is not None
    source, event = result
    # "fields not shown are None / false"
    assert source == SessionSource(**fields)
    assert source.is_bot is fields.get("is_bot", False)
    assert source.role_authorized is fields.get("role_authorized", False)
    assert event.source is source
    assert event.text == text
    assert event.message_id == fields["message_id"]
    assert event.media == []
    assert build_session_key(source) == key


def test_d5_own_message_is_dropped_with_a_debug_line(caplog):
    caplog.set_level(logging.DEBUG, logger="hermes_discord.mapping")
    assert map_sample("d5_own_echo", channel_from="d1_guild_text_role") is None
    assert "discord message 1500000000000000006 skipped: the bot's own message" in caplog.text


def test_d1_without_the_role_is_not_role_authorized():
    source, _ = map_sample("d1_guild_text_role", allowed_roles=set())
    assert source.role_authorized is False


def test_everyone_role_is_the_guild_id_and_only_counts_in_that_guild():
    # D-T6: listing the guild id (= @everyone) admits members of that guild only …
    d2, _ = map_sample("d2_forum_post", allowed_roles={"1100000000000000001"})
    assert d2.role_authorized is True
    d2_other, _ = map_sample("d2_forum_post", allowed_roles={"1100000000000000099"})
    assert d2_other.role_authorized is False
    # … never a DM (no guild, no member), nor a webhook (no member).
    dm, _ = map_sample("d3_dm", allowed_roles={"1100000000000000001", "1400000000000000001"})
    assert dm.role_authorized is False
    hook, _ = map_sample("d4_webhook", channel_from="d1_guild_text_role",
                         allowed_roles={"1100000000000000001"})
    assert hook.role_authorized is False


def test_uncached_thread_is_still_a_thread_when_resolved_by_rest():
    # D-T1: the adapter resolves the channel by id; a thread under a text channel (no forum
    # topic) keys on the parent and the thread.
    sample = load("d1_guild_text_role")
    data = dict(sample["event"]["d"], channel_id="1100000000000000040")
    thread = ChannelInfo(id="1100000000000000040", type=11, name="release prep",
                         parent_id="1100000000000000010", guild_id="1100000000000000001")
    parent = ChannelInfo.from_payload(sample["channel_from_cache"])
    source, _ = map_message(data, bot_id=BOT_ID, channel=thread, parent=parent, guild_name="Hermes Lab")
    assert (source.chat_id, source.thread_id, source.parent_chat_id) == (
        "1100000000000000010", "1100000000000000040", "1100000000000000010")
    assert source.chat_name == "Hermes Lab / #general / release prep"
    assert source.chat_topic is None  # threads of text channels have no topic
    assert build_session_key(source) == "agent:main:discord:group:1100000000000000010:1100000000000000040"


def test_unresolvable_channel_keeps_the_message():
    d1 = load("d1_guild_text_role")["event"]["d"]
    source, event = map_message(d1, bot_id=BOT_ID, channel=None)
    assert (source.chat_type, source.chat_id, source.thread_id) == ("group", "1100000000000000010", None)
    assert event.text == "what changed today?"
    d3 = load("d3_dm")["event"]["d"]
    source, _ = map_message(d3, bot_id=BOT_ID, channel=None)
    assert (source.chat_type, source.chat_id, source.chat_name) == ("dm", "1600000000000000001", "alice")


@pytest.mark.parametrize("kind", [7, 18, 21, 6, 8])
def test_system_messages_are_not_turns(kind, caplog):
    caplog.set_level(logging.DEBUG, logger="hermes_discord.mapping")
    sample = load("d1_guild_text_role")
    sample["event"]["d"]["type"] = kind
    assert map_sample_data(sample) is None
    assert f"skipped: system message type {kind}" in caplog.text


def map_sample_data(sample: dict, **overrides):
    channel = ChannelInfo.from_payload(sample["channel_from_cache"])
    kwargs = dict(bot_id=BOT_ID, channel=channel, guild_name="Hermes Lab", allowed_roles=ALLOWED_ROLES)
    kwargs.update(overrides)
    return map_message(sample["event"]["d"], **kwargs)


def test_reply_type_19_is_a_turn_with_its_reply_context():
    sample = load("d1_guild_text_role")
    sample["event"]["d"].update(
        type=19,
        message_reference={"type": 0, "message_id": "1500000000000000000", "channel_id": "1100000000000000010",
                           "guild_id": "1100000000000000001"},
        referenced_message={"id": "1500000000000000000", "type": 0, "channel_id": "1100000000000000010",
                            "content": "deploy is done", "author": {
                                "id": "1300000000000000002", "username": "bobk", "global_name": None,
                                "discriminator": "0", "avatar": None}})
    _, event = map_sample_data(sample)
    assert event.text == "what changed today?"
    assert (event.reply_to_message_id, event.reply_to_text, event.reply_to_author_id,
            event.reply_to_author_name) == ("1500000000000000000", "deploy is done", "1300000000000000002", "bobk")


def test_reply_to_a_deleted_message_keeps_only_its_id():
    sample = load("d1_guild_text_role")
    sample["event"]["d"].update(type=19, message_reference={"message_id": "1500000000000000000"},
                                referenced_message=None)
    _, event = map_sample_data(sample)
    assert (event.reply_to_message_id, event.reply_to_text) == ("1500000000000000000", None)


def test_forward_reference_on_a_default_message_is_not_a_reply():
    sample = load("d1_guild_text_role")
    sample["event"]["d"]["message_reference"] = {"type": 1, "message_id": "1500000000000000000"}
    _, event = map_sample_data(sample)
    assert event.reply_to_message_id is None


def test_empty_content_without_message_content_intent_is_skipped(caplog):
    caplog.set_level(logging.DEBUG, logger="hermes_discord.mapping")
    sample = load("d1_guild_text_role")
    sample["event"]["d"]["content"] = ""
    assert map_sample_data(sample) is None
    assert "without the Message Content intent" in caplog.text


def test_attachment_only_message_is_a_turn_with_media():
    sample = load("d3_dm")
    sample["event"]["d"].update(content="", attachments=[{
        "id": "1800000000000000001", "filename": "log.txt", "size": 120, "content_type": "text/plain",
        "url": "https://cdn.discordapp.com/attachments/1/2/log.txt"}])
    source, event = map_message(sample["event"]["d"], bot_id=BOT_ID,
                                channel=ChannelInfo.from_payload(sample["channel_from_cache"]))
    assert event.text == ""
    assert event.media == [{"kind": "attachment", "id": "1800000000000000001",
                            "url": "https://cdn.discordapp.com/attachments/1/2/log.txt",
                            "filename": "log.txt", "content_type": "text/plain", "size": 120}]


@pytest.mark.parametrize("content,expected", [
    ("<@1200000000000000000> what changed today?", "what changed today?"),
    ("<@!1200000000000000000> hi", "hi"),
    ("ask <@1200000000000000000> and <@1300000000000000002> about <#1100000000000000010>",
     "ask and <@1300000000000000002> about <#1100000000000000010>"),
    ("ping <@&1400000000000000001>", "ping <@&1400000000000000001>"),
])
def test_only_the_bot_mention_is_stripped(content, expected):
    assert strip_bot_mention(content, BOT_ID) == expected


def test_edit_is_skipped_unless_mapped_as_an_edit():
    sample = load("d3_dm")
    d = sample["event"]["d"]
    d.update(content="can you check my PR #12?", edited_timestamp="2026-01-01T00:05:00.000000+00:00")
    channel = ChannelInfo.from_payload(sample["channel_from_cache"])
    _, event = map_message(d, bot_id=BOT_ID, channel=channel, edit=True)
    assert event.message_id == "1500000000000000004@2026-01-01T00:05:00.000000+00:00"
    assert event.text == "can you check my PR #12?"
    # an embed unfurl (no edited_timestamp) is not an edit of the text
    unfurl = {"id": d["id"], "channel_id": d["channel_id"], "embeds": []}
    assert map_message(unfurl, bot_id=BOT_ID, channel=channel, edit=True) is None


@pytest.mark.parametrize("mutate,field,problem", [
    (lambda d: d.pop("author"), "d.author", "is missing"),
    (lambda d: d.update(id=1500000000000000001), "d.id", "must be a snowflake string, got int"),
    (lambda d: d.update(channel_id="99999999999999999999999"), "d.channel_id",
     "is not a snowflake (a 64-bit unsigned decimal number)"),
    (lambda d: d.update(channel_id="18446744073709551616"), "d.channel_id",
     "is not a snowflake (a 64-bit unsigned decimal number)"),
    (lambda d: d["author"].update(id="12a"), "d.author.id", "is not a snowflake (a 64-bit unsigned decimal number)"),
    (lambda d: d.update(content=42), "d.content", "must be a string, got int"),
    (lambda d: d.update(content="hi \ud800 there"), "d.content", "contains a lone surrogate"),
    (lambda d: d["author"].update(global_name="\udfff"), "d.author.global_name", "contains a lone surrogate"),
    (lambda d: d["member"].update(roles=[14]), "d.member.roles[0]", "must be a snowflake string, got int"),
    (lambda d: d.update(type="0"), "d.type", "must be an integer, got str"),
    (lambda d: d["author"].update(bot="yes"), "d.author.bot", "must be a boolean, got str"),
])
def test_malformed_payload_names_the_field(mutate, field, problem):
    sample = load("d1_guild_text_role")
    mutate(sample["event"]["d"])
    with pytest.raises(MalformedPayload) as info:
        map_sample_data(sample)
    assert (info.value.field, info.value.problem) == (field, problem)
    assert str(info.value) == f"malformed payload: {field} {problem}"


def test_malformed_channel_payload_names_the_field():
    channel = copy.deepcopy(load("d3_dm")["channel_from_cache"])
    channel["recipients"][0].pop("username")
    with pytest.raises(MalformedPayload) as info:
        ChannelInfo.from_payload(channel)
    assert info.value.field == "channel.recipients[0].username"


def test_not_an_object_is_malformed():
    with pytest.raises(MalformedPayload) as info:
        map_message(["not", "a", "message"], bot_id=BOT_ID, channel=None)
    assert info.value.field == "d"


@pytest.mark.parametrize("thread_type,parent_type", [(10, 5), (11, 0), (12, 0), (11, 16)],
                         ids=["announcement-thread", "public-thread", "private-thread", "media-post"])
def test_every_thread_kind_keys_on_its_parent(thread_type, parent_type):
    # docs/adapters.md §2.0: announcement (10), public (11), private (12) threads and forum/media
    # posts all map to group + parent chat_id + thread_id.
    sample = load("d1_guild_text_role")
    data = dict(sample["event"]["d"], channel_id="1100000000000000050")
    thread = ChannelInfo(id="1100000000000000050", type=thread_type, name="t",
                         parent_id="1100000000000000010", guild_id="1100000000000000001")
    parent = ChannelInfo(id="1100000000000000010", type=parent_type, name="general", topic="Ask the agent here",
                         guild_id="1100000000000000001")
    source, _ = map_message(data, bot_id=BOT_ID, channel=thread, parent=parent, guild_name="Hermes Lab")
    assert (source.chat_type, source.chat_id, source.thread_id, source.parent_chat_id) == (
        "group", "1100000000000000010", "1100000000000000050", "1100000000000000010")
    # only forum/media parents lend their topic (their posting guidelines) to a post
    assert source.chat_topic == ("Ask the agent here" if parent_type == 16 else None)
    assert build_session_key(source) == "agent:main:discord:group:1100000000000000010:1100000000000000050"


def test_a_bot_author_without_webhook_is_a_bot():
    sample = load("d1_guild_text_role")
    sample["event"]["d"]["author"]["bot"] = True
    source, _ = map_sample_data(sample)
    assert (source.user_id, source.is_bot) == ("1300000000000000001", True)
    assert source.role_authorized is True  # the core decides what a bot may do (allow_bots)
