"""The single writer connection to `state.db` (docs/architecture.md §7; docs/behaviour.md §0, §3, §12).

One aiosqlite connection per store, opened with `isolation_level=None` so that transactions are
explicit. Migrations are ordered `.sql` files in `migrations/` applied with `executescript` at
open, outside any transaction, and tracked with `PRAGMA user_version`.

Durability (docs/behaviour.md §12): WAL with `synchronous = FULL`, so a write that returned is on
disk and may be acknowledged to a platform. Throughput comes from **group commit**: every write
(`async with db.write():`, `write_one`) is a member of the group transaction open at that moment;
its statements run inside a savepoint of that transaction (a member that raises is rolled back to
its savepoint, the others keep their work), and it returns only after the group's one `COMMIT`
(one fsync for the whole group). A group is committed as soon as no other writer is waiting for
the connection — immediately when writes do not overlap — and after at most `GROUP_WINDOW_S`
once many writers overlap (stragglers join the open group meanwhile). Writers that arrive while
a group commits form the next group, so under load one fsync serves many writes. If the commit fails, every
member of the group raises: nothing of it was stored.

Readers share the connection: a read that runs while a group is open sees that group's rows
before they are committed. Callers act on what they wrote only after their write returned, so a
failed commit can never leave a cached state behind.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import re
import sqlite3
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path
from typing import Any, AsyncIterator, Iterable, Sequence

import aiosqlite

from .cpu import in_thread

log = logging.getLogger(__name__)

_MIGRATION_RE = re.compile(r"^(\d{4})_[A-Za-z0-9_]+\.sql$")


class StoreError(Exception):
    """The session store failed; `str(err)` is one line naming what failed."""


class SchemaTooNewError(StoreError):
    """state.db was written by a newer gateway (its `user_version` is above ours). Never run
    degraded on it: that would split the data between the newer schema and JSONL files."""


class CommitError(StoreError):
    """A group transaction could not be made durable; none of its writes were stored. `cause`
    is the error SQLite (or the journal) reported."""

    def __init__(self, message: str, cause: BaseException) -> None:
        super().__init__(message)
        self.cause = cause


def is_disk_full(exc: BaseException) -> bool:
    """True when `exc` (or what it wraps: a CommitError's cause, `__cause__`, `__context__`) says
    the disk or the database is full: SQLite's SQLITE_FULL ("database or disk is full") or an
    OSError ENOSPC / EDQUOT (the degraded journal). Such a failure is expected to pass once space
    is freed, so callers keep what they could not write and try again (docs/behaviour.md §12)."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, sqlite3.OperationalError) and "full" in str(current):
            return True
        if isinstance(current, OSError) and current.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        todo += [getattr(current, "cause", None), current.__cause__, current.__context__]
    return False


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


class _Group:
    """One group transaction: its members wait on `done` (result None, or the commit's error)."""

    __slots__ = ("done", "members", "kept", "opened", "closing", "timer")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.done: asyncio.Future = loop.create_future()
        self.members = 0  # writes that joined (savepoint names count them)
        self.kept = 0  # of them, those whose body succeeded
        self.opened = loop.time()
        self.closing = False  # a commit is scheduled; later members just join and wait
        self.timer: asyncio.TimerHandle | None = None


class Database:
    """The store's one writer connection, with group commit (module docstring).

    Args:
        path: the SQLite file (`config.db_path`).
        busy_timeout_s: seconds a statement waits on a lock held by another connection.

    Class attributes (a subclass may change them; the store never weakens them, docs/behaviour.md
    §12 — `benchmarks/bench_durability.py` subclasses them to measure the old setting beside):
        SYNCHRONOUS: the `PRAGMA synchronous` value, `"FULL"`.
        GROUP_COMMIT: share one transaction between overlapping writes (True).
        GROUP_WINDOW_S: the longest a group stays open waiting for overlapping writers (s).
        GROUP_SIBLINGS: members the previous group needs before a group waits for stragglers.
        GROUP_MAX: members after which a group commits at once.

    Attributes:
        commits: group transactions committed so far. writes: writes (members) committed.

    Raises (from `open`):
        sqlite3.Error / OSError: the file cannot be opened or is not a database.
        StoreError: the file's schema is newer than this code.
    """

    SYNCHRONOUS = "FULL"
    GROUP_COMMIT = True
    GROUP_WINDOW_S = 0.003
    GROUP_SIBLINGS = 5
    GROUP_MAX = 1000

    def __init__(self, path: Path, busy_timeout_s: float = 5.0) -> None:
        self.path = Path(path)
        self.busy_timeout_s = busy_timeout_s
        self.conn: aiosqlite.Connection | None = None
        # Serialises the connection between tasks: bodies of writes, reads and commits.
        self._lock = asyncio.Lock()
        self._group: _Group | None = None
        self._writers_waiting = 0
        self._last_group_size = 0
        self._commit_tasks: set[asyncio.Task] = set()
        self.commits = 0
        self.writes = 0
        # Session ids whose stored transcript cannot be read → why (only the degraded engine,
        # whose transcripts are files, ever has any).
        self.unreadable: dict[str, str] = {}

    @property
    def is_memory(self) -> bool:
        """True for an in-memory database (the degraded engine), which has no file of its own."""
        return False

    async def open(self) -> None:
        """Connect, set the PRAGMAs and run pending migrations."""
        conn = await self._connect()
        self.conn = conn
        try:
            conn.row_factory = aiosqlite.Row
            await self._configure(conn)
            await self._migrate()
            await self._after_migrate()
        except BaseException:
            await self.close()
            raise

    async def _connect(self) -> aiosqlite.Connection:
        _create_private(self.path)
        conn = self._daemon(aiosqlite.connect(str(self.path), isolation_level=None, timeout=self.busy_timeout_s))
        await conn
        # Transcripts are personal data: owner-only, like sessions.json. SQLite gives the
        # -wal and -shm files the main file's mode.
        try:
            os.chmod(self.path, 0o600)
        except OSError as exc:
            log.warning("cannot restrict permissions of %s: %s", self.path, exc)
        return conn

    @staticmethod
    def _daemon(conn: aiosqlite.Connection) -> aiosqlite.Connection:
        # aiosqlite >= 0.22 runs a non-daemon worker thread: a store left unclosed would make the
        # interpreter wait for it forever at exit. A daemon worker cannot hang exit, and every
        # committed transaction is already durable, so nothing depends on a clean stop.
        worker = getattr(conn, "_thread", None)
        if worker is not None and not worker.is_alive():
            worker.daemon = True
        return conn

    async def _configure(self, conn: aiosqlite.Connection) -> None:
        await conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
        mode = await self.fetchval("PRAGMA journal_mode = WAL")
        if str(mode).lower() != "wal":
            log.warning("state.db %s: journal_mode is %s, not WAL", self.path, mode)
        await conn.execute(f"PRAGMA synchronous = {self.SYNCHRONOUS}")
        await conn.execute("PRAGMA foreign_keys = ON")
        await conn.execute("PRAGMA secure_delete = ON")

    async def _after_migrate(self) -> None:
        """Hook for subclasses: runs once the schema is current."""

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
        """Commit the open group (if any), then close the connection (idempotent)."""
        if self.conn is not None and (self._group is not None or self._commit_tasks):
            group = self._group
            if group is not None and not group.closing:
                self._schedule_commit(group)
            await asyncio.gather(*list(self._commit_tasks), return_exceptions=True)
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

    # ---- writes ---------------------------------------------------------------------------

    @asynccontextmanager
    async def write(self) -> AsyncIterator[aiosqlite.Connection]:
        """One atomic write: the body's statements commit together, or not at all if the body
        raises (also on cancellation). Returns (leaves the block) only once they are durable.

        Raises:
            CommitError: the group's commit failed; nothing of this write was stored.
        """
        conn = self._require()
        if not self.GROUP_COMMIT:
            async with self._lock:
                await conn.execute("BEGIN IMMEDIATE")
                try:
                    yield conn
                except BaseException:
                    # Shield the rollback: a cancelled task must not leave the connection mid-transaction.
                    await asyncio.shield(self._rollback(conn))
                    raise
                await self._durable_commit(conn)
                self.commits += 1
                self.writes += 1
            return
        group = await self._join(savepoint=True)
        try:
            yield self.conn
        except BaseException as exc:
            await asyncio.shield(self._abort(conn, group, exc, statement=False))
            raise
        await self._leave(group)

    async def _join(self, *, savepoint: bool) -> _Group:
        """Take the connection and join (or open) the group transaction. With `savepoint`, the
        member's statements start at a savepoint of their own, so that they can be undone
        alone; a single statement needs none (SQLite undoes a failed statement by itself)."""
        conn = self._require()
        self._writers_waiting += 1
        try:
            await self._lock.acquire()
        finally:
            self._writers_waiting -= 1
        try:
            group = self._group
            if group is None:
                await conn.execute("BEGIN IMMEDIATE")
                group = self._group = _Group(asyncio.get_running_loop())
            elif savepoint:
                await conn.execute(f"SAVEPOINT w{group.members}")
            group.members += 1
        except BaseException:
            self._lock.release()
            raise
        return group

    async def _leave(self, group: _Group) -> None:
        """The member's statements succeeded: release the connection, wait for the commit."""
        try:
            group.kept += 1
            self._member_done(group)
        finally:
            self._lock.release()
        # Shielded: the future is shared by the whole group; a cancelled member must not cancel it.
        await asyncio.shield(group.done)

    async def _rollback(self, conn: aiosqlite.Connection) -> None:
        if conn.in_transaction:
            await conn.execute("ROLLBACK")

    async def _abort(self, conn: aiosqlite.Connection, group: _Group, exc: BaseException, *,
                     statement: bool) -> None:
        """The last member's body raised `exc`: undo its statements, then release the connection
        (run shielded, so a cancelled member still leaves the connection consistent)."""
        try:
            await self._undo_member(conn, group, group.members - 1, exc, statement=statement)
        finally:
            self._lock.release()

    async def _undo_member(self, conn: aiosqlite.Connection, group: _Group, member: int,
                           exc: BaseException, *, statement: bool) -> None:
        """Undo one member's statements (the lock is held). The first member owns the whole
        transaction so far; a later one its savepoint, or nothing when it was one `statement`
        (SQLite already undid it). If SQLite rolled the whole transaction back (it may, on a
        full disk or an I/O error), the group is lost: every member that already wrote gets a
        CommitError."""
        if member > 0 and conn.in_transaction:
            if not statement:
                await conn.execute(f"ROLLBACK TO w{member}")
            return
        self._group = None
        if group.timer is not None:
            group.timer.cancel()
        await self._rollback(conn)
        if group.kept and not group.done.done():
            group.done.set_exception(CommitError(f"state.db transaction rolled back: {exc}", exc))

    def _member_done(self, group: _Group) -> None:
        """A member's body finished (the lock is held): commit now, later, or let waiting
        writers join first (module docstring)."""
        if group.closing:
            return
        loop = asyncio.get_running_loop()
        age = loop.time() - group.opened
        if group.kept >= self.GROUP_MAX or age >= self.GROUP_WINDOW_S:
            self._schedule_commit(group)
        elif self._writers_waiting:
            return  # they join this group; the last of them decides
        elif self._last_group_size >= self.GROUP_SIBLINGS and self.GROUP_WINDOW_S > 0:
            # Many writers overlapped in the last group: hold this one open a little for
            # stragglers (PostgreSQL's commit_delay / commit_siblings idea). Fewer overlapping
            # writers commit at once: waiting would only add latency.
            if group.timer is None:
                group.timer = loop.call_later(self.GROUP_WINDOW_S - age, self._timer_fired, group)
        else:
            self._schedule_commit(group)

    def _timer_fired(self, group: _Group) -> None:
        group.timer = None
        if self._group is group and not group.closing:
            self._schedule_commit(group)

    def _schedule_commit(self, group: _Group) -> None:
        """Commit `group` in a task of its own, so that no member's cancellation can interrupt
        a COMMIT; writers already waiting for the connection still join the group first."""
        group.closing = True
        if group.timer is not None:
            group.timer.cancel()
            group.timer = None
        task = asyncio.get_running_loop().create_task(self._commit_group(group), name="state.db group commit")
        self._commit_tasks.add(task)
        task.add_done_callback(self._commit_tasks.discard)

    async def _commit_group(self, group: _Group) -> None:
        async with self._lock:
            if self._group is not group:
                return  # already rolled back (its members were told)
            self._group = None
            conn = self._require()
            try:
                await self._durable_commit(conn)
            except BaseException as exc:
                try:
                    await self._rollback(conn)
                except sqlite3.Error:
                    pass
                if not group.done.done():
                    group.done.set_exception(CommitError(f"commit of {group.kept} write(s) to "
                                                         f"{self.describe()} failed: {exc}", exc))
                if not isinstance(exc, Exception):
                    raise
                return
            self.commits += 1
            self.writes += group.kept
            self._last_group_size = group.members
            if not group.done.done():
                group.done.set_result(None)

    async def _durable_commit(self, conn: aiosqlite.Connection) -> None:
        """Make the open transaction durable (with FULL, `COMMIT` fsyncs the WAL)."""
        await conn.execute("COMMIT")

    def describe(self) -> str:
        """How log lines name this database (its path)."""
        return str(self.path)

    async def write_one(self, sql: str, params: Sequence[Any] | dict = ()) -> aiosqlite.Cursor:
        """One write statement, atomic and durable like `write()` (a group member of its own)."""
        conn = self._require()
        if not self.GROUP_COMMIT:
            async with self._lock:  # autocommit: the statement is its own transaction
                cursor = await conn.execute(sql, params)
            self.commits += 1
            self.writes += 1
            return cursor
        group = await self._join(savepoint=False)
        try:
            cursor = await conn.execute(sql, params)
        except BaseException as exc:
            await asyncio.shield(self._abort(conn, group, exc, statement=True))
            raise
        await self._leave(group)
        return cursor

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run one statement for many parameter rows as one write."""
        async with self.write() as conn:
            await conn.executemany(sql, rows)

    # ---- reads and maintenance ------------------------------------------------------------
    # These take the lock too, and see the open group's rows (module docstring). Never call
    # them from inside a `write()` block: use the yielded connection there.

    async def execute(self, sql: str, params: Sequence[Any] | dict = ()) -> aiosqlite.Cursor:
        """Run one statement outside `write()`: reads, PRAGMAs and index maintenance (rows of
        the stored tables are written through `write()` / `write_one()`)."""
        conn = self._require()
        async with self._lock:
            return await conn.execute(sql, params)

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

    async def snapshot_rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        """Rows of a long read (e.g. every route for sessions.json) from a consistent committed
        snapshot, read on a separate read-only connection in a worker thread so the writer is
        never blocked by it."""
        uri = self.path.resolve().as_uri() + "?mode=ro"  # percent-encoded: any file name works

        def read() -> list[tuple]:
            conn = sqlite3.connect(uri, uri=True, timeout=self.busy_timeout_s)
            try:
                return conn.execute(sql, params).fetchall()
            finally:
                conn.close()
        return await in_thread(read)
