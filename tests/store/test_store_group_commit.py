"""docs/behaviour.md §12: state.db runs `synchronous = FULL` in WAL mode, and overlapping writes
share one transaction (group commit) run in one call to the SQLite thread: each write returns
only once its group is committed, a write that raises is rolled back alone, and a group whose
commit fails fails every member."""

from __future__ import annotations

import asyncio
import threading

import pytest

from hermes_core.store.db import CommitError, Database


@pytest.fixture
async def db(tmp_path):
    database = Database(tmp_path / "state.db")
    await database.open()
    try:
        yield database
    finally:
        await database.close()


async def test_the_store_connection_runs_synchronous_full_in_wal_mode(store):
    db = store._b().db
    # PRAGMA synchronous: 0 OFF, 1 NORMAL, 2 FULL, 3 EXTRA (sqlite.org/pragma.html#pragma_synchronous)
    assert await db.fetchval("PRAGMA synchronous") == 2
    assert await db.fetchval("PRAGMA journal_mode") == "wal"


async def test_overlapping_writes_share_one_commit(db):
    async def insert(i: int) -> int:
        cur = await db.write_one("INSERT INTO meta (key, value) VALUES (?, ?)", (f"k{i}", str(i)))
        return cur.rowcount

    assert await asyncio.gather(*(insert(i) for i in range(50))) == [1] * 50
    # 50 writes started together: one group, one COMMIT (one fsync of the WAL)
    assert (db.commits, db.writes) == (1, 50)
    assert await db.fetchval("SELECT COUNT(*) FROM meta") == 50


async def test_a_write_that_raises_is_rolled_back_alone(db):
    def good(key: str):
        return lambda conn: conn.execute("INSERT INTO meta (key, value) VALUES (?, 'v')", (key,)) and key

    def bad(conn) -> None:
        conn.execute("INSERT INTO meta (key, value) VALUES ('bad', 'v')")
        raise ValueError("refused by the caller")

    results = await asyncio.gather(db.run(good("a")), db.run(bad), db.run(good("b")), return_exceptions=True)
    assert [r if isinstance(r, str) else type(r).__name__ for r in results] == ["a", "ValueError", "b"]
    assert [r[0] for r in await db.fetchall("SELECT key FROM meta ORDER BY key")] == ["a", "b"]
    assert (db.commits, db.writes) == (1, 2)


async def test_a_lone_write_that_raises_stores_nothing(db):
    def bad(conn) -> None:
        conn.execute("INSERT INTO meta (key, value) VALUES ('half', 'v')")
        raise ValueError("refused by the caller")

    with pytest.raises(ValueError, match="refused by the caller"):
        await db.run(bad)  # a group of one: no savepoint, the whole transaction is rolled back
    assert await db.fetchval("SELECT COUNT(*) FROM meta") == 0
    assert (db.commits, db.writes) == (0, 0)
    await db.write_one("INSERT INTO meta (key, value) VALUES ('after', 'v')")
    assert [r[0] for r in await db.fetchall("SELECT key FROM meta")] == ["after"]
    assert (db.commits, db.writes) == (1, 1)


async def test_a_group_is_one_call_to_the_sqlite_thread(db, thread_calls):
    calls = thread_calls(db)
    await asyncio.gather(*(db.write_one("INSERT INTO meta (key, value) VALUES (?, ?)", (f"k{i}", "v"))
                           for i in range(20)))
    # BEGIN IMMEDIATE, the 20 members in their savepoints and the COMMIT: one hand-off
    assert calls == ["_call_in_thread"]
    await db.write_one("INSERT INTO meta (key, value) VALUES ('alone', 'v')")
    assert calls == ["_call_in_thread", "_call_in_thread"]
    assert (db.commits, db.writes) == (2, 21)


async def test_a_failed_commit_fails_every_member_and_stores_none_of_them(db):
    # A deferred foreign key is checked by COMMIT itself: a real commit failure.
    await db.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
    await db.execute("CREATE TABLE child (parent_id INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED)")

    async def good() -> None:
        await db.write_one("INSERT INTO meta (key, value) VALUES ('kept?', 'v')")

    async def orphan() -> None:
        await db.write_one("INSERT INTO child (parent_id) VALUES (7)")

    results = await asyncio.gather(good(), orphan(), return_exceptions=True)
    assert [type(r).__name__ for r in results] == ["CommitError", "CommitError"]
    assert "FOREIGN KEY constraint failed" in str(results[0])
    assert await db.fetchval("SELECT COUNT(*) FROM meta") == 0
    assert await db.fetchval("SELECT COUNT(*) FROM child") == 0
    # the connection is usable again
    await db.write_one("INSERT INTO meta (key, value) VALUES ('after', 'v')")
    assert await db.fetchval("SELECT value FROM meta WHERE key = 'after'") == "v"


async def test_a_write_cancelled_before_its_group_began_is_left_out(db):
    async with db.write() as conn:  # holds the connection: the writes below wait for the next group
        await conn.execute("INSERT INTO meta (key, value) VALUES ('exclusive', 'v')")
        kept = asyncio.create_task(db.write_one("INSERT INTO meta (key, value) VALUES ('kept', 'v')"))
        dropped = asyncio.create_task(db.write_one("INSERT INTO meta (key, value) VALUES ('dropped', 'v')"))
        await asyncio.sleep(0)  # both are queued for the next group
        dropped.cancel()
    assert (await kept).rowcount == 1
    assert [type(r).__name__ for r in await asyncio.gather(dropped, return_exceptions=True)] == ["CancelledError"]
    assert [r[0] for r in await db.fetchall("SELECT key FROM meta ORDER BY key")] == ["exclusive", "kept"]
    # the exclusive write, then one group with the one member left
    assert (db.commits, db.writes) == (2, 2)


async def test_a_write_whose_caller_is_cancelled_once_its_group_runs_is_committed(db):
    started = asyncio.Event()

    def slow(conn) -> None:
        conn.execute("INSERT INTO meta (key, value) VALUES ('committed', 'v')")
        loop.call_soon_threadsafe(started.set)
        threading.Event().wait(0.05)  # still inside the group when the caller gives up

    loop = asyncio.get_running_loop()
    task = asyncio.create_task(db.run(slow))
    await started.wait()
    task.cancel()
    assert [type(r).__name__ for r in await asyncio.gather(task, return_exceptions=True)] == ["CancelledError"]
    await db.close()  # waits for the group
    await db.open()
    assert await db.fetchval("SELECT value FROM meta WHERE key = 'committed'") == "v"


async def test_commit_error_is_a_store_error_naming_the_file(db):
    assert issubclass(CommitError, Exception)
    await db.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
    await db.execute("CREATE TABLE child (parent_id INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED)")
    with pytest.raises(CommitError) as err:
        await db.write_one("INSERT INTO child (parent_id) VALUES (1)")
    assert str(err.value) == (f"commit of 1 write(s) to state.db {db.path} failed: FOREIGN KEY constraint failed")


async def test_transitions_of_different_sessions_share_commits(store):
    from hermes_core import SessionSource

    db = store._b().db
    before = db.commits
    sources = [SessionSource(platform="telegram", chat_id=str(1000 + i), chat_type="dm") for i in range(20)]
    entries = await asyncio.gather(*(store.get_or_create_session(s) for s in sources))
    assert len({e.session_id for e in entries}) == 20
    # the state machine serialises per session key only: the 20 new sessions are not
    # written one fsync after another
    assert db.commits - before < 20
    assert await db.fetchval("SELECT COUNT(*) FROM routes") == 20


async def test_a_read_runs_its_work_on_the_sqlite_thread(db):
    await db.write_one("INSERT INTO meta (key, value) VALUES ('k', 'v')")

    def work(conn):
        return threading.get_ident(), conn.execute("SELECT value FROM meta WHERE key = 'k'").fetchone()[0]

    ident, value = await db.read(work)
    assert value == "v"
    # the connection's own worker thread (docs/architecture.md §7), never the event loop's
    assert ident == db.conn._thread.ident
    assert ident != threading.get_ident()


async def test_waiting_reads_and_writes_share_one_call_to_the_sqlite_thread(db, thread_calls):
    await db.write_one("INSERT INTO meta (key, value) VALUES ('before', 'v')")
    calls = thread_calls(db)
    async with db.write() as conn:  # holds the connection: everything below waits for one call
        await conn.execute("INSERT INTO meta (key, value) VALUES ('exclusive', 'v')")
        waiting = [asyncio.create_task(db.fetchval("SELECT COUNT(*) FROM meta")) for _ in range(30)]
        waiting += [asyncio.create_task(db.write_one("INSERT INTO meta (key, value) VALUES (?, 'v')", (f"w{i}",)))
                    for i in range(10)]
        await asyncio.sleep(0)
        calls.clear()  # the write() block's INSERT; its COMMIT follows at the end of the block
    results = await asyncio.gather(*waiting)
    # the reads ran first, outside the group, and saw what was committed: 'before' and 'exclusive'
    assert results[:30] == [2] * 30
    assert [r.rowcount for r in results[30:]] == [1] * 10
    assert calls == ["execute", "_call_in_thread"]
    assert await db.fetchval("SELECT COUNT(*) FROM meta") == 12


async def test_a_lone_read_costs_one_call_and_no_commit(db, thread_calls):
    calls = thread_calls(db)
    assert await db.fetchval("SELECT COUNT(*) FROM meta") == 0
    assert calls == ["_call_in_thread"]
    assert (db.commits, db.writes) == (0, 0)


async def test_a_failing_read_fails_alone(db):
    await db.write_one("INSERT INTO meta (key, value) VALUES ('k', 'v')")
    results = await asyncio.gather(db.fetchval("SELECT value FROM meta"), db.fetchval("SELECT nope FROM meta"),
                                   db.write_one("INSERT INTO meta (key, value) VALUES ('k2', 'v')"),
                                   return_exceptions=True)
    assert results[0] == "v"
    assert type(results[1]).__name__ == "OperationalError" and str(results[1]) == "no such column: nope"
    assert results[2].rowcount == 1


async def test_reads_keep_their_results_when_the_group_cannot_begin(db, tmp_path):
    # Another process's connection holds the write lock: BEGIN IMMEDIATE fails after the busy
    # timeout, the reads of the same call still answer.
    import sqlite3

    db.busy_timeout_s = 0
    await db.execute("PRAGMA busy_timeout = 0")
    other = sqlite3.connect(db.path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        read, write = await asyncio.gather(db.fetchval("SELECT COUNT(*) FROM meta"),
                                           db.write_one("INSERT INTO meta (key, value) VALUES ('k', 'v')"),
                                           return_exceptions=True)
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert read == 0
    assert type(write).__name__ == "OperationalError" and str(write) == "database is locked"


async def test_a_group_without_failures_runs_no_savepoints_and_a_failure_runs_it_again_with_them(db):
    # docs/behaviour.md §12: savepoints only when a member raised (then the failing one alone is undone)
    statements: list[str] = []
    await db.conn.set_trace_callback(statements.append)

    def insert(key: str):
        def work(conn):
            conn.execute("INSERT INTO meta (key, value) VALUES (?, 'v')", (key,))
            return key
        return work

    assert await asyncio.gather(*(db.run(insert(f"k{i}")) for i in range(3))) == ["k0", "k1", "k2"]
    assert [s.split()[0] for s in statements] == ["BEGIN", "INSERT", "INSERT", "INSERT", "COMMIT"]
    statements.clear()
    results = await asyncio.gather(db.run(insert("a")), db.run(insert("k0")), db.run(insert("b")),
                                   return_exceptions=True)
    assert [r if isinstance(r, str) else str(r) for r in results] == [
        "a", "UNIQUE constraint failed: meta.key", "b"]
    assert [s.split()[0] for s in statements] == [
        "BEGIN", "INSERT", "INSERT", "ROLLBACK",  # the first run stops at the duplicate key
        "BEGIN", "SAVEPOINT", "INSERT", "RELEASE", "SAVEPOINT", "INSERT", "ROLLBACK", "RELEASE",
        "SAVEPOINT", "INSERT", "RELEASE", "COMMIT"]
    await db.conn.set_trace_callback(None)
    assert [r[0] for r in await db.fetchall("SELECT key FROM meta ORDER BY key")] == ["a", "b", "k0", "k1", "k2"]
    assert (db.commits, db.writes) == (2, 5)


async def test_members_after_sqlite_rolled_the_group_back_do_not_run_outside_it(db):
    # A member that swallows the error of a statement that made SQLite roll the whole transaction
    # back (INSERT OR ROLLBACK here, a full disk in practice): the next members must not be
    # committed one by one outside the group while every caller is told nothing was stored.
    import sqlite3

    await db.write_one("INSERT INTO meta (key, value) VALUES ('taken', 'v')")

    def insert(key: str):
        return lambda conn: conn.execute("INSERT INTO meta (key, value) VALUES (?, 'v')", (key,)) and key

    def swallowing(conn) -> str:
        try:
            conn.execute("INSERT OR ROLLBACK INTO meta (key, value) VALUES ('taken', 'again')")
        except sqlite3.IntegrityError:
            pass
        return "swallowed"

    results = await asyncio.gather(db.run(insert("a")), db.run(swallowing), db.run(insert("b")),
                                   return_exceptions=True)
    stored = [r[0] for r in await db.fetchall("SELECT key FROM meta ORDER BY key")]
    # whatever the callers were told matches what is stored: nothing claimed lost was kept (the
    # group's re-run with savepoints finds its savepoint gone and fails as a whole)
    assert stored == ["taken"]
    assert [str(r) for r in results] == ["no such savepoint: member"] * 3
    assert db.conn.in_transaction is False  # the next group starts clean
    await db.write_one("INSERT INTO meta (key, value) VALUES ('after', 'v')")
    assert [r[0] for r in await db.fetchall("SELECT key FROM meta ORDER BY key")] == ["after", "taken"]


async def test_a_work_function_raising_stopiteration_fails_alone(db):
    def empty_next(conn):
        return next(iter(conn.execute("SELECT key FROM meta").fetchall()))

    results = await asyncio.wait_for(asyncio.gather(
        db.read(empty_next), db.fetchval("SELECT COUNT(*) FROM meta"),
        db.write_one("INSERT INTO meta (key, value) VALUES ('k', 'v')"), return_exceptions=True), 5)
    assert str(results[0]) == "a state.db work function raised StopIteration: StopIteration()"
    assert results[1] == 0 and results[2].rowcount == 1
