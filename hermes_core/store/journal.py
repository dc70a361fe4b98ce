"""Degraded mode on the same engine (docs/behaviour.md §12; seed §3 "falls back to JSONL").

When `state.db` cannot be opened, the store runs the same schema and the same SQL
(`SqliteBackend`) on an in-memory SQLite database, `JournaledDatabase`, made durable by
append-only JSONL files in the sessions folder:

* `{session_id}.jsonl` — the transcripts, as the seed says: one line per stored image of a
  `messages` row: the row's columns (without `session_id`, named by the file), `active`, and
  `tx` / `run`, the group transaction that wrote it and the process run it belongs to;
* `journal.jsonl` — one header line `{"journal": 1, "id", "created"}`, then one line per
  committed group transaction: `{"tx", "run", "put": {table: [row, ...]}, "del": {table:
  [key, ...]}, "transcripts": [session_id, ...], "lines": {session_id: n}}` for the other tables (`routes`, `sessions`, `inbound` —
  intake and dedupe —, `delivery_obligations` — the ledger). The seed transaction (the routes
  sessions.json held when the run began) carries `"seed": true`. `lines` counts the transcript
  lines the transaction wrote to each file, so a committed line that later cannot be read (a
  damaged or missing line in the middle of a transcript) is told from a line of a transaction
  cut short (a journal written before `lines` existed cannot tell them apart).

Every row keeps the id SQLite gave it in memory. Capture is done by temporary triggers that
note the key of every row a transaction changes; at commit the rows' final images are appended
— transcript lines first, fsynced, then the journal line, fsynced — and only then is the
in-memory transaction committed. The journal line is the commit record: at the next start in
degraded mode the database is rebuilt from the journal's transactions in order and from the
transcript lines of those transactions only (same `tx` and `run`), so a transaction cut short by
a crash (transcript lines written, journal line not) is ignored as a whole, even once a later
run has used its number again. A torn last line is skipped; the next append starts on a new
line. A damaged header (line 1) stops both the rebuild and the merge, naming the repair
(`read_journal`): its id is never guessed at. A transcript missing a line of a committed transaction is *damaged*
(`TranscriptRead.missing`): the rebuild makes that session's transcript reads fail, the merge
keeps the file aside (docs/behaviour.md §12).

`merge.merge_journal` replays the same images into `state.db` at the next healthy start.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import secrets
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

import aiosqlite

from ..model import format_timestamp, utc_now
from .db import Database, StoreError
from .files import write_atomic

log = logging.getLogger(__name__)

JOURNAL_FILE_NAME = "journal.jsonl"
JOURNAL_FORMAT = 1
TRANSCRIPT_SUFFIX = ".jsonl"
# A transcript line holds at least one of these: ours have `tx`, `run` and `id`, an older
# gateway's messages (seed §3 legacy transcripts) a `role`.
TRANSCRIPT_LINE_FIELDS = frozenset({"tx", "run", "id", "role"})
# Journaled tables and their primary key columns. `meta` (facts about the store itself) and the
# full-text index (derived from `messages`, with its mark `fts_progress`) are not journaled.
TABLE_KEYS: dict[str, tuple[str, ...]] = {
    "sessions": ("session_id",), "routes": ("session_key",), "messages": ("id",), "inbound": ("id",),
    "delivery_obligations": ("id",), "identity_aliases": ("platform", "alias_id")}


# ---- reading ----------------------------------------------------------------------------------

@dataclass
class Transaction:
    """One committed group transaction of the journal (see the module docstring)."""

    number: int
    run: str = ""
    put: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    delete: dict[str, list[list[Any]]] = field(default_factory=dict)  # primary key values per row
    transcripts: list[str] = field(default_factory=list)
    seed: bool = False
    # Transcript lines written per session id; None on a line of a journal written before the count.
    lines: dict[str, int] | None = None


@dataclass
class JournalState:
    """What `read_journal` found: the journal's id, its committed transactions in order, whether
    a merge sealed it (`{"merged": ..., "damaged": [session id, ...]}` line), and the highest
    tx number committed."""

    path: Path
    journal_id: str
    transactions: list[Transaction]
    sealed: bool
    last_tx: int
    # Session ids whose transcript a merge found damaged (from the seal line; the merge adds to it).
    damaged: set[str] = field(default_factory=set)
    # Unreadable lines followed by a transaction of the same run: committed records (read_journal).
    damaged_lines: list[int] = field(default_factory=list)

    def committed(self, after_tx: int = 0) -> set[tuple[str, int]]:
        """`(run, tx)` of the committed transactions after `after_tx`."""
        return {(tx.run, tx.number) for tx in self.transactions if tx.number > after_tx}

    def expected_lines(self, session_id: str, after_tx: int = 0) -> dict[tuple[str, int], int]:
        """`{(run, tx): n}`: the lines each committed transaction after `after_tx` wrote to the
        transcript of `session_id` (transactions that did not count them are left out)."""
        return {(tx.run, tx.number): tx.lines[session_id] for tx in self.transactions
                if tx.number > after_tx and tx.lines and session_id in tx.lines}

    def transcript_ids(self, after_tx: int = 0) -> list[str]:
        """Session ids whose transcript files hold lines of transactions after `after_tx`."""
        seen: dict[str, None] = {}
        for tx in self.transactions:
            if tx.number > after_tx:
                seen.update(dict.fromkeys(tx.transcripts))
        return list(seen)


def _json_object(raw: bytes) -> dict[str, Any]:
    """One JSONL line as a JSON object. Raises ValueError (UnicodeDecodeError is one): not
    UTF-8, not JSON, or not an object."""
    item = json.loads(raw)
    if not isinstance(item, dict):
        raise ValueError("not a JSON object")
    return item


def _json_lines(path: Path, bad: list[int] | None = None, *, from_line: int = 1,
                empty_is_bad: bool = False) -> Iterator[tuple[int, dict[str, Any]]]:
    """`(line number, object)` of a JSONL file from line `from_line` on; torn or foreign lines
    are skipped (logged, and their numbers appended to `bad` when given). Empty lines are passed
    over, or with `empty_is_bad` (a file whose writer never writes one) skipped as unreadable
    ones are. A missing file has no lines."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    pieces = data.split(b"\n")
    for number, raw in enumerate(pieces, 1):
        if number < from_line:
            continue
        if not raw.strip():
            # The piece after the last newline is the end of the file, not a line.
            if empty_is_bad and number < len(pieces):
                log.warning("%s line %d skipped: empty", path, number)
                if bad is not None:
                    bad.append(number)
            continue
        try:
            item = _json_object(raw)
        except ValueError as exc:
            log.warning("%s line %d skipped: %s", path, number, exc)
            if bad is not None:
                bad.append(number)
            continue
        yield number, item


def pending_journal(sessions_dir: Path) -> Path | None:
    """The degraded run's journal in `sessions_dir` when one waits to be merged into state.db by
    the next start with a healthy state.db (docs/behaviour.md §12), else None. Until then
    state.db lacks what that run wrote: `doctor` warns, and the `sessions` reads say so."""
    path = Path(sessions_dir) / JOURNAL_FILE_NAME
    return path if path.exists() else None


def read_journal(sessions_dir: Path) -> JournalState | None:
    """Read `journal.jsonl` of `sessions_dir`; None when there is none.

    An unreadable line — or a blank one (empty, whitespace or NUL bytes only: a partial
    overwrite or a filesystem repair; the writer never writes one) — followed by a transaction
    of the same run is the damaged record of a committed transaction (only a crash tears a
    line, and the next run has a new run id; the first transaction is written with the header,
    atomically): its numbers are in `damaged_lines`, said in one ERROR line. Such lines at the
    end or before another run's lines are torn lines of transactions a crash cut short: skipped
    (a warning).

    Raises:
        StoreError: line 1 is not a journal header (`journal_header`): damaged, or the file is not
            ours. Its id is never guessed at — it keys the merge's record in state.db and the
            `merged/<id>` folder —, so the message names the line and how to repair it.
        OSError: it cannot be read.
    """
    path = Path(sessions_dir) / JOURNAL_FILE_NAME
    if not path.exists():
        return None
    header = _read_header(path)
    transactions: list[Transaction] = []
    sealed = False
    damaged: set[str] = set()
    last = 0
    bad: list[int] = []  # unreadable or blank lines since the last transaction read
    damaged_lines: list[int] = []
    run: str | None = None  # of the last transaction read
    # No second check by tx numbers: a gap between consecutive committed numbers is no sign of
    # a lost record, since a commit whose write failed (ENOSPC) uses its number up (`_write`) and
    # leaves no journal line — in the middle of a run, or as the next run's first commit right
    # after a line a crash tore (numbered on from the last readable record). Only the lines
    # themselves tell damage.
    for number, item in _json_lines(path, bad, from_line=2, empty_is_bad=True):
        if "merged" in item:
            sealed = True
            damaged.update(str(s) for s in item.get("damaged") or [])
            continue
        try:
            tx = Transaction(number=int(item["tx"]), run=str(item.get("run") or ""), put=dict(item.get("put") or {}),
                             delete=dict(item.get("del") or {}),
                             transcripts=[str(s) for s in item.get("transcripts") or []],
                             seed=bool(item.get("seed")),
                             lines=({str(k): int(v) for k, v in item["lines"].items()}
                                    if isinstance(item.get("lines"), dict) else None))
        except (KeyError, TypeError, ValueError) as exc:
            log.warning("%s line %d skipped: %s", path, number, exc)
            bad.append(number)
            continue
        if bad and run in (None, tx.run):
            damaged_lines += bad
        bad.clear()
        run = tx.run
        if tx.number <= last:
            log.warning("%s line %d skipped: transaction %d is not after %d", path, number, tx.number, last)
            continue
        last = tx.number
        transactions.append(tx)
    if damaged_lines:
        log.error("%s line(s) %s cannot be read and a later transaction of the same run follows: the record of a "
                  "committed transaction is damaged, its rows and transcript lines are left out; the journal is not "
                  "merged until the line is repaired, or removed to merge the rest without it (docs/behaviour.md "
                  "§12)", path, ", ".join(map(str, damaged_lines)))
    return JournalState(path=path, journal_id=header["id"], transactions=transactions, sealed=sealed, last_tx=last,
                        damaged=damaged, damaged_lines=damaged_lines)


# A journal's id as `JournaledDatabase` writes it (`uuid4().hex`).
_JOURNAL_ID = re.compile(r"[0-9a-f]{32}")


def _read_header(path: Path) -> dict[str, Any]:
    """Line 1 of the journal at `path`, its header. Raises StoreError naming the line, what is
    wrong with it and how to repair it (`read_journal`); OSError when it cannot be read."""
    with open(path, "rb") as fh:
        raw = fh.readline().rstrip(b"\n")
    if not raw.strip():
        what = "line 1, the journal header, is empty"
    else:
        try:
            item = _json_object(raw)
        except ValueError as exc:
            what = f"line 1, the journal header, cannot be read ({exc})"
        else:
            journal_id = item.get("id")
            if item.get("journal") != JOURNAL_FORMAT or not isinstance(journal_id, str) or not journal_id:
                what = f"line 1 is not a journal header of format {JOURNAL_FORMAT}"
            elif not _JOURNAL_ID.fullmatch(journal_id):
                # It names a folder (sessions/merged/<id>): never a path of any other shape.
                what = f"line 1, the journal header, has an id that is not 32 hex digits ({journal_id!r})"
            else:
                return item
    raise StoreError(
        f"{path} {what}: the journal is neither merged nor rebuilt until the header is repaired. A header is "
        f'one line {{"journal": {JOURNAL_FORMAT}, "id": "<journal id>", "created": "<time>"}}: keep the id when '
        "all of its 32 lowercase hex digits can still be read (it keys the merge's record in state.db and names "
        "the sessions/merged/<id> folder); otherwise write a new one of 32 lowercase hex digits (`openssl rand "
        "-hex 16`), unless the journal holds a \"merged\" line: state.db has it already, so move it aside "
        "instead (docs/behaviour.md §12)")


def transcript_path(sessions_dir: Path, session_id: str) -> Path:
    """`<sessions_dir>/{session_id}.jsonl`."""
    return Path(sessions_dir) / f"{session_id}{TRANSCRIPT_SUFFIX}"


@dataclass
class TranscriptRead:
    """What `transcript_images` read from one transcript file.

    Attributes:
        images: the `messages` row images of committed transactions, in file order.
        missing: lines the journal says committed transactions wrote that were not read (0 for
            a whole transcript); more than 0 means the transcript is damaged.
        bad_lines: numbers of the lines that could not be read (not JSON, not UTF-8, torn,
            empty, none of `TRANSCRIPT_LINE_FIELDS`, no message id): a torn line of a transaction
            cut short is one of them too.
    """

    path: Path
    images: list[dict[str, Any]]
    missing: int = 0
    bad_lines: list[int] = field(default_factory=list)

    def damage(self) -> str:
        """The one-phrase account of a damaged transcript, for the log and for a failed read."""
        where = f" (unreadable line(s) {', '.join(map(str, self.bad_lines))})" if self.bad_lines else ""
        return (f"{self.path} lacks {self.missing} line(s) of committed transactions{where}"
                if self.path.exists() else f"{self.path} is missing ({self.missing} committed line(s))")


def transcript_images(sessions_dir: Path, session_id: str, committed: set[tuple[str, int]],
                      expected: dict[tuple[str, int], int] | None = None) -> TranscriptRead:
    """The `messages` row images of one transcript file written by `committed` transactions
    (`(run, tx)`), in file order (a later image of an id replaces an earlier one), each with its
    `session_id`. Other lines — of a transaction cut short, or without a `tx` (written by
    something else, e.g. an older gateway) — are passed over; empty lines and objects with none
    of `TRANSCRIPT_LINE_FIELDS` (we never write one) are damage, in `bad_lines`. `expected` (from
    `JournalState.expected_lines`) is how many lines each committed transaction wrote here: each
    one not found counts in `missing`.

    Raises:
        OSError: the file exists but cannot be read.
    """
    path = transcript_path(sessions_dir, session_id)
    read = TranscriptRead(path=path, images=[])
    found: dict[tuple[str, int], int] = {}
    for number, item in _json_lines(path, read.bad_lines, empty_is_bad=True):
        tx = (item.get("run"), item.get("tx"))
        if tx not in committed:
            if TRANSCRIPT_LINE_FIELDS.isdisjoint(item):
                # Neither ours (`tx`) nor an older gateway's message (`role`): a damaged line.
                log.warning("%s line %d skipped: none of the fields of a transcript line (%s)", path, number,
                            ", ".join(sorted(TRANSCRIPT_LINE_FIELDS)))
                read.bad_lines.append(number)
            continue
        if not isinstance(item.get("id"), int):
            log.warning("%s line %d skipped: no message id", path, number)
            read.bad_lines.append(number)
            continue
        found[tx] = found.get(tx, 0) + 1
        row = {k: v for k, v in item.items() if k not in ("tx", "run")}
        row["session_id"] = session_id
        read.images.append(row)
    read.missing = sum(max(0, n - found.get(tx, 0)) for tx, n in (expected or {}).items())
    return read


def final_images(images: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[int]]:
    """The last image of each message id (in order of first appearance) and the ids whose last
    image is a hard-delete marker."""
    last: dict[int, dict[str, Any]] = {}
    for image in images:
        last[image["id"]] = image
    kept = [image for image in last.values() if not image.get("deleted")]
    return kept, [ident for ident, image in last.items() if image.get("deleted")]


# ---- writing ----------------------------------------------------------------------------------

def append_durably(path: Path, text: str) -> None:
    """Append `text` (whole lines) to `path` and fsync it; a new file is created 0600 and its
    folder fsynced. If the file does not end with a newline (a torn line left by a crash or a
    failed append), the text starts on a new line. On failure the file is cut back to its old
    size where possible.

    Raises:
        OSError: the write or the fsync failed (e.g. ENOSPC).
    """
    created = not path.exists()
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            text = "\n" + text
        data = text.encode("utf-8")
        try:
            written = 0
            while written < len(data):
                written += os.write(fd, data[written:])
            os.fsync(fd)
        except OSError:
            try:
                os.ftruncate(fd, size)
            except OSError:
                pass
            raise
    finally:
        os.close(fd)
    if created:
        _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _line(item: dict[str, Any]) -> str:
    return json.dumps(item, ensure_ascii=False, separators=(",", ":")) + "\n"


def journal_header(journal_id: str | None = None) -> str:
    """The first line of a new journal."""
    return _line({"journal": JOURNAL_FORMAT, "id": journal_id or uuid.uuid4().hex,
                  "created": format_timestamp(utc_now())})


def seal_journal(path: Path, damaged: Iterable[str] = ()) -> None:
    """Append the `{"merged": ..., "damaged": [session id, ...]}` line: state.db holds everything
    in this journal that could be read, a degraded start must not continue it (it starts a new
    one); `damaged` names the transcripts to keep aside (`merge.set_merged_files_aside`).
    Raises OSError."""
    append_durably(path, _line({"merged": format_timestamp(utc_now()), "damaged": list(damaged)}))


# ---- the in-memory engine ----------------------------------------------------------------------

def upsert_sql(table: str, columns: Iterable[str], key: tuple[str, ...], where: str = "") -> str:
    """`INSERT … ON CONFLICT(key) DO UPDATE` of every column (optionally only `where` the stored
    row should yield): an update, not a delete and insert, so the full-text triggers see the
    old values."""
    cols = list(columns)
    updates = ", ".join(f"{c} = excluded.{c}" for c in cols if c not in key)
    return (f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)}) "
            f"ON CONFLICT({', '.join(key)}) DO UPDATE SET {updates}{f' WHERE {where}' if where else ''}")


def delete_sql(table: str) -> str:
    """`DELETE` of one row by its primary key (parameters: the key values in order)."""
    return f"DELETE FROM {table} WHERE {' AND '.join(f'{c} = ?' for c in TABLE_KEYS[table])}"


async def table_columns(conn: aiosqlite.Connection, table: str) -> list[str]:
    """The column names of `table` in declaration order."""
    return [row[1] for row in await conn.execute_fetchall(f"PRAGMA table_info({table})")]


class JournaledDatabase(Database):
    """The degraded engine: an in-memory SQLite database with the store's migrations, made
    durable by the journal and transcript files of `sessions_dir` (module docstring).

    Args:
        sessions_dir: the folder of `journal.jsonl` and the `{session_id}.jsonl` transcripts.
        read_only: never write a file (a store opened without the home lock); commits stay in
            memory.

    Attributes:
        fresh: True when no journal existed at open: the caller seeds the database (`seeding()`)
            and then calls `start_journal()`.
    """

    _COMMIT_IN_THREAD = False  # the journal lines are written (and fsynced) before the COMMIT

    def __init__(self, sessions_dir: Path, *, read_only: bool = False) -> None:
        super().__init__(Path(sessions_dir) / JOURNAL_FILE_NAME)
        self.dir = Path(sessions_dir)
        self.read_only = read_only
        self.fresh = False
        self.journal_id: str | None = None
        self._next_tx = 1
        self._run = secrets.token_hex(4)  # tells this run's lines from those of a crashed one
        self._seeding = False
        self._columns: dict[str, list[str]] = {}

    @property
    def is_memory(self) -> bool:
        return True

    def describe(self) -> str:
        return f"the degraded journal {self.path}"

    async def _connect(self) -> aiosqlite.Connection:
        conn = self._daemon(aiosqlite.connect(":memory:", isolation_level=None))
        await conn
        return conn

    async def _configure(self, conn: aiosqlite.Connection) -> None:
        await conn.execute("PRAGMA foreign_keys = ON")

    async def _after_migrate(self) -> None:
        conn = self._require()
        for table in TABLE_KEYS:
            self._columns[table] = await table_columns(conn, table)
        state = read_journal(self.dir)
        if state is not None and state.sealed and not self.read_only:
            from .merge import set_merged_files_aside  # the merge's own last step, finished here

            set_merged_files_aside(self.dir, state)
            state = None
        if state is None:
            self.fresh = True
        else:
            self.journal_id = state.journal_id
            await self._rebuild(conn, state)
            self._next_tx = state.last_tx + 1
        await self._install_capture(conn)

    async def _rebuild(self, conn: aiosqlite.Connection, state: JournalState) -> None:
        """Apply the journal's committed transactions, then their transcript lines."""
        await conn.execute("BEGIN")
        try:
            for tx in state.transactions:
                await self.apply(conn, tx)
                if tx.seed:
                    self.earlier_elsewhere.update(row["session_id"] for row in tx.put.get("sessions") or [])
            committed = state.committed()
            for session_id in state.transcript_ids():
                path = transcript_path(self.dir, session_id)
                try:
                    read = await asyncio.to_thread(transcript_images, self.dir, session_id, committed,
                                                   state.expected_lines(session_id))
                except OSError as exc:
                    read, why = None, f"{path} cannot be read: {exc}"
                else:
                    why = read.damage() if read.missing else None
                if why is not None:
                    # Reads of this transcript fail (never answered as empty, nor with a hole);
                    # the file stays for the merge, the other sessions go on.
                    log.error("degraded transcript of session %s: %s; that session's transcript is unavailable "
                              "until state.db is back (docs/behaviour.md §12)", session_id, why)
                    self.unreadable[session_id] = f"transcript {why}"
                    continue
                kept, deleted = final_images(read.images)
                await self.apply_rows(conn, "messages", kept)
                await conn.executemany("DELETE FROM messages WHERE id = ?", [(i,) for i in deleted])
            await conn.execute("COMMIT")
        except BaseException:
            await self._rollback(conn)
            raise
        log.info("degraded store rebuilt from %s: %d transaction(s)", state.path, len(state.transactions))

    async def apply(self, conn: aiosqlite.Connection, tx: Transaction) -> None:
        """Apply one journal transaction's puts and deletes (the rebuild's raw replay)."""
        for table, rows in tx.put.items():
            if table in TABLE_KEYS and table != "messages":
                await self.apply_rows(conn, table, rows)
        for table, keys in tx.delete.items():
            if table in TABLE_KEYS:
                await conn.executemany(delete_sql(table), [list(k) for k in keys])

    async def apply_rows(self, conn: aiosqlite.Connection, table: str, rows: list[dict[str, Any]]) -> None:
        columns = self._columns[table]
        sql = upsert_sql(table, columns, TABLE_KEYS[table])
        await conn.executemany(sql, [[row.get(c) for c in columns] for row in rows])

    async def _install_capture(self, conn: aiosqlite.Connection) -> None:
        """Temporary triggers noting the key of every journaled row a transaction changes."""
        statements = ["CREATE TEMP TABLE journal_changes (seq INTEGER PRIMARY KEY, tbl TEXT NOT NULL, "
                      "pk TEXT NOT NULL, session_id TEXT)"]
        for table, key in TABLE_KEYS.items():
            for event, row in (("INSERT", "new"), ("UPDATE", "new"), ("DELETE", "old")):
                pk = f"json_array({', '.join(f'{row}.{c}' for c in key)})"
                sid = f"{row}.session_id" if table == "messages" else "NULL"
                statements.append(
                    f"CREATE TEMP TRIGGER journal_{table}_{event.lower()} AFTER {event} ON main.{table} BEGIN "
                    f"INSERT INTO journal_changes (tbl, pk, session_id) VALUES ('{table}', {pk}, {sid}); END")
        await conn.executescript(";\n".join(statements) + ";")

    @contextmanager
    def seeding(self) -> Iterator[None]:
        """Mark the transactions committed in this block as the seed (see the module docstring)."""
        self._seeding = True
        try:
            yield
        finally:
            self._seeding = False

    async def start_journal(self) -> None:
        """Make sure the journal file exists (after seeding a fresh database)."""
        if self.journal_id is None and not self.read_only:
            self.journal_id = uuid.uuid4().hex
            await asyncio.to_thread(write_atomic, self.path, journal_header(self.journal_id))

    async def _durable_commit(self, conn: aiosqlite.Connection) -> None:
        changes = await conn.execute_fetchall(
            "SELECT tbl, pk, session_id FROM journal_changes ORDER BY seq")
        if changes and not self.read_only:
            line, transcripts = await self._images(conn, changes)
            await conn.execute("DELETE FROM journal_changes")
            await asyncio.to_thread(self._write, line, transcripts)
        elif changes:
            await conn.execute("DELETE FROM journal_changes")
        await conn.execute("COMMIT")

    async def _images(self, conn: aiosqlite.Connection, changes: list) -> tuple[dict[str, Any], dict[str, list[str]]]:
        """The journal line and the transcript lines of the open transaction's changes."""
        keys: dict[str, dict[tuple, str | None]] = {}
        for table, pk, session_id in changes:
            keys.setdefault(table, {})[tuple(json.loads(pk))] = session_id
        tx = self._next_tx
        line: dict[str, Any] = {"tx": tx, "run": self._run, "put": {}, "del": {}}
        transcripts: dict[str, list[str]] = {}
        for table, wanted in keys.items():
            found = await self._rows_by_key(conn, table, list(wanted))
            for pk, session_id in wanted.items():
                row = found.get(pk)
                if table != "messages":
                    if row is None:
                        line["del"].setdefault(table, []).append(list(pk))
                    else:
                        line["put"].setdefault(table, []).append(row)
                        if self._seeding and table == "sessions":
                            self.earlier_elsewhere.add(row["session_id"])
                    continue
                if row is None:
                    # The store soft-deletes messages; a hard delete is written as a marker line.
                    row = {"id": pk[0], "deleted": 1}
                else:
                    session_id = row.pop("session_id")
                transcripts.setdefault(str(session_id), []).append(_line(dict(row, tx=tx, run=self._run)).rstrip("\n"))
        line["transcripts"] = sorted(transcripts)
        line["lines"] = {session_id: len(transcripts[session_id]) for session_id in line["transcripts"]}
        if self._seeding:
            line["seed"] = True
        return line, transcripts

    @staticmethod
    async def _rows_by_key(conn: aiosqlite.Connection, table: str, pks: list[tuple]) -> dict[tuple, dict]:
        """`{primary key: row}` of the rows of `table` with these keys (missing ones: deleted)."""
        key = TABLE_KEYS[table]
        found: dict[tuple, dict] = {}
        width = len(key)
        for start in range(0, len(pks), 400):
            chunk = pks[start:start + 400]
            values = ", ".join("(" + ", ".join("?" * width) + ")" for _ in chunk)
            rows = await conn.execute_fetchall(
                f"SELECT * FROM {table} WHERE ({', '.join(key)}) IN (VALUES {values})",
                [v for pk in chunk for v in pk])
            for row in rows:
                found[tuple(row[c] for c in key)] = dict(row)
        return found

    def _write(self, line: dict[str, Any], transcripts: dict[str, list[str]]) -> None:
        """Transcript lines first, then the journal line (the commit record). Runs in a thread.
        The tx number is used up even if this fails: lines of a failed transaction may remain
        in a transcript, and must never count as lines of a later one of this run."""
        self._next_tx = line["tx"] + 1
        for session_id, lines in transcripts.items():
            append_durably(transcript_path(self.dir, session_id), "\n".join(lines) + "\n")
        if self.journal_id is None:
            # The first transaction of a new journal (the seed) is written with its header in one
            # atomic file: a journal never exists without the routes it started from.
            self.journal_id = uuid.uuid4().hex
            write_atomic(self.path, journal_header(self.journal_id) + _line(line))
        else:
            append_durably(self.path, _line(line))

    async def snapshot_rows(self, sql: str, params: tuple = ()) -> list[tuple]:
        return [tuple(row) for row in await self.fetchall(sql, params)]
