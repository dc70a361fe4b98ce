"""End to end: fake Telegram Bot API → real PTB client → TelegramAdapter → GatewayApp (real
plugin loading through the installed entry points, real SQLite store, echo agent) → reply back
at the fake server.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from hermes_core import GatewayConfig
from hermes_core.app import GatewayApp
from hermes_core.testing import HeldEchoAgent

FIXTURES = Path(__file__).parent / "fixtures"


def load(name: str, **changes) -> dict:
    update = json.loads((FIXTURES / f"{name}.json").read_text())
    update.update(changes)
    return update


def text_update(update_id: int, message_id: int, chat: dict, text: str, sender: dict | None = None,
                **extra) -> dict:
    message = {"message_id": message_id, "date": 1767225600, "chat": chat,
               "from": sender or {"id": 222333444, "is_bot": False, "first_name": "Bob"}}
    if text is not None:
        message["text"] = text
    message.update(extra)
    return {"update_id": update_id, "message": message}


def make_config(home: Path, tg, **telegram) -> GatewayConfig:
    table = {"enabled": True, "bot_token": tg.token, "base_url": tg.base_url, "poll_timeout": 1, "allow_all": True}
    table.update(telegram)
    return GatewayConfig(home=home, platforms={"telegram": table})


@pytest.fixture
async def gateway(tmp_path, tg):
    """`await gateway(**telegram_settings)` starts a GatewayApp on HERMES_HOME = tmp_path/home;
    all apps are stopped at teardown."""
    apps = []

    async def start(**telegram):
        app = GatewayApp(make_config(tmp_path / "home", tg, **telegram), watcher=False)
        await app.start()
        apps.append(app)
        return app

    yield start
    for app in apps:
        await app.stop()


async def test_dm_message_gets_echo_reply_in_the_same_chat(tg, gateway):
    app = await gateway()
    assert type(app.adapters["telegram"]).__name__ == "TelegramAdapter"  # via the entry point
    await tg.push(load("t1_private_dm"))
    await tg.wait_for(lambda: len(tg.sent) == 1)
    (reply,) = tg.sent
    assert reply["chat_id"] == "111222333"
    assert reply["text"] == "echo: hello"
    assert reply["reply_parameters"]["message_id"] == 42
    assert "message_thread_id" not in reply


async def test_only_allowed_users_are_answered_and_a_stranger_is_told_once(tg, gateway):
    # docs/behaviour.md §9: the T1 sender (111222333) is not in allowed_users.
    app = await gateway(allow_all=False, allowed_users=[999], parse_mode="plain")
    await tg.push(load("t1_private_dm"))
    await tg.wait_for(lambda: len(tg.sent) == 1)
    assert (tg.sent[0]["chat_id"], tg.sent[0]["text"]) == ("111222333", "This assistant is private.")
    assert app.runner.deps.access.refused == {("telegram", "not_allowed"): 1}
    assert await app.store.list_sessions() == []


async def test_replies_go_to_the_right_topic(tg, gateway):
    await gateway(parse_mode="plain")
    await tg.push(load("t3_supergroup_reply"), load("t4_forum_topic"), load("t5_forum_general_reply"))
    await tg.wait_for(lambda: len(tg.sent) == 3)
    by_text = {s["text"]: s for s in tg.sent}
    # Topics are shared sessions, so the core prefixes the sender's name (seed §5).
    topic = by_text["echo: [Alice Ng] summarise this topic"]
    # T5 replies to Alice's "deploy done", T3 to Bob's "shall we ship?": the agent reads the
    # replied message as a quoted prefix (docs/behaviour.md §7).
    general = by_text['echo: [Replying to "Alice Ng": "deploy done"]\n[Bob] @hermes_test_bot status?']
    reply_chain = by_text['echo: [Replying to "Bob": "shall we ship?"]\nagreed, ship it']
    assert (topic["chat_id"], topic["message_thread_id"]) == ("-1001987654321", "17585")
    assert general["chat_id"] == "-1001987654321" and "message_thread_id" not in general
    assert reply_chain["chat_id"] == "-1001234567890" and "message_thread_id" not in reply_chain
    assert reply_chain["reply_parameters"]["message_id"] == 7010


async def test_long_reply_is_chunked_within_4096_utf16_units_in_order(tg, gateway):
    await gateway(parse_mode="plain")
    # 2000 lines of "line NNNN 😀" = far more than one message; each emoji counts 2 units.
    body = "\n".join(f"line {i:04d} 😀" for i in range(2000))
    await tg.push(text_update(900000300, 300, {"id": 111222333, "type": "private", "first_name": "Alice"},
                              body, sender={"id": 111222333, "is_bot": False, "first_name": "Alice"}))
    await tg.wait_for(lambda: "line 1999" in (tg.sent[-1]["text"] if tg.sent else ""), timeout=20)
    texts = [s["text"] for s in tg.sent]
    assert len(texts) >= 6
    assert all(len(t.encode("utf-16-le")) // 2 <= 4096 for t in texts)
    joined = "\n".join(texts).removeprefix("echo: ")
    numbers = [int(line.split()[1]) for line in joined.splitlines() if line.startswith("line ")]
    assert numbers == list(range(2000))  # every line, once, in order
    assert texts[0].startswith("echo: line 0000")
    # the first chunk answers the trigger; the rest are plain messages
    assert tg.sent[0]["reply_parameters"]["message_id"] == 300
    assert all("reply_parameters" not in s for s in tg.sent[1:])


async def test_429_is_waited_out_and_the_reply_arrives_once(tg, gateway):
    await gateway()
    tg.fail("sendMessage", "429", retry_after=1)
    await tg.push(load("t1_private_dm"))
    await tg.wait_for(lambda: len(tg.sent) == 1)
    attempts = tg.calls_of("sendMessage")
    assert [a.status for a in attempts] == [429, 200]
    assert attempts[1].at - attempts[0].at >= 1.0
    assert [s["text"] for s in tg.sent] == ["echo: hello"]


async def test_redelivered_update_after_restart_gets_no_second_reply(tg, gateway):
    app1 = await gateway()
    await tg.push(load("t1_private_dm"))
    await tg.wait_for(lambda: len(tg.sent) == 1)
    await app1.stop()
    # Telegram redelivers an update whose confirmation was lost (e.g. a crash before the next
    # getUpdates): the same update_id / message_id arrives at a new app on the same home.
    await tg.push(load("t1_private_dm"), load("t7_private_topic"))
    await gateway()
    await tg.wait_for(lambda: len(tg.sent) == 2)
    await tg.wait_for(lambda: any(c.body.get("offset") == "900000009" for c in tg.calls_of("getUpdates")))
    assert [s["text"] for s in tg.sent] == ["echo: hello", "echo: new idea"]


async def test_group_migrated_to_supergroup_keeps_its_session(tg, gateway):
    await gateway(parse_mode="plain")
    group = {"id": -4012345678, "title": "Family", "type": "group"}
    supergroup = {"id": -1004012345678, "title": "Family", "type": "supergroup"}
    await tg.push(text_update(900000400, 10, group, "remember me"))
    await tg.wait_for(lambda: len(tg.sent) == 1)
    await tg.push(text_update(900000401, 11, group, "/status"))
    await tg.wait_for(lambda: len(tg.sent) == 2)
    old_status = tg.sent[1]["text"]
    assert "Session key: agent:main:telegram:group:-4012345678:222333444" in old_status
    # The group becomes a supergroup: Telegram posts the migration service messages.
    await tg.push(
        text_update(900000402, 12, group, None, migrate_to_chat_id=-1004012345678),
        text_update(900000403, 1, supergroup, None, migrate_from_chat_id=-4012345678),
        text_update(900000404, 2, supergroup, "/status"),
    )
    await tg.wait_for(lambda: len(tg.sent) == 3)
    new_status = tg.sent[2]
    assert new_status["chat_id"] == "-1004012345678"  # delivered to the new chat …
    # … from the same session (same key, same session id as before the migration)
    assert "Session key: agent:main:telegram:group:-4012345678:222333444" in new_status["text"]
    old_id = [l for l in old_status.splitlines() if l.startswith("Session id")]
    new_id = [l for l in new_status["text"].splitlines() if l.startswith("Session id")]
    assert old_id and old_id == new_id


async def test_a_command_for_another_bot_in_a_group_is_left_to_that_bot(tg, gateway):
    # docs/behaviour.md §11, docs/adapters.md §1.0: with privacy mode off Telegram delivers
    # `/undo@other_bot` to every bot in the group; it is the other bot's command. Ours is
    # @hermes_test_bot (the fake's getMe), matched case-insensitively.
    app = await gateway(parse_mode="plain")
    group = {"id": -4012345678, "title": "Family", "type": "group"}
    await tg.push(text_update(900000500, 20, group, "remember me"))
    await tg.wait_for(lambda: len(tg.sent) == 1)
    (first,) = await app.store.list_sessions()
    await tg.push(text_update(900000501, 21, group, "/undo@other_bot"),
                  text_update(900000502, 22, group, "/new@other_bot fresh start"),
                  text_update(900000503, 23, group, "/undo@Hermes_Test_Bot"))
    await tg.wait_for(lambda: len(tg.sent) == 2)
    await tg.wait_for(lambda: any(c.body.get("offset") == "900000504" for c in tg.calls_of("getUpdates")))
    assert [s["text"] for s in tg.sent] == ["echo: remember me",
                                            'Undid 1 turn(s) (2 message(s)), back to before "remember me".']
    assert tg.sent[1]["reply_parameters"]["message_id"] == 23
    # `/new@other_bot fresh start` made no session: our /undo undid the first turn of the first one.
    (entry,) = await app.store.list_sessions()
    assert (entry.session_key, entry.session_id) == ("agent:main:telegram:group:-4012345678:222333444",
                                                      first.session_id)


async def test_webhook_mode_end_to_end(tg, gateway):
    import aiohttp

    app = await gateway(mode="webhook", webhook_url="https://bot.example/telegram", webhook_port=0,
                        webhook_secret="hook-secret")
    assert tg.webhook["url"] == "https://bot.example/telegram"
    host, port = app.adapters["telegram"].webhook_address
    async with aiohttp.ClientSession() as http:
        for _ in range(2):  # the second POST is Telegram redelivering: no second reply
            async with http.post(f"http://{host}:{port}/telegram", json=load("t4_forum_topic"),
                                 headers={"X-Telegram-Bot-Api-Secret-Token": "hook-secret"}) as resp:
                assert resp.status == 200
    await tg.wait_for(lambda: len(tg.sent) == 1)
    (reply,) = tg.sent
    assert (reply["chat_id"], reply["message_thread_id"]) == ("-1001987654321", "17585")
    assert reply["text"] == r"echo: \[Alice Ng\] summarise this topic"  # MarkdownV2-escaped
    assert tg.calls_of("getUpdates") == []


async def test_a_lone_surrogate_in_a_name_is_answered_once(tg, gateway):
    # "Bob\ud800" made handle() raise UnicodeEncodeError; the adapter retried and dropped it.
    app = await gateway()
    chat = {"id": 222333444, "first_name": "Bob\ud800", "type": "private"}
    await tg.push(text_update(900000100, 500, chat, "hi", sender={"id": 222333444, "is_bot": False,
                                                                  "first_name": "Bob\ud800"}))
    await tg.wait_for(lambda: len(tg.sent) == 1)
    assert tg.sent[0]["text"] == "echo: hi"
    entry = await app.store.get_entry("agent:main:telegram:dm:222333444")
    assert entry.origin.user_name == "Bob\ufffd"
    await app.runner.join()
    assert len(tg.sent) == 1


def ledger(home: Path) -> list[tuple]:
    """`(state, last_error)` of every delivery obligation, oldest first (read-only)."""
    import sqlite3

    conn = sqlite3.connect((home / "state.db").resolve().as_uri() + "?mode=ro", uri=True)
    try:
        return conn.execute("SELECT state, last_error FROM delivery_obligations ORDER BY id").fetchall()
    finally:
        conn.close()


async def test_send_attempts_bounds_the_tries_of_a_rate_limited_reply(tg, gateway, tmp_path):
    # docs/configuration.md §4: `send_attempts` (default 3) = attempts per chunk when Telegram
    # answers 429. The delivery layer's own default (4) used to apply whatever the setting said.
    app = await gateway(parse_mode="plain")
    tg.fail("sendMessage", "429", retry_after=1, times=10)
    await tg.push(load("t1_private_dm"))
    await tg.wait_for(lambda: len(tg.calls_of("sendMessage")) >= 3, timeout=15)
    await app.runner.join()
    await asyncio.sleep(1.5)  # a 4th try would come 1 s after the 3rd
    assert [c.status for c in tg.calls_of("sendMessage")] == [429, 429, 429]
    assert ledger(tmp_path / "home") == [("failed", "giving up on send: still rate limited after 3 attempts")]


async def test_max_retry_after_caps_the_wait_and_send_attempts_is_read(tg, gateway, tmp_path):
    # docs/configuration.md §4: `max_retry_after` = longest 429 wait the adapter sits out.
    app = await gateway(parse_mode="plain", max_retry_after=5, send_attempts=2)
    tg.fail("sendMessage", "429", retry_after=10)
    await tg.push(load("t1_private_dm"))
    await tg.wait_for(lambda: len(tg.calls_of("sendMessage")) == 1)
    await app.runner.join()
    assert ledger(tmp_path / "home") == [("failed", "giving up on send: server asked to wait 10s, above the 5s cap")]
    tg.fail("sendMessage", "429", retry_after=1, times=5)
    await tg.push(text_update(900000500, 501, {"id": 111222333, "type": "private", "first_name": "Alice"}, "again",
                              sender={"id": 111222333, "is_bot": False, "first_name": "Alice"}))
    await tg.wait_for(lambda: len(tg.calls_of("sendMessage")) >= 3, timeout=15)
    await app.runner.join()
    await asyncio.sleep(1.5)  # a 3rd try of the second reply would come 1 s after its 2nd
    assert [c.status for c in tg.calls_of("sendMessage")] == [429, 429, 429]
    assert ledger(tmp_path / "home")[1] == ("failed", "giving up on send: still rate limited after 2 attempts")


ALICE_DM = {"id": 111222333, "type": "private", "first_name": "Alice"}
ALICE_USER = {"id": 111222333, "is_bot": False, "first_name": "Alice"}


async def queue_behind_a_held_turn(tg, tmp_path, edits_as_turns: bool,
                                   first_id: int) -> tuple[GatewayApp, HeldEchoAgent]:
    """A started app (queue mode, `edits_as_turns` as given) whose agent holds Alice's turn
    "first" (update `first_id`, message `first_id - 900000000`) while her next message
    "queued original" (the next ids) waits in the queue; the caller stops the app."""
    agent = HeldEchoAgent()
    config = GatewayConfig(home=tmp_path / "home", core={"busy_input_mode": "queue"}, platforms={"telegram": {
        "enabled": True, "bot_token": tg.token, "base_url": tg.base_url, "poll_timeout": 1, "allow_all": True,
        "parse_mode": "plain", "edits_as_turns": edits_as_turns}})
    app = GatewayApp(config, watcher=False, agent=agent)
    await app.start()
    message_id = first_id - 900000000
    try:
        await tg.push(text_update(first_id, message_id, ALICE_DM, "first", sender=ALICE_USER))
        await tg.wait_for(lambda: agent.started == ["first"])
        await tg.push(text_update(first_id + 1, message_id + 1, ALICE_DM, "queued original", sender=ALICE_USER))
        await tg.wait_for(lambda: app.runner.queue_depth("agent:main:telegram:dm:111222333") == 1)
    except BaseException:
        await app.stop()
        raise
    return app, agent


def edited(update_id: int, message_id: int, text: str) -> dict:
    """Alice's edit of her message `message_id` into `text`, as update `update_id`."""
    edit = text_update(update_id, message_id, ALICE_DM, text, sender=ALICE_USER, edit_date=1767225700)
    edit["edited_message"] = edit.pop("message")
    return edit


@pytest.mark.parametrize("edits_as_turns", [False, True])
async def test_an_edit_of_a_queued_message_replaces_its_text_in_place(tg, tmp_path, edits_as_turns):
    # docs/behaviour.md §5 "Edits and deletions": an edit of a message still queued replaces its
    # queued text in place. The edit used to be dropped (edits_as_turns off: the stale text was
    # answered) or to become a second turn (on: both texts were answered).
    app, agent = await queue_behind_a_held_turn(tg, tmp_path, edits_as_turns, 900000700)
    try:
        await tg.push(edited(900000702, 701, "queued edited"))
        await tg.wait_for(lambda: any(c.body.get("offset") == "900000703" for c in tg.calls_of("getUpdates")))
        agent.release.set()
        await tg.wait_for(lambda: len(tg.sent) == 2)
        await app.runner.join()
        assert [s["text"] for s in tg.sent] == ["echo: first", "echo: queued edited"]
        assert agent.started == ["first", "queued edited"]
    finally:
        await app.stop()


@pytest.mark.parametrize("edits_as_turns", [False, True])
async def test_a_queued_message_edited_into_a_command_for_another_bot_is_withdrawn(tg, tmp_path, caplog,
                                                                                   edits_as_turns):
    # docs/behaviour.md §11 "Commands addressed to another bot" and §5 "Edits and deletions": a
    # queued message edited into `/undo@other_bot` is that bot's now, as if it had been sent so:
    # withdrawn, never run here. It used to be re-read as `/undo` when its turn came, and ran.
    app, agent = await queue_behind_a_held_turn(tg, tmp_path, edits_as_turns, 900000710)
    try:
        with caplog.at_level("INFO", logger="hermes_core.sdk.adapter"):
            await tg.push(edited(900000712, 711, "/undo@other_bot"))
            await tg.wait_for(lambda: any(c.body.get("offset") == "900000713" for c in tg.calls_of("getUpdates")))
        assert app.runner.queue_depth("agent:main:telegram:dm:111222333") == 0
        agent.release.set()
        await tg.wait_for(lambda: len(tg.sent) == 1)
        await app.runner.join()
        assert [s["text"] for s in tg.sent] == ["echo: first"]
        assert agent.started == ["first"]
        assert await app.store.pending_inbound() == []
        assert [r.getMessage() for r in caplog.records if r.name == "hermes_core.sdk.adapter"] == [
            "telegram message 711 in chat 111222333 edited into a command addressed to @other_bot, "
            "not to this bot (@hermes_test_bot): withdrawn from the queue"]
    finally:
        await app.stop()
