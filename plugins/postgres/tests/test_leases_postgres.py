"""Per-session leases with fencing on a real PostgreSQL: two replicas (two engines with their own
pools and replica ids) on one database (docs/architecture.md §7)."""

from __future__ import annotations

import logging

import psycopg
import pytest

from hermes_core.model import SessionSource
from hermes_core.settings import GatewayConfig
from hermes_core.store import SessionStore
from hermes_core.store.backend import LeaseLostError, lease_scope
from hermes_core.testing.store_contract import KEY, SID, T0, entry, row
from hermes_postgres.backend import PostgresBackend


@pytest.fixture
async def replicas(pg_dsn):
    opened = []

    async def make(name: str) -> PostgresBackend:
        backend = PostgresBackend(pg_dsn, lease_ttl_s=30, replica_id=name)
        await backend.open()
        opened.append(backend)
        return backend
    yield make
    for backend in opened:
        await backend.close()


def expire(dsn: str, key: str) -> None:
    """The lease runs out on the database's clock (as when its holder is paused past it)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE session_leases SET expires_at = now() - interval '1 second' WHERE session_key = %s",
                     (key,))


def lease_row(dsn: str, key: str) -> tuple:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT holder, token, expires_at > now() FROM session_leases WHERE session_key = %s",
                            (key,)).fetchone()


async def test_the_first_write_takes_a_free_lease_and_the_other_replica_is_refused(replicas, pg_dsn):
    a, b = await replicas("replica-a"), await replicas("replica-b")
    await a.save(entry(), new_session=True)
    assert lease_row(pg_dsn, KEY) == ("replica-a", 1, True)
    with pytest.raises(LeaseLostError, match="leased by another replica"):
        await b.begin_turn(KEY, SID, row("user", "from b"), T0.timestamp())
    assert await b.acquire_lease(KEY) is None
    assert await a.load_messages(SID) == []


async def test_a_replica_paused_past_its_lease_can_never_write_again(replicas, pg_dsn, caplog):
    a, b = await replicas("replica-a"), await replicas("replica-b")
    await a.save(entry(), new_session=True)
    await a.begin_turn(KEY, SID, row("user", "question"), T0.timestamp())
    expire(pg_dsn, KEY)
    grant = await b.acquire_lease(KEY)
    assert (grant.token, grant.takeover, grant.previous_holder) == (2, True, "replica-a")
    caplog.set_level(logging.ERROR, logger="hermes_postgres.leases")
    # A wakes up with its reply: every kind of write of the turn is refused, nothing is stored.
    with pytest.raises(LeaseLostError, match=r"fenced write refused: the lease of session .* \(token 1\)"):
        await a.record_reply(KEY, SID, row("assistant", "late answer from a"), None)
    for write in (lambda: a.append_message(SID, row("assistant", "tool row")), lambda: a.end_turn(KEY),
                  lambda: a.save(entry(at=T0))):
        with pytest.raises(LeaseLostError):
            await write()
    assert [m["content"] for m in await b.load_messages(SID)] == ["question"]
    assert len(await b.turn_markers()) == 1
    assert a.leases.refused == 1 and "fenced write refused: replica replica-a lost the lease" in caplog.text
    # The new holder writes with its token.
    await b.record_reply(KEY, SID, row("assistant", "answer from b"), None)
    assert [m["content"] for m in await b.load_messages(SID)] == ["question", "answer from b"]
    assert lease_row(pg_dsn, KEY) == ("replica-b", 2, True)


async def test_an_unreleased_expired_lease_is_not_taken_by_a_plain_write(replicas, pg_dsn):
    a, b = await replicas("replica-a"), await replicas("replica-b")
    await a.save(entry(), new_session=True)
    expire(pg_dsn, KEY)
    with pytest.raises(LeaseLostError, match="left by replica replica-a; it must be taken over"):
        await b.save(entry())
    assert lease_row(pg_dsn, KEY) == ("replica-a", 1, False)


async def test_renewal_keeps_leases_and_reports_the_lost_ones(replicas, pg_dsn):
    a, b = await replicas("replica-a"), await replicas("replica-b")
    await a.save(entry(), new_session=True)
    other = "agent:main:telegram:dm:u2"
    await a.save(entry(other, "20260101_120000_bbbbbbbb"), new_session=True)
    expire(pg_dsn, other)
    await b.acquire_lease(other)
    assert await a.renew_leases() == [other]
    assert a.holds_lease(KEY) and not a.holds_lease(other)
    assert lease_row(pg_dsn, KEY) == ("replica-a", 1, True)


async def test_idle_leases_without_a_turn_are_released_and_taken_without_recovery(replicas, pg_dsn):
    a, b = await replicas("replica-a"), await replicas("replica-b")
    await a.save(entry(), new_session=True)
    busy = "agent:main:telegram:dm:u2"
    await a.save(entry(busy, "20260101_120000_bbbbbbbb"), new_session=True)
    await a.begin_turn(busy, "20260101_120000_bbbbbbbb", row("user", "long question"), T0.timestamp())
    a.leases._used = {key: used - a.leases.ttl_s for key, used in a.leases._used.items()}
    await a.renew_leases()
    assert (a.holds_lease(KEY), a.holds_lease(busy)) == (False, True)  # a turn in flight keeps its lease
    grant = await b.acquire_lease(KEY)
    assert (grant.token, grant.takeover) == (2, False)


async def test_close_releases_every_lease(replicas, pg_dsn):
    a, b = await replicas("replica-a"), await replicas("replica-b")
    await a.save(entry(), new_session=True)
    await a.close()
    assert lease_row(pg_dsn, KEY) == (None, 1, False)
    await b.save(entry())  # a released lease is granted inside the write
    assert lease_row(pg_dsn, KEY) == ("replica-b", 2, True)


async def test_a_takeover_runs_the_sessions_crash_recovery(tmp_path, pg_dsn):
    """Replica A dies mid-turn (marker set, no reply); B's claim promotes the turn to
    resume_pending, lists its waiting intake, and leaves the other sessions alone."""
    def store(name: str) -> SessionStore:
        config = GatewayConfig(home=tmp_path / name, store={"backend": "postgres", "dsn": pg_dsn})
        return SessionStore(config.sessions_dir, config)
    a, b = store("a"), store("b")
    await a.open()
    await b.open()
    try:
        source = SessionSource(platform="telegram", chat_id="42", user_id="7")
        sa = await a.get_or_create_session(source)
        await a.begin_turn(sa.session_key, sa.session_id, {"role": "user", "content": "first"})
        waiting = await a.accept_inbound_event(sa.session_key, {"source": source.to_dict(), "text": "second",
                                                                 "message_id": "m2", "kind": "user",
                                                                 "received_at": "2026-01-01T12:00:00Z"})
        other = SessionSource(platform="telegram", chat_id="43", user_id="8")
        so = await a.get_or_create_session(other)
        await a.begin_turn(so.session_key, so.session_id, {"role": "user", "content": "other"})
        a._b()._renewer.cancel()  # A stalls: its leases run out on the database's clock
        expire(pg_dsn, sa.session_key)
        assert await b.claim_session(so.session_key) is None  # still A's
        claim = await b.claim_session(sa.session_key)
        assert (claim.takeover, claim.resumed, claim.previous_holder) == (True, True, a._b().replica_id)
        assert [row["id"] for row in claim.intake] == [waiting]
        entry_b = await b.get_entry(sa.session_key)
        assert (entry_b.resume_pending, entry_b.resume_reason) == (True, "restart_interrupted")
        assert [m["session_key"] for m in await b.turn_markers()] == [so.session_key]
        assert b.holds_session(sa.session_key) and not b.holds_session(so.session_key)
    finally:
        await a.close()
        await b.close()


async def test_work_begun_under_a_lost_lease_stays_refused_after_the_replica_takes_it_back(replicas, pg_dsn):
    a = await replicas("replica-a")
    await a.save(entry(), new_session=True)
    with lease_scope() as tokens:  # a job of the runner: its first write fixes its token
        await a.begin_turn(KEY, SID, row("user", "question"), T0.timestamp())
        assert tokens == {KEY: 1}
        expire(pg_dsn, KEY)
        assert await a.renew_leases() == [KEY]
        regained = await a.acquire_lease(KEY)  # the sweep's takeover: a new lease of the same replica
        assert (regained.token, regained.takeover) == (2, True)
        with pytest.raises(LeaseLostError, match=r"\(token 1\)"):
            await a.record_reply(KEY, SID, row("assistant", "stale answer"), None)
    with lease_scope():  # a new job writes under the new lease
        await a.record_reply(KEY, SID, row("assistant", "fresh answer"), None)
    assert [m["content"] for m in await a.load_messages(SID)] == ["question", "fresh answer"]


async def test_intake_accepted_by_one_replica_hints_the_others(replicas):
    a, b = await replicas("replica-a"), await replicas("replica-b")
    assert await a.intake_accept("telegram", "c1", "m1", KEY, '{"n": 1}', "2026-01-01T12:00:00Z",
                                 T0.timestamp()) is not None
    assert await b.wait_for_intake(10) == [KEY]
    assert await b.wait_for_intake(0.2) == []  # nothing new: "poll"
