"""docs/behaviour.md §2 / seed §2: the get_or_create_session priorities, reset, switch (CAS), flags, usage."""

from __future__ import annotations

import asyncio
import re
from datetime import datetime, timezone

from hermes_core import SessionSource
from hermes_core.model import TokenUsage

ID_RE = re.compile(r"^20260301_120000_[0-9a-f]{8}$")


async def test_first_message_creates_entry_with_seed_id_format(store, dm, clock):
    entry = await store.get_or_create_session(dm)
    assert entry.session_key == "agent:main:telegram:dm:12345"
    assert ID_RE.match(entry.session_id)
    assert entry.created_at == datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
    assert entry.origin == dm
    assert entry.platform == "telegram"
    assert entry.chat_type == "dm"
    assert (entry.suspended, entry.resume_pending, entry.was_auto_reset, entry.is_fresh_reset) == (
        False, False, False, False)
    info = await store.session_info(entry.session_id)
    assert info["session_key"] == "agent:main:telegram:dm:12345"
    assert info["ended_at"] is None


async def test_existing_entry_keeps_id_and_bumps_updated_at(store, dm, clock):
    first = await store.get_or_create_session(dm)
    clock.advance(300)
    second = await store.get_or_create_session(dm)
    assert second.session_id == first.session_id
    assert second.updated_at == datetime(2026, 3, 1, 12, 5, 0, tzinfo=timezone.utc)
    assert second.created_at == first.created_at


async def test_suspended_forces_new_id_with_activity(store, dm, clock):
    old = await store.get_or_create_session(dm)
    await store.append_to_transcript(old.session_id, {"role": "user", "content": "hi"})
    assert await store.suspend_session(old.session_key) is True
    clock.advance(1)
    new = await store.get_or_create_session(dm)
    assert new.session_id != old.session_id
    assert (new.was_auto_reset, new.auto_reset_reason, new.reset_had_activity) == (True, "suspended", True)
    assert new.suspended is False
    info = await store.session_info(old.session_id)
    assert info["end_reason"] == "suspended"
    assert (await store.session_info(new.session_id))["parent_session_id"] == old.session_id


async def test_suspended_without_turn_has_no_activity(store, dm):
    old = await store.get_or_create_session(dm)
    await store.suspend_session(old.session_key)
    new = await store.get_or_create_session(dm)
    assert (new.was_auto_reset, new.auto_reset_reason, new.reset_had_activity) == (True, "suspended", False)


async def test_suspended_wins_over_resume_pending(store, dm):
    old = await store.get_or_create_session(dm)
    assert await store.mark_resume_pending(old.session_key, "restart_timeout") is True
    await store.suspend_session(old.session_key)
    new = await store.get_or_create_session(dm)
    assert new.session_id != old.session_id
    assert new.auto_reset_reason == "suspended"
    assert new.resume_pending is False


async def test_resume_pending_keeps_id_and_flag(store, dm, clock):
    old = await store.get_or_create_session(dm)
    assert await store.mark_resume_pending(old.session_key, "shutdown_timeout") is True
    clock.advance(60)
    again = await store.get_or_create_session(dm)
    assert again.session_id == old.session_id
    assert (again.resume_pending, again.resume_reason) == (True, "shutdown_timeout")
    assert again.last_resume_marked_at == datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
    # still kept on the access after that: only clear_resume_pending clears it
    again2 = await store.get_or_create_session(dm)
    assert again2.resume_pending is True
    assert await store.clear_resume_pending(old.session_key) is True
    cleared = await store.get_entry(old.session_key)
    # docs/behaviour.md §2: the reason and the time go with the flag
    assert (cleared.resume_pending, cleared.resume_reason, cleared.last_resume_marked_at) == (False, None, None)
    stored = await store._b().get_route(old.session_key)
    assert (stored.resume_pending, stored.resume_reason, stored.last_resume_marked_at) == (False, None, None)
    assert await store.clear_resume_pending(old.session_key) is False


async def test_mark_resume_pending_never_acts_on_suspended(store, dm):
    entry = await store.get_or_create_session(dm)
    await store.suspend_session(entry.session_key)
    assert await store.mark_resume_pending(entry.session_key, "restart_timeout") is False
    stored = await store.get_entry(entry.session_key)
    assert (stored.suspended, stored.resume_pending) == (True, False)
    assert await store.mark_resume_pending("agent:main:telegram:dm:nobody", "restart_timeout") is False


async def test_force_new_ends_previous_session_like_reset(store, dm):
    old = await store.get_or_create_session(dm)
    new = await store.get_or_create_session(dm, force_new=True)
    assert new.session_id != old.session_id
    assert (await store.session_info(old.session_id))["end_reason"] == "reset"
    assert (await store.get_entry(dm_key(store, dm))).session_id == new.session_id


def dm_key(store, source):
    return store.session_key(source)


async def test_concurrent_calls_for_one_key_create_one_row(store, dm):
    entries = await asyncio.gather(*(store.get_or_create_session(dm) for _ in range(25)))
    assert len({e.session_id for e in entries}) == 1
    count = await store._b().db.fetchval("SELECT COUNT(*) FROM sessions")
    assert count == 1


async def test_reset_session(store, dm):
    old = await store.get_or_create_session(dm)
    await store.update_session(old.session_key, usage=TokenUsage(input_tokens=5, output_tokens=7))
    new = await store.reset_session(old.session_key, display_name="renamed")
    assert new.session_id != old.session_id
    assert (new.is_fresh_reset, new.display_name, new.total_tokens, new.origin) == (True, "renamed", 0, dm)
    assert (await store.session_info(old.session_id))["end_reason"] == "reset"
    assert await store.reset_session("agent:main:telegram:dm:unknown") is None


async def test_switch_session_is_compare_and_swap(store, dm):
    first = await store.get_or_create_session(dm)
    await store.update_session(first.session_key, usage=TokenUsage(input_tokens=10, output_tokens=2))
    second = await store.reset_session(first.session_key)
    # stale expectation: the key points at `second`, not `first` -> None, nothing changed
    assert await store.switch_session(first.session_key, first.session_id,
                                      expected_session_id=first.session_id) is None
    assert (await store.get_entry(first.session_key)).session_id == second.session_id
    switched = await store.switch_session(first.session_key, first.session_id,
                                          expected_session_id=second.session_id)
    assert switched.session_id == first.session_id
    assert (switched.input_tokens, switched.output_tokens, switched.total_tokens) == (10, 2, 12)
    assert (await store.session_info(second.session_id))["end_reason"] == "session_switch"
    reopened = await store.session_info(first.session_id)
    assert (reopened["ended_at"], reopened["end_reason"]) == (None, None)
    assert await store.switch_session(first.session_key, "20200101_000000_deadbeef") is None


async def test_update_session_adds_usage(store, dm, clock):
    entry = await store.get_or_create_session(dm)
    clock.advance(120)
    await store.update_session(entry.session_key, 321, usage=TokenUsage(
        input_tokens=100, output_tokens=20, cache_read_tokens=3, cache_write_tokens=4,
        estimated_cost_usd=0.5, cost_status="estimated"))
    await store.update_session(entry.session_key, usage=TokenUsage(input_tokens=1, output_tokens=1,
                                                                   estimated_cost_usd=0.25))
    got = await store.get_entry(entry.session_key)
    assert (got.input_tokens, got.output_tokens, got.cache_read_tokens, got.cache_write_tokens,
            got.total_tokens, got.estimated_cost_usd, got.cost_status, got.last_prompt_tokens) == (
        101, 21, 3, 4, 122, 0.75, "estimated", 321)
    assert got.updated_at == datetime(2026, 3, 1, 12, 2, 0, tzinfo=timezone.utc)
    info = await store.session_info(entry.session_id)
    assert (info["input_tokens"], info["output_tokens"], info["total_tokens"], info["estimated_cost_usd"],
            info["cost_status"]) == (101, 21, 122, 0.75, "estimated")


async def test_list_lookup_and_has_any(store, clock):
    assert await store.has_any_sessions() is False
    a = await store.get_or_create_session(SessionSource(platform="telegram", chat_id="1", user_id="1"))
    clock.advance(1800)
    b = await store.get_or_create_session(SessionSource(platform="slack", chat_id="C1", chat_type="channel",
                                                        user_id="U1"))
    assert [e.session_key for e in await store.list_sessions()] == [b.session_key, a.session_key]
    assert [e.session_key for e in await store.list_sessions(active_minutes=10)] == [b.session_key]
    assert (await store.lookup_by_session_id(a.session_id)).session_key == "agent:main:telegram:dm:1"
    assert await store.lookup_by_session_id("20200101_000000_00000000") is None
    assert await store.has_any_sessions() is True


async def test_lookup_is_scoped_to_owner(store):
    alice = SessionSource(platform="telegram", chat_id="1", user_id="alice")
    bob = SessionSource(platform="telegram", chat_id="2", user_id="bob")
    entry = await store.get_or_create_session(alice)
    old_id = entry.session_id
    await store.reset_session(entry.session_key)
    assert (await store.lookup_by_session_id(old_id, owner=alice)).session_id == old_id
    assert await store.lookup_by_session_id(old_id, owner=bob) is None
    other_platform = SessionSource(platform="discord", chat_id="1", user_id="alice")
    assert await store.lookup_by_session_id(old_id, owner=other_platform) is None


async def test_touch_time_is_persisted(config, clock, dm):
    from hermes_core.store import SessionStore
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        await store.get_or_create_session(dm)
        clock.advance(3600)
        await store.get_or_create_session(dm)
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        got = await store.get_entry("agent:main:telegram:dm:12345")
        assert got.updated_at == datetime(2026, 3, 1, 13, 0, 0, tzinfo=timezone.utc)
