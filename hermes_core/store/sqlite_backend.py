"""SQLite backend of the session store: canonical routes, sessions and transcripts (docs/behaviour.md §0, §3).

Every method is one short transaction on the single writer connection and touches a bounded
number of rows (primary-key or indexed lookups), so per-message cost does not grow with the
number of sessions. The state machine lives in `session_store.SessionStore`.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from contextlib import closing
from dataclasses import fields, replace
from functools import lru_cache, partial
from typing import Any, Callable, Iterable, Sequence

from ..model import SessionEntry, TokenUsage, format_timestamp
from ..model.text import to_json
from . import fts
from .cpu import in_thread
from .db import Database, StoreError, migrated_schema, schema_version
from .mirror import render_from_json_texts
from .records import (ALL_SESSION_COLUMNS, AliasRow, IntakeRow, MessageRow, NewIntake, NewObligation, Obligation,
                      RemovalPlan, RetryTurn, SearchHit, SessionRow, SessionSummary, StoredMessage, TurnMarker)
from .rows import MESSAGE_COLUMNS, TranscriptReadError, messages_from_values

log = logging.getLogger(__name__)

_MSG_COLS = ("session_id", "role", "content", "tool_call_id", "tool_name", "tool_calls",
             "platform_message_id", "timestamp", "reasoning")
# A reply's rows (tool calls, tool results, the reply) go in as one multi-row INSERT of up to this
# many rows: a statement is a step of its own, and between two steps the SQLite thread needs the
# interpreter lock back from the event loop (docs/behaviour.md §12 "Where the time goes at 10,000
# sessions"). 100 rows are 900 parameters, far below SQLite's limit.
_ROWS_PER_INSERT = 100
_UPDATE_OBLIGATION = ("UPDATE delivery_obligations SET state = ?, attempts = attempts + ?, "
                      "last_error = coalesce(?, last_error), sent_ids = coalesce(?, sent_ids), updated_at = ?, "
                      "updated_ts = ? WHERE id = ?")
_UPSERT_ROUTE = (
    "INSERT INTO routes (session_key, session_id, entry, updated_ts, suspended) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT(session_key) DO UPDATE SET session_id = excluded.session_id, entry = excluded.entry, "
    "updated_ts = excluded.updated_ts, suspended = excluded.suspended")
# A batched touch (`touch_routes`): only `updated_at` changes, so SQLite rewrites it inside the
# stored JSON (byte for byte what `entry_json` would give) and the event loop serialises no
# entry: at 10,000 sessions in flight a mirror flush touches every one (docs/behaviour.md §3
# "sessions.json").
# A route whose entry is not valid JSON is left for its next full write.
_TOUCH_ROUTE = ("UPDATE routes SET entry = json_set(entry, '$.updated_at', ?), updated_ts = ? "
                "WHERE session_key = ? AND session_id = ? AND json_valid(entry)")
# The end of a turn on the live path (`record_reply`): the entry of the route's own session and
# the end of its turn marker in one statement that leaves `session_id` (and so the index
# `routes_by_session_id`) untouched. No row changed: the route is missing or moved to another
# session, and `_UPSERT_ROUTE` + `_CLEAR_MARKER` do it.
_END_TURN_ROUTE = ("UPDATE routes SET entry = ?, updated_ts = ?, suspended = ?, turn_session_id = NULL, "
                   "turn_message_id = NULL, turn_started_ts = NULL WHERE session_key = ? AND session_id = ?")
_CLEAR_MARKER = ("UPDATE routes SET turn_session_id = NULL, turn_message_id = NULL, turn_started_ts = NULL "
                 "WHERE session_key = ?")
_FINISH_INBOUND = "UPDATE inbound SET state = 'done', payload = NULL, finished_ts = ? WHERE id = ?"
# An accepted message ('pending'; 'running' when accepted in the transaction that begins its
# turn, docs/behaviour.md §12); a duplicate of its dedupe id inserts nothing.
_ACCEPT = ("INSERT OR IGNORE INTO inbound (platform, chat_id, message_id, accepted_at, accepted_ts, session_key, "
           "payload, state) VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
# The condition of the partial index `delivery_open` (schema 7), word for word.
_OPEN_OBLIGATION = "(state = 'pending' OR state = 'attempting' OR state = 'failed')"
_OPEN_STATES = frozenset({"pending", "attempting", "failed"})
# A read-only search's own index of the messages waiting for the next batch (`_search_read_only`).
_WAITING_FTS = "waiting_fts"
_INSERT_SESSION = (
    "INSERT OR IGNORE INTO sessions (session_id, session_key, origin, platform, chat_id, participant_id, "
    "chat_type, display_name, created_at, updated_at, parent_session_id) VALUES (?,?,?,?,?,?,?,?,?,?,?)")


_SESSION_COLS = ", ".join(f.name for f in fields(SessionRow))


def _message_params(session_id: str, row: MessageRow) -> tuple:
    """The INSERT parameters of one message row (`_MSG_COLS` order)."""
    return (session_id, row.role, row.content, row.tool_call_id, row.tool_name, row.tool_calls,
            row.platform_message_id, row.timestamp, row.reasoning)


@lru_cache(maxsize=_ROWS_PER_INSERT)
def _insert_msgs_sql(count: int) -> str:
    """The INSERT of `count` message rows (`_MSG_COLS` each)."""
    one = f"({', '.join('?' for _ in _MSG_COLS)})"
    return f"INSERT INTO messages ({', '.join(_MSG_COLS)}) VALUES {', '.join([one] * count)}"


def _insert_messages(conn: sqlite3.Connection, session_id: str, rows: Sequence[MessageRow]) -> int | None:
    """Insert `rows` in order, `_ROWS_PER_INSERT` per statement; returns the last row's id (None
    without rows). SQLite inserts a multi-row VALUES in its order, and `lastrowid` is the last
    row's (the full-text trigger's own inserts do not change it)."""
    last = None
    for start in range(0, len(rows), _ROWS_PER_INSERT):
        chunk = rows[start:start + _ROWS_PER_INSERT]
        params = [value for row in chunk for value in _message_params(session_id, row)]
        last = conn.execute(_insert_msgs_sql(len(chunk)), params).lastrowid
    return last


def entry_json(entry: SessionEntry) -> str:
    """The compact JSON stored in `routes.entry` (and copied verbatim into sessions.json)."""
    return to_json(entry.to_dict())


def route_params(entry: SessionEntry) -> tuple:
    return (entry.session_key, entry.session_id, entry_json(entry), entry.updated_at.timestamp(),
            int(entry.suspended))


def session_params(entry: SessionEntry, parent_session_id: str | None = None) -> tuple:
    origin = entry.origin
    return (entry.session_id, entry.session_key,
            to_json(origin.to_dict()) if origin else None,
            entry.platform or (origin.platform if origin else None),
            origin.chat_id if origin else None,
            origin.participant_id if origin else None,
            entry.chat_type, entry.display_name,
            format_timestamp(entry.created_at), format_timestamp(entry.updated_at), parent_session_id)


# Whether a session was ever created here: a session row, or a route (doctor asks it of a file).
HOLDS_SESSIONS = "SELECT EXISTS (SELECT 1 FROM sessions) OR EXISTS (SELECT 1 FROM routes)"


def missing_schema_objects(conn: sqlite3.Connection, version: int) -> list[str]:
    """The tables, indexes, triggers and views the migrations up to `version` create that
    `conn`'s database lacks (`table inbound`, …), read from the migrations themselves
    (`db.migrated_schema`). SQLite's own objects are left out, and so are the full-text index's
    tables: a damaged or missing index is rebuilt by the store itself (`fts`), and doctor's
    index check reports it."""
    present = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
    return [f"{kind} {name}" for name, (kind, _sql) in sorted(migrated_schema(version).items())
            if name not in present and not name.startswith("sqlite_") and not fts.is_index_table(name)]


class SqliteBackend:
    """Routes, sessions and transcripts in `state.db`.

    Args:
        db: the (not yet open) writer connection.
    """

    def __init__(self, db: Database) -> None:
        self.db = db

    @property
    def degraded(self) -> bool:
        """True on the degraded engine (an in-memory database made durable by the journal)."""
        return self.db.is_memory

    @property
    def shared(self) -> bool:
        """False: `state.db` belongs to one gateway (the home lock)."""
        return False

    async def open(self) -> None:
        """Open the database (migrations included) and check that every object of the schema is
        there: a table dropped by hand would otherwise fail every message that touches it.

        Raises:
            StoreError: an object is missing (named; the store then runs degraded, §12 of
                docs/behaviour.md, until state.db is restored from a backup); whatever
                `Database.open` raises."""
        await self.db.open()
        version = schema_version()  # the migrations just brought the file to it
        missing = await self.db.read(partial(missing_schema_objects, version=version))
        if missing:
            await self.db.close()
            # Said after "state.db <path> cannot be opened:" (SessionStore), hence "it".
            raise StoreError(f"it lacks {', '.join(missing)} of its schema {version}: "
                             "restore it from a backup (docs/operations.md §1)")

    async def close(self) -> None:
        await self.db.close()

    # ---- routes ---------------------------------------------------------------------------

    @staticmethod
    def _entry(text: str, where: str) -> SessionEntry | None:
        """Decode a stored entry; a damaged one (edited by hand, written by a buggy tool) is
        logged and treated as absent, never allowed to break every later message."""
        try:
            return SessionEntry.from_dict(json.loads(text))
        except (ValueError, TypeError) as exc:
            log.warning("state.db route %s has a damaged entry (%s); ignored", where, exc)
            return None

    async def get_route(self, session_key: str) -> SessionEntry | None:
        row = await self.db.fetchone("SELECT entry FROM routes WHERE session_key = ?", (session_key,))
        return self._entry(row[0], repr(session_key)) if row else None

    async def route_for_session_id(self, session_id: str) -> SessionEntry | None:
        row = await self.db.fetchone("SELECT entry FROM routes WHERE session_id = ? LIMIT 1", (session_id,))
        return self._entry(row[0], f"of session {session_id}") if row else None

    async def save(self, entry: SessionEntry, *, new_session: bool = False, parent_session_id: str | None = None,
                   end_session: tuple[str, str] | None = None, reopen_session: str | None = None,
                   usage: TokenUsage | None = None, clear_marker: bool = False) -> None:
        """Atomically: end a session row, create/reopen one, upsert the route. The route's entry
        carries the session's counters (so `usage` needs no statement of its own here): readers
        lay them over the session's row (`sessions_now`), and the row takes them when the route
        leaves the session (schema 8)."""
        now_iso = format_timestamp(entry.updated_at)
        route = route_params(entry)
        session = session_params(entry, parent_session_id) if new_session else None

        def work(conn: sqlite3.Connection) -> None:
            if end_session is not None:
                conn.execute(
                    "UPDATE sessions SET ended_at = ?, end_reason = ?, updated_at = ? "
                    "WHERE session_id = ? AND ended_at IS NULL", (now_iso, end_session[1], now_iso, end_session[0]))
            if session is not None:
                conn.execute(_INSERT_SESSION, session)
            if reopen_session is not None:
                conn.execute("UPDATE sessions SET ended_at = NULL, end_reason = NULL, session_key = ?, "
                             "updated_at = ? WHERE session_id = ?", (entry.session_key, now_iso, reopen_session))
            conn.execute(_UPSERT_ROUTE, route)
            if clear_marker:
                conn.execute(_CLEAR_MARKER, (entry.session_key,))
        await self.db.run(work)

    async def touch_routes(self, entries: list[SessionEntry]) -> None:
        if entries:
            await self.db.executemany(_TOUCH_ROUTE, [(format_timestamp(e.updated_at), e.updated_at.timestamp(),
                                                      e.session_key, e.session_id) for e in entries])

    async def delete_routes(self, keys: list[str]) -> None:
        # Only the routes go: pruning never ends a session (docs/behaviour.md §2).
        await self.db.executemany("DELETE FROM routes WHERE session_key = ?", [(key,) for key in keys])

    async def adoptable_session(self, session_key: str) -> SessionRow | None:
        # `pruned`: the end reason older gateways gave pruned routes' sessions.
        row = await self.db.fetchone(
            f"SELECT {_SESSION_COLS} FROM sessions s WHERE s.session_key = ? "
            "AND (s.ended_at IS NULL OR s.end_reason = 'pruned') "
            "AND NOT EXISTS (SELECT 1 FROM routes r WHERE r.session_id = s.session_id) "
            "ORDER BY s.created_at DESC, s.session_id DESC LIMIT 1", (session_key,))
        return SessionRow(*row) if row else None

    async def routes_older_than(self, cutoff_ts: float) -> list[tuple[str, bool]]:
        rows = await self.db.fetchall(
            "SELECT session_key, suspended FROM routes WHERE updated_ts < ? ORDER BY updated_ts", (cutoff_ts,))
        return [(r[0], bool(r[1])) for r in rows]

    async def list_routes(self, since_ts: float | None) -> list[SessionEntry]:
        if since_ts is None:
            rows = await self.db.fetchall("SELECT entry, session_id FROM routes ORDER BY updated_ts DESC")
        else:
            rows = await self.db.fetchall(
                "SELECT entry, session_id FROM routes WHERE updated_ts >= ? ORDER BY updated_ts DESC", (since_ts,))
        entries = (self._entry(r[0], f"of session {r[1]}") for r in rows)
        return [e for e in entries if e is not None]

    # ---- sessions -------------------------------------------------------------------------

    async def session_info(self, session_id: str) -> SessionRow | None:
        # A live session's counters are its route's (schema 8, `sessions_now`).
        row = await self.db.fetchone(f"SELECT {_SESSION_COLS} FROM sessions_now WHERE session_id = ?", (session_id,))
        return SessionRow(*row) if row else None

    async def set_title(self, session_id: str, title: str | None) -> bool:
        cur = await self.db.write_one("UPDATE sessions SET title = ? WHERE session_id = ?", (title, session_id))
        return cur.rowcount > 0

    async def recent_sessions(self, platform: str, limit: int) -> list[SessionSummary]:
        rows = await self.db.fetchall(
            # Last activity: the newest active message (an ending is not activity), else creation.
            "SELECT s.session_id, s.origin, s.title, coalesce((SELECT max(m.timestamp) FROM messages m "
            " WHERE m.session_id = s.session_id AND m.active = 1), s.created_at) AS last_activity, "
            "(SELECT COUNT(*) FROM messages m WHERE m.session_id = s.session_id AND m.active = 1), "
            "(SELECT m.content FROM messages m WHERE m.session_id = s.session_id AND m.active = 1 "
            " AND m.role = 'user' ORDER BY m.id LIMIT 1) "
            "FROM sessions s WHERE s.platform = ? ORDER BY last_activity DESC, s.session_id DESC LIMIT ?",
            (platform, limit))
        return [SessionSummary(r[0], r[1], r[2], r[3], int(r[4]), r[5]) for r in rows]

    async def has_any_sessions(self) -> bool:
        return bool(await self.db.fetchval(HOLDS_SESSIONS))

    async def session_had_turn(self, session_id: str) -> bool:
        return await self.db.fetchone(
            "SELECT 1 FROM messages WHERE session_id = ? AND role = 'user' LIMIT 1", (session_id,)) is not None

    # ---- transcripts ----------------------------------------------------------------------

    async def _with_fts_repair(self, work):
        """Run a write; if it fails because the FTS index is damaged, rebuild the index and retry
        once, so a damaged derived index never costs a message."""
        try:
            return await work()
        except sqlite3.DatabaseError as exc:
            if not await fts.confirm_damage(self.db, exc):
                raise
            log.warning("write hit a damaged full-text index (%s); rebuilding it", exc)
            await fts.rebuild(self.db)
            return await work()

    async def append_message(self, session_id: str, row: MessageRow) -> int:
        params = _message_params(session_id, row)

        async def work():
            cur = await self.db.write_one(_insert_msgs_sql(1), params)
            return cur.lastrowid
        return await self._with_fts_repair(work)

    async def begin_turn(self, session_key: str, session_id: str, row: MessageRow, started_ts: float,
                         inbound_id: int | None = None, accept: NewIntake | None = None) -> int | None:
        # A partial, not a closure (as `record_reply`): fewer objects per turn in flight.
        work = partial(self._begin_turn_in_thread, session_key, session_id, row, started_ts, inbound_id, accept)
        return await self._with_fts_repair(partial(self.db.run, work))

    def _begin_turn_in_thread(self, session_key: str, session_id: str, row: MessageRow, started_ts: float,
                              inbound_id: int | None, accept: NewIntake | None,
                              conn: sqlite3.Connection) -> int | None:
        if accept is not None:
            cur = conn.execute(_ACCEPT, (accept.platform, accept.chat_id, accept.message_id, accept.accepted_at,
                                         accept.accepted_ts, accept.session_key, accept.payload, "running"))
            if cur.rowcount != 1:
                return None  # a duplicate: its turn is not begun
            accepted = cur.lastrowid
        message_id = _insert_messages(conn, session_id, (row,))
        cur = conn.execute("UPDATE routes SET turn_session_id = ?, turn_message_id = ?, turn_started_ts = ? "
                           "WHERE session_key = ?", (session_id, message_id, started_ts, session_key))
        if cur.rowcount == 0:
            raise StoreError(f"cannot begin a turn: no session entry for key {session_key!r}")
        if inbound_id is not None:
            # Same transaction: a 'running' intake row always has its user message stored.
            conn.execute("UPDATE inbound SET state = 'running' WHERE id = ? AND state = 'pending'", (inbound_id,))
        return accepted if accept is not None else inbound_id

    async def resume_turn(self, session_key: str, session_id: str, started_ts: float) -> StoredMessage | None:
        def work(conn: sqlite3.Connection) -> StoredMessage | None:
            rows = conn.execute(
                "SELECT id, role, content, platform_message_id FROM messages WHERE session_id = ? AND active = 1 "
                "AND role IN ('user', 'assistant') ORDER BY id DESC LIMIT 1", (session_id,)).fetchall()
            if not rows or rows[0][1] != "user":
                return None
            last = StoredMessage(id=rows[0][0], content=rows[0][2], platform_message_id=rows[0][3])
            conn.execute("UPDATE routes SET turn_session_id = ?, turn_message_id = ?, turn_started_ts = ? "
                         "WHERE session_key = ?", (session_id, last.id, started_ts, session_key))
            return last
        return await self.db.run(work)

    async def reply_row_after(self, session_id: str, message_id: int | None) -> StoredMessage | None:
        row = await self.db.fetchone(
            "SELECT id, content FROM messages WHERE session_id = ? AND active = 1 AND role = 'assistant' "
            "AND id > ? ORDER BY id LIMIT 1", (session_id, message_id or 0))
        return StoredMessage(id=row[0], content=row[1]) if row else None

    async def end_turn(self, session_key: str) -> None:
        await self.db.write_one(_CLEAR_MARKER, (session_key,))

    async def turn_markers(self) -> list[TurnMarker]:
        rows = await self.db.fetchall(
            "SELECT session_key, turn_session_id, turn_message_id, turn_started_ts FROM routes "
            "WHERE turn_started_ts IS NOT NULL ORDER BY turn_started_ts")
        return [TurnMarker(r[0], r[1], r[2], float(r[3])) for r in rows]

    async def load_messages(self, session_id: str) -> list[dict[str, Any]]:
        if session_id in self.db.unreadable:
            raise TranscriptReadError(self.db.unreadable[session_id])

        def read(conn: sqlite3.Connection) -> list[dict[str, Any]]:
            # The query and the rows' conversion in one SQLite-thread call: this is what a cache
            # miss (a reload after an eviction) costs per message (docs/behaviour.md §8).
            sql = (f"SELECT {', '.join(MESSAGE_COLUMNS)} FROM messages "
                   "WHERE session_id = ? AND active = 1 ORDER BY id")
            with closing(conn.execute(sql, (session_id,))) as cursor:  # closed also when a row is not JSON
                return messages_from_values(cursor)
        try:
            return await self.db.read(read)
        except (sqlite3.Error, ValueError) as exc:
            raise TranscriptReadError(f"transcript {session_id} could not be read: {exc}") from exc

    async def count_turns(self, session_id: str) -> int:
        return int(await self.db.fetchval(
            "SELECT COUNT(*) FROM messages WHERE session_id = ? AND active = 1 AND role = 'user'", (session_id,)))

    async def rewrite(self, session_id: str, rows: list[MessageRow], inbound_id: int | None = None,
                      now_ts: float = 0.0, obligation: NewObligation | None = None) -> int | None:
        def work(conn: sqlite3.Connection) -> int | None:
            conn.execute("UPDATE messages SET active = 0 WHERE session_id = ? AND active = 1", (session_id,))
            _insert_messages(conn, session_id, rows)
            if inbound_id is not None:
                conn.execute(_FINISH_INBOUND, (now_ts, inbound_id))
            return self._insert_obligation(conn, obligation, None) if obligation is not None else None
        return await self._with_fts_repair(lambda: self.db.run(work))

    async def rewind(self, session_id: str, n: int, inbound_id: int | None = None, now_ts: float = 0.0,
                     again: RetryTurn | None = None,
                     obligation: Callable[[dict], NewObligation] | None = None) -> dict[str, Any] | None:
        def work(conn: sqlite3.Connection) -> dict[str, Any] | None:
            users = conn.execute(
                "SELECT id, content FROM messages WHERE session_id = ? AND active = 1 AND role = 'user' "
                "ORDER BY id DESC LIMIT ?", (session_id, n)).fetchall()
            if not users or (again is not None and not (users[-1][1] or "").strip()):
                return None
            target_id, target_text = users[-1][0], users[-1][1]
            rewound = conn.execute("UPDATE messages SET active = 0 WHERE session_id = ? AND active = 1 AND id >= ?",
                                   (session_id, target_id)).rowcount
            conn.execute("UPDATE sessions SET rewind_count = rewind_count + 1 WHERE session_id = ?", (session_id,))
            if again is not None:
                self._begin_turn_in_thread(again.session_key, session_id, replace(again.row, content=target_text),
                                           again.started_ts, inbound_id, None, conn)
            elif inbound_id is not None:
                conn.execute(_FINISH_INBOUND, (now_ts, inbound_id))
            result = {"rewound_count": rewound, "turns_undone": len(users), "target_text": target_text}
            if obligation is not None:
                result["obligation_id"] = self._insert_obligation(conn, obligation(dict(result)), None)
            return result
        return await self._with_fts_repair(partial(self.db.run, work))

    # ---- durable intake (docs/behaviour.md §0, §5) ----------------------------------------------------

    async def intake_accept(self, platform: str, chat_id: str, message_id: str, session_key: str | None,
                            payload: str | None, now_iso: str, now_ts: float, *, done: bool = False) -> int | None:
        cur = await self.db.write_one(
            _ACCEPT, (platform, chat_id, message_id, now_iso, now_ts, session_key, payload, "done" if done else "pending"))
        return cur.lastrowid if cur.rowcount == 1 else None

    async def intake_finish(self, inbound_id: int, now_ts: float) -> None:
        # The payload is dropped: the message lives in the transcript now; the id stays for dedupe.
        await self.db.write_one(_FINISH_INBOUND, (now_ts, inbound_id))

    async def intake_open(self) -> list[IntakeRow]:
        rows = await self.db.fetchall(
            "SELECT id, session_key, payload, state FROM inbound WHERE state != 'done' ORDER BY id")
        return [IntakeRow(*r) for r in rows]

    async def intake_prune(self, before_ts: float) -> int:
        cur = await self.db.write_one("DELETE FROM inbound WHERE state = 'done' AND accepted_ts < ?", (before_ts,))
        return cur.rowcount

    async def intake_merge(self, target_id: int, payload: str, absorbed_ids: list[int], now_ts: float) -> None:
        # One transaction: a crash leaves either the separate rows or the merged one, never half.
        def work(conn: sqlite3.Connection) -> None:
            conn.execute("UPDATE inbound SET payload = ? WHERE id = ? AND state = 'pending'", (payload, target_id))
            conn.executemany(_FINISH_INBOUND, [(now_ts, ident) for ident in absorbed_ids])
        await self.db.run(work)

    # ---- delivery ledger (docs/behaviour.md §6) ------------------------------------------------------

    _OB_COLS = ("id", "session_key", "session_id", "origin", "content", "state", "attempts", "internal",
                "last_error", "message_id", "reply_to", "created_ts", "updated_ts")

    @staticmethod
    def _insert_obligation(conn: sqlite3.Connection, ob: NewObligation, message_id: int | None) -> int:
        return conn.execute(
            "INSERT INTO delivery_obligations (session_key, session_id, origin, content, state, attempts, internal, "
            "message_id, reply_to, created_at, updated_at, created_ts, updated_ts) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (ob.session_key, ob.session_id, ob.origin, ob.content, ob.state, ob.attempts, int(bool(ob.internal)),
             message_id, ob.reply_to, ob.now_iso, ob.now_iso, ob.now_ts, ob.now_ts)).lastrowid

    async def record_reply(self, session_key: str, session_id: str, row: MessageRow | None,
                           obligation: NewObligation | None, *, before: Sequence[MessageRow] = (),
                           entry: SessionEntry | None = None, inbound_ids: Sequence[int] = (),
                           now_ts: float = 0.0) -> tuple[int | None, int | None]:
        # A partial, not a closure: at 10,000 turns in flight each waiting write's objects are
        # traversed by every young garbage collection, and a closure is one cell per variable
        # (docs/behaviour.md §12 "Garbage collection").
        work = partial(self._record_reply_in_thread, session_key, session_id, row, obligation, before,
                       route_params(entry) if entry is not None else None, inbound_ids, now_ts)
        return await self._with_fts_repair(partial(self.db.run, work))

    def _record_reply_in_thread(self, session_key: str, session_id: str, row: MessageRow | None,
                                obligation: NewObligation | None, before: Sequence[MessageRow], route: tuple | None,
                                inbound_ids: Sequence[int], now_ts: float,
                                conn: sqlite3.Connection) -> tuple[int | None, int | None]:
        last_id = _insert_messages(conn, session_id, [*before, row] if row is not None else before)
        message_id = last_id if row is not None else None
        ob_id = None
        if obligation is not None:
            carried = message_id if message_id is not None else obligation.message_id
            ob_id = self._insert_obligation(conn, obligation, carried)
        # The entry carries the session's counters (read through `sessions_now`, schema 8).
        if route is None or conn.execute(_END_TURN_ROUTE, (*route[2:], session_key, route[1])).rowcount == 0:
            if route is not None:
                conn.execute(_UPSERT_ROUTE, route)
            conn.execute(_CLEAR_MARKER, (session_key,))
        conn.executemany(_FINISH_INBOUND, [(now_ts, ident) for ident in inbound_ids])
        return message_id, ob_id

    async def obligation_for_message(self, message_id: int) -> int | None:
        return await self.db.fetchval("SELECT id FROM delivery_obligations WHERE message_id = ? LIMIT 1",
                                      (message_id,))

    async def obligation_update(self, ob_id: int, state: str, now_iso: str, now_ts: float, *,
                                attempt: bool = False, error: str | None = None,
                                sent_ids: str | None = None) -> None:
        await self.db.write_one(_UPDATE_OBLIGATION, (state, 1 if attempt else 0, error, sent_ids, now_iso, now_ts,
                                                     ob_id))

    async def obligations_finished(self, finished: Sequence[tuple[int, str, str | None, str | None]],
                                   now_iso: str, now_ts: float) -> list[tuple[int, Exception]]:
        # One write for all: it is one transaction, so it stores all of them or none.
        if not finished:
            return []
        try:
            await self.db.executemany(_UPDATE_OBLIGATION, [(state, 0, error, sent_ids, now_iso, now_ts, ob_id)
                                                           for ob_id, state, error, sent_ids in finished])
        except Exception as exc:
            return [(ob_id, exc) for ob_id, *_ in finished]
        return []

    async def obligation_by_sent_id(self, platform: str, sent_id: str, since_ts: float) -> tuple[int, str] | None:
        # The updated_ts index bounds the scan to the last day's obligations; json_each reads
        # the ids of each (a handful per reply).
        row = await self.db.fetchone(
            "SELECT o.id, o.state FROM delivery_obligations AS o, json_each(o.sent_ids) AS s "
            "WHERE o.updated_ts >= ? AND o.sent_ids IS NOT NULL AND s.value = ? "
            "AND json_extract(o.origin, '$.platform') = ? ORDER BY o.id DESC LIMIT 1",
            (since_ts, sent_id, platform))
        return (int(row[0]), str(row[1])) if row else None

    async def obligations(self, states: tuple[str, ...]) -> list[Obligation]:
        marks = ", ".join("?" for _ in states)
        # Open states are read through the partial index `delivery_open`, which SQLite uses only
        # when the query names its condition literally; other states (admin) scan the table.
        where = f"{_OPEN_OBLIGATION} AND " if set(states) <= _OPEN_STATES else ""
        rows = await self.db.fetchall(
            f"SELECT {', '.join(self._OB_COLS)} FROM delivery_obligations WHERE {where}state IN ({marks}) "
            "ORDER BY id", states)
        return [Obligation(**dict(zip(self._OB_COLS, r), internal=bool(r[7]))) for r in rows]

    async def obligations_prune(self, before_ts: float) -> int:
        cur = await self.db.write_one(
            "DELETE FROM delivery_obligations WHERE state IN ('delivered', 'abandoned') AND updated_ts < ?",
            (before_ts,))
        return cur.rowcount

    async def resume_pending_routes(self) -> list[SessionEntry]:
        rows = await self.db.fetchall(
            # An entry an outside edit left unreadable is skipped (`_entry` logs it when it is
            # read), not an error that would stop every start: `json_extract` fails on it.
            "SELECT entry, session_id FROM routes WHERE CASE WHEN json_valid(entry) "
            "THEN json_extract(entry, '$.resume_pending') END = 1 ORDER BY updated_ts")
        entries = (self._entry(r[0], f"of session {r[1]}") for r in rows)
        return [e for e in entries if e is not None]

    async def search(self, expression: str, limit: int, offset: int, platform: str | None) -> list[SearchHit]:
        def hits_in(table: str) -> tuple[str, list[Any]]:
            sql = (f"SELECT m.session_id, m.id, snippet({table}, 0, '[', ']', '…', 12), s.origin, {table}.rank "
                   f"FROM {table} JOIN messages m ON m.id = {table}.rowid "
                   "LEFT JOIN sessions s ON s.session_id = m.session_id "
                   f"WHERE {table} MATCH ? AND m.active = 1")
            if platform is None:
                return sql, [expression]
            return sql + " AND s.platform = ?", [expression, platform]

        if self.db.read_only_file:
            return await self._search_read_only(hits_in, limit, offset)
        sql, params = hits_in("messages_fts")
        sql += " ORDER BY rank LIMIT ? OFFSET ?"
        params += [limit, offset]

        async def work():
            await self.db.run(fts.catch_up)  # the messages not yet indexed are found too
            return await self.db.fetchall(sql, params)
        try:
            rows = await work()
        except sqlite3.DatabaseError as exc:
            if not await fts.confirm_damage(self.db, exc):
                raise
            log.warning("search hit a damaged full-text index (%s); rebuilding it", exc)
            await fts.rebuild(self.db)
            rows = await work()
        return [SearchHit(r[0], r[1], r[2], r[3]) for r in rows]

    async def _search_read_only(self, hits_in: Callable[[str], tuple[str, list[Any]]], limit: int,
                                offset: int) -> list[SearchHit]:
        """`search` on a read-only state.db (`Database` `read_only`), which cannot index the
        messages waiting for the next batch (`fts` module docstring): they are indexed in a
        full-text table of the connection's own temporary database (the same default tokenizer
        as `messages_fts`), and the hits of both are ranked together, so the search still sees
        every message. Nothing is written into state.db or beside it."""
        indexed, indexed_params = hits_in(fts.FTS_TABLE)
        waiting, waiting_params = hits_in(_WAITING_FTS)
        sql = f"SELECT * FROM ({indexed} UNION ALL {waiting}) ORDER BY 5 LIMIT ? OFFSET ?"

        def read(conn: sqlite3.Connection) -> list[tuple]:
            conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{_WAITING_FTS} USING fts5(content)")
            conn.execute(f"DELETE FROM {_WAITING_FTS}")
            try:
                conn.execute(f"INSERT INTO {_WAITING_FTS}(rowid, content) SELECT id, content FROM messages "
                             "WHERE id > (SELECT indexed_through FROM fts_progress)")
                return conn.execute(sql, [*indexed_params, *waiting_params, limit, offset]).fetchall()
            except sqlite3.DatabaseError as exc:
                # It cannot rebuild the index (a read): it says what is damaged (a missing shadow
                # table reads as "SQL logic error"), for the command to name the remedy.
                damage = fts.named_damage(conn, exc)
                if damage is exc:
                    raise
                raise damage from exc
        rows = await self.db.read(read)
        return [SearchHit(r[0], r[1], r[2], r[3]) for r in rows]

    async def fts_check_and_repair(self, force: bool = False) -> bool:
        return await fts.check_and_repair(self.db, force=force)

    async def render_mirror(self) -> str:
        """sessions.json text from a consistent snapshot of `routes` (read beside the writer:
        `Database.snapshot_rows`), so the writer is never blocked by a large index."""
        rows = await self.db.snapshot_rows("SELECT session_key, entry FROM routes ORDER BY session_key")
        return await in_thread(render_from_json_texts, rows)

    async def get_meta(self, key: str) -> str | None:
        return await self.db.fetchval("SELECT value FROM meta WHERE key = ?", (key,))

    async def set_meta(self, key: str, value: str) -> None:
        await self.db.write_one("INSERT INTO meta (key, value) VALUES (?, ?) "
                                "ON CONFLICT(key) DO UPDATE SET value = excluded.value", (key, value))

    # ---- import ---------------------------------------------------------------------------

    async def import_entries(self, entries: Iterable[SessionEntry], replace: bool) -> tuple[int, int]:
        """Insert imported entries (routes + session rows) in one transaction.

        Returns `(imported, skipped_existing)`."""
        entries = list(entries)

        def work(conn: sqlite3.Connection) -> tuple[int, int]:
            imported = skipped = 0
            for entry in entries:
                exists = conn.execute("SELECT 1 FROM routes WHERE session_key = ?", (entry.session_key,)).fetchone()
                if exists and not replace:
                    skipped += 1
                    continue
                conn.execute(_INSERT_SESSION, session_params(entry))
                conn.execute(
                    "UPDATE sessions SET input_tokens = ?, output_tokens = ?, cache_read_tokens = ?, "
                    "cache_write_tokens = ?, total_tokens = ?, estimated_cost_usd = ?, cost_status = ? "
                    "WHERE session_id = ?",
                    (entry.input_tokens, entry.output_tokens, entry.cache_read_tokens, entry.cache_write_tokens,
                     entry.total_tokens, entry.estimated_cost_usd, entry.cost_status, entry.session_id))
                conn.execute(_UPSERT_ROUTE, route_params(entry))
                imported += 1
            return imported, skipped
        return await self.db.run(work)

    # ---- identity aliases -----------------------------------------------------------------

    async def alias_rows(self) -> list[AliasRow]:
        rows = await self.db.fetchall(
            "SELECT platform, alias_id, canonical_id, source, first_seen, last_seen FROM identity_aliases "
            "ORDER BY platform, alias_id")
        return [AliasRow(*row) for row in rows]

    async def upsert_alias(self, platform: str, alias_id: str, canonical_id: str, source: str,
                           now_iso: str) -> None:
        await self.db.write_one(
            "INSERT INTO identity_aliases (platform, alias_id, canonical_id, source, first_seen, last_seen) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(platform, alias_id) DO UPDATE SET "
            "canonical_id = excluded.canonical_id, source = excluded.source, last_seen = excluded.last_seen",
            (platform, alias_id, canonical_id, source, now_iso, now_iso))

    # ---- admin removals (RemovalBackend, docs/operations.md §5) ---------------------------------

    async def all_sessions(self, limit: int, offset: int) -> tuple[list[tuple], int]:
        total = int(await self.db.fetchval("SELECT count(*) FROM sessions") or 0)
        rows = await self.db.fetchall(
            # `current` by EXISTS: a session two routes point at (one key resumed another's
            # session) is still one row.
            f"SELECT {', '.join('s.' + c for c in ALL_SESSION_COLUMNS)}, "
            "EXISTS (SELECT 1 FROM routes r WHERE r.session_id = s.session_id) FROM sessions_now s "
            "ORDER BY s.updated_at DESC, s.session_id LIMIT ? OFFSET ?", (limit, offset))
        return [(*r[:-1], bool(r[-1])) for r in rows], total

    async def session_stored(self, session_id: str) -> bool:
        return (await self.db.fetchone("SELECT 1 FROM sessions WHERE session_id = ?", (session_id,)) is not None
                or await self.db.fetchone("SELECT 1 FROM messages WHERE session_id = ?", (session_id,)) is not None)

    async def platform_sessions(self, platform: str) -> list[tuple[str, str | None, str | None]]:
        rows = await self.db.fetchall(
            "SELECT session_id, origin, participant_id FROM sessions WHERE platform = ?", (platform,))
        return [tuple(r) for r in rows]

    async def route_keys(self, session_ids: list[str]) -> list[str]:
        if not session_ids:
            return []
        rows = await self.db.fetchall(
            f"SELECT session_key FROM routes WHERE session_id IN ({','.join('?' * len(session_ids))})", session_ids)
        return [r[0] for r in rows]

    async def alias_ids(self, platform: str, canonical_id: str) -> list[str]:
        rows = await self.db.fetchall(
            "SELECT alias_id FROM identity_aliases WHERE platform = ? AND canonical_id = ?", (platform, canonical_id))
        return [r[0] for r in rows]

    async def intake_payloads(self, platform: str) -> list[tuple[int, str | None, str]]:
        rows = await self.db.fetchall(
            "SELECT id, session_key, payload FROM inbound WHERE platform = ? AND payload IS NOT NULL", (platform,))
        return [tuple(r) for r in rows]

    async def transcript_roles(self, session_id: str) -> list[tuple[int, str, str | None]]:
        rows = await self.db.fetchall(
            "SELECT id, role, content FROM messages WHERE session_id = ? ORDER BY id", (session_id,))
        return [tuple(r) for r in rows]

    async def session_obligations(self, session_id: str) -> list[tuple[int, int | None, str | None]]:
        rows = await self.db.fetchall(
            "SELECT id, message_id, origin FROM delivery_obligations WHERE session_id = ?", (session_id,))
        return [tuple(r) for r in rows]

    @staticmethod
    def _removal_statements(plan: RemovalPlan) -> list[tuple[str, str, str, list]]:
        def where(column: str, values: list) -> tuple[str, list]:
            return f"{column} IN ({','.join('?' * len(values)) or 'NULL'})", list(values)

        statements = [(kind, table, *where(column, values)) for kind, table, column, values in plan.deletions()]
        if plan.aliases is not None:
            platform, ids = plan.aliases
            alias_where, params = where("alias_id", sorted(ids))
            canon_where, more = where("canonical_id", sorted(ids))
            statements.append(("aliases", "identity_aliases",
                               f"platform = ? AND ({alias_where} OR {canon_where})", [platform, *params, *more]))
        return statements

    async def count_removal(self, plan: RemovalPlan) -> dict[str, int]:
        counts: dict[str, int] = {}
        for kind, table, condition, params in self._removal_statements(plan):
            n = int(await self.db.fetchval(f"SELECT count(*) FROM {table} WHERE {condition}", params) or 0)
            counts[kind] = counts.get(kind, 0) + n
        return counts

    async def apply_removal(self, plan: RemovalPlan) -> dict[str, int]:
        counts: dict[str, int] = {}
        async with self.db.write() as conn:
            for kind, table, condition, params in self._removal_statements(plan):
                cur = await conn.execute(f"DELETE FROM {table} WHERE {condition}", params)
                counts[kind] = counts.get(kind, 0) + max(cur.rowcount, 0)
            for sid, text in plan.scrub.items():
                await conn.execute("UPDATE sessions SET origin = ?, participant_id = NULL WHERE session_id = ?",
                                   (text, sid))
                await conn.execute("UPDATE routes SET entry = json_set(entry, '$.origin', json(?)) "
                                   "WHERE session_id = ?", (text, sid))
            # Deleted index entries linger in older FTS segments until they are merged; merging
            # now (secure_delete is on) leaves none of the removed words in the file. The
            # messages still waiting to be indexed are indexed first, so the index left is whole.
            await fts.catch_up_async(conn)
            await conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('optimize')")
        return counts
