"""docs/behaviour.md §2 / seed §3, §10: prune_old_entries."""

from __future__ import annotations

from hermes_core import SessionSource
from hermes_core.store import SessionStore


def src(n: str) -> SessionSource:
    return SessionSource(platform="telegram", chat_id=n, user_id=n)


async def _three_old_one_new(store, clock):
    old = [await store.get_or_create_session(src(str(i))) for i in range(3)]
    clock.advance(864000)
    fresh = await store.get_or_create_session(src("fresh"))
    for e in old:
        await store.append_to_transcript(e.session_id, {"role": "user", "content": "kept transcript"})
    return old, fresh


async def test_zero_or_negative_disables(store, clock):
    await _three_old_one_new(store, clock)
    assert await store.prune_old_entries(0) == 0
    assert await store.prune_old_entries(-1) == 0
    assert await store.prune_old_entries() == 0  # default session_store_max_age_days = 0
    assert len(await store.list_sessions()) == 4


async def test_prunes_old_routes_keeps_transcripts(store, clock):
    old, fresh = await _three_old_one_new(store, clock)
    assert await store.prune_old_entries(7) == 3
    assert [e.session_key for e in await store.list_sessions()] == [fresh.session_key]
    for e in old:
        assert await store.get_entry(e.session_key) is None
        assert [m["content"] for m in await store.load_transcript(e.session_id)] == ["kept transcript"]
        # Only the route goes: the session is not ended (docs/behaviour.md §2, seed §10).
        info = await store.session_info(e.session_id)
        assert (info["ended_at"], info["end_reason"]) == (None, None)
    # the pruned chat writes again: the same session is re-adopted, its transcript goes on
    again = await store.get_or_create_session(src("0"))
    assert again.session_id == old[0].session_id
    assert again.session_key == "agent:main:telegram:dm:0"
    assert (again.was_auto_reset, again.is_fresh_reset) == (False, False)
    await store.append_to_transcript(again.session_id, {"role": "user", "content": "back again"})
    assert [m["content"] for m in await store.load_transcript(again.session_id)] == \
        ["kept transcript", "back again"]
    assert (await store.get_entry("agent:main:telegram:dm:0")).session_id == old[0].session_id


async def test_readoption_skips_sessions_ended_by_reset(store, clock):
    """`/new` is a boundary: after a reset and a prune the key re-adopts the session the reset
    started, never the one it ended."""
    first = await store.get_or_create_session(src("r"))
    second = await store.reset_session(first.session_key)
    clock.advance(864000)
    assert await store.prune_old_entries(7) == 1
    again = await store.get_or_create_session(src("r"))
    assert again.session_id == second.session_id
    assert (await store.session_info(first.session_id))["end_reason"] == "reset"


async def test_a_session_an_older_gateway_ended_as_pruned_is_readopted(store, clock):
    entry = await store.get_or_create_session(src("p"))
    clock.advance(864000)
    assert await store.prune_old_entries(7) == 1
    await store._b().db.execute("UPDATE sessions SET ended_at = '2026-03-08T12:00:00+00:00', end_reason = 'pruned' "
                                "WHERE session_id = ?", (entry.session_id,))
    again = await store.get_or_create_session(src("p"))
    assert again.session_id == entry.session_id
    assert (await store.session_info(entry.session_id))["end_reason"] is None


async def test_suspended_and_active_processes_are_kept(config, clock):
    def active(key: str) -> bool:
        if key.endswith(":1"):
            return True
        if key.endswith(":2"):
            raise RuntimeError("process table unavailable")
        return False

    async with SessionStore(config.sessions_dir, config, active, clock=clock) as store:
        old = [await store.get_or_create_session(src(str(i))) for i in range(4)]
        await store.suspend_session(old[3].session_key)
        clock.advance(2592000)
        assert await store.prune_old_entries(7) == 1
        remaining = sorted(e.session_key for e in await store.list_sessions())
        assert remaining == ["agent:main:telegram:dm:1", "agent:main:telegram:dm:2", "agent:main:telegram:dm:3"]


async def test_age_is_measured_from_updated_at(store, clock):
    entry = await store.get_or_create_session(src("a"))
    clock.advance(518400)
    await store.update_session(entry.session_key)
    clock.advance(518400)
    assert await store.prune_old_entries(7) == 0
    clock.advance(172800)
    assert await store.prune_old_entries(7) == 1


async def test_config_default_is_used(config, clock):
    config.session_store_max_age_days = 7
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        await store.get_or_create_session(src("a"))
        clock.advance(691200)
        assert await store.prune_old_entries() == 1


async def test_an_age_beyond_the_calendar_prunes_nothing(store, clock):
    """`sessions prune --days 800000` or `session_store_max_age_days = 99999999999` reach before
    year 1: nothing is that old, so nothing goes (was an OverflowError that also stopped the
    housekeeping pass)."""
    await _three_old_one_new(store, clock)
    for days in (800000, 10**11, 10**20, 1e300):
        assert await store.prune_candidates(days) == ([], {})
        assert await store.prune_old_entries(days) == 0
    assert len(await store.list_sessions()) == 4
