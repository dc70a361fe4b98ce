"""docs/behaviour.md §5 (durable inbound dedupe) and §6 / seed §7 (turn markers, recover_interrupted_turns)."""

from __future__ import annotations

import pytest

from hermes_core.store import SessionStore, StoreError


async def test_begin_turn_records_message_and_marker(store, dm, clock):
    entry = await store.get_or_create_session(dm)
    await store.begin_turn(entry.session_key, entry.session_id, {"role": "user", "content": "q1"})
    assert [m["content"] for m in await store.load_transcript(entry.session_id)] == ["q1"]
    markers = await store.turn_markers()
    assert [(m["session_key"], m["session_id"], m["started_ts"]) for m in markers] == [
        (entry.session_key, entry.session_id, clock().timestamp())]
    await store.append_to_transcript(entry.session_id, {"role": "assistant", "content": "r1"})
    await store.end_turn(entry.session_key)
    assert await store.turn_markers() == []


async def test_begin_turn_for_unknown_key_writes_nothing(store):
    sid = "20260301_120000_00000001"
    with pytest.raises(StoreError, match="no session entry"):
        await store.begin_turn("agent:main:telegram:dm:none", sid, {"role": "user", "content": "x"})
    assert await store.load_transcript(sid) == []


async def test_recover_marks_unanswered_turns(store, dm, clock):
    entry = await store.get_or_create_session(dm)
    await store.begin_turn(entry.session_key, entry.session_id, {"role": "user", "content": "q"})
    clock.advance(30)
    assert await store.recover_interrupted_turns(3600) == [entry.session_key]
    got = await store.get_entry(entry.session_key)
    assert (got.resume_pending, got.resume_reason) == (True, "restart_interrupted")
    assert await store.turn_markers() == []


async def test_recover_clears_stale_marker_without_resuming(store, dm, clock):
    entry = await store.get_or_create_session(dm)
    await store.begin_turn(entry.session_key, entry.session_id, {"role": "user", "content": "q"})
    clock.advance(3601)
    assert await store.recover_interrupted_turns(3600) == []
    assert (await store.get_entry(entry.session_key)).resume_pending is False
    assert await store.turn_markers() == []


async def test_recover_hands_answered_turn_to_the_ledger(store, dm):
    # seed §7: a marked turn whose reply was saved but never recorded for delivery becomes an
    # obligation carrying the recovered-reply notice (it may have reached the chat), and the
    # marker is cleared; the turn is not resumed.
    entry = await store.get_or_create_session(dm)
    await store.begin_turn(entry.session_key, entry.session_id, {"role": "user", "content": "q"})
    await store.append_to_transcript(entry.session_id, {"role": "assistant", "content": "persisted reply"})
    assert await store.recover_interrupted_turns(3600) == []
    assert (await store.get_entry(entry.session_key)).resume_pending is False
    assert await store.turn_markers() == []
    [ob] = await store.open_obligations()
    assert (ob["session_key"], ob["content"], ob["state"], ob["attempts"], ob["origin"].chat_id) == (
        entry.session_key, "Recovered reply (may be a duplicate):\npersisted reply", "pending", 0, dm.chat_id)


@pytest.mark.parametrize("reason", ["restart_timeout", "shutdown_timeout"])
async def test_recover_keeps_the_more_specific_reason_of_a_drain(store, dm, clock, reason):
    """docs/behaviour.md §6: a drain marked the turn first (then the process died before
    `.clean_shutdown`); recovery only adds `restart_interrupted` where no reason is set."""
    entry = await store.get_or_create_session(dm)
    await store.begin_turn(entry.session_key, entry.session_id, {"role": "user", "content": "q"})
    assert await store.mark_resume_pending(entry.session_key, reason) is True
    marked_at = (await store.get_entry(entry.session_key)).last_resume_marked_at
    clock.advance(30)
    assert await store.recover_interrupted_turns(3600) == [entry.session_key]
    got = await store.get_entry(entry.session_key)
    assert (got.resume_pending, got.resume_reason, got.last_resume_marked_at) == (True, reason, marked_at)
    assert await store.turn_markers() == []


async def test_recover_does_not_mark_suspended(store, dm):
    entry = await store.get_or_create_session(dm)
    await store.begin_turn(entry.session_key, entry.session_id, {"role": "user", "content": "q"})
    await store.suspend_session(entry.session_key)
    assert await store.recover_interrupted_turns(3600) == []
    assert (await store.get_entry(entry.session_key)).resume_pending is False


async def test_sessions_without_marker_are_untouched(store, dm):
    entry = await store.get_or_create_session(dm)
    await store.append_to_transcript(entry.session_id, {"role": "user", "content": "done turn"})
    assert await store.recover_interrupted_turns(3600) == []
    assert (await store.get_entry(entry.session_key)).resume_pending is False


async def test_accept_inbound_dedupes_across_restart(config, clock):
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        assert await store.accept_inbound("telegram", "12345", "m1") is True
        assert await store.accept_inbound("telegram", "12345", "m1") is False
        assert await store.accept_inbound("telegram", "999", "m1") is True
        assert await store.accept_inbound("slack", "12345", "m1") is True
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        assert await store.accept_inbound("telegram", "12345", "m1") is False
        assert await store.accept_inbound("telegram", "12345", "m2") is True
