"""End to end: fake signal-cli daemon → real httpx / httpx-sse client → SignalAdapter → GatewayApp
(real plugin loading through the installed entry points, real SQLite store, echo agent) → reply
back at the fake daemon's JSON-RPC `send`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from pathlib import Path

import pytest

from fake_signal import ACCOUNT, ACCOUNT_UUID, wait_until
from hermes_core import GatewayConfig
from hermes_core.agents.echo import EchoAgent
from hermes_core.app import GatewayApp
from hermes_core.testing import HeldEchoAgent

FIXTURES = Path(__file__).parent / "fixtures"
ALICE = "7d1e2c3b-4a59-4687-9a0b-1c2d3e4f5a6b"
BOB = "0b9c8d7e-6f5a-4b3c-8d2e-1f0a9b8c7d6e"
CAROL = "1a2b3c4d-5e6f-4a1b-8c2d-3e4f5a6b7c8d"
GROUP_ID = "Pmpi+EfPWmsxiomLe9Nx2XF9HOE483p6iKiFj65iMwI="


def load(name: str):
    return json.loads((FIXTURES / f"{name}.json").read_text())


def bare(name: str) -> dict:
    payload = load(name)
    return payload["params"] if "params" in payload else payload


def dm(timestamp: int, text: str, uuid: str | None = ALICE, number: str | None = "+15551230001",
       name: str | None = "Alice", **data) -> dict:
    return {"envelope": {"source": number or uuid, "sourceNumber": number, "sourceUuid": uuid, "sourceName": name,
                         "sourceDevice": 1, "timestamp": timestamp,
                         "dataMessage": {"timestamp": timestamp, "message": text, "expiresInSeconds": 0,
                                         "viewOnce": False, **data}},
            "account": ACCOUNT}


def in_group(timestamp: int, text: str, **sender) -> dict:
    return dm(timestamp, text, **sender, groupInfo=FAMILY)


FAMILY = {"groupId": GROUP_ID, "groupName": "Family", "revision": 5, "type": "DELIVER"}


def edit_of(target: int, timestamp: int, text: str, **data) -> dict:
    """Alice's `editMessage` of her message `target` (signal-cli's shape, as G6)."""
    payload = dm(timestamp, text)
    envelope = payload["envelope"]
    envelope["editMessage"] = {"targetSentTimestamp": target, "dataMessage": {**envelope.pop("dataMessage"), **data}}
    return payload


def remote_delete_of(target, timestamp: int, **data) -> dict:
    """Alice's remote delete of her message `target` (`dataMessage.remoteDelete`, no text)."""
    return dm(timestamp, None, remoteDelete={"timestamp": target}, **data)


@pytest.fixture
async def gateway(tmp_path, daemon):
    """`await gateway(**signal_settings)` starts a GatewayApp on HERMES_HOME = tmp_path/home;
    all apps are stopped at teardown."""
    apps = []

    async def start(agent=None, core=None, **signal):
        table = {"enabled": True, "allow_all": True, "account": ACCOUNT, "base_url": daemon.base_url,
                 "reconnect_initial": 0.05, "reconnect_max": 0.2}
        table.update(signal)
        app = GatewayApp(GatewayConfig(home=tmp_path / "home", core=core or {}, platforms={"signal": table}),
                         watcher=False, agent=agent)
        await app.start()
        apps.append(app)
        return app

    yield start
    for app in apps:
        await app.stop()


class HeldEcho(EchoAgent):
    """The echo agent, answering only once `release` is set (a turn that takes its time)."""

    def __init__(self):
        super().__init__()
        self.release = asyncio.Event()

    async def _generate(self, *args, **kwargs):
        await self.release.wait()
        return await super()._generate(*args, **kwargs)


def replies(daemon) -> list[tuple]:
    """(recipient or groupId, message, quoteTimestamp, quoteAuthor) of every send."""
    return [((p.get("recipient") or [p.get("groupId")])[0], p["message"], p.get("quoteTimestamp"),
             p.get("quoteAuthor")) for p in daemon.sent]


async def test_dm_gets_an_echo_reply_quoting_the_trigger(daemon, gateway):
    app = await gateway()
    assert type(app.adapters["signal"]).__name__ == "SignalAdapter"  # via the entry point
    await daemon.push(bare("g1_dm_jsonrpc"))
    await daemon.push_frames((FIXTURES / "g2_hidden_number.sse").read_text())
    await daemon.wait_for(lambda: len(daemon.sent) == 2)
    assert sorted(replies(daemon)) == sorted([
        (ALICE, "echo: what's on my calendar?", 1767225600123, ALICE),
        (BOB, "echo: ping", 1767225700456, BOB)])
    keys = sorted(e.session_key for e in await app.store.list_sessions())
    assert keys == ["agent:main:signal:dm:0b9c8d7e-6f5a-4b3c-8d2e-1f0a9b8c7d6e",
                    "agent:main:signal:dm:7d1e2c3b-4a59-4687-9a0b-1c2d3e4f5a6b"]


async def test_group_reply_goes_to_the_raw_group_id_and_keys_per_user(daemon, gateway):
    await gateway()
    await daemon.push(in_group(1767225600200, "/status"))
    await daemon.wait_for(lambda: len(daemon.sent) == 1)
    (params,) = daemon.sent
    assert params["groupId"] == GROUP_ID and "recipient" not in params
    assert params["quoteTimestamp"] == 1767225600200 and params["quoteAuthor"] == ALICE
    assert ("Session key: agent:main:signal:group:group:Pmpi+EfPWmsxiomLe9Nx2XF9HOE483p6iKiFj65iMwI="
            ":7d1e2c3b-4a59-4687-9a0b-1c2d3e4f5a6b") in params["message"]


async def test_note_to_self_is_answered_and_its_echo_and_other_syncs_are_not(daemon, gateway):
    await gateway()
    await daemon.push(bare("g3_note_to_self"), bare("g4_sync_to_other"),
                      *[item["params"] for item in load("g5_typing_and_receipt")])
    await daemon.wait_for(lambda: len(daemon.sent) == 1)
    assert replies(daemon) == [(ACCOUNT_UUID, "echo: remind me to call mum", 1767225900000, ACCOUNT_UUID)]
    # The reply is reflected as a Note-to-Self sync with the timestamp `send` returned (G-T3).
    echo = bare("g3_note_to_self")
    sent_ts = daemon.sent_timestamps[0]
    echo["envelope"]["timestamp"] = sent_ts
    echo["envelope"]["syncMessage"]["sentMessage"].update(timestamp=sent_ts, message="echo: remind me to call mum")
    await daemon.push(echo, dm(1767225600300, "next"))
    await daemon.wait_for(lambda: len(daemon.sent) == 2)
    assert replies(daemon)[1] == (ALICE, "echo: next", 1767225600300, ALICE)
    await daemon.wait_for(lambda: not daemon.pending)
    assert len(daemon.sent) == 2


async def test_long_reply_is_chunked_within_2000_utf8_bytes_in_order(daemon, gateway):
    await gateway()
    body = "\n".join(f"line {i:04d} — grüße 😀" for i in range(600))
    await daemon.push(dm(1767225600400, body))
    await daemon.wait_for(lambda: daemon.sent and "line 0599" in daemon.sent[-1]["message"], timeout=20)
    texts = [p["message"] for p in daemon.sent]
    assert len(texts) >= -(-len(("echo: " + body).encode("utf-8")) // 2000)  # at least ⌈bytes / 2000⌉
    assert all(len(t.encode("utf-8")) <= 2000 for t in texts)
    assert "\n".join(texts).removeprefix("echo: ") == body  # every line, once, in order
    assert daemon.sent[0]["quoteTimestamp"] == 1767225600400
    assert all("quoteTimestamp" not in p for p in daemon.sent[1:])


async def test_rate_limit_is_waited_out_and_the_reply_arrives_once(daemon, gateway):
    await gateway()
    daemon.fail("send", "rate_limit", retry_after=1)
    await daemon.push(bare("g1_dm_jsonrpc"))
    await daemon.wait_for(lambda: len(daemon.sent) == 1)
    attempts = daemon.calls_of("send")
    assert [a.error for a in attempts] == [-5, None]
    assert attempts[1].at - attempts[0].at >= 1.0
    assert [p["message"] for p in daemon.sent] == ["echo: what's on my calendar?"]


async def settled_ledger(home: Path, count: int) -> dict[str, tuple]:
    """`{session_key: (state, last_error)}` of the delivery ledger, read (read-only) once
    `count` obligations have left the pending/attempting states."""
    uri = (home / "state.db").resolve().as_uri() + "?mode=ro"
    for _ in range(200):
        conn = sqlite3.connect(uri, uri=True)
        try:
            rows = conn.execute("SELECT session_key, state, last_error FROM delivery_obligations ORDER BY id").fetchall()
        finally:
            conn.close()
        if sum(state not in ("pending", "attempting") for _, state, _ in rows) >= count:
            return {key: (state, error) for key, state, error in rows}
        await asyncio.sleep(0.05)
    raise AssertionError(f"{count} deliveries never settled")


async def test_untrusted_identity_is_a_clear_failed_delivery_and_the_gateway_keeps_serving(
        daemon, gateway, tmp_path):
    await gateway()
    daemon.fail("send", "untrusted", when=lambda p: p.get("recipient") == [ALICE])
    await daemon.push(bare("g1_dm_jsonrpc"), dm(1767225600500, "hi", uuid=BOB, number=None, name="Bob"))
    await daemon.wait_for(lambda: len(daemon.sent) == 1 and len(daemon.calls_of("send")) == 2)
    assert replies(daemon) == [(BOB, "echo: hi", 1767225600500, BOB)]
    rows = await settled_ledger(tmp_path / "home", 2)
    state, error = rows["agent:main:signal:dm:7d1e2c3b-4a59-4687-9a0b-1c2d3e4f5a6b"]
    assert state == "failed"
    assert "the recipient's safety number changed (untrusted identity)" in error
    assert rows["agent:main:signal:dm:0b9c8d7e-6f5a-4b3c-8d2e-1f0a9b8c7d6e"] == ("delivered", None)


async def test_number_and_uuid_of_one_person_share_one_session(daemon, gateway, tmp_path):
    app = await gateway()
    # A typing indicator reveals Carol's number and UUID; later an envelope carries only the
    # number, and her UUID-only messages follow: one DM session, keyed on the UUID.
    typing = {"envelope": {"source": "+15551230003", "sourceNumber": "+15551230003", "sourceUuid": CAROL,
                           "sourceName": "Carol", "sourceDevice": 1, "timestamp": 1767225600600,
                           "typingMessage": {"action": "STARTED", "timestamp": 1767225600600}},
              "account": ACCOUNT}
    await daemon.push(typing, dm(1767225600601, "by number", uuid=None, number="+15551230003", name="Carol"))
    await settled_ledger(tmp_path / "home", 1)
    await daemon.push(dm(1767225600602, "/status", uuid=CAROL, number=None, name="Carol"))
    await daemon.wait_for(lambda: len(daemon.sent) == 2)
    assert [p["recipient"] for p in daemon.sent] == [[CAROL], [CAROL]]
    assert "Session key: agent:main:signal:dm:1a2b3c4d-5e6f-4a1b-8c2d-3e4f5a6b7c8d" in daemon.sent[1]["message"]
    assert [e.session_key for e in await app.store.list_sessions()] == [
        "agent:main:signal:dm:1a2b3c4d-5e6f-4a1b-8c2d-3e4f5a6b7c8d"]
    # the core's alias store folds the number into the UUID for keys and owner scoping
    assert app.pm.hook.hermes_canonical_identity(platform="signal", kind="user", value="+15551230003") == CAROL


async def test_daemon_restart_mid_stream_loses_nothing_it_still_queues(daemon, gateway):
    await gateway()
    await daemon.push(dm(1767225600700, "before"))
    await daemon.wait_for(lambda: len(daemon.sent) == 1)
    await daemon.stop(abrupt=True)
    # two chats, so neither message interrupts the other's turn
    await daemon.push(dm(1767225600701, "while down", uuid=CAROL, number=None, name="Carol"),
                      dm(1767225600702, "still down", uuid=BOB, number=None, name="Bob"))
    await daemon.start()
    await daemon.wait_for(lambda: len(daemon.sent) == 3)
    assert sorted(p["message"] for p in daemon.sent) == ["echo: before", "echo: still down", "echo: while down"]
    await daemon.wait_for(lambda: not daemon.pending)
    assert len(daemon.sent) == 3


async def test_edits_follow_edits_as_turns(daemon, gateway, tmp_path):
    app = await gateway()
    await daemon.push(bare("g1_dm_jsonrpc"))
    await settled_ledger(tmp_path / "home", 1)  # the turn is over: a new message will not interrupt it
    # the edit of an answered message is no turn; the next message is answered normally
    await daemon.push(bare("g6_edited_message"), dm(1767225600800, "after the edit"))
    await daemon.wait_for(lambda: len(daemon.sent) == 2)
    assert [p["message"] for p in daemon.sent] == ["echo: what's on my calendar?", "echo: after the edit"]
    await app.stop()
    await gateway(edits_as_turns=True)
    await daemon.push(bare("g6_edited_message"))
    await daemon.wait_for(lambda: len(daemon.sent) == 3)
    assert replies(daemon)[2] == (ALICE, "echo: what's on my calendar tomorrow?", 1767226200000, ALICE)


async def test_the_chat_shows_typing_while_the_turn_runs(daemon, gateway):
    agent = HeldEcho()
    await gateway(agent=agent)
    await daemon.push(bare("g1_dm_jsonrpc"), in_group(1767225600900, "and the group?", uuid=BOB, number=None,
                                                      name="Bob"))
    await daemon.wait_for(lambda: len(daemon.typing) >= 2)
    assert daemon.sent == []
    assert {json.dumps(t, sort_keys=True) for t in daemon.typing} == {
        json.dumps({"account": ACCOUNT, "recipient": [ALICE]}, sort_keys=True),
        json.dumps({"account": ACCOUNT, "groupId": GROUP_ID}, sort_keys=True)}
    agent.release.set()
    await daemon.wait_for(lambda: len(daemon.sent) == 2)
    # groups are per-user sessions by default: no "[sender]" prefix
    assert sorted(p["message"] for p in daemon.sent) == ["echo: and the group?", "echo: what's on my calendar?"]


async def test_a_user_allowed_by_number_is_answered_when_the_message_names_them_by_uuid(daemon, gateway):
    # docs/behaviour.md §9: allowed_users lists Carol's number; her first envelope carries both
    # (the core records number → UUID), a later one only the UUID; a stranger's DM gets the
    # notice and leaves no session.
    app = await gateway(allow_all=False, allowed_users=["+15551230003"])
    await daemon.push(dm(1767225600701, "hello", uuid=CAROL, number="+15551230003", name="Carol"))
    await daemon.wait_for(lambda: len(daemon.sent) == 1)
    await daemon.push(dm(1767225600702, "me too", uuid="9f8e7d6c-5b4a-4f3e-8d2c-1b0a9f8e7d6c",
                         number="+15557770000", name="Mallory"))
    await daemon.wait_for(lambda: len(daemon.sent) == 2)
    await app.runner.join()
    # Carol again with her number hidden (G2's shape): allowed through the stored alias.
    await daemon.push(dm(1767225600703, "number hidden", uuid=CAROL, number=None, name="Carol"))
    await daemon.wait_for(lambda: len(daemon.sent) == 3)
    assert [(p["recipient"], p["message"]) for p in daemon.sent] == [
        ([CAROL], "echo: hello"), (["9f8e7d6c-5b4a-4f3e-8d2c-1b0a9f8e7d6c"], "This assistant is private."),
        ([CAROL], "echo: number hidden")]
    assert [e.session_key for e in await app.store.list_sessions()] == [f"agent:main:signal:dm:{CAROL}"]


async def test_senders_allowed_by_a_number_with_spaces_and_an_upper_case_uuid_are_answered(daemon, gateway):
    # docs/behaviour.md §9: "+1 555 123 0003" is Carol's `sourceNumber` +15551230003; Alice's ACI
    # written in upper case is her `sourceUuid`, which signal-cli sends in lower case.
    app = await gateway(allow_all=False, allowed_users=["+1 555 123 0003", ALICE.upper()])
    await daemon.push(dm(1767225600711, "hello", uuid=CAROL, number="+15551230003", name="Carol"))
    await daemon.wait_for(lambda: len(daemon.sent) == 1)
    await daemon.push(dm(1767225600712, "hi", number=None))
    await daemon.wait_for(lambda: len(daemon.sent) == 2)
    assert [(p["recipient"], p["message"]) for p in daemon.sent] == [([CAROL], "echo: hello"), ([ALICE], "echo: hi")]
    assert app.runner.deps.access.refused == {}


# ---- edits and deletions (docs/behaviour.md §5 "Edits and deletions") ----------------------------

ALICE_DM_KEY = f"agent:main:signal:dm:{ALICE}"
ALICE_IN_FAMILY_KEY = f"agent:main:signal:group:group:{GROUP_ID}:{ALICE}"


def assert_logs_name_no_text_or_number(caplog, *texts: str) -> None:
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("hermes_signal"))
    assert "+15551230001" not in logged
    for text in texts:
        assert text not in logged


@pytest.mark.parametrize("edits_as_turns", [False, True])
async def test_an_edit_of_a_queued_message_replaces_its_text_in_place(daemon, gateway, caplog, edits_as_turns):
    # The edit used to be dropped (edits_as_turns off: the stale text was answered) or to become
    # a second turn (on: both texts were answered).
    caplog.set_level(logging.INFO)
    agent = HeldEchoAgent()
    app = await gateway(agent=agent, core={"busy_input_mode": "queue"}, edits_as_turns=edits_as_turns)
    await daemon.push(dm(1767225601100, "first"))
    await wait_until(lambda: agent.started == ["first"])
    await daemon.push(dm(1767225601101, "queued original"))
    await wait_until(lambda: app.runner.queue_depth(ALICE_DM_KEY) == 1)
    await daemon.push(edit_of(1767225601101, 1767225601102, "queued edited"))
    await wait_until(lambda: f"queued message 1767225601101:{ALICE} in {ALICE_DM_KEY} edited" in caplog.text)
    agent.release.set()
    await daemon.wait_for(lambda: len(daemon.sent) == 2)
    await app.runner.join()
    assert replies(daemon) == [(ALICE, "echo: first", 1767225601100, ALICE),
                               (ALICE, "echo: queued edited", 1767225601101, ALICE)]
    assert agent.started == ["first", "queued edited"]
    assert app.runner.queue_depth(ALICE_DM_KEY) == 0


async def test_a_remote_delete_withdraws_a_queued_group_message(daemon, gateway):
    # A remote delete used to be skipped: the deleted message was answered all the same.
    agent = HeldEchoAgent()
    app = await gateway(agent=agent, core={"busy_input_mode": "queue"})
    await daemon.push(in_group(1767225601200, "first"))
    await wait_until(lambda: agent.started == ["first"])
    await daemon.push(in_group(1767225601201, "never mind this"))
    await wait_until(lambda: app.runner.queue_depth(ALICE_IN_FAMILY_KEY) == 1)
    await daemon.push(remote_delete_of(1767225601201, 1767225601202, groupInfo=FAMILY))
    await wait_until(lambda: app.runner.queue_depth(ALICE_IN_FAMILY_KEY) == 0)
    agent.release.set()
    await daemon.push(in_group(1767225601203, "after the delete"))
    await daemon.wait_for(lambda: len(daemon.sent) == 2)
    await app.runner.join()
    assert [(p["groupId"], p["message"]) for p in daemon.sent] == [
        (GROUP_ID, "echo: first"), (GROUP_ID, "echo: after the delete")]
    assert agent.started == ["first", "after the delete"]


@pytest.mark.parametrize("edits_as_turns", [False, True])
async def test_edits_and_deletes_of_an_answered_message(daemon, gateway, tmp_path, caplog, edits_as_turns):
    # Not queued any more: a delete is nothing; an edit is a new turn only with edits_as_turns.
    caplog.set_level(logging.INFO)
    await gateway(core={"busy_input_mode": "queue"}, edits_as_turns=edits_as_turns)
    await daemon.push(dm(1767225601300, "first"))
    await settled_ledger(tmp_path / "home", 1)
    await daemon.push(edit_of(1767225601300, 1767225601301, "first, edited"),
                      remote_delete_of(1767225601300, 1767225601302), dm(1767225601303, "after"))
    await daemon.wait_for(lambda: len(daemon.sent) == (3 if edits_as_turns else 2))
    await daemon.wait_for(lambda: not daemon.pending)
    expected = ["echo: first", "echo: first, edited", "echo: after"]
    assert [p["message"] for p in daemon.sent] == (expected if edits_as_turns else expected[::2])
    assert "signal remote delete of message 1767225601300: it is not queued (nothing to withdraw)" in caplog.text
    skipped = "signal edit of message 1767225601300 skipped: it is not queued and edits_as_turns is off"
    assert (skipped in caplog.text) is not edits_as_turns
    assert_logs_name_no_text_or_number(caplog, "first, edited")


@pytest.mark.parametrize("change", ["edit", "remote delete"])
async def test_a_change_carrying_the_uuid_finds_a_message_queued_under_the_number(daemon, gateway, caplog, change):
    # docs/adapters.md §5.1: an envelope carrying only a number, before any number ↔ UUID pair
    # is known, is queued under the number (id "<timestamp>:<number>"). Its edit or remote
    # delete carrying the UUID too (G6's shape) used to find nothing: the queue compared the
    # UUID chat id and id with the number's, and the stale (or deleted) text was answered.
    caplog.set_level(logging.INFO, logger="hermes_core.pipeline.runner")
    agent = HeldEchoAgent()
    app = await gateway(agent=agent, core={"busy_input_mode": "queue"})
    key = "agent:main:signal:dm:+15551230001"
    await daemon.push(dm(1767225601500, "first", uuid=None))
    await wait_until(lambda: agent.started == ["first"])
    await daemon.push(dm(1767225601501, "queued original", uuid=None), dm(1767225601502, "second", uuid=None))
    await wait_until(lambda: app.runner.queue_depth(key) == 2)
    if change == "edit":
        await daemon.push(edit_of(1767225601501, 1767225601503, "queued edited"))
        done, answered = "edited", ["first", "queued edited", "second"]
    else:
        await daemon.push(remote_delete_of(1767225601501, 1767225601503))
        done, answered = "withdrawn", ["first", "second"]
    await wait_until(lambda: f"queued message 1767225601501:+15551230001 in {key} {done}" in caplog.text)
    agent.release.set()
    await daemon.wait_for(lambda: len(daemon.sent) == len(answered))
    await app.runner.join()
    assert agent.started == answered
    assert [p["message"] for p in daemon.sent] == ["echo: " + text for text in answered]


async def test_a_malformed_remote_delete_is_one_clear_log_line_and_the_queue_is_untouched(
        daemon, gateway, caplog):
    # It used to be skipped at DEBUG as if it were a well-formed remote delete.
    agent = HeldEchoAgent()
    app = await gateway(agent=agent, core={"busy_input_mode": "queue"})
    await daemon.push(dm(1767225601400, "first"))
    await wait_until(lambda: agent.started == ["first"])
    await daemon.push(dm(1767225601401, "keep me"))
    await wait_until(lambda: app.runner.queue_depth(ALICE_DM_KEY) == 1)
    await daemon.push(remote_delete_of("1767225601401", 1767225601402), dm(1767225601403, "after"))
    await wait_until(lambda: app.runner.queue_depth(ALICE_DM_KEY) == 2)
    agent.release.set()
    await daemon.wait_for(lambda: len(daemon.sent) == 3)
    await app.runner.join()
    assert [p["message"] for p in daemon.sent] == ["echo: first", "echo: keep me", "echo: after"]
    warnings = [r.getMessage() for r in caplog.records if r.name.startswith("hermes_signal")
                and r.levelno >= logging.WARNING]
    assert warnings == ["skipping malformed signal payload: malformed payload: "
                        "envelope.dataMessage.remoteDelete.timestamp must be an integer, got str"]
    assert_logs_name_no_text_or_number(caplog, "keep me")
