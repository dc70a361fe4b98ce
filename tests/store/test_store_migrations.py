"""Schema versioning with PRAGMA user_version and forward migrations at open ."""

from __future__ import annotations

import sqlite3

import pytest

from hermes_core import SessionSource
from hermes_core.model import TokenUsage
from hermes_core.store import SchemaTooNewError, SessionStore
from hermes_core.store.db import migrations


def test_migrations_are_ordered_and_numbered():
    assert [(v, name) for v, name, _ in migrations()] == [
        (1, "0001_initial.sql"), (2, "0002_route_counters_and_meta.sql"),
        (3, "0003_durable_intake_and_ledger.sql"), (4, "0004_identity_aliases.sql"),
        (5, "0005_delivery_sent_ids.sql"), (6, "0006_titles_rewinds_reasoning.sql"),
        (7, "0007_fewer_pages_per_commit.sql"), (8, "0008_live_counters_on_the_route.sql")]


async def test_fresh_db_is_at_latest_version_with_wal(store, config):
    conn = sqlite3.connect(config.db_path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 8
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert {"sessions", "messages", "routes", "inbound", "delivery_obligations", "messages_fts",
                "meta", "identity_aliases"} <= tables
    finally:
        conn.close()


async def test_version_1_database_is_migrated_forward(config, clock):
    config.home.mkdir(parents=True)
    v1 = migrations()[0][2]
    conn = sqlite3.connect(config.db_path)
    conn.executescript(v1 + "\nPRAGMA user_version = 1;")
    conn.close()
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        entry = await store.get_or_create_session(SessionSource(platform="telegram", chat_id="5"))
        await store.update_session(entry.session_key, usage=TokenUsage(input_tokens=3, output_tokens=4))
        # a live session's counters are its entry's (schema 8: read through `sessions_now`)
        assert (await store.session_info(entry.session_id))["total_tokens"] == 7
    conn = sqlite3.connect(config.db_path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 8
    conn.close()


async def test_a_read_only_store_refuses_an_older_schema_and_leaves_it_as_it_is(config, clock):
    """docs/operations.md §5: a read-only command writes nothing, so it does not upgrade."""
    from hermes_core.store import StoreError

    config.home.mkdir(parents=True)
    conn = sqlite3.connect(config.db_path)
    conn.executescript(migrations()[0][2] + "\nPRAGMA user_version = 1;")
    conn.close()
    store = SessionStore(config.sessions_dir, config, clock=clock, lock_home=False, degraded_fallback=False,
                         read_only=True)
    with pytest.raises(StoreError) as caught:
        await store.open()
    assert str(caught.value) == (
        f"state.db {config.db_path} cannot be opened: it has schema version 1, older than this gateway's 8, and a "
        "read-only command does not upgrade it: the next start of the gateway does")
    conn = sqlite3.connect(config.db_path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    conn.close()
    assert not config.sessions_dir.exists()  # nothing created in the home either


async def test_newer_schema_refuses_to_open_and_does_not_degrade(config, clock):
    config.home.mkdir(parents=True)
    conn = sqlite3.connect(config.db_path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    store = SessionStore(config.sessions_dir, config, clock=clock)
    with pytest.raises(SchemaTooNewError, match="schema version 99"):
        await store.open()
    assert store.is_open is False
    # the home lock was released: another attempt is refused for the same reason, not the lock
    with pytest.raises(SchemaTooNewError):
        await SessionStore(config.sessions_dir, config, clock=clock).open()


async def test_state_db_and_wal_are_owner_only(store, config, dm):
    import os
    import stat
    await store.get_or_create_session(dm)
    for suffix in ("", "-wal"):
        assert stat.S_IMODE(os.stat(f"{config.db_path}{suffix}").st_mode) == 0o600


async def test_version_2_dedupe_ids_survive_migration_3(config, clock):
    """Schema 3 rebuilds `inbound` with an explicit id; ids accepted under schema 2 still dedupe."""
    config.home.mkdir(parents=True)
    conn = sqlite3.connect(config.db_path)
    conn.executescript(migrations()[0][2] + "\n" + migrations()[1][2] + "\nPRAGMA user_version = 2;")
    conn.execute("INSERT INTO inbound (platform, chat_id, message_id, accepted_at) VALUES "
                 "('telegram', '12345', 'm1', '2026-01-02T03:04:05+00:00')")
    conn.commit()
    conn.close()
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        assert await store.accept_inbound("telegram", "12345", "m1") is False
        assert await store.accept_inbound("telegram", "12345", "m2") is True
    conn = sqlite3.connect(config.db_path)
    assert conn.execute("SELECT message_id, state, accepted_ts FROM inbound ORDER BY id").fetchall() == [
        ("m1", "done", 1767323045.0), ("m2", "done", conn.execute(
            "SELECT accepted_ts FROM inbound WHERE message_id = 'm2'").fetchone()[0])]
    conn.close()


async def test_version_6_database_keeps_its_index_and_ledger_through_migration_7(config, clock):
    """Schema 7 indexes messages in batches of 64 and respells `delivery_open` (docs/behaviour.md §3,
    §12): the messages a version-6 database indexed one by one stay indexed (none twice), its open
    obligations are still found, and it has no `delivery_by_state` any more."""
    from hermes_core.store.fts import integrity_ok
    config.home.mkdir(parents=True)
    conn = sqlite3.connect(config.db_path)
    conn.executescript("\n".join(sql for _, _, sql in migrations()[:6]) + "\nPRAGMA user_version = 6;")
    for n in range(3):
        conn.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES "
                     "('20260101_120000_aaaaaaaa', 'user', ?, '2026-01-01T12:00:00+00:00')", (f"heron {n}",))
    conn.execute("INSERT INTO delivery_obligations (content, state, created_at, updated_at, created_ts, updated_ts) "
                 "VALUES ('owed', 'attempting', 'x', 'x', 1, 1), ('sent', 'delivered', 'x', 'x', 1, 1)")
    conn.commit()
    conn.close()
    async with SessionStore(config.sessions_dir, config, clock=clock) as store:
        db = store._b().db
        assert await db.fetchval("SELECT indexed_through FROM fts_progress") == 3
        assert await integrity_ok(db) is True
        await store.append_to_transcript("20260101_120000_aaaaaaaa", {"role": "user", "content": "heron 3"})
        assert [h["message_id"] for h in await store.search_transcripts("heron", limit=10)] == [1, 2, 3, 4]
        assert [ob["content"] for ob in await store.open_obligations()] == ["owed"]
        assert await db.fetchval("SELECT count(*) FROM sqlite_master WHERE name = 'delivery_by_state'") == 0


async def test_migration_lines_name_the_database_they_apply_to(tmp_path, caplog):
    """state.db is named state.db; the degraded engine (docs/behaviour.md §3 "Degraded mode")
    is named by its journal, not as state.db."""
    import logging

    from hermes_core.store.db import Database
    from hermes_core.store.journal import JournaledDatabase

    caplog.set_level(logging.INFO, "hermes_core.store.db")
    for db in (Database(tmp_path / "state.db"), JournaledDatabase(tmp_path / "sessions")):
        await db.open()
        await db.close()
    lines = [r.getMessage() for r in caplog.records if "0001" in r.getMessage()]
    assert lines == [f"state.db {tmp_path / 'state.db'}: applying migration 0001_initial.sql",
                     f"the degraded journal {tmp_path / 'sessions' / 'journal.jsonl'}: applying migration "
                     "0001_initial.sql"]
