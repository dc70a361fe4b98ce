"""The single writer connection to `state.db` (docs/architecture.md §7; docs/behaviour.md §0, §3).

One aiosqlite connection per store, opened with `isolation_level=None` so that transactions are
explicit: every write goes through `async with db.write():` (`BEGIN IMMEDIATE` … `COMMIT`, or
`ROLLBACK` on any exception). Migrations are ordered `.sql` files in `migrations/` applied with
`executescript` at open, outside any transaction, and tracked with `PRAGMA user_version`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import sqlite3
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path
from typing import Any, AsyncIterator, Iterable, Sequence

import aiosqlite

log = logging.getLogger(__name__)

_MIGRATION_RE = re.compile(r"^(\d{4})_[A-Za-z0-9_]+\.sql$")


class StoreError(Exception):
    """The session store failed; `str(err)` is one line naming what failed."""


class SchemaTooNewError(StoreError):
    """state.db was written by a newer gateway (its `user_version` is above ours). Never run
    degraded on it: that would split the data between the newer schema and JSONL files."""


def migrations() -> list[tuple[int, str, str]]:
    """Return the packaged migrations as `(version, file name, sql)`, ordered by version."""
    found = []
    for item in resources.files("hermes_core.store.migrations").iterdir():
        match = _MIGRATION_RE.match(item.name)
        if match:
            found.append((int(match.group(1)), item.name, item.read_text(encoding="utf-8")))
    found.sort()
    return found


def schema_version() -> int:
    """The newest schema version this code knows (the last migration's number)."""
    return migrations()[-1][0]


def _create_private(path: Path) -> None:
    """Create an empty `path` with mode 0600 unless it exists, so state.db is never readable by
    others, not even between creation and the chmod after connecting. SQLite gives the `-wal`
    and `-shm` files the main file's mode. (An empty file is a valid new database.)"""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    except OSError:
        return  # connecting reports the real problem (missing folder, permissions) in one line
    os.close(fd)


class Database:
    """The store's one writer connection.

    Args:
        path: the SQLite file (`config.db_path`).
        busy_timeout_s: seconds a statement waits on a lock held by another connection.

    Raises (from `open`):
        sqlite3.Error / OSError: the file cannot be opened or is not a database.
        StoreError: the file's schema is newer than this code.
    """

    def __init__(self, path: Path, busy_timeout_s: float = 5.0) -> None:
        self.path = Path(path)
        self.busy_timeout_s = busy_timeout_s
        self.conn: aiosqlite.Connection | None = None
        # Serialises transactions of different tasks on the one connection.
        self._lock = asyncio.Lock()

    async def open(self) -> None:
        """Connect, set the PRAGMAs and run pending migrations."""
        _create_private(self.path)
        conn = aiosqlite.connect(str(self.path), isolation_level=None, timeout=self.busy_timeout_s)
        # aiosqlite >= 0.22 runs a non-daemon worker thread: a store left unclosed would make the
        # interpreter wait for it forever at exit. A daemon worker cannot hang exit, and every
        # committed transaction is already in the WAL, so nothing durable depends on a clean stop.
        worker = getattr(conn, "_thread", None)
        if worker is not None and not worker.is_alive():
            worker.daemon = True
        try:
            await conn
        except BaseException:
            raise
        self.conn = conn
        try:
            # Transcripts are personal data: owner-only, like sessions.json. SQLite gives the
            # -wal and -shm files the main file's mode.
            try:
                os.chmod(self.path, 0o600)
            except OSError as exc:
                log.warning("cannot restrict permissions of %s: %s", self.path, exc)
            conn.row_factory = aiosqlite.Row
            await conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
            mode = await self.fetchval("PRAGMA journal_mode = WAL")
            if str(mode).lower() != "wal":
                log.warning("state.db %s: journal_mode is %s, not WAL", self.path, mode)
            await conn.execute("PRAGMA synchronous = NORMAL")
            await conn.execute("PRAGMA foreign_keys = ON")
            await conn.execute("PRAGMA secure_delete = ON")
            await self._migrate()
        except BaseException:
            await self.close()
            raise

    async def _migrate(self) -> None:
        assert self.conn is not None
        current = int(await self.fetchval("PRAGMA user_version") or 0)
        known = migrations()
        newest = known[-1][0] if known else 0
        if current > newest:
            raise SchemaTooNewError(
                f"state.db {self.path} has schema version {current}, newer than this gateway's {newest}; "
                f"upgrade hermes-gateway-core")
        for version, name, sql in known:
            if version <= current:
                continue
            log.info("state.db %s: applying migration %s", self.path, name)
            # executescript commits any open transaction first; the script carries its own
            # transaction so that a failing migration leaves the previous version intact.
            script = f"BEGIN IMMEDIATE;\n{sql}\nPRAGMA user_version = {version};\nCOMMIT;"
            try:
                await self.conn.executescript(script)
            except sqlite3.Error as exc:
                if self.conn.in_transaction:
                    await self.conn.execute("ROLLBACK")
                raise StoreError(f"state.db {self.path}: migration {name} failed: {exc}") from exc

    async def close(self) -> None:
        """Close the connection (idempotent)."""
        conn, self.conn = self.conn, None
        if conn is not None:
            await conn.close()

    @property
    def is_open(self) -> bool:
        """True between `open()` and `close()`."""
        return self.conn is not None

    def _require(self) -> aiosqlite.Connection:
        if self.conn is None:
            raise StoreError("the session store is not open")
        return self.conn

    @asynccontextmanager
    async def write(self) -> AsyncIterator[aiosqlite.Connection]:
        """`BEGIN IMMEDIATE` … `COMMIT`; `ROLLBACK` if the body raises (also on cancellation)."""
        conn = self._require()
        async with self._lock:
            await conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                # Shield the rollback: a cancelled task must not leave the connection mid-transaction.
                await asyncio.shield(conn.execute("ROLLBACK"))
                raise
            else:
                await conn.execute("COMMIT")

    async def write_one(self, sql: str, params: Sequence[Any] | dict = ()) -> aiosqlite.Cursor:
        """One write statement as its own (implicit) transaction: atomic like `write()`, but a
        single round trip to the connection thread, which is what per-message writes use."""
        conn = self._require()
        async with self._lock:
            return await conn.execute(sql, params)

    # Statements below take the lock too: a statement run while another task is inside
    # `write()` would otherwise join (and be rolled back with) that task's transaction.
    # Never call them from inside a `write()` block: use the yielded connection there.

    async def execute(self, sql: str, params: Sequence[Any] | dict = ()) -> aiosqlite.Cursor:
        """Run one statement in autocommit mode."""
        conn = self._require()
        async with self._lock:
            return await conn.execute(sql, params)

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run one statement for many parameter rows (one round trip)."""
        conn = self._require()
        async with self._lock:
            await conn.executemany(sql, rows)

    async def fetchall(self, sql: str, params: Sequence[Any] | dict = ()) -> list[aiosqlite.Row]:
        """All rows of a query (`aiosqlite.Row`, indexable by position and name)."""
        conn = self._require()
        async with self._lock:
            return list(await conn.execute_fetchall(sql, params))

    async def fetchone(self, sql: str, params: Sequence[Any] | dict = ()) -> aiosqlite.Row | None:
        """The first row of a query, or None."""
        rows = await self.fetchall(sql, params)
        return rows[0] if rows else None

    async def fetchval(self, sql: str, params: Sequence[Any] | dict = ()) -> Any:
        """The first column of the first row, or None."""
        row = await self.fetchone(sql, params)
        return row[0] if row is not None else None
