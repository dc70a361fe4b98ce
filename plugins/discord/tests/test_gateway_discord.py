"""End to end: fake Discord gateway → real discord.py client → DiscordAdapter → GatewayApp (real
plugin loading through the installed entry points, real SQLite store in a temporary
HERMES_HOME, echo agent) → reply POSTed back at the fake Discord REST API.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from samples_discord import sample
from fake_discord import DM_ID, FORUM_POST_ID, GENERAL_ID, wait_until

from hermes_core import GatewayConfig
from hermes_core.agents.echo import EchoAgent
from hermes_core.app import GatewayApp
from hermes_core.testing import HeldEchoAgent


def make_config(home: Path, fake, **discord) -> GatewayConfig:
    table = {"enabled": True, "bot_token": fake.token, "allow_all": True, "connect_timeout": 10}
    table.update(discord)
    return GatewayConfig(home=home, platforms={"discord": table})


@pytest.fixture
async def gateway(tmp_path, fake):
    """`await gateway(**discord_settings)` starts a GatewayApp on HERMES_HOME = tmp_path/home;
    all apps are stopped at teardown."""
    apps = []

    async def start(agent=None, **discord):
        app = GatewayApp(make_config(tmp_path / "home", fake, **discord), watcher=False, agent=agent)
        await app.start()
        apps.append(app)
        return app

    yield start
    for app in apps:
        await app.stop()


async def test_guild_message_gets_echo_reply_in_its_channel(fake, gateway):
    app = await gateway()
    assert type(app.adapters["discord"]).__name__ == "DiscordAdapter"  # via the entry point
    await fake.message(sample("d1_guild_text_role"))
    await fake.wait_for(lambda: len(fake.sent) == 1)
    (reply,) = fake.sent
    assert reply["channel_id"] == GENERAL_ID
    assert reply["content"] == "echo: what changed today?"
    assert reply["message_reference"]["message_id"] == 1500000000000000001
    assert reply["message_reference"]["fail_if_not_exists"] is False
    assert reply["allowed_mentions"] == {"parse": [], "replied_user": False}


async def test_forum_post_reply_goes_to_the_thread_with_the_documented_key(fake, gateway):
    await gateway()
    await fake.message(sample("d2_forum_post"))
    await fake.wait_for(lambda: len(fake.sent) == 1)
    # Threads are shared sessions: the core prefixes the sender's name (seed §5).
    assert (fake.sent[0]["channel_id"], fake.sent[0]["content"]) == \
        (FORUM_POST_ID, "echo: [Alice] login loops after the update")
    await fake.message(dict(sample("d2_forum_post"), id="1500000000000000040", content="/status"))
    await fake.wait_for(lambda: len(fake.sent) == 2)
    status = fake.sent[1]
    assert status["channel_id"] == FORUM_POST_ID
    assert "Session key: agent:main:discord:group:1100000000000000012:1100000000000000030" in status["content"]


async def test_dm_reply_goes_to_the_dm_channel(fake, gateway):
    await gateway()
    await fake.message(sample("d3_dm"))
    await fake.wait_for(lambda: len(fake.sent) == 1)
    assert (fake.sent[0]["channel_id"], fake.sent[0]["content"]) == (DM_ID, "echo: can you check my PR?")
    await fake.message(dict(sample("d3_dm"), id="1500000000000000041", content="/status"))
    await fake.wait_for(lambda: len(fake.sent) == 2)
    assert fake.sent[1]["channel_id"] == DM_ID
    assert "Session key: agent:main:discord:dm:1600000000000000001" in fake.sent[1]["content"]


async def test_long_reply_is_chunked_within_2000_characters_in_order(fake, gateway):
    await gateway()
    body = "\n".join(f"line {i:04d} ✓ ünïcödé" for i in range(700))  # ~16,000 characters
    await fake.message(dict(sample("d3_dm"), id="1500000000000000300", content=body))
    await fake.wait_for(lambda: "line 0699" in (fake.sent[-1]["content"] if fake.sent else ""), timeout=20)
    texts = [s["content"] for s in fake.sent]
    assert len(texts) >= 8
    assert all(len(t) <= 2000 for t in texts)
    assert {s["channel_id"] for s in fake.sent} == {DM_ID}
    joined = "\n".join(texts).removeprefix("echo: ")
    numbers = [int(line.split()[1]) for line in joined.splitlines() if line.startswith("line ")]
    assert numbers == list(range(700))  # every line, once, in order
    # the first chunk answers the trigger; the rest are plain messages
    assert fake.sent[0]["message_reference"]["message_id"] == 1500000000000000300
    assert all("message_reference" not in s for s in fake.sent[1:])


async def test_429_is_waited_out_and_the_reply_arrives_once(fake, gateway):
    await gateway()
    fake.fail("create_message", "429", retry_after=1.0)
    await fake.message(sample("d3_dm"))
    await fake.wait_for(lambda: len(fake.sent) == 1)
    attempts = fake.calls_of("create_message")
    assert [a.status for a in attempts] == [429, 200]
    assert attempts[1].at - attempts[0].at >= 1.0
    assert [s["content"] for s in fake.sent] == ["echo: can you check my PR?"]


async def test_reconnect_resumes_and_loses_nothing(fake, gateway):
    app = await gateway()
    await fake.message(dict(sample("d3_dm"), id="1500000000000000501", content="before"))
    await fake.wait_for(lambda: len(fake.sent) == 1)
    fake.replay_overlap = 1  # the RESUME replays "before" as well (D-T2)
    await fake.drop()
    await fake.message(dict(sample("d3_dm"), id="1500000000000000502", content="while away"))
    await fake.message(dict(sample("d1_guild_text_role"), id="1500000000000000503", content="also away"))
    await fake.wait_for(lambda: len(fake.sent) == 3)
    assert [(s["channel_id"], s["content"]) for s in fake.sent] == [
        (DM_ID, "echo: before"), (DM_ID, "echo: while away"), (GENERAL_ID, "echo: also away")]
    assert fake.connections == ["/gw", "/gw/resume"]
    assert app.adapters["discord"].resumes == 1


async def test_gateway_stop_closes_the_adapter_after_the_drain(fake, gateway):
    app = await gateway()
    await fake.message(sample("d3_dm"))
    await fake.wait_for(lambda: len(fake.sent) == 1)
    adapter = app.adapters["discord"]
    await app.stop()
    assert not fake.connected
    assert adapter.client.is_closed()  # closed by the plugin's hermes_shutdown hook


async def test_redelivered_message_in_a_new_process_gets_no_second_reply(fake, gateway):
    app1 = await gateway()
    await fake.message(sample("d3_dm"))
    await fake.wait_for(lambda: len(fake.sent) == 1)
    await app1.stop()
    await gateway()  # a new gateway on the same home: a new gateway session (IDENTIFY)
    await fake.message(sample("d3_dm"))  # the same message id again: the persisted dedupe drops it
    await fake.message(dict(sample("d3_dm"), id="1500000000000000601", content="new one"))
    await fake.wait_for(lambda: len(fake.sent) == 2)
    assert [s["content"] for s in fake.sent] == ["echo: can you check my PR?", "echo: new one"]
    assert len(fake.identifies) == 2


class HeldEcho(EchoAgent):
    """The echo agent, answering only once `release` is set (a turn that takes its time)."""

    def __init__(self):
        super().__init__()
        self.release = asyncio.Event()

    async def _generate(self, *args, **kwargs):
        await self.release.wait()
        return await super()._generate(*args, **kwargs)


async def test_the_thread_shows_typing_while_the_turn_runs(fake, gateway):
    agent = HeldEcho()
    await gateway(agent=agent)
    await fake.message(sample("d2_forum_post"))
    await fake.wait_for(lambda: len(fake.typing) >= 1)
    assert fake.sent == []
    agent.release.set()
    await fake.wait_for(lambda: len(fake.sent) == 1)
    # shown in the thread (the post), never in the forum parent, which takes no messages
    assert set(fake.typing) == {FORUM_POST_ID}
    assert fake.sent[0]["channel_id"] == FORUM_POST_ID


async def test_access_by_role_bots_ignored_and_strangers_told_once_in_a_dm(fake, gateway):
    # docs/behaviour.md §9 with D1 (a member holding role 1400000000000000001), D4 (a webhook)
    # and D3 (a DM from someone who holds no allowed role: DMs carry no roles).
    app = await gateway(allow_all=False, allowed_roles=["1400000000000000001"])
    await fake.message(sample("d4_webhook"))
    await fake.message(sample("d3_dm"))
    await fake.message(sample("d1_guild_text_role"))
    refused = app.runner.deps.access.refused
    await fake.wait_for(lambda: len(fake.sent) == 2 and sum(refused.values()) == 2)
    assert [(s["channel_id"], s["content"]) for s in fake.sent] == [
        (DM_ID, "This assistant is private."), (GENERAL_ID, "echo: what changed today?")]
    assert app.runner.deps.access.refused == {("discord", "bot"): 1, ("discord", "not_allowed"): 1}
    assert [e.session_key for e in await app.store.list_sessions()] == [
        "agent:main:discord:group:1100000000000000010:1300000000000000001"]


@pytest.mark.parametrize("edits_as_turns", [False, True])
async def test_an_edit_of_a_queued_message_replaces_its_text_in_place(fake, tmp_path, caplog, edits_as_turns):
    # docs/behaviour.md §5 "Edits and deletions": an edit of a message still queued replaces its
    # queued text in place. A MESSAGE_UPDATE used to be dropped (edits_as_turns off: the stale
    # text was answered) or to become a second turn (on: both texts were answered).
    caplog.set_level(logging.INFO, logger="hermes_core.pipeline.runner")
    agent = HeldEchoAgent()
    config = make_config(tmp_path / "home", fake, edits_as_turns=edits_as_turns)
    config = config.model_copy(update={"core": config.core.model_copy(update={"busy_input_mode": "queue"})})
    app = GatewayApp(config, watcher=False, agent=agent)
    await app.start()
    try:
        await fake.message(sample("d3_dm"))
        await wait_until(lambda: agent.started == ["can you check my PR?"])
        queued = dict(sample("d3_dm"), id="1500000000000000050", content="queued original")
        await fake.message(queued)
        await wait_until(lambda: app.runner.queue_depth("agent:main:discord:dm:1600000000000000001") == 1)
        await fake.push("MESSAGE_UPDATE", dict(queued, content="queued edited",
                                               edited_timestamp="2026-01-01T00:05:00.000000+00:00"))
        edited = "queued message 1500000000000000050 in agent:main:discord:dm:1600000000000000001 edited"
        await wait_until(lambda: edited in caplog.text)
        agent.release.set()
        await fake.wait_for(lambda: len(fake.sent) == 2)
        await app.runner.join()
        assert [s["content"] for s in fake.sent] == ["echo: can you check my PR?", "echo: queued edited"]
        assert agent.started == ["can you check my PR?", "queued edited"]
    finally:
        await app.stop()


@pytest.mark.parametrize("name,key", [
    ("d3_dm", "agent:main:discord:dm:1600000000000000001"),
    ("d1_guild_text_role", "agent:main:discord:group:1100000000000000010:1300000000000000001"),
])
async def test_a_deletion_of_a_queued_message_withdraws_it(fake, tmp_path, caplog, name, key):
    # docs/behaviour.md §5 "Edits and deletions": a deletion withdraws a message still queued. A
    # MESSAGE_DELETE names no author; a guild channel's key is per user, so it is routed with the
    # source its message was handed over with (docs/adapters.md D-T12). Deletions used to be
    # ignored: the deleted text was answered.
    caplog.set_level(logging.INFO, logger="hermes_core.pipeline.runner")
    agent = HeldEchoAgent()
    config = make_config(tmp_path / "home", fake)
    config = config.model_copy(update={"core": config.core.model_copy(update={"busy_input_mode": "queue"})})
    app = GatewayApp(config, watcher=False, agent=agent)
    await app.start()
    try:
        first = sample(name)
        await fake.message(first)
        await wait_until(lambda: len(agent.started) == 1)
        deleted = dict(sample(name), id="1500000000000000050", content="oops, not for you")
        kept = dict(sample(name), id="1500000000000000051", content="queued and kept")
        await fake.message(deleted)
        await fake.message(kept)
        await wait_until(lambda: app.runner.queue_depth(key) == 2)
        gone = {"id": deleted["id"], "channel_id": deleted["channel_id"]}
        if "guild_id" in deleted:
            gone["guild_id"] = deleted["guild_id"]
        await fake.push("MESSAGE_DELETE", gone)
        await wait_until(lambda: f"queued message 1500000000000000050 in {key} withdrawn" in caplog.text)
        assert app.runner.queue_depth(key) == 1
        agent.release.set()
        await fake.wait_for(lambda: len(fake.sent) == 2)
        await app.runner.join()
        assert agent.started[1:] == ["queued and kept"]
        assert [s["content"] for s in fake.sent][1:] == ["echo: queued and kept"]
    finally:
        await app.stop()


async def test_a_deletion_in_a_per_user_channel_after_a_restart_withdraws_the_queued_message(fake, tmp_path, caplog):
    # docs/adapters.md D-T12: a MESSAGE_DELETE names no author and a guild channel's session is
    # per user. A message queued before a restart (replayed from the intake) is not in the new
    # receiver's memory; it is found in the gateway's queue by its channel and id. It used to
    # find nothing: the deleted text was answered after the restart.
    caplog.set_level(logging.INFO, logger="hermes_core.pipeline.runner")
    key = "agent:main:discord:group:1100000000000000010:1300000000000000001"
    config = make_config(tmp_path / "home", fake)
    config = config.model_copy(update={
        "core": config.core.model_copy(update={"busy_input_mode": "queue"}),
        "scheduler": config.scheduler.model_copy(update={"drain_timeout_s": 0.2})})
    first = GatewayApp(config, watcher=False, agent=HeldEchoAgent())
    await first.start()
    try:
        await fake.message(sample("d1_guild_text_role"))
        await wait_until(lambda: first.agent.started == ["what changed today?"])
        deleted = dict(sample("d1_guild_text_role"), id="1500000000000000050", content="oops, not for you")
        await fake.message(deleted)
        await fake.message(dict(sample("d1_guild_text_role"), id="1500000000000000051", content="queued and kept"))
        await wait_until(lambda: first.runner.queue_depth(key) == 2)
    finally:
        await first.stop()  # the running turn is cut off; both queued messages stay in the intake
    agent = HeldEchoAgent()
    app = GatewayApp(config, watcher=False, agent=agent)
    await app.start()
    try:
        await wait_until(lambda: app.runner.queue_depth(key) == 2)
        await fake.push("MESSAGE_DELETE", {"id": deleted["id"], "channel_id": deleted["channel_id"],
                                           "guild_id": deleted["guild_id"]})
        await wait_until(lambda: f"queued message 1500000000000000050 in {key} withdrawn" in caplog.text)
        assert app.runner.queue_depth(key) == 1
        agent.release.set()
        await app.runner.join()
        assert "oops, not for you" not in agent.started
        assert agent.started[-1] == "queued and kept"
    finally:
        await app.stop()


async def test_a_bulk_deletion_withdraws_each_queued_message_it_names(fake, tmp_path, caplog):
    # docs/behaviour.md §5: a moderator's purge (MESSAGE_DELETE_BULK: `ids`, `channel_id`,
    # `guild_id`) withdraws every message of it still queued, as one MESSAGE_DELETE per id; a
    # malformed one is one warning naming the field. Purges used to be ignored.
    caplog.set_level(logging.INFO)
    key = "agent:main:discord:dm:1600000000000000001"
    agent = HeldEchoAgent()
    config = make_config(tmp_path / "home", fake)
    config = config.model_copy(update={"core": config.core.model_copy(update={"busy_input_mode": "queue"})})
    app = GatewayApp(config, watcher=False, agent=agent)
    await app.start()
    try:
        await fake.message(sample("d3_dm"))
        await wait_until(lambda: len(agent.started) == 1)
        for number, text in ((70, "purged one"), (71, "purged two"), (72, "queued and kept")):
            await fake.message(dict(sample("d3_dm"), id=f"15000000000000000{number}", content=text))
        await wait_until(lambda: app.runner.queue_depth(key) == 3)
        await fake.push("MESSAGE_DELETE_BULK", {"ids": "1500000000000000070", "channel_id": DM_ID})
        await fake.push("MESSAGE_DELETE_BULK", {"ids": ["1500000000000000070", "1500000000000000071"],
                                                "channel_id": DM_ID})
        await wait_until(lambda: f"queued message 1500000000000000071 in {key} withdrawn" in caplog.text)
        assert app.runner.queue_depth(key) == 1
        assert [r.getMessage() for r in caplog.records if "MESSAGE_DELETE_BULK" in r.getMessage()] == [
            "skipping malformed discord MESSAGE_DELETE_BULK: malformed payload: d.ids must be a list, got str"]
        agent.release.set()
        await fake.wait_for(lambda: len(fake.sent) == 2)
        await app.runner.join()
        assert agent.started[1:] == ["queued and kept"]
        assert [s["content"] for s in fake.sent][1:] == ["echo: queued and kept"]
    finally:
        await app.stop()


async def test_a_deletion_of_an_answered_message_changes_nothing(fake, gateway, caplog):
    # docs/behaviour.md §5: only a message still queued is withdrawn; an answered one stays in
    # the transcript and nothing is sent.
    caplog.set_level(logging.DEBUG, logger="hermes_discord")
    app = await gateway()
    await fake.message(sample("d3_dm"))
    await fake.wait_for(lambda: len(fake.sent) == 1)
    await app.runner.join()
    await fake.push("MESSAGE_DELETE", {"id": "1500000000000000004", "channel_id": DM_ID})
    await wait_until(lambda: "discord deletion of message 1500000000000000004: it is not queued (nothing to "
                     "withdraw)" in caplog.text)
    await fake.message(dict(sample("d3_dm"), id="1500000000000000060", content="still there?"))
    await fake.wait_for(lambda: len(fake.sent) == 2)
    await app.runner.join()
    assert [s["content"] for s in fake.sent] == ["echo: can you check my PR?", "echo: still there?"]
    [entry] = await app.store.list_sessions()
    assert [m["content"] for m in await app.store.load_transcript(entry.session_id)] == [
        "can you check my PR?", "echo: can you check my PR?", "still there?", "echo: still there?"]
