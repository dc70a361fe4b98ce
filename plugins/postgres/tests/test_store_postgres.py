"""SessionStore on `[store] backend = "postgres"`, selected through the core's entry-point group."""

from __future__ import annotations

import pytest

from hermes_core.model import SessionSource
from hermes_core.settings import GatewayConfig
from hermes_core.store import SessionStore, StoreError
from hermes_core.store.backends import store_backend_names
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
