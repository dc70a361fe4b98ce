"""End to end: fake Slack → real slack-bolt / slack-sdk clients → SlackAdapter → GatewayApp (real
plugin loading through the installed entry points, real SQLite store, echo agent) → reply back
at the fake's `chat.postMessage`.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from fake_slack import adapter_settings, post_event

from hermes_core import GatewayConfig
from hermes_core.agents.echo import EchoAgent
from hermes_core.app import GatewayApp

FIXTURES = Path(__file__).parent / "fixtures"
GENERAL_ROOT = "1767225700.000200"  # Alice's top-level mention that sample S2's thread hangs under


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


async def settle(app: GatewayApp) -> None:
    """Wait until the app has finished every turn, so the next message is not a busy-input
    follow-up of the previous one (docs/behaviour.md §5)."""
    await app.runner.join()


@pytest.fixture
async def gateway(tmp_path, slack):
    """`await gateway(**slack_settings)` starts a GatewayApp on HERMES_HOME = tmp_path/home with
    the Slack platform enabled against the fake; all apps are stopped at teardown."""
    apps = []

    async def start(agent=None, **overrides):
        table = dict(adapter_settings(slack, **overrides), enabled=True, allow_all=True)
        app = GatewayApp(GatewayConfig(home=tmp_path / "home", platforms={"slack": table}), watcher=False,
                         agent=agent)
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


class HeldEcho(EchoAgent):
    """The echo agent, answering only once `release` is set (a turn that takes its time)."""

    def __init__(self):
        super().__init__()
        self.release = asyncio.Event()

    async def _generate(self, *args, **kwargs):
        await self.release.wait()
        return await super()._generate(*args, **kwargs)


async def test_the_thread_shows_the_working_status_while_the_turn_runs(slack, gateway):
    # Slack has no typing indicator for bots; in a thread the adapter sets the assistant status
    # (docs/adapters.md §3.3). A DM answered inline shows nothing.
    agent = HeldEcho()
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
