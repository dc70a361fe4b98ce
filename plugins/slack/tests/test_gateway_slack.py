"""End to end: fake Slack → real slack-bolt / slack-sdk clients → SlackAdapter → GatewayApp (real
plugin loading through the installed entry points, real SQLite store, echo agent) → reply back
at the fake's `chat.postMessage`.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from fake_slack import adapter_settings, post_event

from hermes_core import GatewayConfig
from hermes_core.agents.echo import EchoAgent
from hermes_core.app import GatewayApp
from hermes_core.testing import HeldEchoAgent

FIXTURES = Path(__file__).parent / "fixtures"
GENERAL_ROOT = "1767225700.000200"  # Alice's top-level mention that sample S2's thread hangs under
DM_KEY = "agent:main:slack:dm:D0DMALICE1"
THREAD_KEY = f"agent:main:slack:channel:C0GENERAL1:{GENERAL_ROOT}"
# The fields of a message event Slack repeats in an edit's `message` and a deletion's `previous_message`.
MESSAGE_FIELDS = ("type", "user", "text", "ts", "thread_ts", "parent_user_id", "team", "client_msg_id")


def load(name: str, event_id: str | None = None, **event_changes) -> dict:
    payload = json.loads((FIXTURES / f"{name}.json").read_text())
    payload["event"].update(event_changes)
    if event_id:
        payload["event_id"] = event_id
    return payload


def dm(ts: str, text: str) -> dict:
    """A new top-level DM from Alice (sample S1's shape)."""
    return load("s1_message_im", event_id=f"Ev{ts.replace('.', '')}", ts=ts, event_ts=ts, text=text)


def starter() -> dict:
    """Alice's top-level mention in #general, which S2's thread replies to."""
    payload = load("s2_thread_reply", event_id="Ev0100000002", user="U0ALICE01", ts=GENERAL_ROOT,
                   event_ts=GENERAL_ROOT, text="<@U0BOT0001> why is CI red?")
    del payload["event"]["thread_ts"], payload["event"]["parent_user_id"]
    return payload


def changed(original: dict, text: str, at: str) -> dict:
    """Slack's `message_changed` event (sample S7's shape) of the message `original` (an envelope
    pushed before): its text became `text` at `at`."""
    old = original["event"]
    message = {key: old[key] for key in MESSAGE_FIELDS if key in old}
    payload = load("s7_message_changed", event_id=f"Ev{at.replace('.', '')}", channel=old["channel"],
                   channel_type=old["channel_type"], ts=at, event_ts=at,
                   message=dict(message, text=text, edited={"user": old["user"], "ts": at}),
                   previous_message=message)
    return payload


def deleted(original: dict, at: str) -> dict:
    """Slack's `message_deleted` event of the message `original` (an envelope pushed before)."""
    old = original["event"]
    payload = load("s7_message_changed", event_id=f"Ev{at.replace('.', '')}")
    payload["event"] = {"type": "message", "subtype": "message_deleted", "channel": old["channel"],
                        "channel_type": old["channel_type"], "hidden": True, "ts": at, "event_ts": at,
                        "deleted_ts": old["ts"],
                        "previous_message": {key: old[key] for key in MESSAGE_FIELDS if key in old}}
    return payload


def slack_log(caplog) -> list[str]:
    """What the Slack plugin's own code logged (not slack-sdk / slack-bolt, whose loggers it names
    `hermes_slack.web`, `.bolt` and `.socket_mode`)."""
    libraries = ("hermes_slack.web", "hermes_slack.bolt", "hermes_slack.socket_mode")
    return [r.getMessage() for r in caplog.records
            if r.name.startswith("hermes_slack.") and not r.name.startswith(libraries)]


async def settle(app: GatewayApp) -> None:
    """Wait until the app has finished every turn, so the next message is not a busy-input
    follow-up of the previous one (docs/behaviour.md §5)."""
    await app.runner.join()


@pytest.fixture
async def gateway(tmp_path, slack):
    """`await gateway(agent=None, core=None, **slack_settings)` starts a GatewayApp on HERMES_HOME =
    tmp_path/home with the Slack platform enabled against the fake (and `[core]` settings `core`);
    all apps are stopped at teardown."""
    apps = []

    async def start(agent=None, core=None, **overrides):
        table = dict(adapter_settings(slack, **overrides), enabled=True, allow_all=True)
        app = GatewayApp(GatewayConfig(home=tmp_path / "home", core=core or {}, platforms={"slack": table}),
                         watcher=False, agent=agent)
        await app.start()
        apps.append(app)
        return app

    yield start
    for app in apps:
        await app.stop()


async def test_dm_gets_an_inline_echo_reply(slack, gateway):
    app = await gateway()
    assert type(app.adapters["slack"]).__name__ == "SlackAdapter"  # via the entry point
    await slack.push(load("s1_message_im"))
    await slack.wait_for(lambda: len(slack.posted) == 1)
    (reply,) = slack.posted
    assert (reply["channel"], reply["text"]) == ("D0DMALICE1", "echo: hi, can you draft the release notes?")
    assert "thread_ts" not in reply


async def test_channel_mention_is_answered_in_a_new_thread_that_keeps_one_session(slack, gateway):
    app = await gateway()
    await slack.push(starter())
    await slack.wait_for(lambda: len(slack.posted) == 1)
    await settle(app)
    # S2: Bob answers inside the thread without mentioning the bot; then asks for the status.
    await slack.push(load("s2_thread_reply"))
    await slack.wait_for(lambda: len(slack.posted) == 2)
    await settle(app)
    await slack.push(load("s2_thread_reply", event_id="Ev0100000010", ts="1767225770.000310",
                          event_ts="1767225770.000310", text="!status"))
    await slack.wait_for(lambda: len(slack.posted) == 3)
    first, second, status = slack.posted
    # The thread is a shared session: the core prefixes each sender's name (seed §5).
    assert (first["channel"], first["thread_ts"], first["text"]) == \
        ("C0GENERAL1", GENERAL_ROOT, "echo: [Alice] why is CI red?")
    assert (second["channel"], second["thread_ts"], second["text"]) == \
        ("C0GENERAL1", GENERAL_ROOT, "echo: [Bob] it's the flaky e2e job again")
    assert status["thread_ts"] == GENERAL_ROOT
    assert f"Session key: agent:main:slack:channel:C0GENERAL1:{GENERAL_ROOT}" in status["text"]


async def test_app_mention_and_message_of_one_message_get_one_reply(slack, gateway):
    await gateway()
    as_message = load("s3_app_mention_private", event_id="Ev0100000099", type="message", channel_type="group")
    ids = await slack.push(load("s3_app_mention_private"), as_message)
    await slack.wait_for(lambda: len(slack.posted) == 1 and set(ids) <= set(slack.acks))
    await slack.push(load("s5_mpim"))  # a later message is answered: the first reply was the only one
    await slack.wait_for(lambda: len(slack.posted) == 2)
    assert [(p["channel"], p.get("thread_ts"), p["text"]) for p in slack.posted] == [
        ("C0PRIVATE9", "1767225790.000350", "echo: [Bob] summarise this thread"),
        ("G0MPIM0001", None, "echo: book a room for the three of us"),
    ]


async def test_long_reply_is_chunked_within_4000_characters_in_order(slack, gateway):
    await gateway()
    body = "\n".join(f"line {i:04d} café 😀" for i in range(1500))
    await slack.push(dm("1767226500.000100", body))
    await slack.wait_for(lambda: "line 1499" in (slack.posted[-1]["text"] if slack.posted else ""), timeout=20)
    texts = [p["text"] for p in slack.posted]
    assert len(texts) >= 6
    assert all(len(t) <= 4000 for t in texts)
    joined = "\n".join(texts).removeprefix("echo: ")
    numbers = [int(line.split()[1]) for line in joined.splitlines() if line.startswith("line ")]
    assert numbers == list(range(1500))  # every line, once, in order
    assert {p["channel"] for p in slack.posted} == {"D0DMALICE1"}


async def test_429_is_waited_out_and_the_reply_arrives_once(slack, gateway):
    await gateway()
    slack.fail("chat.postMessage", "ratelimited", retry_after=1)
    await slack.push(load("s1_message_im"))
    await slack.wait_for(lambda: len(slack.posted) == 1)
    attempts = slack.calls_of("chat.postMessage")
    assert [a.status for a in attempts] == [429, 200]
    assert attempts[1].at - attempts[0].at >= 1.0
    assert [p["text"] for p in slack.posted] == ["echo: hi, can you draft the release notes?"]


async def test_reconnect_loses_nothing_and_redeliveries_get_no_second_reply(slack, gateway):
    app = await gateway()
    await slack.push(load("s1_message_im"))
    await slack.wait_for(lambda: len(slack.posted) == 1)
    await settle(app)
    # The network drops; while the app is away Alice writes again, and Slack sends the first
    # message once more (a retry whose ack it did not see).
    await slack.drop_connections()
    await slack.push(dm("1767226600.000100", "are you there?"), load("s1_message_im"))
    await slack.wait_for(lambda: len(slack.posted) == 2 and not slack.pending(), timeout=20)
    assert slack.connections == 2
    assert [p["text"] for p in slack.posted] == ["echo: hi, can you draft the release notes?",
                                                 "echo: are you there?"]


async def test_http_events_api_end_to_end_with_a_slack_retry(slack, gateway):
    app = await gateway(mode="http")
    host, port = app.adapters["slack"].http_address
    url = f"http://{host}:{port}/slack/events"
    assert (await post_event(url, load("s5_mpim")))[0] == 200
    assert (await post_event(url, load("s5_mpim"), retry_num=1))[0] == 200  # X-Slack-Retry-Num: 1
    assert (await post_event(url, load("s1_message_im"), secret="forged"))[0] == 401
    await slack.wait_for(lambda: len(slack.posted) == 1)
    await settle(app)
    await post_event(url, dm("1767226700.000100", "next"))
    await slack.wait_for(lambda: len(slack.posted) == 2)
    assert [(p["channel"], p["text"]) for p in slack.posted] == [
        ("G0MPIM0001", "echo: book a room for the three of us"), ("D0DMALICE1", "echo: next")]
    assert slack.connections == 0


async def test_redelivery_after_a_restart_gets_no_second_reply(slack, gateway):
    first = await gateway()
    await slack.push(load("s1_message_im"))
    await slack.wait_for(lambda: len(slack.posted) == 1)
    await first.stop()
    await slack.push(load("s1_message_im"), dm("1767226800.000100", "new idea"))
    await gateway()
    await slack.wait_for(lambda: len(slack.posted) == 2 and not slack.pending(), timeout=20)
    assert [p["text"] for p in slack.posted] == ["echo: hi, can you draft the release notes?", "echo: new idea"]


async def test_the_bots_threads_are_remembered_in_its_data_dir_across_restarts(slack, gateway, tmp_path):
    first = await gateway()
    assert first.adapters["slack"].data_dir == tmp_path / "home" / "slack"
    await slack.push(starter())
    await slack.wait_for(lambda: len(slack.posted) == 1)
    await first.stop()
    assert (tmp_path / "home" / "slack" / "slack_state.db").is_file()
    await gateway()
    await slack.push(load("s2_thread_reply"))  # no mention: answered because the bot is in the thread
    await slack.wait_for(lambda: len(slack.posted) == 2)
    assert (slack.posted[1]["thread_ts"], slack.posted[1]["text"]) == \
        (GENERAL_ROOT, "echo: [Bob] it's the flaky e2e job again")


async def test_the_thread_shows_the_working_status_while_the_turn_runs(slack, gateway):
    # Slack has no typing indicator for bots; in a thread the adapter sets the assistant status
    # (docs/adapters.md §3.3). A DM answered inline shows nothing.
    agent = HeldEchoAgent()
    await gateway(agent=agent)
    await slack.push(starter(), load("s1_message_im"))
    await slack.wait_for(lambda: len(slack.statuses) >= 1)
    assert slack.posted == []
    assert slack.statuses[0] == {"channel_id": "C0GENERAL1", "thread_ts": GENERAL_ROOT, "status": "is thinking…"}
    agent.release.set()
    await slack.wait_for(lambda: len(slack.posted) == 2)
    assert {(s["channel_id"], s["thread_ts"]) for s in slack.statuses} == {("C0GENERAL1", GENERAL_ROOT)}
    assert sorted((p["channel"], p.get("thread_ts")) for p in slack.posted) == [
        ("C0GENERAL1", GENERAL_ROOT), ("D0DMALICE1", None)]


async def test_only_allowed_users_are_answered_bots_ignored_and_a_channel_refusal_is_silent(slack, tmp_path):
    # docs/behaviour.md §9: Alice (U0ALICE01) is allowed; Bob's S3 mention in a channel is
    # refused without a notice (notices only in DMs); the S6 bot message, here mentioning the
    # bot, is ignored (no allow_bots).
    table = dict(adapter_settings(slack), enabled=True, allowed_users=["U0ALICE01"])
    app = GatewayApp(GatewayConfig(home=tmp_path / "home", platforms={"slack": table}), watcher=False)
    await app.start()
    try:
        await slack.push(load("s3_app_mention_private"))
        await slack.push(load("s6_bot_message", text="<@U0BOT0001> Build #812 failed"))
        await slack.push(load("s1_message_im"))
        refused = app.runner.deps.access.refused
        await slack.wait_for(lambda: len(slack.posted) == 1 and sum(refused.values()) == 2)
        await settle(app)
        assert [(p["channel"], p["text"]) for p in slack.posted] == [
            ("D0DMALICE1", "echo: hi, can you draft the release notes?")]
        assert app.runner.deps.access.refused == {("slack", "not_allowed"): 1, ("slack", "bot"): 1}
        assert [e.session_key for e in await app.store.list_sessions()] == ["agent:main:slack:dm:D0DMALICE1"]
    finally:
        await app.stop()


async def test_a_user_allowed_by_a_lower_case_member_id_is_answered(slack, tmp_path):
    # docs/behaviour.md §9: Slack sends Alice as "U0ALICE01"; "u0alice01" names her all the same.
    table = dict(adapter_settings(slack), enabled=True, allowed_users=["u0alice01"])
    app = GatewayApp(GatewayConfig(home=tmp_path / "home", platforms={"slack": table}), watcher=False)
    await app.start()
    try:
        await slack.push(load("s1_message_im"))
        await slack.wait_for(lambda: len(slack.posted) == 1)
        assert [(p["channel"], p["text"]) for p in slack.posted] == [
            ("D0DMALICE1", "echo: hi, can you draft the release notes?")]
        assert app.runner.deps.access.refused == {}
    finally:
        await app.stop()


@pytest.mark.parametrize("edits_as_turns", [False, True])
async def test_an_edit_of_a_queued_message_replaces_its_text_in_place(slack, gateway, edits_as_turns):
    # docs/behaviour.md §5 "Edits and deletions": an edit of a message still queued replaces its
    # queued text in place. A message_changed used to be dropped (edits_as_turns off: the stale
    # text was answered) or to become a second turn (on: both texts were answered).
    agent = HeldEchoAgent()
    app = await gateway(agent=agent, core={"busy_input_mode": "queue"}, edits_as_turns=edits_as_turns)
    await slack.push(dm("1767227000.000100", "first"))
    await slack.wait_for(lambda: agent.started == ["first"])
    queued = dm("1767227000.000200", "queued original")
    await slack.push(queued)
    await slack.wait_for(lambda: app.runner.queue_depth(DM_KEY) == 1)
    ids = await slack.push(changed(queued, "queued edited", "1767227000.000300"))
    await slack.wait_for(lambda: ids[0] in slack.acks)
    agent.release.set()
    await slack.wait_for(lambda: len(slack.posted) == 2)
    await settle(app)
    assert [p["text"] for p in slack.posted] == ["echo: first", "echo: queued edited"]
    assert agent.started == ["first", "queued edited"]


async def test_a_deletion_of_a_queued_thread_reply_withdraws_it(slack, gateway):
    # docs/behaviour.md §5: a deletion withdraws a message still queued. Bob's reply in the thread
    # of Alice's mention is keyed by the thread root (the session the reply was queued in); it
    # used to be answered after Bob had deleted it.
    agent = HeldEchoAgent()
    app = await gateway(agent=agent, core={"busy_input_mode": "queue"})
    await slack.push(starter())
    await slack.wait_for(lambda: len(agent.started) == 1)
    reply = load("s2_thread_reply")
    await slack.push(reply)
    await slack.wait_for(lambda: app.runner.queue_depth(THREAD_KEY) == 1)
    ids = await slack.push(deleted(reply, "1767225765.000000"))
    await slack.wait_for(lambda: ids[0] in slack.acks)
    assert app.runner.queue_depth(THREAD_KEY) == 0
    agent.release.set()
    await slack.wait_for(lambda: len(slack.posted) == 1)
    await settle(app)
    assert [(p["thread_ts"], p["text"]) for p in slack.posted] == [(GENERAL_ROOT, "echo: [Alice] why is CI red?")]
    assert not any("flaky" in message for message in agent.started)


async def test_a_thread_parent_deleted_as_a_tombstone_is_withdrawn(slack, gateway):
    # docs/adapters.md S-T11: a thread's parent deleted while it has replies comes as a
    # message_changed whose message is a tombstone, not as a message_deleted; it withdraws the
    # parent if it is still queued. It used to be skipped as no text edit, and answered.
    agent = HeldEchoAgent()
    app = await gateway(agent=agent, core={"busy_input_mode": "queue"})
    await slack.push(dm("1767227300.000100", "first"))
    await slack.wait_for(lambda: agent.started == ["first"])
    parent = dm("1767227300.000200", "a parent with replies")
    await slack.push(parent)
    await slack.wait_for(lambda: app.runner.queue_depth(DM_KEY) == 1)
    tombstone = changed(parent, "This message was deleted.", "1767227300.000300")
    tombstone["event"]["message"] = dict(tombstone["event"]["message"], subtype="tombstone", user="USLACKBOT",
                                         thread_ts=parent["event"]["ts"], reply_count=1)
    del tombstone["event"]["message"]["edited"]
    ids = await slack.push(tombstone)
    await slack.wait_for(lambda: ids[0] in slack.acks)
    assert app.runner.queue_depth(DM_KEY) == 0
    agent.release.set()
    await slack.wait_for(lambda: len(slack.posted) == 1)
    await settle(app)
    assert agent.started == ["first"]
    assert [p["text"] for p in slack.posted] == ["echo: first"]


@pytest.mark.parametrize("previous", ["absent", [], {}])
async def test_a_deletion_without_the_message_as_it_was_changes_nothing_quietly(slack, gateway, caplog, previous):
    # docs/adapters.md S-T11: Slack's reference shows message_deleted without previous_message,
    # and Slack sends `[]` for a reply of a thread whose parent is a tombstone. Such a deletion
    # names no session: nothing is withdrawn, and it is no malformed payload (a DEBUG line).
    caplog.set_level(logging.DEBUG, logger="hermes_slack")
    agent = HeldEchoAgent()
    app = await gateway(agent=agent, core={"busy_input_mode": "queue"})
    await slack.push(dm("1767227400.000100", "first"))
    await slack.wait_for(lambda: agent.started == ["first"])
    queued = dm("1767227400.000200", "still queued")
    await slack.push(queued)
    await slack.wait_for(lambda: app.runner.queue_depth(DM_KEY) == 1)
    gone = deleted(queued, "1767227400.000300")
    if previous == "absent":
        del gone["event"]["previous_message"]
    else:
        gone["event"]["previous_message"] = previous
    ids = await slack.push(gone)
    await slack.wait_for(lambda: ids[0] in slack.acks)
    assert app.runner.queue_depth(DM_KEY) == 1
    agent.release.set()
    await slack.wait_for(lambda: len(slack.posted) == 2)
    await settle(app)
    assert [p["text"] for p in slack.posted] == ["echo: first", "echo: still queued"]
    logged = slack_log(caplog)
    assert not any("malformed" in m for m in logged)
    assert ("slack event Ev1767227400000300 skipped: deletion of 1767227400.000200 without the message as it was"
            in logged)


@pytest.mark.parametrize("edits_as_turns", [False, True])
async def test_an_edit_or_deletion_of_an_answered_message_is_no_new_turn(slack, gateway, caplog, edits_as_turns):
    # docs/behaviour.md §5: an edit of a message already processed is not a new turn unless
    # edits_as_turns (then it is one, with its own id); a deletion never is one.
    caplog.set_level(logging.DEBUG, logger="hermes_slack")
    app = await gateway(edits_as_turns=edits_as_turns)
    first = dm("1767227100.000100", "first")
    await slack.push(first)
    await slack.wait_for(lambda: len(slack.posted) == 1)
    await settle(app)
    ids = await slack.push(changed(first, "first, edited", "1767227100.000200"),
                           deleted(first, "1767227100.000300"))
    await slack.wait_for(lambda: set(ids) <= set(slack.acks))
    await settle(app)
    await slack.push(dm("1767227100.000400", "next"))
    await slack.wait_for(lambda: len(slack.posted) == (3 if edits_as_turns else 2))
    await settle(app)
    edit_turn = ["echo: first, edited"] if edits_as_turns else []
    assert [p["text"] for p in slack.posted] == ["echo: first", *edit_turn, "echo: next"]
    logged = slack_log(caplog)
    assert ("slack deletion of message 1767227100.000100 in D0DMALICE1 (event Ev1767227100000300): it is not "
            "queued (nothing to withdraw)") in logged
    skipped = ("slack edit of message 1767227100.000100 in D0DMALICE1 (event Ev1767227100000200) skipped: it is "
               "not queued and edits_as_turns is off")
    assert (skipped in logged) is not edits_as_turns


def _no_deleted_ts(payload):
    del payload["event"]["deleted_ts"]


def _numeric_deleted_ts(payload):
    payload["event"]["deleted_ts"] = 1767227200.0002


def _other_previous_message(payload):
    payload["event"]["previous_message"]["ts"] = "1767227200.000999"


def _edit_without_message(payload):
    payload["event"].update(subtype="message_changed", message="queued original, edited")


@pytest.mark.parametrize("breakage, problem", [
    (_no_deleted_ts, "event.deleted_ts is missing"),
    (_numeric_deleted_ts, "event.deleted_ts must be a string, got float"),
    (_other_previous_message, "event.deleted_ts is not the ts of event.previous_message"),
    (_edit_without_message, "event.message must be an object, got str"),
])
async def test_a_malformed_edit_or_deletion_is_logged_once_and_changes_nothing(slack, gateway, caplog, breakage, problem):
    # One warning naming the broken field, never the message's text; acknowledged (a redelivery
    # would be as broken); the queued message is left alone and the adapter keeps serving.
    caplog.set_level(logging.DEBUG, logger="hermes_slack")
    agent = HeldEchoAgent()
    app = await gateway(agent=agent, core={"busy_input_mode": "queue"})
    await slack.push(dm("1767227200.000100", "first"))
    await slack.wait_for(lambda: agent.started == ["first"])
    queued = dm("1767227200.000200", "queued original")
    await slack.push(queued)
    await slack.wait_for(lambda: app.runner.queue_depth(DM_KEY) == 1)
    broken = deleted(queued, "1767227200.000300")
    breakage(broken)
    ids = await slack.push(broken)
    await slack.wait_for(lambda: ids[0] in slack.acks)
    assert app.runner.queue_depth(DM_KEY) == 1
    agent.release.set()
    await slack.wait_for(lambda: len(slack.posted) == 2)
    await settle(app)
    assert agent.started == ["first", "queued original"]
    assert [p["text"] for p in slack.posted] == ["echo: first", "echo: queued original"]
    logged = slack_log(caplog)
    assert [m for m in logged if "malformed" in m] == [
        f"skipping malformed slack event Ev1767227200000300: malformed payload: {problem}"]
    assert not any("queued original" in m for m in logged)


async def test_the_agent_is_told_the_home_channel_as_the_chat_id_rule_read_it(slack, gateway):
    # docs/behaviour.md §7, §9: `home_channel = "c0general1"` means the conversation C0GENERAL1
    # (Slack sends ids in upper case); the session context names that id, not the spelling.
    seen = []

    class Recording(EchoAgent):
        async def _generate(self, context, history, message, system_context):
            seen.append(context.home_channels["slack"].chat_id)
            return await super()._generate(context, history, message, system_context)

    await gateway(agent=Recording(), home_channel="c0general1")
    await slack.push(load("s1_message_im"))
    await slack.wait_for(lambda: len(slack.posted) == 1)
    assert seen == ["C0GENERAL1"]
