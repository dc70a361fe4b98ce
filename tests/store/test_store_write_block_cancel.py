"""docs/behaviour.md §12 and `Database.write()`: a `write()` block holds the connection until its
transaction is committed or rolled back, also when its task is cancelled meanwhile ("a cancelled
task must not leave the connection mid-transaction"). A write queued behind it is then committed
as usual. The degraded engine's commit writes the journal (a thread) before its `COMMIT`, so a
cancellation can arrive while the transaction is still open (found by a cancellation fuzz of
`write()` blocks and `run()` writes on the degraded engine: the next group failed with "cannot
start a transaction within a transaction")."""

from __future__ import annotations

import asyncio
import threading

from hermes_core.store.journal import JournaledDatabase

INSERT = ("INSERT INTO identity_aliases (platform, alias_id, canonical_id, first_seen, last_seen) "
          "VALUES ('telegram', ?, 'c1', '2026-03-01T12:00:00Z', '2026-03-01T12:00:00Z')")


async def test_a_write_queued_behind_a_block_cancelled_during_its_commit_is_committed(tmp_path):
    db = JournaledDatabase(tmp_path / "sessions")
    (tmp_path / "sessions").mkdir()
    await db.open()
    await db.start_journal()
    entered, release = threading.Event(), threading.Event()
    real_write = db._write

    def held_write(line, transcripts):  # the journal line of the block's commit, held open
        entered.set()
        release.wait()
        real_write(line, transcripts)

    async def block() -> None:
        async with db.write() as conn:
            await conn.execute(INSERT, ("alias-block",))

    db._write = held_write
    task = asyncio.create_task(block())
    try:
        await asyncio.to_thread(entered.wait)  # the block's commit is writing its journal line
        db._write = real_write
        task.cancel()
        await asyncio.wait({task}, timeout=1.0)  # the block keeps the connection until its commit ends
        queued = asyncio.create_task(db.write_one(INSERT, ("alias-queued",)))
        # A bound, not a speed check: the queued write may only run once the block's transaction
        # is closed, so with the block's commit still held it cannot finish (nor fail).
        await asyncio.wait({queued}, timeout=1.0)
        release.set()
        (outcome,) = await asyncio.gather(queued, return_exceptions=True)
        assert not isinstance(outcome, BaseException), repr(outcome)
        assert outcome.rowcount == 1
        assert [type(r).__name__ for r in await asyncio.gather(task, return_exceptions=True)] == ["CancelledError"]
        rows = await db.fetchall("SELECT alias_id FROM identity_aliases ORDER BY alias_id")
        assert [r[0] for r in rows] == ["alias-block", "alias-queued"]
    finally:
        release.set()
        await db.close()
