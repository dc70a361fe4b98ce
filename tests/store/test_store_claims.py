"""Session claims on the single-gateway SQLite engine: every claim succeeds with nothing to
recover (docs/architecture.md §7); the engine has no leases."""

from __future__ import annotations

from hermes_core import SessionSource


async def test_sqlite_claims_always_succeed_without_recovery(store):
    source = SessionSource(platform="telegram", chat_id="42", user_id="7")
    entry = await store.get_or_create_session(source)
    await store.begin_turn(entry.session_key, entry.session_id, {"role": "user", "content": "hi"})
    claim = await store.claim_session(entry.session_key)
    assert (claim.session_key, claim.takeover, claim.resumed, claim.intake, claim.obligations) == (
        entry.session_key, False, False, [], [])
    # Recovery is the start-up's job on SQLite: the marker is untouched by a claim.
    assert [m["session_key"] for m in await store.turn_markers()] == [entry.session_key]
    assert store.leased is False and store.holds_session("anything") is True
    await store.release_session(entry.session_key)  # no-op
