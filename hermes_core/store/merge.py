"""Merging a degraded run's journal into `state.db` (docs/behaviour.md §0 "nothing accepted is
ever lost", §12), at the first healthy open that finds `journal.jsonl`.

The merge replays the journal's row images (`journal.py`) into `state.db` in ONE transaction,
which also records in `meta` (key `journal:<journal id>`) the last transaction merged and the
id offset used. Every row keeps its identity: an integer id of the degraded run is stored as
`offset + id` in the same table (`messages.id`, `inbound.id`, `delivery_obligations.id`, and the
references `routes.turn_message_id`, `delivery_obligations.message_id`), where `offset` is the
highest id `state.db` held when the journal was first merged (the in-memory database numbered
its rows from 1, not knowing `state.db`'s ids). Text keys (session ids and keys, the dedupe key,
alias ids) are kept as they are. A SIGKILL before the transaction commits leaves `state.db`
untouched; after it, `meta` says what is merged and the next merge adds nothing; either way a
second merge stores every row exactly once. Then the journal is sealed (a `merged` line) and it
and its transcripts are moved to `merged/<journal id>/` (kept for audit, never read again).

A *damaged* transcript (a line of a committed transaction unreadable or missing, `journal.py`)
is merged with the lines that can be read — they were accepted, and the chat goes on with
them — and the file is kept as `damaged/<journal id>/<session id>.jsonl` for a person to
recover the rest from: one ERROR line per such session names it, and `doctor` warns while the
folder holds a file (docs/behaviour.md §12). Which sessions were damaged is recorded with the
merge in `meta` and in the seal line, so a crash between the steps sets the file aside the same
way.

What the replay keeps when `state.db` already has a row with the same key:
* `sessions`, `routes`: the degraded row when it is at least as new (`updated_at`,
  `updated_ts`), so the chat goes on with the session it used while degraded; rows of the seed
  transaction (copied from sessions.json when the run began) are only added where missing.
* `inbound`: a platform message `state.db` already accepted under another id is not accepted
  a second time (so it is not answered twice).
* `identity_aliases`: the one seen last.
* deletions of routes (pruning while degraded) are not replayed: pruning only
  frees a route, and the next message re-adopts the session anyway.

The merged rows are then ordinary `state.db` rows: open intake rows are replayed, open delivery
obligations are sent (an 'attempting' one with the recovered-reply notice, docs/behaviour.md §6)
and turn markers are recovered by the start-up recovery, exactly as after a crash of a healthy run.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..dirs import ensure_private_dir
from .db import Database, StoreError
from .journal import (JOURNAL_FILE_NAME, TABLE_KEYS, JournalState, final_images, read_journal, seal_journal,
                      table_columns, transcript_images, transcript_path, upsert_sql)

log = logging.getLogger(__name__)

MERGED_DIR_NAME = "merged"
DAMAGED_DIR_NAME = "damaged"
META_PREFIX = "journal:"
# Integer columns that hold ids of the degraded run, shifted by the offset.
_ID_COLUMNS = {"messages": ("id",), "inbound": ("id",), "delivery_obligations": ("id", "message_id"),
               "routes": ("turn_message_id",)}
_OPEN_LEDGER = ("pending", "attempting", "failed")


@dataclass
class MergeReport:
    """What `merge_journal` added: sessions begun in the degraded run (`sessions`, their rows
    new to state.db, whichever route now points at them), new messages, waiting
    messages to replay (`pending`), delivery obligations still owed (`owed`), turn markers of
    interrupted turns (`interrupted`); `skipped` has one line per row not merged; `damaged`
    maps the session id of each damaged transcript to where its file was kept."""

    sessions: int = 0
    messages: int = 0
    pending: int = 0
    owed: int = 0
    interrupted: int = 0
    skipped: list[str] = field(default_factory=list)
    damaged: dict[str, Path] = field(default_factory=dict)


def merged_dir(sessions_dir: Path, journal_id: str) -> Path:
    """`<sessions_dir>/merged/<journal id>/`: where a merged journal and its transcripts go."""
    return Path(sessions_dir) / MERGED_DIR_NAME / journal_id


def damaged_dir(sessions_dir: Path, journal_id: str) -> Path:
    """`<sessions_dir>/damaged/<journal id>/`: where a merge keeps the damaged transcripts of a
    journal (module docstring)."""
    return Path(sessions_dir) / DAMAGED_DIR_NAME / journal_id


def set_merged_files_aside(sessions_dir: Path, state: JournalState) -> None:
    """Move the journal's transcripts, then the journal itself, to `merged/<journal id>/` — the
    damaged ones (`state.damaged`) to `damaged/<journal id>/` (idempotent: files already moved
    are passed over). Raises OSError."""
    target = merged_dir(sessions_dir, state.journal_id)
    damaged = damaged_dir(sessions_dir, state.journal_id)
    # Both levels owner-only: they hold transcripts (`mkdir(parents=True)` would leave
    # `merged/` itself at the umask's mode).
    folders = [ensure_private_dir(ensure_private_dir(target.parent) / target.name)]
    if state.damaged:
        folders.append(ensure_private_dir(ensure_private_dir(damaged.parent) / damaged.name))
    for session_id in state.transcript_ids():
        source = transcript_path(sessions_dir, session_id)
        if source.exists():
            os.replace(source, (damaged if session_id in state.damaged else target) / source.name)
    os.replace(state.path, target / JOURNAL_FILE_NAME)
    for folder in (*folders, Path(sessions_dir)):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _shift(table: str, row: dict[str, Any], offset: int) -> dict[str, Any]:
    row = dict(row)
    for column in _ID_COLUMNS.get(table, ()):
        if isinstance(row.get(column), int):
            row[column] += offset
    return row


def _merge_sql(table: str, columns: list[str], seed: bool) -> str:
    key = TABLE_KEYS[table]
    if seed and table in ("sessions", "routes"):
        return (f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)}) "
                f"ON CONFLICT({', '.join(key)}) DO NOTHING")
    where = {"sessions": "julianday(excluded.updated_at) >= julianday(sessions.updated_at)",
             "routes": "excluded.updated_ts >= routes.updated_ts",
             "identity_aliases": "excluded.last_seen >= identity_aliases.last_seen"}.get(table, "")
    sql = upsert_sql(table, columns, key, where)
    if table == "inbound":
        sql += " ON CONFLICT DO NOTHING"  # the dedupe key is state.db's already: not accepted twice
    return sql


async def merge_journal(db: Database, sessions_dir: Path) -> MergeReport | None:
    """Merge `<sessions_dir>/journal.jsonl` (if any) into the open `state.db` `db`, then set it
    aside (module docstring).

    Returns:
        A MergeReport, or None when there is no journal.
    Raises:
        StoreError: the journal has no header (not ours), or the record of a committed transaction
            in it is damaged (`JournalState.damaged_lines`); it is left where it is.
        sqlite3.Error / OSError: a write failed (the next open merges again, adding nothing twice).
    """
    state = await asyncio.to_thread(read_journal, sessions_dir)
    if state is None:
        return None
    report = MergeReport()
    meta_key = META_PREFIX + state.journal_id
    done = await db.fetchval("SELECT value FROM meta WHERE key = ?", (meta_key,))
    done = json.loads(done) if done else {}
    through = int(done.get("through_tx") or 0)
    pending = [tx for tx in state.transactions if tx.number > through]
    if pending and state.damaged_lines:
        # The lost transaction may hold anything (an accepted message, an owed reply, an ended
        # session) and later ones build on it: state.db stays untouched and the journal waits.
        raise StoreError(f"{state.path} line(s) {', '.join(map(str, state.damaged_lines))} hold the damaged record "
                         "of a committed transaction; repair the line, or remove it to merge the rest without it")
    # Damaged transcripts of an earlier attempt that committed (then crashed before the seal).
    state.damaged.update(done.get("damaged") or [])
    if pending:
        committed = state.committed(after_tx=through)
        messages: list[dict[str, Any]] = []
        damage: dict[str, str] = {}
        for session_id in state.transcript_ids(after_tx=through):
            read = await asyncio.to_thread(transcript_images, sessions_dir, session_id, committed,
                                           state.expected_lines(session_id, after_tx=through))
            if read.missing:
                damage[session_id] = read.damage()
                state.damaged.add(session_id)
            kept, deleted = final_images(read.images)
            messages += kept
            report.skipped += [f"message {i} of {session_id}: deleted while degraded" for i in deleted]
        await _replay(db, state, pending, messages, meta_key, done.get("offset"), report)
        for session_id, why in damage.items():
            log.error("degraded transcript of session %s is damaged: %s; merged without the missing line(s), "
                      "the file is kept as %s to recover them from (docs/behaviour.md §12)", session_id, why,
                      damaged_dir(sessions_dir, state.journal_id) / transcript_path(sessions_dir, session_id).name)
    if not state.sealed:
        await asyncio.to_thread(seal_journal, state.path, sorted(state.damaged))
    await asyncio.to_thread(set_merged_files_aside, sessions_dir, state)
    report.damaged = {sid: damaged_dir(sessions_dir, state.journal_id) / transcript_path(sessions_dir, sid).name
                      for sid in sorted(state.damaged)}
    return report


async def _replay(db: Database, state: JournalState, pending: list, messages: list[dict[str, Any]],
                  meta_key: str, offset: int | None, report: MergeReport) -> None:
    """The merge transaction: every pending row, then the `meta` record of it."""
    async with db.write() as conn:
        if offset is None:
            offset = 0
            for table in ("messages", "inbound", "delivery_obligations"):
                row = await (await conn.execute(f"SELECT max(id) FROM {table}")).fetchone()
                offset = max(offset, int(row[0] or 0))
        columns = {table: await table_columns(conn, table) for table in TABLE_KEYS}
        before = await _counts(conn, offset)
        for tx in pending:
            for table in ("sessions", "routes", "inbound", "delivery_obligations", "identity_aliases"):
                rows = tx.put.get(table) or []
                if not rows:
                    continue
                sql = _merge_sql(table, columns[table], tx.seed)
                for row in rows:
                    row = _shift(table, row, offset)
                    await conn.execute(sql, [row.get(c) for c in columns[table]])
            for table in ("inbound", "delivery_obligations", "identity_aliases"):
                keys = tx.delete.get(table) or []
                if keys:
                    await conn.executemany(
                        f"DELETE FROM {table} WHERE {' AND '.join(f'{c} = ?' for c in TABLE_KEYS[table])}",
                        [_shift_key(table, list(k), offset) for k in keys])
        sql = upsert_sql("messages", columns["messages"], TABLE_KEYS["messages"])
        await conn.executemany(sql, [[_shift("messages", m, offset).get(c) for c in columns["messages"]]
                                     for m in messages])
        after = await _counts(conn, offset)
        await conn.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = "
                           "excluded.value", (meta_key, json.dumps({"offset": offset, "through_tx": state.last_tx,
                                                                    "damaged": sorted(state.damaged)})))
    report.sessions = after["sessions"] - before["sessions"]
    report.messages = after["messages"] - before["messages"]
    report.pending, report.owed, report.interrupted = after["pending"], after["owed"], after["interrupted"]


def _shift_key(table: str, key: list[Any], offset: int) -> list[Any]:
    if TABLE_KEYS[table] == ("id",) and isinstance(key[0], int):
        return [key[0] + offset]
    return key


async def _counts(conn, offset: int) -> dict[str, int]:
    """Rows of this journal (ids above `offset`) in state.db: messages, waiting intake rows,
    open obligations, and routes with a marker on a message of this journal; and all sessions."""
    async def count(sql: str, params: tuple = ()) -> int:
        return int((await (await conn.execute(sql, params)).fetchone())[0])
    return {
        "sessions": await count("SELECT COUNT(*) FROM sessions"),  # text ids: all of them, before and after
        "messages": await count("SELECT COUNT(*) FROM messages WHERE id > ?", (offset,)),
        "pending": await count("SELECT COUNT(*) FROM inbound WHERE id > ? AND state = 'pending'", (offset,)),
        "owed": await count(f"SELECT COUNT(*) FROM delivery_obligations WHERE id > ? AND state IN "
                            f"({', '.join('?' for _ in _OPEN_LEDGER)})", (offset, *_OPEN_LEDGER)),
        "interrupted": await count("SELECT COUNT(*) FROM routes WHERE turn_message_id > ?", (offset,)),
    }
