"""Delivery ledger and resumed-turn store operations on both backends (docs/behaviour.md §6; seed §7):
obligations survive a reopen with their state, an orphaned saved reply is adopted by crash
recovery once, `resume_turn` finds the unanswered user message."""

from __future__ import annotations

import pytest

from hermes_core import GatewayConfig, SessionSource
from hermes_core.store import SessionStore
from hermes_core.store.records import ReportMatch

DM = SessionSource("telegram", "12345", chat_type="dm", user_id="12345")
KEY = "agent:main:telegram:dm:12345"


@pytest.fixture(params=["sqlite", "degraded"])
def home_config(request, tmp_path):
    home = tmp_path / request.param
    home.mkdir()
    if request.param == "degraded":
        (home / "state.db").mkdir()  # SQLite cannot open a directory
    return GatewayConfig(home=home), request.param == "degraded"


async def test_obligation_states_survive_reopen(home_config, clock):
    config, degraded = home_config
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        assert store.degraded is degraded
        entry = await store.get_or_create_session(DM)
        await store.begin_turn(KEY, entry.session_id, {"role": "user", "content": "q", "platform_message_id": "7"})
        ob = await store.record_reply(KEY, entry.session_id, {"role": "assistant", "content": "a"},
                                      origin=DM, content="a", reply_to="7")
        assert await store.turn_markers() == []
        await store.start_delivery(ob)
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        [row] = await store.open_obligations()
        assert (row["id"], row["content"], row["state"], row["attempts"], row["reply_to"], row["internal"],
                row["origin"]) == (ob, "a", "attempting", 1, "7", False, DM)
        await store.finish_delivery(ob, True)
        assert await store.open_obligations() == []
        assert [m["content"] for m in await store.load_transcript(entry.session_id)] == ["q", "a"]


async def test_orphaned_reply_is_adopted_once_and_resume_turn_finds_unanswered(home_config, clock):
    config, _ = home_config
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        entry = await store.get_or_create_session(DM)
        await store.begin_turn(KEY, entry.session_id, {"role": "user", "content": "q1"})
        await store.append_to_transcript(entry.session_id, {"role": "assistant", "content": "NO_REPLY"})
        assert await store.recover_interrupted_turns(3600) == []
        assert await store.recover_interrupted_turns(3600) == []  # marker gone: adopted once
        assert [(o["content"], o["state"]) for o in await store.open_obligations()] == [
            ("(The agent chose not to reply to this message.)", "pending")]
        assert await store.resume_turn(KEY, entry.session_id) is None  # last message has a reply
        await store.begin_turn(KEY, entry.session_id, {"role": "user", "content": "q2", "platform_message_id": "9"})
        await store.end_turn(KEY)
        assert await store.resume_turn(KEY, entry.session_id) == {"content": "q2", "platform_message_id": "9"}
        [marker] = await store.turn_markers()
        assert marker["session_key"] == KEY


WA = SessionSource("whatsapp_cloud", "US.13491208655302741918", chat_type="dm", user_id="16505551234")
WA_KEY = "agent:main:whatsapp_cloud:dm:US.13491208655302741918"


async def _delivered(store, source, key, text, sent_ids):
    entry = await store.get_or_create_session(source)
    await store.begin_turn(key, entry.session_id, {"role": "user", "content": "q"})
    ob = await store.record_reply(key, entry.session_id, {"role": "assistant", "content": text},
                                  origin=source, content=text)
    await store.start_delivery(ob)
    await store.finish_delivery(ob, True, sent_ids=sent_ids)
    return ob


async def test_delivery_reports_settle_the_obligation_that_sent_the_message(home_config, clock):
    # docs/behaviour.md §6 "Delivery reports": a platform's later report about a sent message
    # (WhatsApp status callbacks) finds its obligation by the recorded platform message ids.
    config, _ = home_config
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        ob = await _delivered(store, WA, WA_KEY, "a long reply", ["wamid.A1", None, "wamid.A2"])
        other = await _delivered(store, DM, KEY, "telegram reply", ["wamid.A2"])  # same id, other platform
        # Found, nothing changed (already delivered) is told apart from no obligation at all.
        assert await store.settle_sent_message("whatsapp_cloud", "wamid.A1", "delivered") == ReportMatch(ob, False)
        assert await store.settle_sent_message("whatsapp_cloud", "wamid.unknown", "failed", "x") is None
        assert await store.settle_sent_message("whatsapp_cloud", "wamid.A2", "failed",
                                               "131047: more than 24 hours have passed") == ReportMatch(ob, True)
        # a confirmation of the other chunk does not undo the failure
        assert await store.settle_sent_message("whatsapp_cloud", "wamid.A1", "delivered") == ReportMatch(ob, False)
        with pytest.raises(ValueError, match="delivery report status must be one of"):
            await store.settle_sent_message("whatsapp_cloud", "wamid.A1", "read")
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        [row] = await store.open_obligations()
        assert (row["id"], row["state"], row["last_error"]) == (ob, "failed", "131047: more than 24 hours have passed")
        assert [o["id"] for o in await store.obligations_in("delivered")] == [other]


async def test_a_report_about_an_abandoned_obligation_finds_it_and_changes_nothing(home_config, clock):
    # docs/behaviour.md §6 "Delivery reports": an 'abandoned' obligation is left alone; the
    # report still found it (it does not wait for outcomes, as one that found nothing does).
    config, _ = home_config
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        ob = await _delivered(store, WA, WA_KEY, "reply", ["wamid.B1"])
        await store.abandon_delivery(ob, "gave up after 3 attempts")
        assert await store.settle_sent_message("whatsapp_cloud", "wamid.B1", "failed", "x") == ReportMatch(ob, False)
        assert [(o["id"], o["last_error"]) for o in await store.obligations_in("abandoned")] == [
            (ob, "gave up after 3 attempts")]


async def test_delivery_reports_older_than_a_day_are_not_matched(home_config, clock):
    config, _ = home_config
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        await _delivered(store, WA, WA_KEY, "reply", ["wamid.OLD"])
        clock.advance(86401)
        assert await store.settle_sent_message("whatsapp_cloud", "wamid.OLD", "failed", "late") is None


async def test_a_reply_after_many_tool_steps_keeps_their_order_and_owes_the_reply_itself(home_config, clock):
    # The rows before a reply go in as multi-row inserts of up to 100 rows; the obligation must
    # still point at the reply (docs/behaviour.md §6), and the transcript keep the agent's order.
    config, _ = home_config
    steps = [{"role": "assistant", "content": f"step {n}"} for n in range(101)]
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        entry = await store.get_or_create_session(DM)
        await store.begin_turn(KEY, entry.session_id, {"role": "user", "content": "q"})
        ob = await store.record_reply(KEY, entry.session_id, {"role": "assistant", "content": "finalanswer"},
                                      origin=DM, content="finalanswer", before=steps)
        contents = [m["content"] for m in await store.load_transcript(entry.session_id)]
        assert contents == ["q"] + [f"step {n}" for n in range(101)] + ["finalanswer"]
        [hit] = await store.search_transcripts("finalanswer")
        [row] = await store.open_obligations()
        assert (row["id"], row["message_id"]) == (ob, hit["message_id"])
