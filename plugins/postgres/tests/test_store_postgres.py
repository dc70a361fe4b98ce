"""SessionStore on `[store] backend = "postgres"`, selected through the core's entry-point group."""

from __future__ import annotations

import pytest

from hermes_core.model import MessageEvent, SessionSource
from hermes_core.model.events import event_to_dict
from hermes_core.settings import GatewayConfig
from hermes_core.store import SessionStore, StoreError
from hermes_core.store.backends import store_backend_names
from hermes_core.store.records import ReportMatch
from hermes_postgres.backend import PostgresBackend


def config(tmp_path, **store):
    return GatewayConfig(home=tmp_path / "home", store={"backend": "postgres", **store})


def test_postgres_is_an_installed_store_backend():
    assert store_backend_names() == ["postgres", "sqlite"]


async def test_session_store_runs_on_postgres(tmp_path, pg_dsn):
    store = SessionStore(tmp_path / "home" / "sessions", config(tmp_path, dsn=pg_dsn))
    async with store:
        assert isinstance(store._b(), PostgresBackend) and store.degraded is False
        source = SessionSource(platform="telegram", chat_id="42", user_id="7")
        entry = await store.get_or_create_session(source)
        await store.begin_turn(entry.session_key, entry.session_id, {"role": "user", "content": "hello"})
        ob_id = await store.record_reply(entry.session_key, entry.session_id, {"role": "assistant", "content": "hi"},
                                         origin=source, content="hi", reply_to="m1")
        assert [(o["id"], o["content"], o["state"]) for o in await store.open_obligations()] == [(ob_id, "hi", "pending")]
        again = await store.get_or_create_session(source)
        assert again.session_id == entry.session_id
        assert [(m["role"], m["content"]) for m in await store.load_transcript(entry.session_id)] == [
            ("user", "hello"), ("assistant", "hi")]
        assert [h["session_id"] for h in await store.search_transcripts("HELLO")] == [entry.session_id]
        # Nothing is served from memory: another replica may have written the route meanwhile.
        assert store.cache_size == 0 and store._cache == {}


async def test_a_message_with_a_nul_character_is_stored_on_postgres(tmp_path, pg_dsn):
    # PostgreSQL's text cannot hold U+0000: the message was accepted, then its turn failed with
    # "PostgreSQL text fields cannot contain NUL (0x00) bytes". Built into a MessageEvent (as
    # every adapter does), it is stored with U+FFFD in its place (docs/behaviour.md §7).
    store = SessionStore(tmp_path / "home" / "sessions", config(tmp_path, dsn=pg_dsn))
    async with store:
        event = MessageEvent(SessionSource(platform="local", chat_id="t", user_name="Ann\x00"), text="a\x00b",
                             message_id="m1")
        entry = await store.get_or_create_session(event.source)
        assert await store.accept_inbound_event(entry.session_key, event_to_dict(event)) is not None
        await store.begin_turn(entry.session_key, entry.session_id, {"role": "user", "content": event.text})
        assert [m["content"] for m in await store.load_transcript(entry.session_id)] == ["a\ufffdb"]
        assert (await store.get_entry(entry.session_key)).origin.user_name == "Ann\ufffd"


async def test_delivery_reports_tell_an_unchanged_obligation_from_none_on_postgres(tmp_path, pg_dsn):
    # docs/behaviour.md §6 "Delivery reports": found and changed, found and unchanged (a
    # confirmation after a failure, a second 'failed'), and no obligation at all are three answers.
    store = SessionStore(tmp_path / "home" / "sessions", config(tmp_path, dsn=pg_dsn))
    async with store:
        source = SessionSource(platform="whatsapp_cloud", chat_id="16505551234", user_id="16505551234")
        entry = await store.get_or_create_session(source)
        await store.begin_turn(entry.session_key, entry.session_id, {"role": "user", "content": "hello"})
        ob_id = await store.record_reply(entry.session_key, entry.session_id, {"role": "assistant", "content": "hi"},
                                         origin=source, content="hi", sending=True)
        await store.finish_delivery(ob_id, True, sent_ids=["wamid.1", "wamid.2"])
        assert await store.settle_sent_message("whatsapp_cloud", "wamid.2", "failed", "131047") == ReportMatch(ob_id, True)
        assert await store.settle_sent_message("whatsapp_cloud", "wamid.1", "delivered") == ReportMatch(ob_id, False)
        assert await store.settle_sent_message("whatsapp_cloud", "wamid.2", "failed", "131047") == ReportMatch(ob_id, False)
        assert await store.settle_sent_message("whatsapp_cloud", "wamid.9", "failed", "131047") is None
        assert [(o["id"], o["state"], o["last_error"]) for o in await store.open_obligations()] == [
            (ob_id, "failed", "131047")]


async def test_without_a_dsn_the_start_fails_naming_the_setting(tmp_path):
    store = SessionStore(tmp_path / "home" / "sessions", config(tmp_path))
    with pytest.raises(StoreError, match=r"needs \[store\] dsn"):
        await store.open()


async def test_an_unreachable_server_fails_the_start_without_the_password(tmp_path, pg_cluster):
    dsn = f"postgresql://postgres:s3cret-pw@127.0.0.1:{pg_cluster.port}/absent_db?connect_timeout=2"
    store = SessionStore(tmp_path / "home" / "sessions", config(tmp_path, dsn=dsn))
    with pytest.raises(StoreError) as caught:
        await store.open()
    assert f"127.0.0.1:{pg_cluster.port}/absent_db cannot be reached" in str(caught.value)
    assert "s3cret-pw" not in str(caught.value)
    assert store.is_open is False


async def test_an_unknown_backend_names_the_installed_ones(tmp_path):
    store = SessionStore(tmp_path / "home" / "sessions", GatewayConfig(home=tmp_path / "h", store={"backend": "mongo"}))
    with pytest.raises(StoreError, match=r"\[store\] backend = 'mongo' is not installed \(known: postgres, sqlite\)"):
        await store.open()


@pytest.mark.parametrize("dsn", ["postgresql://hermes:s3cret-pw@[::1/hermes",  # libpq quotes the whole URI
                                 "password=s3cret-pw host",  # ... or the word around the fault
                                 "host=127.0.0.1 password=s3cret-pw\udcff"])  # undecodable bytes from the environment
async def test_an_unparsable_dsn_fails_the_start_naming_the_setting_never_the_password(tmp_path, dsn):
    store = SessionStore(tmp_path / "home" / "sessions", config(tmp_path, dsn=dsn))
    with pytest.raises(StoreError) as caught:
        await store.open()
    assert str(caught.value) == ("[store] dsn cannot be parsed: expected a libpq connection string "
                                 "(host=… dbname=…) or a postgresql:// URI")
    assert store.is_open is False


async def test_a_role_without_rights_on_the_schema_fails_the_start_naming_the_store(tmp_path, pg_cluster, pg_dsn):
    import psycopg

    async with SessionStore(tmp_path / "first" / "sessions", config(tmp_path, dsn=pg_dsn)):
        pass  # the schema exists, owned by the superuser
    with psycopg.connect(pg_cluster.dsn(), autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS hermes_reader")
        conn.execute("CREATE ROLE hermes_reader LOGIN")
    database = pg_dsn.split("dbname=")[1].split()[0]
    dsn = pg_dsn.replace("user=postgres", "user=hermes_reader")
    store = SessionStore(tmp_path / "home" / "sessions", config(tmp_path, dsn=dsn))
    try:
        with pytest.raises(StoreError) as caught:
            await store.open()
    finally:
        with psycopg.connect(pg_cluster.dsn(), autocommit=True) as conn:
            conn.execute(f'REVOKE ALL ON DATABASE "{database}" FROM hermes_reader')
    assert str(caught.value) == (f"PostgreSQL store 127.0.0.1:{pg_cluster.port}/{database} cannot be used: "
                                 "permission denied for schema public")
    assert store.is_open is False


async def test_outcomes_recorded_together_keep_the_lease_of_the_job_that_sent_each(tmp_path, pg_dsn, caplog):
    # docs/behaviour.md §12 "'delivered' off the session's path": on a leased store each outcome
    # is written under its own job's lease tokens; a job whose lease was lost records nothing.
    import asyncio

    import psycopg

    from hermes_core.pipeline.ledger import OutcomeRecorder
    from hermes_core.store.backend import lease_scope
    from hermes_core.store.records import SentOutcome

    spawned = []

    def spawn(coro):
        spawned.append(asyncio.ensure_future(coro))
        return spawned[-1]

    async with SessionStore(tmp_path / "home" / "sessions", config(tmp_path, dsn=pg_dsn)) as store:
        recorder = OutcomeRecorder(store, spawn)
        obligations = {}
        for chat in ("1", "2"):
            source = SessionSource(platform="telegram", chat_id=chat, user_id=chat)
            entry = await store.get_or_create_session(source)
            with lease_scope():  # a job: the reply, then its outcome queued
                await store.begin_turn(entry.session_key, entry.session_id, {"role": "user", "content": "q"})
                obligations[chat] = await store.record_reply(
                    entry.session_key, entry.session_id, {"role": "assistant", "content": "a"}, origin=source,
                    content="a", sending=True)
                if chat == "1":  # this job's lease runs out and the replica takes the session back
                    with psycopg.connect(pg_dsn, autocommit=True) as conn:
                        conn.execute("UPDATE session_leases SET expires_at = now() - interval '1 second' "
                                     "WHERE session_key = %s", (entry.session_key,))
                    await store._b().renew_leases()
                    await store._b().acquire_lease(entry.session_key)
                recorder.add(entry.session_key, SentOutcome(obligations[chat], True))
        await asyncio.gather(*spawned)
        states = {o["id"]: o["state"] for o in await store.open_obligations()}
        assert states == {obligations["1"]: "attempting"}
        assert [o["id"] for o in await store.obligations_in("delivered")] == [obligations["2"]]
        # Another replica may be the one that sends it again: the log line says so.
        [line] = [r.getMessage() for r in caplog.records if "could not be recorded" in r.getMessage()]
        assert line.startswith(f"obligation {obligations['1']} of agent:main:telegram:dm:1 was sent but its "
                               "outcome could not be recorded (")
        assert line.endswith("; it is sent again, labelled as a possible duplicate, when the session is next "
                             "recovered (by the replica that takes it over, or at the next start)")
