"""SlackAdapter driven through the real slack-bolt / slack-sdk clients against the fake Slack on
127.0.0.1 (docs/adapters.md §3.2, §3.3). Inbound events are recorded by a bound handler; the
gateway end-to-end tests are in `test_gateway_slack.py`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest
from fake_slack import APP_TOKEN, BOT_TOKEN, SIGNING_SECRET, post_event

from hermes_core.sdk import RetryAfter, SendError, SessionSource
from hermes_slack.adapter import SlackAdapter
from hermes_slack.receiver import SlackStartError

FIXTURES = Path(__file__).parent / "fixtures"


def load(name: str, **event_changes) -> dict:
    payload = json.loads((FIXTURES / f"{name}.json").read_text())
    payload["event"].update(event_changes)
    return payload


class Recorder:
    """Inbound handler that records events; can refuse the next N events or hold them."""

    def __init__(self, refuse: int = 0):
        self.events = []
        self.refuse = refuse
        self.gate: asyncio.Event | None = None

    async def __call__(self, event):
        if self.gate is not None:
            await self.gate.wait()
        if self.refuse > 0:
            self.refuse -= 1
            raise RuntimeError("store unavailable")
        self.events.append(event)


def mention(ts: str, text: str = "<@U0BOT0001> why is CI red?", user: str = "U0ALICE01", **extra) -> dict:
    """A top-level mention in #general (the starter of sample S2's thread)."""
    payload = load("s2_thread_reply")
    event = payload["event"]
    event.update(user=user, text=text, ts=ts, event_ts=ts, **extra)
    del event["thread_ts"], event["parent_user_id"]
    payload["event_id"] = f"Ev{ts.replace('.', '')}"
    return payload


DM = SessionSource(platform="slack", chat_id="D0DMALICE1", chat_type="dm", user_id="U0ALICE01")
THREAD = SessionSource(platform="slack", chat_id="C0GENERAL1", chat_type="channel", user_id="U0BOB0002",
                       thread_id="1767225700.000200")


# ---- Socket Mode -----------------------------------------------------------------------------

async def test_socket_mode_event_is_mapped_emitted_and_acked(slack, make_adapter):
    rec = Recorder()
    adapter = await make_adapter(rec)
    assert [c.method for c in slack.calls[:2]] == ["auth.test", "apps.connections.open"]
    assert (adapter.team_id, adapter.bot_user_id, adapter.bot_id) == ("T0ACME001", "U0BOT0001", "B0HERMES01")
    (envelope_id,) = await slack.push(load("s1_message_im"))
    await slack.wait_for(lambda: envelope_id in slack.acks)
    (event,) = rec.events
    assert event.text == "hi, can you draft the release notes?"
    assert (event.source.chat_id, event.source.chat_type, event.source.user_name) == ("D0DMALICE1", "dm", "Alice")
    assert event.message_id == "1767225600.000100"
    # DMs need no conversations.info; users.info gave the name
    assert [c.args["user"] for c in slack.calls_of("users.info")] == ["U0ALICE01"]
    assert slack.calls_of("conversations.info") == []
    assert (await adapter.health())["ok"] is True


async def test_ack_is_sent_only_after_the_gateway_accepted_the_event(slack, make_adapter):
    rec = Recorder()
    rec.gate = asyncio.Event()
    await make_adapter(rec)
    (envelope_id,) = await slack.push(load("s1_message_im"))
    await asyncio.sleep(0.3)  # the listener is waiting in `emit`
    assert slack.acks == [] and rec.events == []
    rec.gate.set()
    await slack.wait_for(lambda: slack.acks == [envelope_id])
    assert len(rec.events) == 1


async def test_refused_event_is_not_acked_and_redelivered_after_reconnect(slack, make_adapter):
    rec = Recorder(refuse=1)
    adapter = await make_adapter(rec)
    (envelope_id,) = await slack.push(load("s1_message_im"))
    await slack.wait_for(lambda: rec.refuse == 0)
    await asyncio.sleep(0.2)
    assert slack.acks == [] and [e.envelope_id for e in slack.pending()] == [envelope_id]
    assert (await adapter.health())["last_error"] == "RuntimeError: store unavailable"
    # Slack asks the app to reconnect; it redelivers what was not acknowledged.
    await slack.disconnect()
    await slack.wait_for(lambda: envelope_id in slack.acks)
    assert slack.connections == 2
    assert len(slack.calls_of("apps.connections.open")) == 2
    assert [e.message_id for e in rec.events] == ["1767225600.000100"]
    assert slack.envelopes[0].attempts == 2


async def test_events_held_while_stopped_arrive_after_restart(slack, make_adapter, tmp_path):
    first = Recorder()
    adapter = await make_adapter(first)
    await adapter.stop()
    ids = await slack.push(load("s1_message_im"), load("s5_mpim"))
    second = Recorder()
    await make_adapter(second)
    await slack.wait_for(lambda: set(ids) <= set(slack.acks))
    assert first.events == []
    assert sorted(e.message_id for e in second.events) == ["1767225600.000100", "1767225900.000500"]


async def test_app_mention_and_message_of_one_message_are_the_same_message(slack, make_adapter):
    # S-T1: both are emitted with the same (chat_id, message_id): the core's durable dedupe keeps one
    # (the end-to-end "one reply" check is in test_gateway_slack.py).
    rec = Recorder()
    await make_adapter(rec)
    as_message = load("s3_app_mention_private", type="message", channel_type="group")
    as_message["event_id"] = "Ev0100000099"
    await slack.push(load("s3_app_mention_private"), as_message)
    await slack.wait_for(lambda: len(slack.acks) == 2)
    assert {(e.source.chat_id, e.message_id) for e in rec.events} == {("C0PRIVATE9", "1767225800.000400")}
    assert {e.source.chat_type for e in rec.events} == {"channel"}
    assert {e.source.chat_name for e in rec.events} == {"release-crew"}


async def test_messages_not_for_the_bot_are_acked_and_dropped(slack, make_adapter, caplog):
    rec = Recorder()
    await make_adapter(rec)
    unmentioned = mention("1767226200.000800", text="lunch anyone?")
    with caplog.at_level(logging.DEBUG, logger="hermes_slack"):
        ids = await slack.push(load("s6_bot_message"), unmentioned, load("s7_message_changed"),
                               load("s1_message_im", user="U0BOT0001"))
        await slack.wait_for(lambda: set(ids) <= set(slack.acks))
    assert rec.events == []
    assert ("slack message 1767226200.000800 in C0GENERAL1 is not for the bot: channel message without "
            "a mention of the bot") in caplog.text


async def test_threads_the_bot_answered_in_need_no_mention_even_after_a_restart(slack, make_adapter):
    rec = Recorder()
    adapter = await make_adapter(rec)
    starter = mention("1767225700.000200")
    await slack.push(starter)
    await slack.wait_for(lambda: len(rec.events) == 1)
    assert rec.events[0].source.thread_id == "1767225700.000200"  # synthetic root
    await adapter.stop()
    rec2 = Recorder()
    await make_adapter(rec2)
    ids = await slack.push(load("s2_thread_reply"))
    await slack.wait_for(lambda: ids[0] in slack.acks)
    (reply,) = rec2.events
    assert (reply.source.thread_id, reply.text, reply.source.user_name) == \
        ("1767225700.000200", "it's the flaky e2e job again", "Bob")


async def test_malformed_events_are_logged_acked_and_the_adapter_keeps_serving(slack, make_adapter, caplog):
    rec = Recorder()
    await make_adapter(rec)
    broken_ts = load("s1_message_im", ts=1767225600.0001)
    unknown = load("s1_message_im")
    unknown["event"] = {"type": "brand_new_kind", "channel": "D0DMALICE1"}
    with caplog.at_level(logging.WARNING, logger="hermes_slack"):
        ids = await slack.push(broken_ts, unknown, load("s5_mpim"))
        await slack.wait_for(lambda: set(ids) <= set(slack.acks))
    assert [e.message_id for e in rec.events] == ["1767225900.000500"]
    assert "skipping malformed slack event Ev0100000001: malformed payload: event.ts must be a string, got float" \
        in caplog.text
    assert "malformed payload: event.type has unknown kind 'brand_new_kind'" in caplog.text


async def test_names_and_channels_are_looked_up_once(slack, make_adapter):
    rec = Recorder()
    await make_adapter(rec)
    second = mention("1767226300.000900", text="<@U0BOT0001> and another thing")
    await slack.push(mention("1767225700.000200"), second)
    await slack.wait_for(lambda: len(rec.events) == 2)
    assert [c.args["channel"] for c in slack.calls_of("conversations.info")] == ["C0GENERAL1"]
    assert [c.args["user"] for c in slack.calls_of("users.info")] == ["U0ALICE01"]
    assert rec.events[1].source.chat_topic == "Company-wide announcements"


async def test_failed_lookups_fall_back_and_the_event_is_still_accepted(slack, make_adapter):
    rec = Recorder()
    await make_adapter(rec)
    slack.fail("conversations.info", "ratelimited", retry_after=30)
    slack.fail("users.info", "internal_error")
    await slack.push(load("s3_app_mention_private"))
    await slack.wait_for(lambda: len(rec.events) == 1)
    source = rec.events[0].source
    assert (source.chat_type, source.chat_name, source.user_name) == ("channel", "C0PRIVATE9", None)


async def test_hanging_lookups_do_not_hold_the_ack_past_lookup_timeout(slack, make_adapter):
    # Slack's ack window is 3 s: a users.info / conversations.info that hangs is given up after
    # `lookup_timeout` and the event is accepted (and acked) without the names.
    rec = Recorder()
    await make_adapter(rec, lookup_timeout=0.2)
    slack.held = {"users.info": asyncio.Event(), "conversations.info": asyncio.Event()}
    (envelope_id,) = await slack.push(load("s3_app_mention_private"))
    await slack.wait_for(lambda: envelope_id in slack.acks)
    source = rec.events[0].source
    assert (source.chat_type, source.chat_name, source.user_name) == ("channel", "C0PRIVATE9", None)
    assert not any(event.is_set() for event in slack.held.values())  # the lookups still hang
    for event in slack.held.values():
        event.set()


async def test_start_refuses_bad_tokens_without_naming_them(slack, make_adapter):
    with pytest.raises(SlackStartError) as info:
        await make_adapter(bot_token="xoxb-wrong-token-value")
    assert str(info.value) == "slack auth.test refused the bot token: invalid_auth"
    with pytest.raises(SlackStartError) as info:
        await make_adapter(app_token="xapp-wrong-token-value")
    assert str(info.value) == "slack apps.connections.open refused the app token: invalid_auth"
    with pytest.raises(SlackStartError) as info:
        await make_adapter(app_token=None)
    assert "platforms.slack.app_token is not set" in str(info.value)
    assert slack.connections == 0


# ---- HTTP Events API -------------------------------------------------------------------------

async def http_url(adapter: SlackAdapter) -> str:
    host, port = adapter.http_address
    return f"http://{host}:{port}/slack/events"


async def test_http_signed_event_is_emitted_then_answered_200(slack, make_adapter):
    rec = Recorder()
    adapter = await make_adapter(rec, mode="http")
    status, _ = await post_event(await http_url(adapter), load("s5_mpim"))
    assert status == 200
    (event,) = rec.events  # accepted before the 200 was sent
    assert (event.source.chat_type, event.text) == ("group", "book a room for the three of us")
    assert slack.connections == 0 and slack.calls_of("apps.connections.open") == []


async def test_http_bad_signature_is_refused_401_and_logged_without_the_body(slack, make_adapter, caplog):
    rec = Recorder()
    adapter = await make_adapter(rec, mode="http")
    url = await http_url(adapter)
    with caplog.at_level(logging.DEBUG):
        status, _ = await post_event(url, load("s1_message_im"), secret="not-the-signing-secret")
        stale, _ = await post_event(url, load("s1_message_im"), timestamp=1_000_000_000)
    assert (status, stale) == (401, 401)
    assert rec.events == []
    assert "refused (401): bad or expired signature" in caplog.text
    assert "draft the release notes" not in caplog.text
    assert SIGNING_SECRET not in caplog.text


async def test_http_url_verification_challenge(slack, make_adapter):
    adapter = await make_adapter(mode="http")
    body = {"token": "legacyVerificationTok", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P",
            "type": "url_verification"}
    status, text = await post_event(await http_url(adapter), body)
    assert status == 200
    assert json.loads(text) == {"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}


async def test_http_refused_event_answers_500_so_slack_retries(slack, make_adapter):
    rec = Recorder(refuse=1)
    adapter = await make_adapter(rec, mode="http")
    url = await http_url(adapter)
    assert (await post_event(url, load("s1_message_im")))[0] == 500
    assert (await post_event(url, load("s1_message_im"), retry_num=1))[0] == 200
    assert [e.message_id for e in rec.events] == ["1767225600.000100"]


# Slack's `app_rate_limited` callback (api.slack.com/events-api "Rate limiting"): an envelope that
# is no event callback, so no event listener takes it.
RATE_LIMITED = {"token": "Jhj5dZrVaK7ZwHHjRyZWjbDl", "type": "app_rate_limited", "team_id": "T0TEAM0001",
                "minute_rate_limited": 1518467820, "api_app_id": "A0APP00001"}
NO_TYPE = {**load("s1_message_im"), "event": {**load("s1_message_im")["event"], "type": None}}


async def test_an_envelope_no_listener_takes_is_acknowledged_with_one_warning(slack, make_adapter, caplog):
    # Bolt answers such an envelope 404 (HTTP) or leaves it unacknowledged (Socket Mode), and
    # Slack delivers it again and again; the receiver acknowledges it and names its type.
    rec = Recorder()
    await make_adapter(rec)
    with caplog.at_level(logging.WARNING, logger="hermes_slack.receiver"):
        ids = await slack.push(RATE_LIMITED, NO_TYPE)
        await slack.wait_for(lambda: all(envelope_id in slack.acks for envelope_id in ids))
    assert rec.events == []
    assert [r.getMessage() for r in caplog.records if r.name == "hermes_slack.receiver"] == [
        "slack envelope of type 'app_rate_limited' (event type None) has no handler; acknowledged and skipped",
        "slack envelope of type 'event_callback' (event type None) has no handler; acknowledged and skipped"]


async def test_http_an_envelope_no_listener_takes_is_answered_200(slack, make_adapter):
    rec = Recorder()
    adapter = await make_adapter(rec, mode="http")
    url = await http_url(adapter)
    assert [(await post_event(url, body))[0] for body in (RATE_LIMITED, NO_TYPE)] == [200, 200]
    assert rec.events == []


async def test_http_a_signed_body_that_is_no_envelope_is_refused_400_in_one_line(slack, make_adapter, caplog):
    # A JSON list instead of an envelope: aiohttp's 500 with a traceback before; now a 400 and
    # one warning naming what failed, without the body. The listener keeps serving.
    rec = Recorder()
    adapter = await make_adapter(rec, mode="http")
    url = await http_url(adapter)
    with caplog.at_level(logging.WARNING, logger="hermes_slack.receiver"):
        assert await post_event(url, ["draft", "the", "notes"]) == (400, "invalid request")
    [line] = [r.getMessage() for r in caplog.records if r.name == "hermes_slack.receiver"]
    assert line.endswith("refused (400): its body is not an envelope (AttributeError)")
    assert "draft" not in caplog.text
    assert (await post_event(url, load("s5_mpim")))[0] == 200
    assert [e.text for e in rec.events] == ["book a room for the three of us"]


async def test_http_port_in_use_is_a_clear_start_error(slack, make_adapter):
    first = await make_adapter(mode="http")
    _, port = first.http_address
    with pytest.raises(SlackStartError) as info:
        await make_adapter(mode="http", http_port=port)
    assert str(info.value).startswith(f"slack HTTP listener on 127.0.0.1:{port} could not start")


# ---- sending ---------------------------------------------------------------------------------

async def test_send_posts_mrkdwn_into_the_thread(slack, make_adapter):
    adapter = await make_adapter()
    result = await adapter.send(THREAD, "**Done** & dusted: <script> [log](https://ci.example/1)")
    (posted,) = slack.posted
    assert posted == {"channel": "C0GENERAL1", "thread_ts": "1767225700.000200", "reply_broadcast": False,
                      "text": "*Done* &amp; dusted: &lt;script&gt; <https://ci.example/1|log>", "mrkdwn": True,
                      "unfurl_links": False, "unfurl_media": False, "ts": result.message_id}
    assert result.message_id == "1767300000.000001"


async def test_send_to_a_dm_has_no_thread(slack, make_adapter):
    adapter = await make_adapter()
    await adapter.send(DM, "plain & simple", metadata={"format": "plain"})
    (posted,) = slack.posted
    assert (posted["channel"], posted["text"], posted["mrkdwn"]) == ("D0DMALICE1", "plain &amp; simple", False)
    assert "thread_ts" not in posted


async def test_429_becomes_retry_after_with_slacks_seconds(slack, make_adapter):
    adapter = await make_adapter()
    slack.fail("chat.postMessage", "ratelimited", retry_after=7)
    with pytest.raises(RetryAfter) as info:
        await adapter.send(DM, "hello")
    assert info.value.seconds == 7.0
    assert slack.posted == []


async def test_send_text_waits_out_429_and_posts_once(slack, make_adapter):
    adapter = await make_adapter()
    slack.fail("chat.postMessage", "ratelimited", retry_after=1)
    await adapter.send_text(DM, "hello")
    attempts = slack.calls_of("chat.postMessage")
    assert [a.status for a in attempts] == [429, 200]
    assert attempts[1].at - attempts[0].at >= 1.0
    assert [p["text"] for p in slack.posted] == ["hello"]


async def test_refused_send_names_slacks_error(slack, make_adapter):
    adapter = await make_adapter()
    slack.fail("chat.postMessage", "not_in_channel")
    with pytest.raises(SendError) as info:
        await adapter.send(THREAD, "hi")
    assert str(info.value) == "slack chat.postMessage failed: not_in_channel"
    with pytest.raises(ValueError):
        await adapter.send(DM, "x" * 4001)


async def test_edit_message_uses_chat_update(slack, make_adapter):
    adapter = await make_adapter()
    await adapter.edit_message(THREAD, "1767300000.000001", "now **final**")
    assert slack.updates == [{"channel": "C0GENERAL1", "ts": "1767300000.000001", "text": "now *final*"}]


async def test_typing_status_in_threads_only_and_not_retried_where_refused(slack, make_adapter):
    adapter = await make_adapter()
    await adapter.send_typing(DM)
    await adapter.send_typing(THREAD)
    assert slack.statuses == [{"channel_id": "C0GENERAL1", "thread_ts": "1767225700.000200",
                               "status": "is thinking…"}]
    slack.status_error = "not_allowed_token_type"
    other = SessionSource(platform="slack", chat_id="C0GENERAL1", chat_type="channel", thread_id="1767226400.000100")
    await adapter.send_typing(other)
    await adapter.send_typing(other)
    assert len(slack.statuses) == 2


async def test_sent_thread_is_remembered(slack, make_adapter):
    rec = Recorder()
    adapter = await make_adapter(rec)
    await adapter.send(THREAD, "on it")
    ids = await slack.push(load("s2_thread_reply"))
    await slack.wait_for(lambda: ids[0] in slack.acks)
    assert [e.text for e in rec.events] == ["it's the flaky e2e job again"]


async def test_secrets_never_reach_logs(slack, make_adapter, caplog):
    rec = Recorder()
    with caplog.at_level(logging.DEBUG):
        adapter = await make_adapter(rec)
        await slack.push(load("s1_message_im"))
        await slack.wait_for(lambda: len(rec.events) == 1)
        await adapter.send(DM, "hi")
        await adapter.stop()
    for secret in (BOT_TOKEN, APP_TOKEN, SIGNING_SECRET):
        assert secret not in caplog.text
    assert BOT_TOKEN not in repr(adapter.settings) and APP_TOKEN not in repr(adapter.settings)


async def test_check_online_is_auth_test_and_a_refused_token_is_one_line(slack):
    # docs/operations.md §1 (`doctor --online`): who the bot token is, without receiving anything.
    from fake_slack import adapter_settings

    adapter = SlackAdapter(adapter_settings(slack))
    assert await adapter.check_online() == "bot U0BOT0001 in workspace T0ACME001"
    wrong = SlackAdapter(adapter_settings(slack, bot_token="xoxb-not-the-one"))
    with pytest.raises(SlackStartError) as err:
        await wrong.check_online()
    assert str(err.value) == "slack auth.test refused the bot token: invalid_auth"


async def test_an_unreachable_web_api_is_said_in_words(slack):
    import socket

    from fake_slack import adapter_settings

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}/api/"
    for call in ("check_online", "start"):
        with pytest.raises(SlackStartError) as err:
            await getattr(SlackAdapter(adapter_settings(slack, api_base_url=closed)), call)()
        assert str(err.value) == f"slack auth.test failed: cannot reach {closed}: connection refused"
