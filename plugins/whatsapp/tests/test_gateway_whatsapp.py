"""End to end: fake bridge / fake Graph API on 127.0.0.1 → the plugin's real httpx clients and
aiohttp webhook → WhatsApp adapters → GatewayApp (real plugin loading through the installed entry
points, real SQLite store, echo agent) → replies back at the fakes, in the right chat.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from pathlib import Path

import pytest

from fake_whatsapp import MetaPoster, bridge_settings, cloud_settings, post_webhook
from hermes_core import GatewayConfig
from hermes_core.agents.echo import EchoAgent
from hermes_core.app import GatewayApp
from hermes_core.testing import HeldEchoAgent

FIXTURES = Path(__file__).parent / "fixtures"
CAROL_PN = "15551234567@s.whatsapp.net"
CAROL_LID = "98765432109876@lid"
GROUP = "120363025555555555@g.us"
BSUID = "US.13491208655302741918"
CLOUD_GROUP = "Y2FwaV9ncm91cDoxNzA1NTU1MDEzOToxMjAzNjM0MDQ2OTQyMzM4MjAZD"


def load(name: str):
    return json.loads((FIXTURES / f"{name}.json").read_text())


def upsert(chat: str, text: str, message_id: str, *, alt: str | None = None, participant: str | None = None,
           name: str | None = "Carol") -> dict:
    key = {"remoteJid": chat, "fromMe": False, "id": message_id}
    if alt:
        key["remoteJidAlt"] = alt
    if participant:
        key["participant"] = participant
    item = {"key": key, "messageTimestamp": 1767225600, "message": {"conversation": text}}
    if name:
        item["pushName"] = name
    return {"type": "notify", "messages": [item]}


def cloud_dm(text: str, message_id: str, *, phone: str = "16505551234", bsuid: str = BSUID,
             name: str = "Sheena") -> dict:
    body = load("w5_cloud_dm")
    value = body["entry"][0]["changes"][0]["value"]
    value["contacts"] = [{"profile": {"name": name}, "wa_id": phone, "user_id": bsuid}]
    value["messages"] = [{"from": phone, "from_user_id": bsuid, "id": message_id, "timestamp": "1767225600",
                          "type": "text", "text": {"body": text}}]
    return body


def edit_of(chat: str, original_id: str, text: str, edit_id: str, *, participant: str | None = None,
            alt: str | None = None) -> dict:
    """A Baileys edit of `original_id`: `editedMessage` around a `protocolMessage` of type 14."""
    event = upsert(chat, "", edit_id, participant=participant, alt=alt)
    event["messages"][0]["message"] = {"editedMessage": {"message": {"protocolMessage": {
        "key": {"remoteJid": chat, "fromMe": True, "id": original_id}, "type": 14,
        "editedMessage": {"conversation": text}}}}}
    return event


def revoke_of(chat: str, original_id: str, revoke_id: str, *, participant: str | None = None,
              alt: str | None = None) -> dict:
    """A Baileys deletion for everyone of `original_id`: a `protocolMessage` of type 0 (REVOKE)."""
    event = upsert(chat, "", revoke_id, participant=participant, alt=alt)
    event["messages"][0]["message"] = {"protocolMessage": {
        "key": {"remoteJid": chat, "fromMe": True, "id": original_id}, "type": 0}}
    return event


async def wait_until(predicate, timeout: float = 10.0) -> None:
    async def poll():
        while not predicate():
            await asyncio.sleep(0.01)
    await asyncio.wait_for(poll(), timeout)


def cloud_change(kind: str, original_id: str, message_id: str, text: str | None = None) -> dict:
    """A Cloud API `edit` (new text) or `revoke` of `original_id` by Sheena (Coexistence numbers)."""
    body = cloud_dm("", message_id)
    message = body["entry"][0]["changes"][0]["value"]["messages"][0]
    del message["text"]
    message["type"] = kind
    message[kind] = {"original_message_id": original_id}
    if kind == "edit":
        message["edit"]["message"] = {"type": "text", "text": {"body": text}}
    return body


def statuses(*items: dict) -> dict:
    body = load("w5_cloud_dm")
    value = body["entry"][0]["changes"][0]["value"]
    del value["contacts"], value["messages"]
    value["statuses"] = list(items)
    return body


class HeldEcho(EchoAgent):
    """The echo agent, answering only once `release` is set (a turn that takes its time)."""

    def __init__(self):
        super().__init__()
        self.release = asyncio.Event()

    async def _generate(self, *args, **kwargs):
        await self.release.wait()
        return await super()._generate(*args, **kwargs)


class RecordingEcho(EchoAgent):
    """The echo agent, keeping what the model would have been given (system context, message)."""

    def __init__(self):
        super().__init__()
        self.inputs: list[tuple[str, str]] = []

    async def _generate(self, context, history, message, system_context):
        self.inputs.append((system_context, message))
        return await super()._generate(context, history, message, system_context)


@pytest.fixture
async def gateway(tmp_path):
    """`await gateway(platforms, agent=None, **config)` starts a GatewayApp on HERMES_HOME =
    tmp_path/home; all apps are stopped at teardown."""
    apps = []

    async def start(platforms: dict, agent=None, **config):
        app = GatewayApp(GatewayConfig(home=tmp_path / "home", platforms=platforms, **config), watcher=False,
                         agent=agent)
        await app.start()
        apps.append(app)
        return app

    yield start
    for app in apps:
        await app.stop()


def bridge_table(bridge, **overrides) -> dict:
    return {"enabled": True, "allow_all": True, **bridge_settings(bridge), **overrides}


def cloud_table(graph, **overrides) -> dict:
    return {"enabled": True, "allow_all": True, **cloud_settings(graph), **overrides}


def webhook_url(app) -> str:
    host, port = app.adapters["whatsapp_cloud"].http_address
    return f"http://{host}:{port}/whatsapp/webhook"


def ledger(home: Path) -> list[tuple]:
    """`(session_key, state, last_error, sent_ids)` of every obligation, oldest first (read-only)."""
    conn = sqlite3.connect((home / "state.db").resolve().as_uri() + "?mode=ro", uri=True)
    try:
        return conn.execute("SELECT session_key, state, last_error, sent_ids FROM delivery_obligations "
                            "ORDER BY id").fetchall()
    finally:
        conn.close()


async def settled(home: Path, count: int) -> list[tuple]:
    for _ in range(400):
        rows = ledger(home)
        if sum(state not in ("pending", "attempting") for _, state, _, _ in rows) >= count:
            return rows
        await asyncio.sleep(0.05)
    raise AssertionError(f"{count} deliveries never settled")


def table_count(home: Path, table: str) -> int:
    conn = sqlite3.connect((home / "state.db").resolve().as_uri() + "?mode=ro", uri=True)
    try:
        return conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
    finally:
        conn.close()


# ---- bridge ------------------------------------------------------------------------------------

async def test_bridge_pn_and_lid_dms_of_one_person_are_one_session_replied_on_the_raw_jid(bridge, gateway):
    app = await gateway({"whatsapp": bridge_table(bridge)})
    assert type(app.adapters["whatsapp"]).__name__ == "WhatsAppAdapter"  # via the entry point
    bridge.push(load("w1_dm_pn"))
    await bridge.wait_for(lambda: len(bridge.sent) == 1)
    bridge.push(upsert(CAROL_LID, "/status", "3EB0F00DBABE00000002", alt=CAROL_PN))
    await bridge.wait_for(lambda: len(bridge.sent) == 2)
    first, second = bridge.sent
    assert first == {"chatId": CAROL_PN, "message": "echo: hello", "replyTo": "3EB0A1B2C3D4E5F60718"}
    assert second["chatId"] == CAROL_LID and second["replyTo"] == "3EB0F00DBABE00000002"
    assert "Session key: agent:main:whatsapp:dm:15551234567" in second["message"]
    assert [e.session_key for e in await app.store.list_sessions()] == ["agent:main:whatsapp:dm:15551234567"]
    assert app.pm.hook.hermes_canonical_identity(platform="whatsapp", kind="user", value=CAROL_LID) == "15551234567"


async def test_bridge_sender_allowed_by_a_phone_number_written_with_spaces_is_answered(bridge, gateway):
    # docs/behaviour.md §9: `"+1 555 123 4567"` in allowed_users is Carol (15551234567@s.whatsapp.net).
    app = await gateway({"whatsapp": bridge_table(bridge, allow_all=False, allowed_users=["+1 555 123 4567"])})
    bridge.push(load("w1_dm_pn"))
    await bridge.wait_for(lambda: len(bridge.sent) == 1)
    assert bridge.sent == [{"chatId": CAROL_PN, "message": "echo: hello", "replyTo": "3EB0A1B2C3D4E5F60718"}]
    assert app.runner.deps.access.refused == {}


async def test_bridge_group_reply_goes_to_the_group_jid_and_own_echo_and_status_are_ignored(bridge, gateway, tmp_path):
    app = await gateway({"whatsapp": bridge_table(bridge)})
    seqs = bridge.push(load("w4_status_and_echo"), load("w3_whatsmeow_group"))
    await bridge.wait_for(lambda: len(bridge.sent) == 1)
    assert bridge.sent == [{"chatId": GROUP, "message": "echo: me too", "replyTo": "3A1F2E3D4C5B6A79"}]
    [entry] = await app.store.list_sessions()
    assert entry.session_key == "agent:main:whatsapp:group:120363025555555555:15557654321"
    assert entry.origin.chat_name == "Book Club" and bridge.group_lookups == [GROUP]
    await bridge.wait_for(lambda: bridge.acked >= seqs[-1])
    await settled(tmp_path / "home", 1)
    assert len(bridge.sent) == 1


async def test_bridge_long_reply_is_chunked_within_4096_in_order(bridge, gateway):
    await gateway({"whatsapp": bridge_table(bridge)})
    body = "\n".join(f"line {i:04d} — café 😀" for i in range(700))
    bridge.push(upsert(CAROL_PN, body, "3EB0LONG0001"))
    await bridge.wait_for(lambda: bridge.sent and "line 0699" in bridge.sent[-1]["message"], timeout=20)
    texts = [b["message"] for b in bridge.sent]
    assert len(texts) >= -(-len("echo: " + body) // 4096) and len(texts) > 1
    assert all(len(t) <= 4096 for t in texts)
    assert "\n".join(texts).removeprefix("echo: ") == body  # every line, once, in order
    assert bridge.sent[0]["replyTo"] == "3EB0LONG0001" and all("replyTo" not in b for b in bridge.sent[1:])


async def test_bridge_rate_limit_is_waited_out_and_the_reply_arrives_once(bridge, gateway):
    await gateway({"whatsapp": bridge_table(bridge)})
    bridge.fail_send(429, "rate-overlimit", retry_after=1)
    bridge.push(load("w1_dm_pn"))
    await bridge.wait_for(lambda: len(bridge.sent) == 1)
    assert [c.status for c in bridge.calls] == [429, 200]
    assert bridge.calls[1].at - bridge.calls[0].at >= 1.0
    assert [b["message"] for b in bridge.sent] == ["echo: hello"]


async def test_bridge_refusal_is_a_failed_delivery_and_other_chats_keep_being_served(bridge, gateway, tmp_path):
    await gateway({"whatsapp": bridge_table(bridge)})
    bridge.fail_send(500, "not-authorized", when=lambda b: b["chatId"] == CAROL_PN)
    bridge.push(load("w1_dm_pn"), upsert("15557654321@s.whatsapp.net", "hi", "3EB0DAVE0001", name="Dave"))
    await bridge.wait_for(lambda: len(bridge.sent) == 1 and len(bridge.calls) == 2)
    rows = {key: (state, error) for key, state, error, _ in await settled(tmp_path / "home", 2)}
    state, error = rows["agent:main:whatsapp:dm:15551234567"]
    assert state == "failed" and "the WhatsApp bridge refused POST /send: HTTP 500: not-authorized" in error
    assert rows["agent:main:whatsapp:dm:15557654321"] == ("delivered", None)


async def test_bridge_restart_loses_nothing_it_still_holds(bridge, gateway):
    await gateway({"whatsapp": bridge_table(bridge)})
    bridge.push(upsert(CAROL_PN, "before", "3EB0R1"))
    await bridge.wait_for(lambda: len(bridge.sent) == 1)
    await bridge.stop()
    bridge.push(upsert("15557654321@s.whatsapp.net", "while down", "3EB0R2", name="Dave"),
                upsert("15559998888@s.whatsapp.net", "still down", "3EB0R3", name="Erin"))
    await asyncio.sleep(0.3)  # the adapter's polls fail meanwhile
    await bridge.start()
    await bridge.wait_for(lambda: len(bridge.sent) == 3)
    assert sorted(b["message"] for b in bridge.sent) == ["echo: before", "echo: still down", "echo: while down"]
    await bridge.wait_for(lambda: not bridge.pending)
    assert len(bridge.sent) == 3


async def test_bridge_poll_errors_and_429s_do_not_stop_receiving(bridge, gateway):
    app = await gateway({"whatsapp": bridge_table(bridge)})
    bridge.poll_failures = [429, 500, 429]
    bridge.push(load("w1_dm_pn"))
    await bridge.wait_for(lambda: len(bridge.sent) == 1)
    assert bridge.poll_failures == [] and bridge.sent[0]["message"] == "echo: hello"
    assert (await app.adapters["whatsapp"].health())["ok"] is True


async def test_bridge_session_files_fold_a_lid_dm_into_the_phone_session(bridge, gateway, tmp_path):
    session = tmp_path / "baileys_auth"
    session.mkdir()
    (session / "lid-mapping-15551234567.json").write_text('"98765432109876"')
    (session / "lid-mapping-98765432109876_reverse.json").write_text('"15551234567"')
    app = await gateway({"whatsapp": bridge_table(bridge, session_dir=str(session))})
    bridge.push(upsert(CAROL_LID, "/status", "3EB0FILE0001"))  # no remoteJidAlt
    await bridge.wait_for(lambda: len(bridge.sent) == 1)
    assert bridge.sent[0]["chatId"] == CAROL_LID
    assert "Session key: agent:main:whatsapp:dm:15551234567" in bridge.sent[0]["message"]
    assert [(a["alias_id"], a["canonical_id"], a["source"]) for a in await app.store.identity_aliases("whatsapp")] == [
        ("98765432109876", "15551234567", "lid-mapping file")]


async def test_bridge_chat_shows_typing_while_the_turn_runs(bridge, gateway):
    agent = HeldEcho()
    await gateway({"whatsapp": bridge_table(bridge)}, agent=agent)
    bridge.push(load("w1_dm_pn"), load("w3_whatsmeow_group"))
    await bridge.wait_for(lambda: {t["chatId"] for t in bridge.typing} == {CAROL_PN, GROUP})
    assert bridge.sent == []
    agent.release.set()
    await bridge.wait_for(lambda: len(bridge.sent) == 2)


async def test_with_redaction_no_phone_number_reaches_the_model_input(bridge, gateway):
    # docs/behaviour.md §7: a shared group session prefixes "[sender]"; with redaction on, a
    # missing name falls back to the pseudonym and a name that is a phone number is replaced.
    agent = RecordingEcho()
    await gateway({"whatsapp": bridge_table(bridge)}, agent=agent, group_sessions_per_user=False,
                  redaction={"enabled": True})
    bridge.push(upsert(GROUP, "hi all", "3EB0PII1", participant="15557654321:3@s.whatsapp.net", name=None))
    await bridge.wait_for(lambda: len(bridge.sent) == 1)
    bridge.push(upsert(GROUP, "me too", "3EB0PII2", participant="15551234567@s.whatsapp.net", name="+1 555 123 4567"))
    await bridge.wait_for(lambda: len(bridge.sent) == 2)
    seen = "\n".join(system + "\n" + message for system, message in agent.inputs)
    assert "hi all" in seen and "me too" in seen
    for secret in ("15557654321", "15551234567", "555 123 4567", "@s.whatsapp.net", "120363025555555555"):
        assert secret not in seen


@pytest.mark.parametrize("edits_as_turns", [False, True])
async def test_bridge_edit_of_a_queued_message_replaces_its_text_in_place(bridge, gateway, caplog, edits_as_turns):
    # docs/behaviour.md §5 "Edits and deletions": an edit of a message still queued replaces its
    # queued text in place. A Baileys edit used to be dropped (edits_as_turns off: the stale text
    # was answered) or to become a turn of its own (on: both texts were answered).
    caplog.set_level(logging.INFO, logger="hermes_core.pipeline.runner")
    agent = HeldEchoAgent()
    app = await gateway({"whatsapp": bridge_table(bridge, edits_as_turns=edits_as_turns)}, agent=agent,
                        core={"busy_input_mode": "queue"})
    bridge.push(upsert(CAROL_PN, "first", "3EB0Q1"))
    await wait_until(lambda: agent.started == ["first"])
    bridge.push(upsert(CAROL_PN, "queued original", "3EB0Q2"))
    await wait_until(lambda: app.runner.queue_depth("agent:main:whatsapp:dm:15551234567") == 1)
    seqs = bridge.push(edit_of(CAROL_PN, "3EB0Q2", "queued edited", "3EB0Q2EDIT"))
    await wait_until(lambda: "queued message 3EB0Q2 in agent:main:whatsapp:dm:15551234567 edited" in caplog.text)
    agent.release.set()
    await bridge.wait_for(lambda: len(bridge.sent) == 2)
    await app.runner.join()
    await bridge.wait_for(lambda: bridge.acked >= seqs[-1])
    assert [b["message"] for b in bridge.sent] == ["echo: first", "echo: queued edited"]
    assert agent.started == ["first", "queued edited"]
    assert bridge.sent[1]["replyTo"] == "3EB0Q2"


async def test_bridge_edit_naming_another_members_message_leaves_it_as_queued(bridge, gateway, caplog):
    # docs/behaviour.md §5, docs/adapters.md W-T11: only a message's author can edit it, so an
    # edit from Eve whose `protocolMessage.key.participant` names Dave's queued message is not
    # taken for his (only a group admin's revoke is tried under the author named there).
    caplog.set_level(logging.INFO, logger="hermes_core.pipeline.runner")
    agent = HeldEchoAgent()
    app = await gateway({"whatsapp": bridge_table(bridge)}, agent=agent, core={"busy_input_mode": "queue"})
    dave, eve = "15557654321:3@s.whatsapp.net", "15550000099@s.whatsapp.net"
    key = "agent:main:whatsapp:group:120363025555555555:15557654321"
    bridge.push(upsert(GROUP, "first", "3EB0G1", participant=dave, name="Dave"))
    await wait_until(lambda: agent.started == ["first"])
    bridge.push(upsert(GROUP, "dave's own words", "3EB0G2", participant=dave, name="Dave"))
    await wait_until(lambda: app.runner.queue_depth(key) == 1)
    spoof = edit_of(GROUP, "3EB0G2", "words put in Dave's mouth", "3EB0EVE1", participant=eve)
    spoof["messages"][0]["message"]["editedMessage"]["message"]["protocolMessage"]["key"]["participant"] = dave
    seqs = bridge.push(spoof)
    await bridge.wait_for(lambda: bridge.acked >= seqs[-1])
    agent.release.set()
    await app.runner.join()
    assert "queued message 3EB0G2" not in caplog.text
    assert agent.started == ["first", "dave's own words"]


async def test_bridge_revoke_of_a_queued_group_message_withdraws_it(bridge, gateway, caplog):
    # docs/behaviour.md §5: a deletion withdraws a message still queued (a REVOKE used to be
    # dropped as a protocol message, and the deleted text was answered). In a group the session
    # is the sender's (group_sessions_per_user), so the revoke is routed by its sender too.
    caplog.set_level(logging.INFO, logger="hermes_core.pipeline.runner")
    agent = HeldEchoAgent()
    app = await gateway({"whatsapp": bridge_table(bridge)}, agent=agent, core={"busy_input_mode": "queue"})
    dave = "15557654321:3@s.whatsapp.net"
    key = "agent:main:whatsapp:group:120363025555555555:15557654321"
    bridge.push(upsert(GROUP, "first", "3EB0G1", participant=dave, name="Dave"))
    await wait_until(lambda: agent.started == ["first"])
    bridge.push(upsert(GROUP, "oops, wrong chat", "3EB0G2", participant=dave, name="Dave"),
                upsert(GROUP, "second", "3EB0G3", participant=dave, name="Dave"))
    await wait_until(lambda: app.runner.queue_depth(key) == 2)
    seqs = bridge.push(revoke_of(GROUP, "3EB0G2", "3EB0G2DEL", participant=dave))
    await wait_until(lambda: f"queued message 3EB0G2 in {key} withdrawn" in caplog.text)
    assert app.runner.queue_depth(key) == 1
    agent.release.set()
    await bridge.wait_for(lambda: len(bridge.sent) == 2)
    await app.runner.join()
    await bridge.wait_for(lambda: bridge.acked >= seqs[-1])
    assert [b["message"] for b in bridge.sent] == ["echo: first", "echo: second"]
    assert agent.started == ["first", "second"]


@pytest.mark.parametrize("change", ["edit", "revoke"])
async def test_bridge_change_of_a_queued_dm_under_its_other_jid_form_finds_it(bridge, gateway, caplog, change):
    # docs/adapters.md W-T11: the queue matches the chat id through the key's canonicalisation.
    # W1 (PN, with its LID in remoteJidAlt) and W2 (LID) are one session; an edit or a
    # revoke addressed by the LID form of a message queued under the PN form used to find
    # nothing, and the stale (or deleted) text was answered.
    caplog.set_level(logging.INFO, logger="hermes_core.pipeline.runner")
    agent = HeldEchoAgent()
    app = await gateway({"whatsapp": bridge_table(bridge)}, agent=agent, core={"busy_input_mode": "queue"})
    key = "agent:main:whatsapp:dm:15551234567"
    bridge.push(load("w1_dm_pn"))
    await wait_until(lambda: agent.started == ["hello"])
    bridge.push(upsert(CAROL_PN, "queued original", "3EB0Q2", alt=CAROL_LID),
                upsert(CAROL_PN, "second", "3EB0Q3", alt=CAROL_LID))
    await wait_until(lambda: app.runner.queue_depth(key) == 2)
    if change == "edit":
        seqs = bridge.push(edit_of(CAROL_LID, "3EB0Q2", "queued edited", "3EB0Q2EDIT"))
        done, answered = f"queued message 3EB0Q2 in {key} edited", ["hello", "queued edited", "second"]
    else:
        seqs = bridge.push(revoke_of(CAROL_LID, "3EB0Q2", "3EB0Q2DEL"))
        done, answered = f"queued message 3EB0Q2 in {key} withdrawn", ["hello", "second"]
    await wait_until(lambda: done in caplog.text)
    agent.release.set()
    await bridge.wait_for(lambda: len(bridge.sent) == len(answered))
    await app.runner.join()
    await bridge.wait_for(lambda: bridge.acked >= seqs[-1])
    assert agent.started == answered
    assert [b["message"] for b in bridge.sent] == ["echo: " + text for text in answered]


@pytest.mark.parametrize("change", ["edit", "revoke"])
async def test_bridge_change_that_first_reveals_the_lid_phone_pair_still_finds_the_queued_message(
        bridge, gateway, caplog, change):
    # docs/adapters.md §4.2, W-T1, W-T11: an edit or a revoke records its own remoteJidAlt pair
    # before it is offered to the queue, as a message does before its key is built. Carol's
    # messages came under her phone JID with no alt; the change comes under her LID with the phone
    # JID in remoteJidAlt, the first event to tell the pair. It used to miss the queued message
    # (the LID was no alias yet), and the stale (or deleted) text was answered.
    caplog.set_level(logging.INFO, logger="hermes_core.pipeline.runner")
    agent = HeldEchoAgent()
    app = await gateway({"whatsapp": bridge_table(bridge)}, agent=agent, core={"busy_input_mode": "queue"})
    key = "agent:main:whatsapp:dm:15551234567"
    bridge.push(upsert(CAROL_PN, "first", "3EB0Q1"))
    await wait_until(lambda: agent.started == ["first"])
    bridge.push(upsert(CAROL_PN, "queued original", "3EB0Q2"), upsert(CAROL_PN, "second", "3EB0Q3"))
    await wait_until(lambda: app.runner.queue_depth(key) == 2)
    assert await app.store.identity_aliases("whatsapp") == []
    if change == "edit":
        seqs = bridge.push(edit_of(CAROL_LID, "3EB0Q2", "queued edited", "3EB0Q2EDIT", alt=CAROL_PN))
        done, answered = f"queued message 3EB0Q2 in {key} edited", ["first", "queued edited", "second"]
    else:
        seqs = bridge.push(revoke_of(CAROL_LID, "3EB0Q2", "3EB0Q2DEL", alt=CAROL_PN))
        done, answered = f"queued message 3EB0Q2 in {key} withdrawn", ["first", "second"]
    await bridge.wait_for(lambda: bridge.acked >= seqs[-1])
    assert done in caplog.text
    assert [(a["alias_id"], a["canonical_id"], a["source"]) for a in await app.store.identity_aliases("whatsapp")] \
        == [("98765432109876", "15551234567", "remoteJidAlt")]
    agent.release.set()
    await bridge.wait_for(lambda: len(bridge.sent) == len(answered))
    await app.runner.join()
    assert agent.started == answered
    assert [b["message"] for b in bridge.sent] == ["echo: " + text for text in answered]
    assert {b["chatId"] for b in bridge.sent} == {CAROL_PN}


async def test_bridge_edit_of_an_answered_message_is_no_turn_with_edits_as_turns_off(bridge, gateway, caplog):
    # docs/behaviour.md §5: an edit of a message already processed is not a new turn unless
    # edits_as_turns; it is still offered to the queue first (and the queue says it is not there).
    caplog.set_level(logging.INFO, logger="hermes_whatsapp")
    app = await gateway({"whatsapp": bridge_table(bridge)})
    bridge.push(upsert(CAROL_PN, "what's the time?", "3EB0A1"))
    await bridge.wait_for(lambda: len(bridge.sent) == 1)
    await app.runner.join()
    seqs = bridge.push(edit_of(CAROL_PN, "3EB0A1", "what's the date?", "3EB0A1EDIT"),
                       revoke_of(CAROL_PN, "3EB0A1", "3EB0A1DEL"))
    await bridge.wait_for(lambda: bridge.acked >= seqs[-1])
    await app.runner.join()
    logged = [r.getMessage() for r in caplog.records if r.name.startswith("hermes_whatsapp")]
    assert ("whatsapp edit of message 3EB0A1 skipped: it is not queued and edits_as_turns is off"
            in logged)
    assert [b["message"] for b in bridge.sent] == ["echo: what's the time?"]
    [entry] = await app.store.list_sessions()
    assert [m["content"] for m in await app.store.load_transcript(entry.session_id)] == [
        "what's the time?", "echo: what's the time?"]


async def test_bridge_malformed_revoke_is_one_clear_warning_and_the_gateway_keeps_serving(bridge, gateway, caplog):
    # A revoke that does not name its original cannot withdraw anything: one warning naming the
    # field (never the text or the number), the event is acknowledged, the queued message stays.
    agent = HeldEchoAgent()
    app = await gateway({"whatsapp": bridge_table(bridge)}, agent=agent, core={"busy_input_mode": "queue"})
    bridge.push(upsert(CAROL_PN, "first", "3EB0M1"))
    await wait_until(lambda: agent.started == ["first"])
    bridge.push(upsert(CAROL_PN, "keep me", "3EB0M2"))
    await wait_until(lambda: app.runner.queue_depth("agent:main:whatsapp:dm:15551234567") == 1)
    broken = revoke_of(CAROL_PN, "3EB0M2", "3EB0M2DEL")
    del broken["messages"][0]["message"]["protocolMessage"]["key"]["id"]
    seqs = bridge.push(broken)
    await bridge.wait_for(lambda: bridge.acked >= seqs[-1])
    agent.release.set()
    await bridge.wait_for(lambda: len(bridge.sent) == 2)
    assert [b["message"] for b in bridge.sent] == ["echo: first", "echo: keep me"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("hermes")]
    assert warnings == ["skipping malformed whatsapp bridge message: malformed payload: "
                        "event.messages[0].message.protocolMessage.key.id is missing"]


# ---- Cloud API ----------------------------------------------------------------------------------

async def test_cloud_dm_group_and_username_user_are_answered_in_place(graph, gateway):
    app = await gateway({"whatsapp_cloud": cloud_table(graph)})
    url = webhook_url(app)
    for name in ("w5_cloud_dm", "w6_cloud_group", "w7_cloud_username"):
        assert (await post_webhook(url, load(name))).status_code == 200
    await graph.wait_for(lambda: len(graph.sent) == 3)
    by_text = {b["text"]["body"]: b for b in graph.sent}
    assert by_text["echo: Do you ship to Canada?"] == {
        "messaging_product": "whatsapp", "recipient_type": "individual", "recipient": BSUID, "type": "text",
        "text": {"body": "echo: Do you ship to Canada?", "preview_url": False},
        "context": {"message_id": "wamid.HBgLMTY1MDU1NTEyMzQVAgASGBQzQTRBNjU5OUFFRTAzODEwMTQ0RgA="}}
    group = by_text["echo: what time is the call?"]
    assert (group["recipient_type"], group["to"], group["context"]) == (
        "group", CLOUD_GROUP, {"message_id": "wamid.GRP0000000000000001"})
    username = by_text["echo: oi, tudo bem?"]
    assert (username["recipient_type"], username["recipient"], "to" in username) == (
        "individual", "BR.1502576394655843", False)
    assert sorted(e.session_key for e in await app.store.list_sessions()) == [
        "agent:main:whatsapp_cloud:dm:BR.1502576394655843",
        "agent:main:whatsapp_cloud:dm:US.13491208655302741918",
        "agent:main:whatsapp_cloud:group:" + CLOUD_GROUP + ":US.13491208655302741918"]


async def test_cloud_handshake_and_bad_signature_store_nothing(graph, gateway, tmp_path):
    app = await gateway({"whatsapp_cloud": cloud_table(graph)})
    url = webhook_url(app)
    import httpx
    async with httpx.AsyncClient() as client:
        ok = await client.get(url, params={"hub.mode": "subscribe", "hub.verify_token": "test-verify-token",
                                           "hub.challenge": "1158201444"})
        wrong = await client.get(url, params={"hub.mode": "subscribe", "hub.verify_token": "guess",
                                              "hub.challenge": "1158201444"})
    assert (ok.status_code, ok.text, wrong.status_code) == (200, "1158201444", 403)
    assert (await post_webhook(url, load("w5_cloud_dm"), secret="not-the-app-secret")).status_code == 401
    assert (await post_webhook(url, load("w5_cloud_dm"), secret=None)).status_code == 401
    raw = json.dumps(load("w5_cloud_dm")).encode()
    reserialised = json.dumps(load("w5_cloud_dm"), indent=1).encode()  # W-T8: the HMAC is over the raw bytes
    assert (await post_webhook(url, None, raw=reserialised, signature=(
        "sha256=" + __import__("hmac").new(b"test-app-secret", raw, "sha256").hexdigest()))).status_code == 401
    await asyncio.sleep(0.2)
    assert graph.sent == [] and await app.store.list_sessions() == []
    assert table_count(tmp_path / "home", "inbound") == 0


async def test_cloud_redelivery_of_an_accepted_message_is_answered_once(graph, gateway):
    app = await gateway({"whatsapp_cloud": cloud_table(graph)})
    url = webhook_url(app)
    assert (await post_webhook(url, load("w5_cloud_dm"))).status_code == 200
    await graph.wait_for(lambda: len(graph.sent) == 1)
    assert (await post_webhook(url, load("w5_cloud_dm"))).status_code == 200
    await asyncio.sleep(0.3)
    assert len(graph.sent) == 1


async def test_cloud_24_hour_window_error_is_one_clear_failed_delivery(graph, gateway, tmp_path):
    app = await gateway({"whatsapp_cloud": cloud_table(graph)})
    graph.fail(131047, title="Re-engagement message", when=lambda b: b.get("recipient") == BSUID)
    url = webhook_url(app)
    await post_webhook(url, load("w5_cloud_dm"))
    await post_webhook(url, load("w7_cloud_username"))
    rows = await settled(tmp_path / "home", 2)
    states = {key: (state, error) for key, state, error, _ in rows}
    state, error = states["agent:main:whatsapp_cloud:dm:US.13491208655302741918"]
    assert state == "failed"
    assert error.endswith("WhatsApp error 131047: the 24-hour customer-service window is closed (the user last "
                          "wrote more than 24 hours ago); only a template message can reach them now")
    assert states["agent:main:whatsapp_cloud:dm:BR.1502576394655843"] == ("delivered", None)
    await asyncio.sleep(0.3)
    assert [c.status for c in graph.calls if c.body.get("recipient") == BSUID] == [400]  # no retry loop


async def test_cloud_status_callbacks_update_the_ledger_and_create_no_turn(graph, gateway, tmp_path):
    app = await gateway({"whatsapp_cloud": cloud_table(graph)})
    url = webhook_url(app)
    await post_webhook(url, load("w5_cloud_dm"))
    await post_webhook(url, load("w7_cloud_username"))
    rows = await settled(tmp_path / "home", 2)
    assert [json.loads(sent) for _, _, _, sent in rows] == [[w] for w in graph.wamids]
    w5_reply, w7_reply = (graph.wamids[[b.get("recipient") for b in graph.sent].index(r)]
                          for r in (BSUID, "BR.1502576394655843"))
    answer = await post_webhook(url, statuses(
        {"id": w5_reply, "status": "sent", "timestamp": "1767225700", "recipient_id": "16505551234"},
        {"id": w5_reply, "status": "failed", "timestamp": "1767225701", "recipient_id": "16505551234",
         "errors": [{"code": 131026, "title": "Message undeliverable"}]},
        {"id": w7_reply, "status": "delivered", "timestamp": "1767225702", "recipient_user_id": "BR.1502576394655843"},
        {"id": w7_reply, "status": "read", "timestamp": "1767225703", "recipient_user_id": "BR.1502576394655843"}))
    assert answer.status_code == 200
    states = {key: (state, error) for key, state, error, _ in ledger(tmp_path / "home")}
    assert states == {
        "agent:main:whatsapp_cloud:dm:US.13491208655302741918": ("failed", "WhatsApp error 131026: Message undeliverable"),
        "agent:main:whatsapp_cloud:dm:BR.1502576394655843": ("delivered", None)}
    await asyncio.sleep(0.2)
    assert len(graph.sent) == 2 and len(await app.store.list_sessions()) == 2


async def test_cloud_rate_limit_is_waited_out_and_the_reply_arrives_once(graph, gateway):
    app = await gateway({"whatsapp_cloud": cloud_table(graph)})
    graph.fail(130429, status=429, title="Rate limit hit", retry_after=1)
    await post_webhook(webhook_url(app), load("w5_cloud_dm"))
    await graph.wait_for(lambda: len(graph.sent) == 1)
    assert [c.status for c in graph.calls] == [429, 200]
    assert graph.calls[1].at - graph.calls[0].at >= 1.0
    assert [b["text"]["body"] for b in graph.sent] == ["echo: Do you ship to Canada?"]


async def test_cloud_long_reply_is_chunked_within_4096_in_order(graph, gateway):
    app = await gateway({"whatsapp_cloud": cloud_table(graph)})
    body = "\n".join(f"linha {i:04d} — ação 😀" for i in range(700))
    await post_webhook(webhook_url(app), cloud_dm(body, "wamid.LONG0001"))
    await graph.wait_for(lambda: graph.sent and "linha 0699" in graph.sent[-1]["text"]["body"], timeout=20)
    texts = [b["text"]["body"] for b in graph.sent]
    assert len(texts) > 1 and all(len(t) <= 4096 for t in texts)
    assert "\n".join(texts).removeprefix("echo: ") == body
    assert graph.sent[0]["context"] == {"message_id": "wamid.LONG0001"}
    assert all("context" not in b for b in graph.sent[1:])


async def test_cloud_refused_message_is_redelivered_by_meta_and_answered_once(graph, gateway, tmp_path):
    app = await gateway({"whatsapp_cloud": cloud_table(graph)})
    original = app.adapters["whatsapp_cloud"]._on_message
    calls = {"n": 0}

    async def flaky(event):
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError("disk full (test)")
        await original(event)

    app.adapters["whatsapp_cloud"]._on_message = flaky
    poster = MetaPoster(webhook_url(app))
    assert await poster.deliver(load("w5_cloud_dm")) == 200
    assert poster.answers == [500, 200]
    await graph.wait_for(lambda: len(graph.sent) == 1)


async def test_cloud_malformed_webhooks_are_skipped_and_the_gateway_keeps_serving(graph, gateway, caplog):
    app = await gateway({"whatsapp_cloud": cloud_table(graph)})
    url = webhook_url(app)
    bad = cloud_dm("x", "wamid.BAD1")
    bad["entry"][0]["changes"][0]["value"]["messages"][0]["from"] = 10 ** 40
    assert (await post_webhook(url, bad)).status_code == 200
    assert (await post_webhook(url, None, raw=b'{"object": "whatsapp_business_account", "entry": [1' + b"9" * 5000
                               + b"]}")).status_code == 200
    lone = cloud_dm("hi", "wamid.LONE1", name="Sh\ud800eena")
    assert (await post_webhook(url, None, raw=json.dumps(lone).encode())).status_code == 200
    await graph.wait_for(lambda: len(graph.sent) == 1)
    assert graph.sent[0]["text"]["body"] == "echo: hi"
    logged = [r.getMessage() for r in caplog.records]
    assert ("skipping malformed whatsapp_cloud message: malformed payload: "
            "body.entry[0].changes[0].value.messages[0].from must be a string, got int") in logged
    assert "whatsapp_cloud webhook body skipped: not valid JSON (ValueError)" in logged  # 5000-digit integer


async def test_cloud_chat_shows_typing_while_the_turn_runs(graph, gateway):
    agent = HeldEcho()
    app = await gateway({"whatsapp_cloud": cloud_table(graph)}, agent=agent)
    await post_webhook(webhook_url(app), load("w5_cloud_dm"))
    await graph.wait_for(lambda: len(graph.typing) >= 1)
    assert graph.typing[0] == {"messaging_product": "whatsapp", "status": "read",
                               "message_id": "wamid.HBgLMTY1MDU1NTEyMzQVAgASGBQzQTRBNjU5OUFFRTAzODEwMTQ0RgA=",
                               "typing_indicator": {"type": "text"}}
    assert graph.sent == []
    agent.release.set()
    await graph.wait_for(lambda: len(graph.sent) == 1)


async def test_bridge_malformed_events_are_skipped_and_the_gateway_keeps_serving(bridge, gateway, caplog):
    await gateway({"whatsapp": bridge_table(bridge)})
    seqs = bridge.push("not an object",
                       {"type": "message", "Info": {"Chat": 15551234567, "Sender": "x", "ID": "y"}},
                       {"type": "lid-mapping.update", "lid": "\ud800@lid", "pn": "15551234567@s.whatsapp.net"},
                       load("w1_dm_pn"))
    await bridge.wait_for(lambda: len(bridge.sent) == 1)
    assert bridge.sent[0]["message"] == "echo: hello"
    await bridge.wait_for(lambda: bridge.acked >= seqs[-1])
    logged = [r.getMessage() for r in caplog.records]
    assert "skipping malformed whatsapp bridge event: malformed payload: event must be an object, got str" in logged
    assert ("skipping malformed whatsapp bridge event: malformed payload: event.Info.Chat must be a string, got int"
            in logged)
    assert ("skipping malformed whatsapp bridge event: malformed payload: event.lid is not valid Unicode "
            "(lone surrogate)") in logged


async def test_cloud_edit_and_revoke_of_queued_messages_change_the_queue(graph, gateway, caplog):
    # docs/behaviour.md §5: an `edit` webhook replaces a queued message's text in place, a
    # `revoke` withdraws one; neither is a turn. Both used to be dropped (no text of their own),
    # and the stale and the deleted texts were answered.
    caplog.set_level(logging.INFO, logger="hermes_core.pipeline.runner")
    agent = HeldEchoAgent()
    app = await gateway({"whatsapp_cloud": cloud_table(graph)}, agent=agent, core={"busy_input_mode": "queue"})
    url = webhook_url(app)
    key = "agent:main:whatsapp_cloud:dm:" + BSUID
    assert (await post_webhook(url, cloud_dm("first", "wamid.C1"))).status_code == 200
    await wait_until(lambda: agent.started == ["first"])
    for text, wamid in (("queued one", "wamid.C2"), ("queued two", "wamid.C3")):
        assert (await post_webhook(url, cloud_dm(text, wamid))).status_code == 200
    await wait_until(lambda: app.runner.queue_depth(key) == 2)
    assert (await post_webhook(url, cloud_change("edit", "wamid.C2", "wamid.C2E", "queued one, edited"))).status_code == 200
    assert (await post_webhook(url, cloud_change("revoke", "wamid.C3", "wamid.C3R"))).status_code == 200
    assert f"queued message wamid.C2 in {key} edited" in caplog.text
    assert f"queued message wamid.C3 in {key} withdrawn" in caplog.text
    agent.release.set()
    await graph.wait_for(lambda: len(graph.sent) == 2)
    await app.runner.join()
    assert [b["text"]["body"] for b in graph.sent] == ["echo: first", "echo: queued one, edited"]
    assert agent.started == ["first", "queued one, edited"]


async def test_cloud_oversized_body_and_wrong_handshake_mode_are_refused(graph, gateway):
    import httpx
    app = await gateway({"whatsapp_cloud": cloud_table(graph, max_body_bytes=2048)})
    url = webhook_url(app)
    big = cloud_dm("x" * 4000, "wamid.BIG1")
    assert (await post_webhook(url, big)).status_code == 413
    async with httpx.AsyncClient() as client:
        answer = await client.get(url, params={"hub.mode": "unsubscribe", "hub.verify_token": "test-verify-token",
                                               "hub.challenge": "1"})
    assert answer.status_code == 403
    assert graph.sent == [] and await app.store.list_sessions() == []


async def test_access_control_uses_the_canonical_ids_the_plugin_supplies(bridge, graph, gateway, tmp_path):
    # docs/behaviour.md §9: the core decides; the plugin gives raw ids plus their aliases, so the
    # phone number allows Carol's LID DM (W2) and the BSUID allows Sheena's phone; strangers
    # leave no row behind.
    app = await gateway({
        "whatsapp": {**bridge_table(bridge), "allow_all": False, "allowed_users": ["15551234567"]},
        "whatsapp_cloud": {**cloud_table(graph), "allow_all": False, "allowed_users": [BSUID],
                           "refusal_notice": ""}})
    bridge.push(load("w2_dm_lid"), upsert("15557654321@s.whatsapp.net", "let me in", "3EB0STRANGER", name="Dave"))
    url = webhook_url(app)
    assert (await post_webhook(url, load("w5_cloud_dm"))).status_code == 200
    assert (await post_webhook(url, load("w7_cloud_username"))).status_code == 200
    await bridge.wait_for(lambda: len(bridge.sent) == 2)
    await graph.wait_for(lambda: len(graph.sent) == 1)
    await asyncio.sleep(0.5)
    assert sorted((b["chatId"], b["message"]) for b in bridge.sent) == [
        ("15557654321@s.whatsapp.net", "This assistant is private."), (CAROL_LID, "echo: are you there?")]
    assert [b["text"]["body"] for b in graph.sent] == ["echo: Do you ship to Canada?"]
    assert sorted(e.session_key for e in await app.store.list_sessions()) == [
        "agent:main:whatsapp:dm:15551234567", "agent:main:whatsapp_cloud:dm:US.13491208655302741918"]
