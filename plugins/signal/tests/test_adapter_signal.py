"""SignalAdapter against the fake signal-cli HTTP daemon on 127.0.0.1: the real httpx / httpx-sse
client receiving SSE frames and sending JSON-RPC (docs/adapters.md §5.0, §5.3, §5.4, G-T3, G-T6)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from fake_signal import ACCOUNT, ACCOUNT_UUID, FakeSignalDaemon
from hermes_core import SessionSource
from hermes_core.sdk import RetryAfter, RetryPolicy, SendError
from hermes_signal.adapter import SignalAdapter, SignalStartError
from hermes_signal.rpc import SignalDeliveryError, SignalRpc, SignalRpcError

FIXTURES = Path(__file__).parent / "fixtures"
ALICE = "7d1e2c3b-4a59-4687-9a0b-1c2d3e4f5a6b"
BOB = "0b9c8d7e-6f5a-4b3c-8d2e-1f0a9b8c7d6e"
GROUP_ID = "Pmpi+EfPWmsxiomLe9Nx2XF9HOE483p6iKiFj65iMwI="

ALICE_DM = SessionSource(platform="signal", chat_id=ALICE, chat_name="Alice", chat_type="dm",
                         user_id="+15551230001", user_name="Alice", user_id_alt=ALICE)
GROUP = SessionSource(platform="signal", chat_id="group:" + GROUP_ID, chat_id_alt=GROUP_ID, chat_type="group",
                      user_id="+15551230001", user_id_alt=ALICE)


def load(name: str):
    return json.loads((FIXTURES / f"{name}.json").read_text())


def bare(name: str) -> dict:
    """The `{"envelope", "account"}` object the HTTP daemon puts in an SSE event's data."""
    payload = load(name)
    return payload["params"] if "params" in payload else payload


def dm(timestamp: int, text: str, uuid: str = ALICE, number: str | None = "+15551230001", name="Alice") -> dict:
    return {"envelope": {"source": number or uuid, "sourceNumber": number, "sourceUuid": uuid, "sourceName": name,
                         "sourceDevice": 1, "timestamp": timestamp,
                         "dataMessage": {"timestamp": timestamp, "message": text, "expiresInSeconds": 0,
                                         "viewOnce": False}},
            "account": ACCOUNT}


class Inbox:
    """A gateway stand-in recording what the adapter emits."""

    def __init__(self):
        self.events = []
        self.changed = asyncio.Event()

    async def __call__(self, event):
        self.events.append(event)
        self.changed.set()

    async def wait(self, count: int, timeout: float = 10.0):
        async def _wait():
            while len(self.events) < count:
                self.changed.clear()
                await self.changed.wait()
        await asyncio.wait_for(_wait(), timeout)

    @property
    def texts(self):
        return [e.text for e in self.events]


async def test_sse_frames_reach_the_gateway_in_order(daemon, make_adapter):
    inbox = Inbox()
    await make_adapter(inbox)
    g2_frame = (FIXTURES / "g2_hidden_number.sse").read_text()  # data: without a space, ":" keep-alive
    await daemon.push(bare("g1_dm_jsonrpc"))
    await daemon.push_frames(g2_frame)
    await daemon.push(bare("g4_sync_to_other"), *[item["params"] for item in load("g5_typing_and_receipt")],
                      bare("g3_note_to_self"), bare("g6_edited_message"))
    await inbox.wait(3)
    await daemon.wait_for(lambda: not daemon.pending)
    assert inbox.texts == ["what's on my calendar?", "ping", "remind me to call mum"]
    assert [(e.source.chat_id, e.source.user_id) for e in inbox.events] == [
        (ALICE, "+15551230001"), (BOB, BOB), (ACCOUNT_UUID, ACCOUNT)]
    assert daemon.stream_requests == [{"account": ACCOUNT}]


async def test_edits_become_turns_when_configured(daemon, make_adapter):
    inbox = Inbox()
    await make_adapter(inbox, edits_as_turns=True)
    await daemon.push(bare("g6_edited_message"))
    await inbox.wait(1)
    assert inbox.texts == ["what's on my calendar tomorrow?"]
    assert inbox.events[0].message_id == "1767226200000:" + ALICE


async def test_malformed_events_are_logged_and_skipped(daemon, make_adapter, caplog):
    inbox = Inbox()
    await make_adapter(inbox)
    broken = dm(1767225600500, "x")
    broken["envelope"]["dataMessage"]["timestamp"] = 10 ** 30
    await daemon.push_frames("event:receive\ndata:{not json\n\n")
    await daemon.push(broken, {"envelope": "nope", "account": ACCOUNT}, dm(1767225600600, "still here"))
    await inbox.wait(1)
    assert inbox.texts == ["still here"]
    assert "skipping malformed signal event: data is not JSON" in caplog.text
    assert "malformed payload: envelope.dataMessage.timestamp is out of range" in caplog.text
    assert "malformed payload: payload.envelope must be an object, got str" in caplog.text


async def test_unknown_kinds_and_invalid_unicode_are_skipped_and_the_stream_keeps_serving(
        daemon, make_adapter, caplog):
    caplog.set_level("DEBUG", logger="hermes_signal")
    inbox = Inbox()
    adapter = await make_adapter(inbox)
    unknown_content = dm(1767225601000, "x")
    del unknown_content["envelope"]["dataMessage"]
    unknown_content["envelope"]["pniSignatureMessage"] = {"pni": "PNI:1", "signature": "c2ln"}
    await daemon.push_frames("event:somethingNew\ndata:{\"x\":1}\n\n")  # an SSE event kind of a newer daemon
    await daemon.push(unknown_content)
    # a lone surrogate as the JSON escape signal-cli would write for broken UTF-16 in a name or text
    await daemon.push_frames('event:receive\ndata:' + json.dumps(dm(1767225601100, "hi \ud800"))
                             .replace('"Alice"', '"Al\\udfffice"') + "\n\n")
    await daemon.push(dm(1767225601200, "still here"))
    await inbox.wait(2)
    assert inbox.texts == ["hi \ufffd", "still here"]  # U+FFFD (docs/behaviour.md §7)
    assert inbox.events[0].source.user_name == "Al\ufffdice"
    assert "signal event 'somethingNew' ignored" in caplog.text
    assert "envelope without a message (profile key, decryption or unknown content)" in caplog.text
    assert (await adapter.health())["ok"] is True


@pytest.mark.parametrize("abrupt", [False, True], ids=["clean-restart", "killed"])
async def test_daemon_restart_mid_stream_loses_nothing_it_still_queues(daemon, make_adapter, abrupt):
    inbox = Inbox()
    adapter = await make_adapter(inbox)
    await daemon.push(dm(1767225600001, "one"))
    await inbox.wait(1)
    await daemon.stop(abrupt=abrupt)
    # While the daemon is down Signal keeps what arrives; the adapter keeps reconnecting.
    await daemon.push(dm(1767225600002, "two"), dm(1767225600003, "three", uuid=BOB, number=None, name="Bob"))
    await asyncio.sleep(0.3)
    assert (await adapter.health())["ok"] is False
    await daemon.start()
    await inbox.wait(3)
    assert inbox.texts == ["one", "two", "three"]
    await daemon.wait_for(lambda: daemon.open_streams == 1)
    health = await adapter.health()
    assert health["ok"] is True and health["connections"] == 2


async def test_a_silent_stream_is_reopened(make_adapter):
    async with FakeSignalDaemon(keepalive=60) as quiet:  # no keep-alive within the idle timeout
        inbox = Inbox()
        adapter = await make_adapter(inbox, base_url=quiet.base_url, stream_idle_timeout=0.3)
        await quiet.wait_for(lambda: len(quiet.stream_requests) >= 2)
        await quiet.push(dm(1767225600010, "after the reconnect"))
        await inbox.wait(1)
        assert inbox.texts == ["after the reconnect"]
        await adapter.stop()


async def test_daemon_down_at_start_is_retried_in_the_background(caplog):
    daemon = FakeSignalDaemon(keepalive=0.5)
    await daemon.start()
    port = daemon.port
    await daemon.stop()
    inbox = Inbox()
    adapter = SignalAdapter({"account": ACCOUNT, "base_url": f"http://127.0.0.1:{port}",
                             "reconnect_initial": 0.05, "reconnect_max": 0.2}, on_message=inbox)
    await adapter.start()
    try:
        assert "is not reachable yet" in caplog.text
        await daemon.push(dm(1767225600020, "hello late daemon"))
        await daemon.start()
        await inbox.wait(1)
        assert inbox.texts == ["hello late daemon"]
    finally:
        await adapter.stop()
        await daemon.stop()


async def test_start_needs_the_account_and_stop_is_idempotent(daemon):
    with pytest.raises(SignalStartError, match="platforms.signal.account is not set"):
        await SignalAdapter({"base_url": daemon.base_url}).start()
    adapter = SignalAdapter({"account": ACCOUNT, "base_url": daemon.base_url})
    await adapter.stop()
    await adapter.start()
    await adapter.start()
    await adapter.stop()
    await adapter.stop()


async def test_gateway_refusing_a_message_is_retried_then_dropped(daemon, make_adapter, caplog):
    accepted = []
    refusals = {"first": 2, "poison": 99}

    async def flaky(event):
        if refusals.get(event.text, 0) > 0:
            refusals[event.text] -= 1
            raise RuntimeError("store busy")
        accepted.append(event.text)

    adapter = await make_adapter(flaky, max_emit_attempts=3)
    adapter.emit_backoff_s = 0.01
    await daemon.push(dm(1767225600030, "first"), dm(1767225600031, "poison"), dm(1767225600032, "last"))
    await daemon.wait_for(lambda: not daemon.pending)
    for _ in range(100):
        if accepted == ["first", "last"]:
            break
        await asyncio.sleep(0.05)
    assert accepted == ["first", "last"]
    assert adapter.dropped == 1
    assert "signal message 1767225600031 refused by the gateway 3 times, dropped" in caplog.text


async def test_number_only_envelope_uses_the_uuid_seen_before(daemon, make_adapter):
    inbox = Inbox()
    await make_adapter(inbox)
    typing = load("g5_typing_and_receipt")[0]["params"]  # reveals Alice's number and UUID
    number_only = dm(1767225600040, "number only", uuid=None)
    await daemon.push(typing, number_only)
    await inbox.wait(1)
    assert (inbox.events[0].source.chat_id, inbox.events[0].source.user_id_alt) == (ALICE, ALICE)


# ---- sending ---------------------------------------------------------------------------------

async def test_dm_send_uses_the_uuid_and_quotes_the_trigger(daemon, make_adapter):
    adapter = await make_adapter()
    result = await adapter.send(ALICE_DM, "hello", reply_to="1767225600123:" + ALICE)
    (params,) = daemon.sent
    assert params == {"account": ACCOUNT, "recipient": [ALICE], "message": "hello",
                      "quoteTimestamp": 1767225600123, "quoteAuthor": ALICE}
    assert result.message_id == "1767225601001:" + ACCOUNT  # own UUID not learned yet


async def test_group_send_uses_the_raw_group_id_byte_exact(daemon, make_adapter):
    adapter = await make_adapter()
    await adapter.send(GROUP, "hi group")
    legacy = SessionSource(platform="signal", chat_id="group:" + GROUP_ID.lower(), chat_type="group")
    await adapter.send(legacy, "other group")
    assert [(p.get("groupId"), "recipient" in p, p["message"]) for p in daemon.sent] == [
        (GROUP_ID, False, "hi group"), (GROUP_ID.lower(), False, "other group")]


async def test_note_to_self_reply_and_its_echo(daemon, make_adapter):
    inbox = Inbox()
    adapter = await make_adapter(inbox)
    await daemon.push(bare("g3_note_to_self"))
    await inbox.wait(1)
    assert adapter.account_uuid == ACCOUNT_UUID  # learned from the sync
    event = inbox.events[0]
    result = await adapter.send(event.source, "noted", reply_to=event.message_id)
    assert daemon.sent[-1]["recipient"] == [ACCOUNT_UUID]
    assert daemon.sent[-1]["quoteAuthor"] == ACCOUNT_UUID
    sent_ts = int(result.message_id.split(":")[0])
    assert result.message_id == f"{sent_ts}:{ACCOUNT_UUID}"
    # The reply comes back as a Note-to-Self sync carrying its timestamp: not a turn (G-T3).
    echo = bare("g3_note_to_self")
    echo["envelope"]["timestamp"] = sent_ts
    echo["envelope"]["syncMessage"]["sentMessage"].update(timestamp=sent_ts, message="noted")
    await daemon.push(echo, dm(1767225600050, "after the echo"))
    await inbox.wait(2)
    assert inbox.texts == ["remind me to call mum", "after the echo"]


async def test_rate_limit_with_retry_after_is_waited_out_once(daemon, make_adapter):
    adapter = await make_adapter()
    daemon.fail("send", "rate_limit", retry_after=3)
    with pytest.raises(RetryAfter) as info:
        await adapter.send(ALICE_DM, "hello")
    assert info.value.seconds == 3.0
    daemon.fail("send", "rate_limit", retry_after=1)
    await adapter.send_text(ALICE_DM, "hello again")
    attempts = daemon.calls_of("send")[1:]
    assert [a.error for a in attempts] == [-5, None]
    assert attempts[1].at - attempts[0].at >= 1.0
    assert [p["message"] for p in daemon.sent] == ["hello again"]


@pytest.mark.parametrize("kind,reason,text", [
    ("untrusted", "untrusted_identity", "the recipient's safety number changed (untrusted identity)"),
    ("unregistered", "unregistered", "the recipient is not registered on Signal"),
    ("captcha", "captcha", "the account must solve a captcha first"),
])
async def test_refusals_are_clear_failed_deliveries(daemon, make_adapter, kind, reason, text):
    adapter = await make_adapter()
    daemon.fail("send", kind, retry_after=None)
    with pytest.raises(SignalDeliveryError) as info:
        await adapter.send(ALICE_DM, "hello")
    assert info.value.reason == reason
    assert text in str(info.value)
    assert ALICE not in str(info.value) and "+1555" not in str(info.value)
    assert daemon.sent == []


async def test_rate_limit_without_a_wait_or_above_the_cap_fails_the_delivery(daemon, make_adapter):
    adapter = await make_adapter()
    daemon.fail("send", "rate_limit", retry_after=None)
    with pytest.raises(SignalDeliveryError, match="rate limited and Signal gave no retry time"):
        await adapter.send(ALICE_DM, "hello")
    daemon.fail("send", "rate_limit", retry_after=86400)
    with pytest.raises(SendError, match="server asked to wait 86400s, above the 60s cap"):
        await adapter.send_text(ALICE_DM, "hello", policy=RetryPolicy(max_wait_s=60))
    assert daemon.sent == []


async def test_long_reply_is_chunked_within_2000_utf8_bytes_in_order(daemon, make_adapter):
    adapter = await make_adapter()
    body = "\n".join(f"Zeile {i:03d} — grüße 😀" for i in range(300))
    results = await adapter.send_text(ALICE_DM, body, reply_to="1767225600123:" + ALICE)
    texts = [p["message"] for p in daemon.sent]
    assert len(texts) == len(results) >= 5
    assert all(len(t.encode("utf-8")) <= 2000 for t in texts)
    assert "\n".join(texts) == body
    assert daemon.sent[0]["quoteTimestamp"] == 1767225600123
    assert all("quoteTimestamp" not in p for p in daemon.sent[1:])
    with pytest.raises(ValueError, match="longer than 2000 UTF-8 bytes"):
        await adapter.send(ALICE_DM, "😀" * 501)


async def test_typing_and_edit(daemon, make_adapter):
    adapter = await make_adapter()
    await adapter.send_typing(ALICE_DM)
    await adapter.send_typing(GROUP)
    assert daemon.typing == [{"account": ACCOUNT, "recipient": [ALICE]}, {"account": ACCOUNT, "groupId": GROUP_ID}]
    first = await adapter.send(ALICE_DM, "draft")
    await adapter.edit_message(ALICE_DM, first.message_id, "final")
    assert daemon.sent[-1] == {"account": ACCOUNT, "recipient": [ALICE], "message": "final",
                               "editTimestamp": int(first.message_id.split(":")[0])}
    with pytest.raises(ValueError, match="not a signal message id"):
        await adapter.edit_message(ALICE_DM, "abc", "x")


async def test_wrong_host_header_gets_421_with_a_hint(daemon):
    async with httpx.AsyncClient(base_url=daemon.base_url, headers={"Host": f"signal-cli:{daemon.port}"}) as client:
        with pytest.raises(SignalRpcError) as info:
            await SignalRpc(client, ACCOUNT).call("version")
    assert info.value.code == 421
    assert "reach the daemon as 127.0.0.1 or localhost" in str(info.value)


async def test_unknown_method_is_a_json_rpc_error(daemon):
    async with httpx.AsyncClient(base_url=daemon.base_url) as client:
        rpc = SignalRpc(client, ACCOUNT)
        assert await rpc.call("version") == {"version": "0.14.1"}
        with pytest.raises(SignalRpcError) as info:
            await rpc.call("noSuchMethod")
    assert (info.value.code, str(info.value)) == (-32601, "signal-cli error -32601: noSuchMethod: Method not implemented")


async def test_aliases_reach_the_core_once(daemon, make_adapter):
    recorded = []

    async def record(aliases):
        recorded.extend((a.platform, a.alias_id, a.canonical_id) for a in aliases)

    inbox = Inbox()
    adapter = await make_adapter(inbox)
    adapter.bind(inbox, record_aliases=record)
    typing = load("g5_typing_and_receipt")[0]["params"]
    await daemon.push(typing, bare("g1_dm_jsonrpc"), dm(1767225600060, "again"))
    await inbox.wait(2)
    # the typing indicator taught the pair (recorded directly); the messages carry nothing new
    assert recorded == [("signal", "+15551230001", ALICE)]
    assert [e.aliases for e in inbox.events] == [[], []]


async def test_replies_of_draining_turns_still_go_out_after_stop(daemon, make_adapter):
    # The gateway stops receiving first, then drains running turns, which still reply.
    adapter = await make_adapter()
    await adapter.stop()
    result = await adapter.send(ALICE_DM, "late reply")
    assert daemon.sent[-1] == {"account": ACCOUNT, "recipient": [ALICE], "message": "late reply"}
    assert result.message_id == f"{daemon.sent_timestamps[-1]}:{ACCOUNT}"
    await daemon.wait_for(lambda: daemon.open_streams == 0)  # nothing reads the stream any more


async def test_an_edit_the_queue_fails_on_is_one_error_line_and_no_turn(daemon, make_adapter, caplog):
    # docs/behaviour.md §5: whether a failed queue edit changed the queued message is unknown, so
    # the edit is not made a turn as well (it could be answered twice); the stream keeps serving.
    offered = []

    async def edit_queued(source, message_id, text):
        offered.append((source, message_id, text))
        raise RuntimeError("store is gone")

    inbox = Inbox()
    adapter = await make_adapter(inbox, edits_as_turns=True)
    adapter.bind(inbox, edit_queued=edit_queued)
    await daemon.push(bare("g6_edited_message"), dm(1767226300000, "still here"))
    await inbox.wait(1)
    assert inbox.texts == ["still here"]
    assert offered == [(SessionSource(platform="signal", chat_id=ALICE, chat_name="Alice", chat_type="dm",
                                      user_id="+15551230001", user_name="Alice", user_id_alt=ALICE,
                                      message_id="1767225600123"),
                        "1767225600123:" + ALICE, "what's on my calendar tomorrow?")]
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR" and r.name.startswith("hermes_signal")]
    assert errors == ["signal edit of message 1767225600123 not applied to the queue, skipped: RuntimeError"]
