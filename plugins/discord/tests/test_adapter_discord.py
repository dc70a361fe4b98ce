"""DiscordAdapter driven through the real discord.py client against the fake Discord (REST +
gateway) on 127.0.0.1 (docs/adapters.md §2.2, §2.3, §2.4).

Inbound events are recorded by a bound handler; the gateway end-to-end tests are in
`test_gateway_discord.py`.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from samples_discord import sample
from fake_discord import ALICE_ID, BOT_ID, DM_ID, FORUM_ID, FORUM_POST_ID, GENERAL_ID, GUILD_ID, wait_until

from hermes_core import SessionSource


class Recorder:
    """Inbound handler that records events; can be told to refuse the next N events."""

    def __init__(self, refuse: int = 0):
        self.events = []
        self.refuse = refuse
        self.refused = 0

    async def __call__(self, event):
        if self.refuse > 0:
            self.refuse -= 1
            self.refused += 1
            raise RuntimeError("store unavailable")
        self.events.append(event)



async def test_start_logs_in_identifies_and_maps_a_guild_message(fake, make_adapter):
    rec = Recorder()
    adapter = await make_adapter(rec, allowed_roles=["1400000000000000001"])
    assert [c.route for c in fake.calls[:2]] == ["get_me", "get_application"]
    (identify,) = fake.identifies
    # GUILDS (1<<0) | GUILD_MESSAGES (1<<9) | DIRECT_MESSAGES (1<<12) | MESSAGE_CONTENT (1<<15)
    assert identify["intents"] == 1 + 512 + 4096 + 32768
    assert adapter.bot_id == BOT_ID
    await fake.message(sample("d1_guild_text_role"))
    await wait_until(lambda: len(rec.events) == 1)
    (event,) = rec.events
    assert event.source == SessionSource(
        platform="discord", chat_id="1100000000000000010", chat_name="Hermes Lab / #general",
        chat_type="group", user_id="1300000000000000001", user_name="Ali", chat_topic="Ask the agent here",
        guild_id="1100000000000000001", message_id="1500000000000000001", role_authorized=True)
    assert event.text == "what changed today?"
    assert fake.calls_of("get_channel") == []  # the channel came from GUILD_CREATE's cache
    assert (await adapter.health())["ok"] is True


async def test_uncached_thread_is_resolved_over_rest_and_keyed_on_its_parent(fake, make_adapter):
    # D2 / D-T1: the forum post is not in GUILD_CREATE; discord.py would hand out a
    # PartialMessageable. The adapter asks GET /channels/{id} and files it as a thread.
    rec = Recorder()
    await make_adapter(rec)
    await fake.message(sample("d2_forum_post"))
    await wait_until(lambda: len(rec.events) == 1)
    source = rec.events[0].source
    assert source == SessionSource(
        platform="discord", chat_id="1100000000000000012", chat_name="Hermes Lab / #support / Bug: login loop",
        chat_type="group", user_id="1300000000000000001", user_name="Alice", thread_id="1100000000000000030",
        chat_topic="Post one bug per thread. Include logs.", guild_id="1100000000000000001",
        parent_chat_id="1100000000000000012", message_id="1100000000000000030")
    assert [c.path for c in fake.calls_of("get_channel")] == [f"/api/v10/channels/{FORUM_POST_ID}"]
    # a second message in the same thread needs no second lookup (a channel's kind never changes)
    await fake.message(dict(sample("d2_forum_post"), id="1500000000000000031", content="still broken"))
    await wait_until(lambda: len(rec.events) == 2)
    assert rec.events[1].source.thread_id == FORUM_POST_ID
    assert len(fake.calls_of("get_channel")) == 1


async def test_cached_thread_and_thread_create_need_no_rest_lookup(fake, make_adapter):
    fake.guild_threads = [FORUM_POST_ID]  # the forum post comes with GUILD_CREATE this time
    rec = Recorder()
    await make_adapter(rec)
    await fake.message(sample("d2_forum_post"))
    # a thread opened later under #general arrives as THREAD_CREATE before its first message
    await fake.push("THREAD_CREATE", {
        "id": "1100000000000000040", "type": 11, "guild_id": GUILD_ID, "parent_id": GENERAL_ID,
        "owner_id": ALICE_ID, "name": "release prep", "newly_created": True, "message_count": 0,
        "member_count": 1, "rate_limit_per_user": 0, "flags": 0, "last_message_id": None,
        "thread_metadata": {"archived": False, "auto_archive_duration": 1440,
                            "archive_timestamp": "2026-01-01T00:00:00+00:00", "locked": False}})
    await fake.message(dict(sample("d1_guild_text_role"), channel_id="1100000000000000040", content="ship it?"))
    await wait_until(lambda: len(rec.events) == 2)
    forum, thread = (e.source for e in rec.events)
    assert (forum.chat_id, forum.thread_id, forum.chat_name, forum.chat_topic) == (
        FORUM_ID, FORUM_POST_ID, "Hermes Lab / #support / Bug: login loop", "Post one bug per thread. Include logs.")
    assert (thread.chat_id, thread.thread_id, thread.parent_chat_id, thread.chat_name, thread.chat_topic) == (
        GENERAL_ID, "1100000000000000040", GENERAL_ID, "Hermes Lab / #general / release prep", None)
    assert fake.calls_of("get_channel") == []


async def test_dm_and_webhook_and_own_message(fake, make_adapter):
    rec = Recorder()
    await make_adapter(rec)
    await fake.message(sample("d5_own_echo"))  # dropped (D5)
    await fake.message(sample("d4_webhook"))  # mapped, is_bot: the core applies allow_bots
    await fake.message(sample("d3_dm"))  # an uncached DM channel: GET /channels/{id}
    await wait_until(lambda: len(rec.events) == 2)
    webhook, dm = rec.events
    assert (webhook.source.user_id, webhook.source.user_name, webhook.source.is_bot) == \
        ("1700000000000000001", "CI Hook", True)
    assert dm.source == SessionSource(platform="discord", chat_id=DM_ID, chat_name="alice", chat_type="dm",
                                      user_id=ALICE_ID, user_name="Alice", message_id="1500000000000000004")
    assert [e.message_id for e in rec.events] == ["1500000000000000005", "1500000000000000004"]


async def test_messages_are_emitted_in_gateway_order(fake, make_adapter):
    rec = Recorder()
    await make_adapter(rec)
    for i in range(8):
        # alternate a cached channel and an uncached DM (which needs a REST lookup first)
        base = sample("d1_guild_text_role") if i % 2 == 0 else sample("d3_dm")
        await fake.message(dict(base, id=f"15000000000000001{i:02d}", content=f"message {i}"))
    await wait_until(lambda: len(rec.events) == 8)
    assert [e.text for e in rec.events] == [f"message {i}" for i in range(8)]


async def test_malformed_payloads_are_logged_and_the_adapter_keeps_running(fake, make_adapter, caplog):
    caplog.set_level(logging.INFO)
    rec = Recorder()
    adapter = await make_adapter(rec)
    no_author = sample("d1_guild_text_role")
    no_author.pop("author")
    await fake.message(no_author)
    huge = dict(sample("d3_dm"), channel_id="123456789012345678901234567890")
    await fake.message(huge)
    await fake.push("GUILD_CREATE", {"id": "not-a-number"})  # discord.py's own parser fails on it
    await fake.push("SOMETHING_NEW", {"x": 1})  # an event kind discord.py does not know
    await fake.message(sample("d3_dm"))
    await wait_until(lambda: len(rec.events) == 1)
    assert rec.events[0].message_id == "1500000000000000004"
    assert "skipping malformed discord MESSAGE_CREATE: malformed payload: d.author is missing" in caplog.text
    assert ("skipping malformed discord MESSAGE_CREATE: malformed payload: d.channel_id is not a "
            "snowflake (a 64-bit unsigned decimal number)") in caplog.text
    assert "discord GUILD_CREATE dispatch could not be parsed by discord.py and was skipped" in caplog.text
    health = await adapter.health()
    assert health["ok"] is True and health["sessions"] == 1


async def test_emit_refusals_are_retried_and_the_message_arrives_once(fake, make_adapter):
    rec = Recorder(refuse=2)
    await make_adapter(rec)
    await fake.message(sample("d3_dm"))
    await wait_until(lambda: len(rec.events) == 1)
    assert rec.refused == 2
    await asyncio.sleep(0.3)
    assert [e.message_id for e in rec.events] == ["1500000000000000004"]


async def test_edits_are_turns_only_when_configured(fake, make_adapter):
    rec = Recorder()
    await make_adapter(rec, edits_as_turns=True)
    edited = dict(sample("d3_dm"), content="can you check my PR #12?",
                  edited_timestamp="2026-01-01T00:05:00.000000+00:00")
    await fake.message(sample("d3_dm"))
    await fake.push("MESSAGE_UPDATE", edited)
    await wait_until(lambda: len(rec.events) == 2)
    assert [(e.message_id, e.text) for e in rec.events] == [
        ("1500000000000000004", "can you check my PR?"),
        ("1500000000000000004@2026-01-01T00:05:00.000000+00:00", "can you check my PR #12?")]


async def test_edits_are_ignored_by_default(fake, make_adapter, caplog):
    caplog.set_level(logging.DEBUG, logger="hermes_discord")
    rec = Recorder()
    await make_adapter(rec)
    await fake.push("MESSAGE_UPDATE", dict(sample("d3_dm"), content="changed",
                                           edited_timestamp="2026-01-01T00:05:00.000000+00:00"))
    await fake.message(dict(sample("d3_dm"), id="1500000000000000010", content="next"))
    await wait_until(lambda: len(rec.events) == 1)
    assert rec.events[0].text == "next"
    assert ("discord update of message 1500000000000000004 skipped: it is not queued and edits_as_turns is off"
            in caplog.text)


async def test_deletions_are_routed_with_the_source_their_message_had_else_by_their_channel(fake, make_adapter,
                                                                                            caplog):
    # docs/adapters.md D-T12: MESSAGE_DELETE carries no author. A message handed to the gateway is
    # deleted under the source it was handed over with (a guild channel's key is per user); one
    # not remembered gets what its channel alone gives (a DM's key is exact without the author).
    # A malformed deletion is one warning naming the field.
    caplog.set_level(logging.WARNING, logger="hermes_discord")
    rec = Recorder()
    adapter = await make_adapter(rec)
    offered = []

    async def edit_queued(source, message_id, text):
        offered.append((source, message_id, text))
        return False

    adapter.bind(rec, edit_queued=edit_queued)
    await fake.message(sample("d1_guild_text_role"))
    await wait_until(lambda: len(rec.events) == 1)
    await fake.push("MESSAGE_DELETE", {"id": "1500000000000000001", "channel_id": GENERAL_ID, "guild_id": GUILD_ID})
    await fake.push("MESSAGE_DELETE", {"id": 1500000000000000002, "channel_id": GENERAL_ID})
    await fake.push("MESSAGE_DELETE", {"id": "1500000000000000003", "channel_id": DM_ID})
    await fake.push("MESSAGE_DELETE", {"id": "1500000000000000009", "channel_id": GENERAL_ID, "guild_id": GUILD_ID})
    await wait_until(lambda: len(offered) == 3)
    remembered, dm, channel = offered
    assert remembered == (rec.events[0].source, "1500000000000000001", None)
    assert (remembered[0].user_id, remembered[0].chat_id) == (ALICE_ID, GENERAL_ID)
    assert (dm[0].chat_type, dm[0].chat_id, dm[0].user_id, dm[1]) == ("dm", DM_ID, None, "1500000000000000003")
    assert (channel[0].chat_type, channel[0].chat_id, channel[0].guild_id, channel[0].user_id) == (
        "group", GENERAL_ID, GUILD_ID, None)
    assert [r.getMessage() for r in caplog.records if r.name.startswith("hermes_discord")] == [
        "skipping malformed discord MESSAGE_DELETE: malformed payload: d.id must be a snowflake string, got int"]
    assert len(rec.events) == 1  # a deletion is never a turn


# ---- reconnects --------------------------------------------------------------------------------

async def test_dropped_connection_resumes_and_loses_nothing(fake, make_adapter):
    rec = Recorder()
    adapter = await make_adapter(rec)
    seq_a = await fake.message(dict(sample("d3_dm"), id="1500000000000000101", content="before the drop"))
    await wait_until(lambda: len(rec.events) == 1)
    await fake.drop()
    # Discord holds these for the session while the bot is away.
    await fake.message(dict(sample("d3_dm"), id="1500000000000000102", content="while away 1"))
    await fake.message(dict(sample("d1_guild_text_role"), id="1500000000000000103", content="while away 2"))
    await wait_until(lambda: len(rec.events) == 3)
    assert [e.text for e in rec.events] == ["before the drop", "while away 1", "while away 2"]
    (resume,) = fake.resumes
    assert (resume["session_id"], resume["seq"]) == ("fake-session-1", seq_a)
    assert fake.connections == ["/gw", "/gw/resume"]  # RESUME goes to READY's resume_gateway_url
    assert len(fake.identifies) == 1
    assert (adapter.sessions, adapter.resumes) == (1, 1)


async def test_replayed_events_after_resume_are_not_emitted_twice(fake, make_adapter):
    # D-T2: a RESUME may replay events the bot already received.
    rec = Recorder()
    await make_adapter(rec)
    fake.replay_overlap = 2
    await fake.message(dict(sample("d3_dm"), id="1500000000000000201", content="one"))
    await fake.message(dict(sample("d3_dm"), id="1500000000000000202", content="two"))
    await wait_until(lambda: len(rec.events) == 2)
    await fake.request_reconnect()  # op 7: the client reconnects and RESUMEs
    await fake.wait_for(lambda: len(fake.resumes) == 1 and fake.connected)
    await fake.message(dict(sample("d3_dm"), id="1500000000000000203", content="three"))
    await wait_until(lambda: len(rec.events) == 3)
    await asyncio.sleep(0.2)
    assert [e.text for e in rec.events] == ["one", "two", "three"]


async def test_invalidated_session_identifies_again(fake, make_adapter, caplog, monkeypatch):
    from hermes_discord.adapter import _Client

    async def no_identify_pause(self, shard_id, *, initial=False):
        pass

    # discord.py waits 5 s before every non-initial IDENTIFY (Discord's identify rate limit,
    # `Client.before_identify_hook`); the pacing is not under test here.
    monkeypatch.setattr(_Client, "before_identify_hook", no_identify_pause)
    rec = Recorder()
    adapter = await make_adapter(rec)
    fake.invalidate_next_resume = True
    await fake.drop()
    await fake.wait_for(lambda: len(fake.identifies) == 2 and fake.connected)
    await fake.message(sample("d3_dm"))
    await wait_until(lambda: len(rec.events) == 1)
    assert (adapter.sessions, adapter.resumes) == (2, 0)
    assert "discord gateway session could not be resumed; a new session started" in caplog.text


# ---- start-up ----------------------------------------------------------------------------------

async def test_missing_message_content_intent_is_said_at_start(fake, make_adapter, caplog):
    fake.app_flags = 0
    caplog.set_level(logging.WARNING)
    await make_adapter(Recorder())
    assert ("discord: the Message Content intent is not enabled for this application (Developer Portal → "
            "Bot → Privileged Gateway Intents); connecting without it: guild messages that do not mention "
            "the bot arrive with empty text and are not answered (DMs and mentions are)") in caplog.text
    assert fake.identifies[0]["intents"] == 1 + 512 + 4096  # the privileged bit is not requested


async def test_gateway_refusing_the_intent_fails_start_with_the_remedy(fake, make_adapter):
    # The application says Message Content is on, but the gateway closes with 4014 anyway.
    from hermes_discord.adapter import DiscordStartError

    fake.refuse_message_content = True
    with pytest.raises(DiscordStartError) as info:
        await make_adapter(Recorder())
    assert str(info.value) == (
        "discord gateway connection failed: Discord refused the privileged intents (close code 4014): "
        "enable the Message Content intent in the Developer Portal or set message_content = false")


async def test_rejected_token_fails_start_without_echoing_it(fake, make_adapter):
    from hermes_discord.adapter import DiscordStartError

    with pytest.raises(DiscordStartError) as info:
        await make_adapter(Recorder(), bot_token="MTIz.wrong.token-SECRETPART")
    assert str(info.value) == "discord rejected the bot token (401 Unauthorized)"
    assert "SECRETPART" not in repr(info.value)


async def test_start_without_token_names_the_setting(make_adapter):
    from hermes_discord.adapter import DiscordStartError

    with pytest.raises(DiscordStartError, match="platforms.discord.bot_token is not set"):
        await make_adapter(Recorder(), bot_token=None)


async def test_settings_endpoints_point_discord_py_at_the_fake(fake, make_adapter):
    import discord.gateway
    import discord.http

    discord.http.Route.BASE = "https://discord.com/api/v10"
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = None
    rec = Recorder()
    await make_adapter(rec, api_base=fake.api_base + "/", gateway_url=fake.gateway_url)
    assert discord.http.Route.BASE == fake.api_base
    await fake.message(sample("d3_dm"))
    await wait_until(lambda: len(rec.events) == 1)


# ---- sending -----------------------------------------------------------------------------------

THREAD = SessionSource(platform="discord", chat_id=FORUM_ID, chat_type="group", thread_id=FORUM_POST_ID,
                       parent_chat_id=FORUM_ID, guild_id=GUILD_ID, user_id=ALICE_ID)
CHANNEL = SessionSource(platform="discord", chat_id=GENERAL_ID, chat_type="group", guild_id=GUILD_ID,
                        user_id=ALICE_ID)


async def test_reply_goes_to_the_thread_references_the_trigger_and_pings_nobody(fake, make_adapter):
    adapter = await make_adapter(Recorder())
    result = await adapter.send(THREAD, "@everyone look <@1300000000000000001>", reply_to="1100000000000000030")
    (sent,) = fake.sent
    assert sent["channel_id"] == FORUM_POST_ID  # never the forum parent in chat_id (D-T10)
    assert sent["content"] == "@everyone look <@1300000000000000001>"
    # discord.py writes the reference's ids as JSON numbers (Discord accepts both forms)
    assert sent["message_reference"] == {"type": 0, "message_id": 1100000000000000030,
                                         "channel_id": 1100000000000000030, "fail_if_not_exists": False}
    # nobody is pinged: no @everyone/roles/users, and not the author of the trigger
    assert sent["allowed_mentions"] == {"parse": [], "replied_user": False}
    assert result.message_id == sent["id"]


async def test_reply_to_a_deleted_trigger_still_arrives(fake, make_adapter):
    adapter = await make_adapter(Recorder())
    fake.deleted_messages.add("1500000000000000001")
    await adapter.send(CHANNEL, "answer", reply_to="1500000000000000001")
    assert [(s["channel_id"], s["content"]) for s in fake.sent] == [(GENERAL_ID, "answer")]
    assert [c.status for c in fake.calls_of("create_message")] == [200]


async def test_posting_to_a_forum_parent_is_refused_by_discord(fake, make_adapter):
    import discord

    adapter = await make_adapter(Recorder())
    parent_only = SessionSource(platform="discord", chat_id=FORUM_ID, chat_type="group")
    with pytest.raises(discord.HTTPException) as info:
        await adapter.send(parent_only, "hello")
    assert info.value.code == 50008


async def test_users_mode_lets_user_mentions_ping(fake, make_adapter):
    adapter = await make_adapter(Recorder(), allowed_mentions="users")
    await adapter.send(CHANNEL, "<@1300000000000000001> done")
    assert fake.sent[0]["allowed_mentions"] == {"parse": ["users"]}


async def test_chunk_over_2000_characters_is_refused_before_sending(fake, make_adapter):
    adapter = await make_adapter(Recorder())
    with pytest.raises(ValueError, match="longer than 2000 characters"):
        await adapter.send(CHANNEL, "x" * 2001)
    assert fake.calls_of("create_message") == []


async def test_429_is_sat_out_by_discord_py_and_sent_once(fake, make_adapter):
    adapter = await make_adapter(Recorder())
    fake.fail("create_message", "429", retry_after=1.0)
    await adapter.send(CHANNEL, "hello")
    attempts = fake.calls_of("create_message")
    assert [a.status for a in attempts] == [429, 200]
    assert attempts[1].at - attempts[0].at >= 1.0
    assert [s["content"] for s in fake.sent] == ["hello"]


async def test_long_429_is_raised_as_retry_after(fake, make_adapter):
    from hermes_core.sdk.errors import RetryAfter

    adapter = await make_adapter(Recorder())
    fake.fail("create_message", "429", retry_after=45.5)
    with pytest.raises(RetryAfter) as info:
        await adapter.send(CHANNEL, "hello")
    assert info.value.seconds == 45.5
    assert [a.status for a in fake.calls_of("create_message")] == [429]


async def test_route_buckets_are_honoured_without_a_429(fake, make_adapter):
    fake.bucket_limit, fake.bucket_window = 3, 0.5
    adapter = await make_adapter(Recorder())
    text = "\n".join(f"line {i:02d} " + "y" * 1490 for i in range(7))  # 7 chunks of ~1500 characters
    results = await adapter.send_text(CHANNEL, text, reply_to="1500000000000000001")
    assert len(results) == 7
    assert [c.status for c in fake.calls_of("create_message")] == [200] * 7
    assert [s["content"][:7] for s in fake.sent] == [f"line {i:02d}" for i in range(7)]
    assert "message_reference" in fake.sent[0] and all("message_reference" not in s for s in fake.sent[1:])
    calls = fake.calls_of("create_message")
    assert calls[3].at - calls[0].at >= 0.4  # the fourth waited for the bucket to reset


async def test_typing_and_edit_go_to_the_thread(fake, make_adapter):
    adapter = await make_adapter(Recorder())
    await adapter.send_typing(THREAD)
    result = await adapter.edit_message(THREAD, "1900000000000000005", "better answer")
    assert fake.typing == [FORUM_POST_ID]
    (edit,) = fake.edits
    assert (edit["channel_id"], edit["id"], edit["content"], edit["allowed_mentions"]) == \
        (FORUM_POST_ID, "1900000000000000005", "better answer", {"parse": []})
    assert result.message_id == "1900000000000000005"


async def test_sending_works_after_stop_until_aclose(fake, make_adapter):
    # The gateway stops its adapters, then drains running turns whose replies still go out.
    rec = Recorder()
    adapter = await make_adapter(rec)
    await adapter.stop()
    await fake.wait_for(lambda: not fake.connected)
    await adapter.send(CHANNEL, "late reply")
    assert [s["content"] for s in fake.sent] == ["late reply"]
    assert (await adapter.health())["ok"] is False
    await adapter.aclose()
    assert adapter.client.is_closed()
    with pytest.raises(RuntimeError, match="not started"):
        await adapter.send(CHANNEL, "too late")


async def test_stop_hands_queued_messages_to_the_gateway(fake, make_adapter):
    release = asyncio.Event()
    seen = []

    async def slow(event):
        await release.wait()
        seen.append(event.text)

    adapter = await make_adapter(slow)
    for i in range(3):
        await fake.message(dict(sample("d3_dm"), id=f"15000000000000003{i:02d}", content=f"m{i}"))
    await fake.wait_for(lambda: len(fake.sessions["fake-session-1"].frames) == 5)
    await asyncio.sleep(0.1)
    stopping = asyncio.create_task(adapter.stop())
    await asyncio.sleep(0.1)
    release.set()
    await stopping
    assert seen == ["m0", "m1", "m2"]


async def test_the_token_never_reaches_the_logs_or_health(fake, make_adapter, caplog):
    # discord.py logs REST calls and gateway frames at DEBUG; IDENTIFY and RESUME carry the token.
    rec = Recorder()
    with caplog.at_level(logging.DEBUG):
        adapter = await make_adapter(rec)
        await fake.message(sample("d3_dm"))
        await wait_until(lambda: len(rec.events) == 1)
        await adapter.send(CHANNEL, "hi")
        await fake.drop()  # the reconnect RESUMEs with the token
        await fake.wait_for(lambda: len(fake.resumes) == 1 and fake.connected)
        health = await adapter.health()
        await adapter.aclose()
    # the frames and REST calls that carry or answer the token were logged …
    assert "Shard ID None has sent the IDENTIFY payload." in caplog.text
    assert "/api/v10/users/@me with None has returned 200" in caplog.text
    # … but never the token, whole or its secret part
    assert fake.token not in caplog.text and fake.token.split(".")[-1] not in caplog.text
    assert fake.token not in repr(adapter.settings) and fake.token not in str(health)
