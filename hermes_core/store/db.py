"""The single writer connection to `state.db` (docs/architecture.md §7; docs/behaviour.md §0, §3, §12).

One aiosqlite connection per store, opened with `isolation_level=None` so that transactions are
explicit. Migrations are ordered `.sql` files in `migrations/` applied with `executescript` at
open, outside any transaction, and tracked with `PRAGMA user_version`.

Durability (docs/behaviour.md §12): WAL with `synchronous = FULL`, so a write that returned is on
disk and may be acknowledged to a platform. Throughput comes from **group commit**: a write is a
function of the raw `sqlite3.Connection` (`await db.run(work)`, `write_one` for one statement)
queued for the next group; the writes waiting together run in **one call to the SQLite thread**
— `BEGIN IMMEDIATE`, the members, one `COMMIT` (one fsync for the whole group) — and each
returns only after that commit. A member that raises is undone alone, the others keep their work:
the group is then rolled back and run again with each member in a savepoint of its own (only
then: savepoints cost every write two statements more, `_group_in_thread`). A lone write therefore costs one thread call and one fsync; writes
that arrive while a group runs form the next group, so under load one call and one fsync serve
many writes, with no timer. If the commit fails, every member of the group raises: nothing of it
was stored. The long, rare writes that must await between statements (merges, erasure, index
rebuilds) use `async with db.write()`, a transaction of their own.

aiosqlite offers no public call that runs a function on its thread; `Connection._execute(fn,
*args)` is the method all of its own calls are made of, and `Connection._conn` the `sqlite3`
connection it runs them on. The store uses both for the group's one call and for `read` (a
query and the conversion of its rows in one call). The dependency is bounded below the next
aiosqlite release in `pyproject.toml`; the store tests fail if either changes.

Reads share the connection and its one thread call (`read`, `fetchall`…): a read is queued like a
write, and the flusher's call runs the waiting reads first, outside any transaction (each sees
what was committed before it, never a group half done), then the waiting writes' group. Under load
one call to the SQLite thread serves many reads and a group commit; a read that arrives alone
costs one call, with no `BEGIN` or `COMMIT`. Handing a call to the thread and waking the loop with
its result is what a read costs the event loop (a cache miss reads its transcript on every turn
once the sessions outnumber the cache), so many waiting reads must not cost as many calls.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import os
import re
import sqlite3
import stat
from contextlib import asynccontextmanager, closing
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable, Mapping, NamedTuple, Sequence, TypeVar

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


def caused_by(exc: BaseException, test: Callable[[BaseException], bool]) -> bool:
    """True when `exc` or what it wraps (a CommitError's `cause`, `__cause__`, `__context__`)
    passes `test`."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if test(current):
            return True
        todo += [getattr(current, "cause", None), current.__cause__, current.__context__]
    return False


def is_disk_full(exc: BaseException) -> bool:
    """True when `exc` (or what it wraps, `caused_by`) says the disk or the database is full:
    SQLite's SQLITE_FULL ("database or disk is full") or an OSError ENOSPC / EDQUOT (the degraded
    journal). Such a failure is expected to pass once space is freed, so callers keep what they
    could not write and try again (docs/behaviour.md §12)."""
    return caused_by(exc, lambda e: (isinstance(e, sqlite3.OperationalError) and "full" in str(e))
                      or (isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)))


def is_damaged(exc: BaseException) -> bool:
    """True when `exc` (or what it wraps, `caused_by`) is SQLite finding the file damaged:
    SQLITE_CORRUPT ("database disk image is malformed") or SQLITE_NOTADB. It does not pass by
    itself: the operator restores the file from a backup (docs/operations.md §1)."""
    # The primary code: the extended ones (SQLITE_CORRUPT_VTAB, _INDEX, …) keep it in the low byte.
    return caused_by(exc, lambda e: isinstance(e, sqlite3.DatabaseError) and (getattr(
        e, "sqlite_errorcode", None) or 0) & 0xFF in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB))


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


@functools.cache
def migrated_schema(version: int) -> Mapping[str, tuple[str, str | None]]:
    """`{name: (type, sql)}` of every table, index, trigger and view the migrations up to
    `version` leave, read from a scratch in-memory database that ran them (the schema's own
    definitions, never a second hand-written copy; computed once per version, so read-only:
    every caller shares it)."""
    with closing(sqlite3.connect(":memory:")) as scratch:
        for number, _name, sql in migrations():
            if number <= version:
                scratch.executescript(sql)
        return MappingProxyType({name: (kind, sql)
                                 for kind, name, sql in scratch.execute("SELECT type, name, sql FROM sqlite_master")})


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


Work = Callable[[sqlite3.Connection], Any]
T = TypeVar("T")


async def _to_the_end(work: Awaitable[Any]) -> Any:
    """Await `work` to its end even when the caller is cancelled meanwhile, then raise that
    cancellation: a `write()` block keeps the connection until its transaction is committed or
    rolled back, so no other write ever finds it mid-transaction (the degraded engine's commit
    awaits its journal write before the `COMMIT`)."""
    task = asyncio.ensure_future(work)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.cancelled():
                raise
            cancelled = True
        except BaseException:
            break
    if cancelled:
        raise asyncio.CancelledError
    return task.result()


def _settle(members: list[tuple[Work, asyncio.Future]], outcomes: list[tuple[bool, Any]]) -> None:
    """Give each waiting future its `(ok, result or exception)`; futures already done (their
    caller was cancelled meanwhile) are passed over. A StopIteration (a work function's `next()`
    on an empty result) is raised as a RuntimeError, as PEP 479 does for generators: a future
    refuses it, and the other futures of the call would never be answered."""
    for (_, future), (ok, value) in zip(members, outcomes):
        if future.done():
            continue
        if ok:
            future.set_result(value)
        elif isinstance(value, StopIteration):
            error = RuntimeError(f"a state.db work function raised StopIteration: {value!r}")
            error.__cause__ = value
            future.set_exception(error)
        else:
            future.set_exception(value)


def _fail(members: list[tuple[Work, asyncio.Future]], exc: BaseException) -> None:
    """`_settle` with the same exception for every member."""
    _settle(members, [(False, exc)] * len(members))


class WriteResult(NamedTuple):
    """What one write statement did (`write_one`): rows changed, and the rowid it inserted."""

    rowcount: int
    lastrowid: int | None


class Database:
    """The store's one writer connection, with group commit (module docstring).

    Args:
        path: the SQLite file (`config.db_path`).
        busy_timeout_s: seconds a statement waits on a lock held by another connection.
        read_only: open the existing file read-only (`mode=ro`; the read-only `sessions`
            commands, docs/operations.md §5): nothing is created, migrated, chmod-ed or written
            into its folder, and every write is refused by SQLite. In a folder this process
            cannot write (where SQLite cannot create the `-shm` file a WAL reader needs) the
            file is read as immutable, unless a `-wal` file holds writes not yet in it; elsewhere
            SQLite may leave an empty `-wal` and a `-shm` file beside it, as for any reader.

    Class attributes (a subclass may change them; the store never weakens them, docs/behaviour.md
    §12 — `benchmarks/bench_durability.py` subclasses them to measure the old setting beside):
        SYNCHRONOUS: the `PRAGMA synchronous` value, `"FULL"`.
        GROUP_COMMIT: share one transaction between the writes waiting together (True); False
            gives every write a transaction (and a commit) of its own.

    Attributes:
        commits: transactions committed so far. writes: writes (members) committed.

    Raises (from `open`):
        sqlite3.Error / OSError: the file cannot be opened or is not a database.
        StoreError: the file's schema is newer than this code.
    """

    SYNCHRONOUS = "FULL"
    GROUP_COMMIT = True
    # The SQLite engine commits in the group's own thread call; the degraded engine's commit
    # writes its journal first (`_durable_commit`), so it commits after the call.
    _COMMIT_IN_THREAD = True

    def __init__(self, path: Path, busy_timeout_s: float = 5.0, *, read_only: bool = False) -> None:
        self.path = Path(path)
        self.busy_timeout_s = busy_timeout_s
        # Not `read_only`: the degraded engine (journal.py) names its own "write no file" so.
        self.read_only_file = read_only
        self.conn: aiosqlite.Connection | None = None
        # Serialises the connection between tasks: the flusher's thread call, a `write()` block, `execute`.
        self._lock = asyncio.Lock()
        # Writes waiting for the next group, and reads for the next call: (work, future of its result).
        self._writes: list[tuple[Work, asyncio.Future]] = []
        self._reads: list[tuple[Work, asyncio.Future]] = []
        self._flusher: asyncio.Task | None = None
        self.commits = 0
        self.writes = 0
        # Session ids whose stored transcript cannot be read → why (only the degraded engine,
        # whose transcripts are files, ever has any).
        self.unreadable: dict[str, str] = {}
        # Session ids whose earlier transcript is not in this database (only the degraded engine:
        # the sessions it took from sessions.json, whose earlier messages are in state.db).
        self.earlier_elsewhere: set[str] = set()

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
            await self._check_writable()
            await self._after_migrate()
        except BaseException:
            await self.close()
            raise

    async def _connect(self) -> aiosqlite.Connection:
        if self.read_only_file:
            return await self._connect_read_only()
        _create_private(self.path)
        conn = self._daemon(aiosqlite.connect(str(self.path), isolation_level=None, timeout=self.busy_timeout_s))
        await conn
        # Transcripts are personal data: owner-only, like sessions.json. SQLite gives the
        # -wal and -shm files the main file's mode. Group and others lose their bits; the
        # owner's stay as they are (a file made read-only is not made writable behind the
        # operator's back: `_check_writable` then runs the store degraded).
        try:
            mode = stat.S_IMODE(os.stat(self.path).st_mode)
            if mode & 0o077:
                os.chmod(self.path, mode & ~0o077)
        except OSError as exc:
            log.warning("cannot restrict permissions of %s: %s", self.path, exc)
        return conn

    async def _connect_read_only(self) -> aiosqlite.Connection:
        """The `read_only` connection (class docstring).

        Raises:
            StoreError: the folder cannot be written and a `-wal` file holds writes (an
                immutable read would not see them).
            sqlite3.Error: the file cannot be opened or is not a database.
        """
        uri = self.path.resolve().as_uri() + "?mode=ro"  # percent-encoded: any file name works
        # A plain read-only connection first: SQLite's locks keep each read whole while a gateway
        # writes, starts or checkpoints meanwhile. Like any reader of a WAL database it may
        # leave an empty -wal and a -shm file beside state.db (SQLite gives them the file's
        # owner, also when run as root); the gateway uses them at its next start.
        conn = await self._open_uri(uri)
        try:
            await (await conn.execute("SELECT count(*) FROM sqlite_master")).close()  # reads the -wal index
            return conn
        except sqlite3.OperationalError as exc:
            await conn.close()
            # Without its -shm file, which that connection needs: the folder refuses it (SQLite
            # says READONLY_DIRECTORY, or CANTOPEN beside a -wal).
            shm = self.path.with_name(self.path.name + "-shm")
            if (getattr(exc, "sqlite_errorname", "") not in ("SQLITE_READONLY_DIRECTORY", "SQLITE_CANTOPEN")
                    or shm.exists()):
                raise
        wal = self.path.with_name(self.path.name + "-wal")
        if wal.exists() and wal.stat().st_size:
            # Said after "state.db <path> cannot be opened:" (SessionStore), hence "it".
            raise StoreError(f"it cannot be read here: its folder is not writable and {wal.name} holds writes not "
                             "yet in it (a gateway that can write the folder takes them in at its next start)")
        # A folder this process cannot write, and no -wal holding writes: the file alone is the
        # whole database, read as immutable (no -shm needed). Only a gateway of another user
        # could write there meanwhile: its checkpoint could then make this read fail.
        return await self._open_uri(uri + "&immutable=1")

    async def _open_uri(self, uri: str) -> aiosqlite.Connection:
        conn = self._daemon(aiosqlite.connect(uri, uri=True, isolation_level=None, timeout=self.busy_timeout_s))
        await conn
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
        if self.read_only_file:  # the rest concerns writes (and setting WAL would be one)
            return
        mode = await self.fetchval("PRAGMA journal_mode = WAL")
        if str(mode).lower() != "wal":
            log.warning("state.db %s: journal_mode is %s, not WAL", self.path, mode)
        await conn.execute(f"PRAGMA synchronous = {self.SYNCHRONOUS}")
        await conn.execute("PRAGMA foreign_keys = ON")
        await conn.execute("PRAGMA secure_delete = ON")

    async def _check_writable(self) -> None:
        """Raise when SQLite could open the file for reading only (its mode, a read-only mount,
        a user who may not write it): every write would fail, so the store says so at the open
        (a gateway then runs degraded, docs/behaviour.md §12) rather than refusing each message.
        Learnt by writing the schema version it has, in a transaction rolled back; a file
        another connection is writing (SQLITE_BUSY, not waited for) counts as writable.

        Raises:
            StoreError: SQLite opened it for reading only (SQLITE_READONLY).
        """
        if self.read_only_file:
            return
        assert self.conn is not None
        version = int(await self.fetchval("PRAGMA user_version") or 0)
        await self.conn.execute("PRAGMA busy_timeout = 0")
        try:
            await self.conn.execute("BEGIN IMMEDIATE")
            await self.conn.execute(f"PRAGMA user_version = {version}")
        except sqlite3.OperationalError as exc:
            if not str(getattr(exc, "sqlite_errorname", "")).startswith("SQLITE_READONLY"):
                return  # busy: another connection writes it, so it can be written
            # Said after "state.db <path> cannot be opened:" (SessionStore), hence "it".
            raise StoreError(f"it opens for reading only ({exc}): `hermes-gateway doctor` says why") from exc
        finally:
            if self.conn.in_transaction:
                await self.conn.execute("ROLLBACK")
            await self.conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")

    async def _after_migrate(self) -> None:
        """Hook for subclasses: runs once the schema is current."""

    async def _migrate(self) -> None:
        assert self.conn is not None
        current = int(await self.fetchval("PRAGMA user_version") or 0)
        known = migrations()
        newest = known[-1][0] if known else 0
        if current > newest:
            raise SchemaTooNewError(
                f"{self.describe()} has schema version {current}, newer than this gateway's {newest}; "
                f"upgrade hermes-gateway-core")
        if self.read_only_file and current < newest:
            # Said after "state.db <path> cannot be opened:" (SessionStore), hence "it".
            raise StoreError(f"it has schema version {current}, older than this gateway's {newest}, and a read-only "
                             "command does not upgrade it: the next start of the gateway does")
        for version, name, sql in known:
            if version <= current:
                continue
            log.info("%s: applying migration %s", self.describe(), name)
            # executescript commits any open transaction first; the script carries its own
            # transaction so that a failing migration leaves the previous version intact.
            script = f"BEGIN IMMEDIATE;\n{sql}\nPRAGMA user_version = {version};\nCOMMIT;"
            try:
                await self.conn.executescript(script)
            except sqlite3.Error as exc:
                if self.conn.in_transaction:
                    await self.conn.execute("ROLLBACK")
                raise StoreError(f"{self.describe()}: migration {name} failed: {exc}") from exc

    async def close(self) -> None:
        """Commit the writes still waiting (if any), then close the connection (idempotent)."""
        while self._flusher is not None:
            await asyncio.gather(self._flusher, return_exceptions=True)
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

    async def run(self, work: Work) -> Any:
        """One atomic, durable write: `work(conn)` runs on the SQLite thread with the raw
        `sqlite3.Connection` (statements only: no transaction control, no awaits) as a member of
        the next group transaction, and its return value is returned once that group is
        committed. If `work` raises, its statements are undone alone (the group runs again with
        a savepoint per member) and the exception is raised here; the other members keep theirs.
        `work` may therefore run more than once: it must have no effect beyond its statements.

        The writes waiting together form one group: one call to the SQLite thread runs `BEGIN
        IMMEDIATE`, every member, and the `COMMIT` (one fsync). A write that arrives while a
        group runs waits for the next one, so under load one commit serves many writes, and a
        lone write costs one call.

        Raises:
            CommitError: the group's commit failed; nothing of this write was stored.
            sqlite3.Error / OSError: from `work` (nothing of it was stored), or the group could
                not begin (e.g. the file is locked by another process past `busy_timeout_s`).
            StoreError: the store is not open.
        """
        # A caller cancelled before its group began is left out of it; once the group runs, the
        # write is committed with it even if the caller no longer waits.
        return await self._enqueue(self._writes, work)

    async def _enqueue(self, queue: list[tuple[Work, asyncio.Future]], work: Work) -> Any:
        """Queue `work` for the flusher's next call (starting the flusher) and await its result."""
        self._require()
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        queue.append((work, future))
        if self._flusher is None:
            self._flusher = loop.create_task(self._flush(), name="state.db group commit")
        return await future

    async def _flush(self) -> None:
        """Run the waiting reads and writes, one thread call after another, until none is left
        (module docstring)."""
        try:
            while self._writes or self._reads:
                async with self._lock:
                    reads = [r for r in self._reads if not r[1].cancelled()]
                    self._reads = []
                    live = [m for m in self._writes if not m[1].cancelled()]
                    members = live if self.GROUP_COMMIT else live[:1]
                    self._writes = live[len(members):]  # later arrivals form the next group
                    if reads or members:
                        await self._run_call(reads, members)
        finally:
            self._flusher = None

    async def _run_call(self, reads: list[tuple[Work, asyncio.Future]],
                        members: list[tuple[Work, asyncio.Future]]) -> None:
        """One call to the SQLite thread (the lock is held): the reads, then the group transaction
        of `members` and its durable commit. A group that fails as a whole (it could not begin,
        its commit failed) fails its members only: the reads keep their results."""
        conn = self._require()
        try:
            read_outcomes, group = await conn._execute(
                self._call_in_thread, conn._conn, [work for work, _ in reads],
                [work for work, _ in members], self._COMMIT_IN_THREAD)
        except BaseException as exc:
            _fail(reads + members, exc)
            if not isinstance(exc, Exception):
                raise
            return
        _settle(reads, read_outcomes)
        if group is None:
            return
        ok, value = group
        if not ok:
            _fail(members, value)
            return
        outcomes, kept = value
        try:
            if not self._COMMIT_IN_THREAD and kept:
                await self._commit_outcomes(conn, outcomes, kept)
            elif not self._COMMIT_IN_THREAD:
                await self._rollback(conn)
        except BaseException as exc:
            _fail(members, exc)
            if not isinstance(exc, Exception):
                raise
            return
        committed = sum(1 for ok, _ in outcomes if ok)
        if committed:
            self.commits += 1
            self.writes += committed
        _settle(members, outcomes)

    def _call_in_thread(self, raw: sqlite3.Connection, reads: list[Work], works: list[Work],
                        commit: bool) -> tuple[list[tuple[bool, Any]], tuple[bool, Any] | None]:
        """Runs on the SQLite thread: each read (outside any transaction), then the group of
        `works` (`_group_in_thread`) unless there is none. Returns one `(ok, result or
        exception)` per read, and the group's `(True, (outcomes, kept))` or `(False, exception)`
        (None without writes)."""
        read_outcomes: list[tuple[bool, Any]] = []
        for work in reads:
            try:
                read_outcomes.append((True, work(raw)))
            except Exception as exc:
                read_outcomes.append((False, exc))
        if not works:
            return read_outcomes, None
        try:
            return read_outcomes, (True, self._group_in_thread(raw, works, commit))
        except Exception as exc:
            # Failed as a whole (e.g. a statement of the re-run): leave no transaction open for
            # the next call's reads and group.
            try:
                self._rollback_in_thread(raw)
            except sqlite3.Error:
                log.exception("state.db: rolling back a failed group failed")
            return read_outcomes, (False, exc)

    @staticmethod
    def _rollback_in_thread(raw: sqlite3.Connection) -> None:
        """Roll the open transaction back, if SQLite has not already done so."""
        if raw.in_transaction:
            raw.execute("ROLLBACK")

    def _group_in_thread(self, raw: sqlite3.Connection, works: list[Work],
                         commit: bool) -> tuple[list[tuple[bool, Any]], int]:
        """Runs on the SQLite thread: `BEGIN IMMEDIATE`, the members, `COMMIT`.
        Returns one `(ok, result or exception)` per member and how many are in the transaction.

        The members first run one after the other with nothing between them: members rarely
        fail, and a savepoint around each cost two statements more per write — at 10,000
        sessions, with thousands of writes per group, about a tenth of the pipeline's throughput
        (benchmarks/bench_throughput.py). Only if one raises is that transaction rolled back and
        the group run again, each member in a savepoint of its own (`_members_one_by_one`), so
        the failing one is undone alone. A work function is statements only (`run`): running it
        again after a rollback repeats nothing."""
        raw.execute("BEGIN IMMEDIATE")
        values = self._members_at_once(raw, works) if len(works) > 1 else None
        if values is not None:
            outcomes, kept = [(True, value) for value in values], list(range(len(works)))
        else:  # a lone member, or the run above stopped: its transaction is undone first
            if len(works) > 1:
                self._rollback_in_thread(raw)
                raw.execute("BEGIN IMMEDIATE")
            outcomes, kept = self._members_one_by_one(raw, works)
        if not commit:
            return outcomes, len(kept)
        if not kept:
            raw.execute("ROLLBACK")
            return outcomes, 0
        try:
            raw.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback_in_thread(raw)
            failed = CommitError(f"commit of {len(kept)} write(s) to {self.describe()} failed: {exc}", exc)
            for index in kept:
                outcomes[index] = (False, failed)
            return outcomes, 0
        return outcomes, len(kept)

    @staticmethod
    def _members_at_once(raw: sqlite3.Connection, works: list[Work]) -> list[Any] | None:
        """Each member's result, in one run with no savepoints; None as soon as one raises or the
        transaction is no longer open (SQLite rolled it back itself — a full disk, an I/O error —
        under a member that caught the error: the next members must not run outside it, each
        committed on its own). The transaction is then the caller's to roll back."""
        values = []
        for work in works:
            try:
                values.append(work(raw))
            except Exception:
                return None
            if not raw.in_transaction:
                return None
        return values

    @staticmethod
    def _members_one_by_one(raw: sqlite3.Connection, works: list[Work]) -> tuple[list[tuple[bool, Any]], list[int]]:
        """Each member in a savepoint of its own (a lone member in none), in the open
        transaction: one that raises is rolled back to it and the others keep their work.
        Returns one `(ok, result or exception)` per member and the indexes in the transaction.
        A member whose statements made SQLite roll the whole transaction back (a full disk, an
        I/O error) takes the members before it down with it: they get a CommitError, and the
        next members start a new transaction."""
        outcomes: list[Any] = [None] * len(works)
        kept: list[int] = []
        # A lone member needs no savepoint: undoing it is rolling the whole transaction back,
        # which the caller does when no member is kept.
        alone = len(works) == 1
        for index, work in enumerate(works):
            if not alone:
                raw.execute("SAVEPOINT member")
            try:
                value = work(raw)
            except Exception as exc:
                outcomes[index] = (False, exc)
                if raw.in_transaction:
                    if not alone:
                        raw.execute("ROLLBACK TO member")
                        raw.execute("RELEASE member")
                    continue
                lost = CommitError(f"state.db transaction rolled back: {exc}", exc)
                for earlier in kept:
                    outcomes[earlier] = (False, lost)
                kept = []
                raw.execute("BEGIN IMMEDIATE")
                continue
            if not alone:
                raw.execute("RELEASE member")
            outcomes[index] = (True, value)
            kept.append(index)
        return outcomes, kept

    async def _commit_outcomes(self, conn: aiosqlite.Connection, outcomes: list[tuple[bool, Any]],
                               kept: int) -> None:
        """Commit the open group transaction after the thread call (engines whose commit is not
        a plain `COMMIT`); on failure every kept member gets a CommitError."""
        try:
            await self._durable_commit(conn)
        except Exception as exc:
            try:
                await self._rollback(conn)
            except sqlite3.Error:
                pass
            failed = CommitError(f"commit of {kept} write(s) to {self.describe()} failed: {exc}", exc)
            for index, (ok, _) in enumerate(outcomes):
                if ok:
                    outcomes[index] = (False, failed)

    @asynccontextmanager
    async def write(self) -> AsyncIterator[aiosqlite.Connection]:
        """One atomic write whose body awaits statements on the yielded aiosqlite connection
        (the long, rare writes: merges, erasure, index rebuilds): a transaction of its own,
        holding the connection until it is committed. The body's statements commit together, or
        not at all if it raises (also on cancellation). Everything on the per-message path uses
        `run` / `write_one`, which share commits.

        Raises:
            CommitError: the commit failed; nothing of this write was stored.
        """
        conn = self._require()
        async with self._lock:
            await conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                await _to_the_end(self._rollback(conn))
                raise
            await _to_the_end(self._end_write(conn))

    async def _end_write(self, conn: aiosqlite.Connection) -> None:
        """Commit a `write()` block's transaction, or roll it back when the commit fails."""
        try:
            await self._durable_commit(conn)
        except Exception as exc:
            await self._rollback(conn)
            raise CommitError(f"commit of 1 write(s) to {self.describe()} failed: {exc}", exc) from exc
        self.commits += 1
        self.writes += 1

    async def _rollback(self, conn: aiosqlite.Connection) -> None:
        if conn.in_transaction:
            await conn.execute("ROLLBACK")

    async def _durable_commit(self, conn: aiosqlite.Connection) -> None:
        """Make the open transaction durable (with FULL, `COMMIT` fsyncs the WAL)."""
        await conn.execute("COMMIT")

    def describe(self) -> str:
        """How log lines and errors name this database (`state.db <path>`; the degraded engine
        names its journal)."""
        return f"state.db {self.path}"

    async def write_one(self, sql: str, params: Sequence[Any] | dict = ()) -> WriteResult:
        """One write statement, atomic and durable like `run` (a group member of its own).
        Returns its WriteResult (`rowcount`, `lastrowid`)."""
        def statement(raw: sqlite3.Connection) -> WriteResult:
            cursor = raw.execute(sql, params)
            return WriteResult(cursor.rowcount, cursor.lastrowid)
        return await self.run(statement)

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run one statement for many parameter rows as one write."""
        rows = list(rows)

        def statements(raw: sqlite3.Connection) -> None:
            raw.executemany(sql, rows)
        await self.run(statements)

    # ---- reads and maintenance ------------------------------------------------------------
    # These wait for the connection too and see only committed rows (module docstring). Never
    # call them from inside a `write()` block (it holds the connection): use the yielded one.

    async def execute(self, sql: str, params: Sequence[Any] | dict = ()) -> aiosqlite.Cursor:
        """Run one statement outside `write()`: reads, PRAGMAs and index maintenance (rows of
        the stored tables are written through `write()` / `write_one()`)."""
        conn = self._require()
        async with self._lock:
            return await conn.execute(sql, params)

    async def read(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """A read done and turned into its result on the SQLite thread, in the flusher's next
        call with the other waiting reads and writes (module docstring): `work(conn)` gets the
        raw `sqlite3.Connection` (queries only: it must not write or control transactions) and
        its return value is returned. For reads whose rows are converted one by one (a
        transcript reload, docs/behaviour.md §8): the rows never cross to the event loop as row
        objects, and the loop does not run the conversion.

        Raises:
            sqlite3.Error: from the query. Whatever `work` raises. StoreError: the store is not
                open.
        """
        return await self._enqueue(self._reads, work)

    async def fetchall(self, sql: str, params: Sequence[Any] | dict = ()) -> list[aiosqlite.Row]:
        """All rows of a query (`aiosqlite.Row`, indexable by position and name), read as `read`
        reads."""
        def query(raw: sqlite3.Connection) -> list[aiosqlite.Row]:
            with closing(raw.execute(sql, params)) as cursor:
                return cursor.fetchall()
        return await self.read(query)

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
