"""TelegramAdapter driven through the real python-telegram-bot client against the fake Bot API
on 127.0.0.1 (docs/adapters.md §1.2, §1.3).

Inbound events are recorded by a bound handler; the gateway end-to-end tests are in
`test_gateway_telegram.py`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import aiohttp
import pytest

from hermes_core.sdk import IdentityAlias, RetryAfter, SessionSource
from hermes_core.testing import FakeGateway
from hermes_telegram.adapter import TelegramAdapter, TelegramStartError

FIXTURES = Path(__file__).parent / "fixtures"


def load(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


FORUM_TOPIC = SessionSource(platform="telegram", chat_id="-1001987654321", chat_type="group",
                            thread_id="17585", chat_name="Research Lab")
FORUM_GENERAL = SessionSource(platform="telegram", chat_id="-1001987654321", chat_type="group",
                              thread_id="1", chat_name="Research Lab")
DM = SessionSource(platform="telegram", chat_id="111222333", chat_type="dm", user_id="111222333")


# ---- receiving: polling ---------------------------------------------------------------------

async def test_polled_update_is_mapped_and_emitted(tg, make_adapter):
    rec = FakeGateway()
    adapter = await make_adapter(rec)
    await tg.push(load("t4_forum_topic"))
    await tg.wait_for(lambda: len(tg.calls_of("getUpdates")) >= 2 and len(rec.events) == 1)
    (event,) = rec.events
    assert event.text == "summarise this topic"
    assert event.message_id == "5120"
    assert (event.source.chat_id, event.source.thread_id, event.source.chat_topic) == \
        ("-1001987654321", "17585", "Deploys")
    # getMe, the command menu, deleteWebhook (keeping pending updates), then long polls
    assert [c.method for c in tg.calls[:3]] == ["getMe", "setMyCommands", "deleteWebhook"]
    assert tg.calls[2].body["drop_pending_updates"] == "false"
    await tg.wait_for(lambda: any(c.body.get("offset") == "900000005" for c in tg.calls_of("getUpdates")))
    assert adapter.bot_id == 7000000001
    assert (await adapter.health())["ok"] is True


async def test_channel_post_and_updates_in_order(tg, make_adapter):
    rec = FakeGateway()
    await make_adapter(rec)
    await tg.push(load("t1_private_dm"), load("t6_channel_post"), load("t7_private_topic"))
    await tg.wait_for(lambda: len(rec.events) == 3)
    assert [e.message_id for e in rec.events] == ["42", "310", "91"]
    assert rec.events[1].source.chat_type == "channel"


async def test_own_service_and_malformed_updates_are_skipped_polling_continues(tg, make_adapter, caplog):
    rec = FakeGateway()
    own = load("t1_private_dm")
    own["update_id"] = 900000100
    own["message"]["from"] = {"id": 7000000001, "is_bot": True, "first_name": "Hermes"}
    broken = load("t2_basic_group_mention")
    broken["update_id"] = 900000101
    broken["message"]["chat"]["id"] = "not-a-number"
    unknown = {"update_id": 900000102, "brand_new_kind": {"x": 1}}
    no_id = {"message": load("t1_private_dm")["message"]}
    good = load("t3_supergroup_reply")
    good["update_id"] = 900000103
    with caplog.at_level(logging.INFO):
        await make_adapter(rec)
        await tg.push(own, broken, unknown, no_id, good)
        await tg.wait_for(lambda: len(rec.events) == 1)
    assert rec.events[0].message_id == "7010"
    assert "field 'message.chat.id' must be an integer, got str" in caplog.text
    assert "telegram update 900000102: field 'update' has no known update kind" in caplog.text
    assert "field 'update.update_id' is missing or not an integer" in caplog.text
    # all were confirmed: the next poll asks past the last one
    await tg.wait_for(lambda: any(c.body.get("offset") == "900000104" for c in tg.calls_of("getUpdates")))


async def test_refused_update_is_offered_again_not_lost(tg, make_adapter):
    rec = FakeGateway(refuse=1)
    await make_adapter(rec)
    first, second = load("t1_private_dm"), load("t7_private_topic")
    await tg.push(first, second)
    await tg.wait_for(lambda: len(rec.events) == 2)
    assert rec.refused == 1
    assert [e.message_id for e in rec.events] == ["42", "91"]
    # No getUpdates asked past the refused update before it was accepted.
    offsets = [c.body.get("offset") for c in tg.calls_of("getUpdates")]
    assert offsets[:2] == [None, None]


async def test_updates_sent_while_stopped_arrive_after_restart(tg, make_adapter):
    rec1 = FakeGateway()
    a1 = await make_adapter(rec1)
    await tg.push(load("t1_private_dm"))
    await tg.wait_for(lambda: len(rec1.events) == 1)
    await a1.stop()
    # While the gateway is down, users keep writing.
    await tg.push(load("t2_basic_group_mention"), load("t3_supergroup_reply"))
    rec2 = FakeGateway()
    await make_adapter(rec2)
    await tg.wait_for(lambda: len(rec2.events) == 2)
    # The update handled before the stop was confirmed at stop, so it is not redelivered.
    assert [e.message_id for e in rec2.events] == ["77", "7010"]


async def test_getupdates_errors_are_retried(tg, make_adapter):
    rec = FakeGateway()
    tg.fail("getUpdates", "server", times=2)
    adapter = await make_adapter(rec)
    await tg.push(load("t1_private_dm"))
    await tg.wait_for(lambda: len(rec.events) == 1, timeout=15)
    assert [c.status for c in tg.calls_of("getUpdates")][:2] == [502, 502]
    assert (await adapter.health())["ok"] is True


async def test_edits_follow_the_setting(tg, make_adapter):
    edit = load("t1_private_dm")
    msg = edit.pop("message")
    msg["edit_date"] = 1767225999
    msg["text"] = "hello again"
    edit["edited_message"] = msg
    edit["update_id"] = 900000050
    rec = FakeGateway()
    await make_adapter(rec, edits_as_turns=True)
    await tg.push(edit)
    await tg.wait_for(lambda: len(rec.events) == 1)
    assert (rec.events[0].text, rec.events[0].message_id) == ("hello again", "42@1767225999")


# ---- sending --------------------------------------------------------------------------------

async def test_send_to_topic_general_and_dm(tg, make_adapter):
    adapter = await make_adapter()
    r1 = await adapter.send(FORUM_TOPIC, "in topic", reply_to="5120")
    await adapter.send(FORUM_GENERAL, "in general")
    await adapter.send(DM, "in dm", reply_to="42@1767225999")
    topic, general, dm = tg.sent
    assert topic["chat_id"] == "-1001987654321" and topic["message_thread_id"] == "17585"
    assert topic["reply_parameters"] == {"message_id": 5120, "allow_sending_without_reply": True}
    assert "message_thread_id" not in general  # General: omit the thread (TG-T8)
    assert dm["chat_id"] == "111222333" and dm["reply_parameters"]["message_id"] == 42
    assert r1.message_id == "1001"


async def test_thread_not_found_retries_once_without_thread(tg, make_adapter):
    adapter = await make_adapter()
    tg.fail("sendMessage", "thread_not_found", when=lambda b: "message_thread_id" in b)
    result = await adapter.send(FORUM_TOPIC, "hello topic")
    attempts = tg.calls_of("sendMessage")
    assert [a.status for a in attempts] == [400, 200]
    assert attempts[0].body["message_thread_id"] == "17585"
    assert "message_thread_id" not in attempts[1].body
    assert len(tg.sent) == 1 and result.message_id == "1001"


async def test_refused_formatting_falls_back_to_plain_text(tg, make_adapter):
    adapter = await make_adapter()
    tg.fail("sendMessage", "parse", when=lambda b: b.get("parse_mode") == "MarkdownV2")
    await adapter.send(DM, "1. see *this* (x)")
    first, second = tg.calls_of("sendMessage")
    assert first.body["text"] == r"1\. see \*this\* \(x\)" and first.body["parse_mode"] == "MarkdownV2"
    assert second.body["text"] == "1. see *this* (x)" and "parse_mode" not in second.body
    assert [s["text"] for s in tg.sent] == ["1. see *this* (x)"]


async def test_code_fence_is_rendered_as_pre_block(tg, make_adapter):
    adapter = await make_adapter()
    await adapter.send(DM, "run:\n```python\nprint(a_b)\n```\ndone.")
    assert tg.sent[0]["text"] == "run:\n```python\nprint(a_b)\n```\ndone\\."


async def test_429_surfaces_as_sdk_retry_after(tg, make_adapter):
    adapter = await make_adapter()
    tg.fail("sendMessage", "429", retry_after=7)
    with pytest.raises(RetryAfter) as info:
        await adapter.send(DM, "hi")
    assert info.value.seconds == 7.0
    assert tg.sent == []


async def test_send_text_waits_out_429_and_delivers_once(tg, make_adapter):
    adapter = await make_adapter()
    tg.fail("sendMessage", "429", retry_after=1)
    results = await adapter.send_text(DM, "only once please")
    attempts = tg.calls_of("sendMessage")
    assert [a.status for a in attempts] == [429, 200]
    assert [s["text"] for s in tg.sent] == ["only once please"]
    assert len(results) == 1
    # Telegram: "do not retry sooner" than retry_after.
    assert attempts[1].at - attempts[0].at >= 1.0


async def test_send_text_chunks_at_4096_utf16_units_in_order(tg, make_adapter):
    adapter = await make_adapter(parse_mode="plain")
    # 3000 emoji = 6000 UTF-16 units (each counts 2), then a code block that must be cut.
    emoji = "😀" * 3000
    code = "```python\n" + "".join(f"x{i} = {i}\n" for i in range(600)) + "```"
    text = emoji + "\n\n" + code + "\n\nthe end"
    await adapter.send_text(DM, text)
    sent = [s["text"] for s in tg.sent]
    assert len(sent) >= 3
    assert all(len(s.encode("utf-16-le")) // 2 <= 4096 for s in sent)
    # order kept: the emoji first, the end last
    assert sent[0].startswith("😀") and sent[-1].endswith("the end")
    assert "".join(sent).count("😀") == 3000
    # every chunk with code has balanced fences (closed and reopened with the language tag)
    for chunk in sent:
        if "x1" in chunk:
            assert chunk.count("```") % 2 == 0
    reopened = [s for s in sent[1:] if s.startswith("```python\n")]
    assert reopened, "a cut inside the code block must reopen the fence"


async def test_sends_to_one_chat_keep_order_under_concurrency(tg, make_adapter):
    adapter = await make_adapter(parse_mode="plain")
    tg.fail("sendMessage", "429", retry_after=1, when=lambda b: b["text"] == "a-0")
    await asyncio.gather(*(adapter.send_text(DM, f"a-{i}") for i in range(4)))
    assert [s["text"] for s in tg.sent] == ["a-0", "a-1", "a-2", "a-3"]


async def test_over_long_chunk_is_refused_before_sending(tg, make_adapter):
    adapter = await make_adapter()
    with pytest.raises(ValueError, match="longer than 4096 UTF-16 units"):
        await adapter.send(DM, "😀" * 2049)
    assert tg.calls_of("sendMessage") == []


async def test_typing_in_general_passes_thread_1(tg, make_adapter):
    adapter = await make_adapter()
    await adapter.send_typing(FORUM_GENERAL)
    (call,) = tg.calls_of("sendChatAction")
    assert call.body == {"chat_id": "-1001987654321", "action": "typing", "message_thread_id": "1"}


# ---- group → supergroup migration -------------------------------------------------------------

async def test_chat_migrated_on_send_resends_to_new_id_and_remembers(tg, make_adapter):
    adapter = await make_adapter()
    group = SessionSource(platform="telegram", chat_id="-4012345678", chat_type="group")
    tg.fail("sendMessage", "migrated", migrate_to=-1004012345678)
    await adapter.send(group, "hi group")
    first, second = tg.calls_of("sendMessage")
    assert (first.body["chat_id"], second.body["chat_id"]) == ("-4012345678", "-1004012345678")
    # The new id is recorded in the gateway's store as an alias of the group's first id.
    assert adapter.test_gateway.aliases == [
        IdentityAlias("telegram", "-1004012345678", "-4012345678", "ChatMigrated")]
    # later sends to the old origin go straight to the supergroup
    await adapter.send(group, "again")
    assert tg.sent[-1]["chat_id"] == "-1004012345678"


async def test_migration_service_message_records_alias(tg, make_adapter):
    rec = FakeGateway()
    adapter = await make_adapter(rec)
    await tg.push({"update_id": 900000200, "message": {
        "message_id": 1, "date": 1767225800, "from": {"id": 222333444, "is_bot": False, "first_name": "Bob"},
        "chat": {"id": -1004012345678, "title": "Family", "type": "supergroup"},
        "migrate_from_chat_id": -4012345678}}, load("t2_basic_group_mention") | {"update_id": 900000201})
    await tg.wait_for(lambda: len(rec.events) == 1)
    assert rec.aliases == [IdentityAlias("telegram", "-1004012345678", "-4012345678", "migrate_chat_id")]
    assert adapter.migrations.current("-4012345678") == "-1004012345678"
    assert rec.events[0].message_id == "77"  # the service message itself is not a turn


async def test_migration_not_stored_is_offered_again(tg, make_adapter):
    class StoreDown(FakeGateway):
        failures = 1

        async def record_aliases(self, aliases):
            if self.failures:
                self.failures -= 1
                raise OSError("disk full")
            return await super().record_aliases(aliases)

    rec = StoreDown()
    await make_adapter(rec)
    migration = {"update_id": 900000210, "message": {
        "message_id": 1, "date": 1767225800, "from": {"id": 222333444, "is_bot": False, "first_name": "Bob"},
        "chat": {"id": -1004012345678, "title": "Family", "type": "supergroup"},
        "migrate_from_chat_id": -4012345678}}
    await tg.push(migration, load("t2_basic_group_mention") | {"update_id": 900000211})
    await tg.wait_for(lambda: len(rec.events) == 1)
    # The first attempt failed, the redelivered service message was recorded, then the message.
    assert rec.aliases == [IdentityAlias("telegram", "-1004012345678", "-4012345678", "migrate_chat_id")]
    offsets = [c.body.get("offset") for c in tg.calls_of("getUpdates")]
    assert offsets[:2] == [None, None]  # not confirmed past the migration before it was stored


async def test_legacy_alias_file_is_imported_once_and_renamed(tg, make_adapter, data_dir):
    legacy = data_dir / "chat_aliases.json"
    legacy.write_text(json.dumps({"_README": "old format", "migrations": {
        "-4012345678": "-1004012345678", "-4000000001": "-1004000000001"}}))
    adapter = await make_adapter()
    assert adapter.test_gateway.aliases == [
        IdentityAlias("telegram", "-1004000000001", "-4000000001", "chat_aliases.json"),
        IdentityAlias("telegram", "-1004012345678", "-4012345678", "chat_aliases.json")]
    assert not legacy.exists()
    assert json.loads((data_dir / "chat_aliases.json.imported").read_text())["migrations"]["-4012345678"] == \
        "-1004012345678"
    await adapter.send(SessionSource(platform="telegram", chat_id="-4012345678", chat_type="group"), "hi")
    assert tg.sent[-1]["chat_id"] == "-1004012345678"  # sends go to the newest id at once
    await adapter.stop()
    await adapter.start()  # nothing left to import
    assert len(adapter.test_gateway.aliases) == 2


async def test_unreadable_legacy_alias_file_is_kept_and_named(tg, make_adapter, data_dir, caplog):
    legacy = data_dir / "chat_aliases.json"
    legacy.write_text("{not json")
    adapter = await make_adapter()
    assert adapter.test_gateway.aliases == []
    assert legacy.exists()
    assert f"telegram chat migrations not imported: {legacy} is not valid JSON" in caplog.text


# ---- webhook mode ------------------------------------------------------------------------------

async def test_webhook_mode_registers_and_accepts_updates(tg, make_adapter, caplog):
    rec = FakeGateway()
    adapter = await make_adapter(rec, mode="webhook", webhook_url="https://bot.example/telegram",
                                 webhook_port=0, webhook_secret="s3cret-path-token")
    assert tg.webhook["url"] == "https://bot.example/telegram"
    assert tg.webhook["secret_token"] == "s3cret-path-token"
    assert tg.webhook["drop_pending_updates"] == "false"
    host, port = adapter.webhook_address
    url = f"http://{host}:{port}/telegram"
    headers = {"X-Telegram-Bot-Api-Secret-Token": "s3cret-path-token"}
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json=load("t4_forum_topic"), headers=headers) as resp:
            assert resp.status == 200
        async with http.post(url, json=load("t1_private_dm"), headers={}) as resp:
            assert resp.status == 403  # wrong/missing secret: refused, nothing emitted
        rec.refuse = 1
        async with http.post(url, json=load("t6_channel_post"), headers=headers) as resp:
            assert resp.status == 500  # not accepted: Telegram will redeliver
        async with http.post(url, json=load("t6_channel_post"), headers=headers) as resp:
            assert resp.status == 200
        with caplog.at_level(logging.WARNING):
            async with http.post(url, data="not json", headers=headers) as resp:
                assert resp.status == 200
    assert [e.message_id for e in rec.events] == ["5120", "310"]
    assert "skipping malformed telegram webhook body: not JSON" in caplog.text
    assert tg.calls_of("getUpdates") == []


def test_webhook_mode_requires_url():
    with pytest.raises(ValueError, match="webhook_url is required"):
        TelegramAdapter({"bot_token": "1:x", "mode": "webhook"})


# ---- secrets -----------------------------------------------------------------------------------

async def test_token_never_appears_in_logs(tg, make_adapter, caplog):
    with caplog.at_level(logging.DEBUG):
        rec = FakeGateway(refuse=1)
        adapter = await make_adapter(rec)
        await tg.push(load("t1_private_dm"))
        await tg.wait_for(lambda: len(rec.events) == 1)
        tg.fail("sendMessage", "thread_not_found", when=lambda b: "message_thread_id" in b)
        await adapter.send(FORUM_TOPIC, "x")
        await adapter.stop()
    assert "HTTP Request: POST" in caplog.text  # httpx did log the URLs …
    assert tg.token not in caplog.text           # … with the token scrubbed
    assert "bot<telegram-token>/getMe" in caplog.text
    assert tg.token not in repr(adapter.settings)


async def test_a_response_echoing_the_token_is_scrubbed_in_ptbs_request_log(tg, make_adapter, caplog):
    # PTB's request layer logs an unparsable response verbatim; a proxy's 404 page may echo the path.
    await make_adapter()
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("telegram.request.BaseRequest").error(
            'Can not load invalid JSON data: "<html>404 not found /bot%s/getMe</html>"', tg.token)
    assert tg.token not in caplog.text
    assert "/bot<telegram-token>/getMe" in caplog.text


async def test_rejected_token_fails_start_without_echoing_it(tg, caplog):
    adapter = TelegramAdapter({"bot_token": "999:WRONG-secret", "base_url": tg.base_url})
    with caplog.at_level(logging.DEBUG), pytest.raises(TelegramStartError) as info:
        await adapter.start()
    assert "telegram rejected the bot token" in str(info.value)
    assert "WRONG-secret" not in str(info.value)
    assert "WRONG-secret" not in caplog.text
    await adapter.stop()  # not started: a no-op


async def test_an_unreachable_or_foreign_bot_api_is_said_in_words_without_the_token():
    # doctor --online and a failed start: what failed, in words (no httpx.ConnectError, no
    # KeyError: 'result'), naming the API address but never the token appended to it.
    import socket

    from aiohttp import web

    token = "123456:ABCdefGHIjklMNOpqrSTUvwxYZ012345678"
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}/bot"
    for call in ("check_online", "start"):
        with pytest.raises(TelegramStartError) as info:
            await getattr(TelegramAdapter({"bot_token": token, "base_url": closed}), call)()
        assert str(info.value) == f"telegram getMe failed: cannot reach the Bot API at {closed}: connection refused"

    async def not_the_bot_api(request):  # a 200 JSON answer without getMe's `result`
        return web.json_response({"ok": True})
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", not_the_bot_api)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    foreign = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/bot"
    try:
        for call in ("check_online", "start"):
            with pytest.raises(TelegramStartError) as info:
                await getattr(TelegramAdapter({"bot_token": token, "base_url": foreign}), call)()
            assert str(info.value) == (f"telegram getMe failed: what answered at {foreign} is not the Bot API "
                                       "('result' is missing)")
    finally:
        await runner.cleanup()


async def test_missing_token_is_a_clear_error():
    with pytest.raises(TelegramStartError, match="bot_token is not set"):
        await TelegramAdapter({}).start()


async def test_start_and_stop_are_idempotent(tg, make_adapter):
    adapter = await make_adapter()
    await adapter.start()
    assert len(tg.calls_of("getMe")) == 1
    assert len(tg.calls_of("setMyCommands")) == 1
    await adapter.stop()
    await adapter.stop()
    assert (await adapter.health())["ok"] is False


# ---- edit and media capabilities -------------------------------------------------------------

async def test_edit_message_replaces_text(tg, make_adapter):
    adapter = await make_adapter()
    result = await adapter.edit_message(DM, "1001", "better (v2)")
    assert result.message_id == "1001"
    assert tg.edits == [{"chat_id": "111222333", "message_id": "1001", "text": r"better \(v2\)",
                         "parse_mode": "MarkdownV2"}]


async def test_send_media_uploads_a_file_to_the_topic(tg, make_adapter, tmp_path):
    adapter = await make_adapter()
    report = tmp_path / "report.txt"
    report.write_bytes(b"quarterly numbers\n")
    result = await adapter.send_media(FORUM_TOPIC, {"kind": "document", "path": str(report)},
                                      caption="the report", reply_to="5120")
    ((method, body),) = tg.media
    assert method == "sendDocument"
    assert body["chat_id"] == "-1001987654321" and body["message_thread_id"] == "17585"
    assert body["caption"] == "the report"
    uploads = [v for v in body.values() if isinstance(v, dict) and "content" in v]
    assert [(u["filename"], u["content"]) for u in uploads] == [("report.txt", b"quarterly numbers\n")]
    assert result.message_id == "1001"


async def test_send_media_rejects_bad_descriptors(make_adapter):
    adapter = await make_adapter()
    with pytest.raises(ValueError, match="unsupported telegram media kind 'hologram'"):
        await adapter.send_media(DM, {"kind": "hologram", "url": "https://x/y"})
    with pytest.raises(ValueError, match="one of 'path', 'url' or 'file_id'"):
        await adapter.send_media(DM, {"kind": "photo"})


async def test_stop_lets_the_update_in_hand_reach_the_gateway(tg, make_adapter):
    gateway = FakeGateway()
    gateway.hold = asyncio.Event()  # e.g. the dedupe write is in progress
    adapter = await make_adapter(gateway)
    await tg.push(load("t1_private_dm"))
    async with asyncio.timeout(10):
        while gateway.in_emit != 1:  # the update is inside the gateway
            await asyncio.sleep(0.01)
    stopping = asyncio.create_task(adapter.stop())
    await asyncio.sleep(0.2)
    assert not stopping.done()  # stop waits for the update in hand …
    gateway.hold.set()
    await asyncio.wait_for(stopping, 10)
    assert [e.message_id for e in gateway.events] == ["42"]  # … which was not cancelled half-way
    # and the handled update was confirmed to Telegram on the way out
    assert tg.calls_of("getUpdates")[-1].body["offset"] == "900000002"


async def test_start_advertises_the_gateway_commands_in_the_menu(tg, make_adapter):
    await make_adapter()
    (call,) = tg.calls_of("setMyCommands")
    commands = call.body["commands"]
    commands = json.loads(commands) if isinstance(commands, str) else commands
    assert [c["command"] for c in commands] == ["new", "reset", "stop", "queue", "resume", "title", "undo", "retry",
                                                "compress", "status", "help", "restart"]
    assert all(3 <= len(c["description"]) <= 256 for c in commands)  # Bot API limits


async def test_a_refused_command_menu_does_not_stop_start_up(tg, make_adapter):
    tg.fail("setMyCommands", "server")
    adapter = await make_adapter()
    assert (await adapter.health())["ok"] is True
