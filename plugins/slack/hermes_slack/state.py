"""The threads the bot takes part in, remembered across restarts (docs/adapters.md §3.5).

In channels the bot answers mentions; once it has answered inside a thread (or opened one for a
top-level mention, docs/adapters.md §0.3 item 7), every later reply in that thread is for it too,
mention or not (sample S2). That fact must survive a restart, or the conversation would go
silent after one, so it lives in a small SQLite file in the adapter's data directory
(`<HERMES_HOME>/slack/slack_state.db`, via aiosqlite). Entries older than `days` are pruned at
open: a thread nobody wrote in for a month starts again with a mention.

Deduplication of Slack's double deliveries is not kept here: the core's durable intake already
refuses a second message with the same (chat, message id), i.e. the same `(channel, ts)`
(docs/behaviour.md §5 "Inbound dedupe").
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import aiosqlite

log = logging.getLogger(__name__)

FILE_NAME = "slack_state.db"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS bot_threads (
    channel    TEXT NOT NULL,
    thread_ts  TEXT NOT NULL,
    touched_at REAL NOT NULL,
    PRIMARY KEY (channel, thread_ts)
) WITHOUT ROWID;
"""


class ThreadMemory:
    """`(channel, thread_ts)` pairs of threads the bot takes part in.

    Args:
        path: the SQLite file, or None for an in-memory table (an adapter run without a data
            directory: remembered until stop only).
        days: how long an untouched thread is remembered.
    """

    def __init__(self, path: Path | None, days: int = 30):
        self.path = path
        self.days = days
        self._db: aiosqlite.Connection | None = None

    async def open(self) -> None:
        """Open (creating the file and table) and prune old entries.

        Raises:
            sqlite3.Error / OSError: the file cannot be opened or written.
        """
        if self._db is not None:
            return
        target = ":memory:" if self.path is None else str(self.path)
        db = await aiosqlite.connect(target, isolation_level=None)
        try:
            await db.execute("PRAGMA journal_mode=WAL")
            await db.execute("PRAGMA synchronous=NORMAL")
            await db.executescript(_SCHEMA)
            cutoff = time.time() - self.days * 86400
            await db.execute("DELETE FROM bot_threads WHERE touched_at < ?", (cutoff,))
        except BaseException:
            await db.close()
            raise
        self._db = db

    async def close(self) -> None:
        """Close the file. Idempotent."""
        if self._db is not None:
            db, self._db = self._db, None
            await db.close()

    async def contains(self, channel: str, thread_ts: str) -> bool:
        """True when the bot takes part in thread `thread_ts` of `channel`."""
        if self._db is None:
            return False
        async with self._db.execute("SELECT 1 FROM bot_threads WHERE channel = ? AND thread_ts = ?",
                                    (channel, thread_ts)) as cursor:
            return await cursor.fetchone() is not None

    async def remember(self, channel: str, thread_ts: str) -> None:
        """Record (or refresh) that the bot takes part in thread `thread_ts` of `channel`.

        Raises:
            RuntimeError: not opened.
            sqlite3.Error: the write failed.
        """
        if self._db is None:
            raise RuntimeError("thread memory is not open")
        await self._db.execute(
            "INSERT INTO bot_threads (channel, thread_ts, touched_at) VALUES (?, ?, ?) "
            "ON CONFLICT (channel, thread_ts) DO UPDATE SET touched_at = excluded.touched_at",
            (channel, thread_ts, time.time()))
