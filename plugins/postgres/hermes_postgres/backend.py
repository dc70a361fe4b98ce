"""The PostgreSQL store engine: `[store] backend = "postgres"` (docs/architecture.md §7).

Implements the core's `StoreBackend` Protocol (the same contract suite as SQLite passes on it)
and `LeasedBackend`: several gateway replicas share one database, and every write for a session
key checks that replica's lease in its own transaction (`leases.Leases.fence`). Connections come
from a psycopg_pool pool in autocommit mode; each method is one explicit transaction (or one
statement), durable when it returns (PostgreSQL's `synchronous_commit = on`).

Intake rows are deduplicated across replicas by their unique key; every accepted row sends
`NOTIFY hermes_intake` (its session key) when its transaction commits, a hint other replicas
wait on with `wait_for_intake`, polling when no hint arrives. Search uses the generated
`messages.search` tsvector ('simple' configuration) with a GIN index.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import socket
import uuid
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any, AsyncIterator, Callable, Iterable, Sequence

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from hermes_core.model import SessionEntry, TokenUsage, format_timestamp
from hermes_core.store.backend import LeaseGrant
from hermes_core.store.db import StoreError
from hermes_core.store.mirror import render_from_json_texts
from hermes_core.store.records import (ALL_SESSION_COLUMNS, AliasRow, IntakeRow, KeptRoute, MessageRow, NewIntake,
                                       NewObligation, Obligation, RemovalPlan, RetryTurn, SearchHit, SessionRow,
                                       SessionSummary, StoredMessage, TurnMarker)
from hermes_core.store.rows import TranscriptReadError, row_to_message
from hermes_core.store.sqlite_backend import entry_json, session_params

from .leases import Leases
from .migrate import migrate

log = logging.getLogger(__name__)

INTAKE_CHANNEL = "hermes_intake"
_TERM_RE = re.compile(r'"((?:[^"]|"")*)"')

_MSG_COLS = ("session_id", "role", "content", "tool_call_id", "tool_name", "tool_calls",
             "platform_message_id", "timestamp", "reasoning")
_INSERT_MSG = (f"INSERT INTO messages ({', '.join(_MSG_COLS)}) VALUES ({', '.join('%s' for _ in _MSG_COLS)}) "
               f"RETURNING id")
_UPSERT_ROUTE = (
    "INSERT INTO routes (session_key, session_id, entry, updated_ts, suspended, resume_pending) "
    "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (session_key) DO UPDATE SET session_id = excluded.session_id, "
    "entry = excluded.entry, updated_ts = excluded.updated_ts, suspended = excluded.suspended, "
    "resume_pending = excluded.resume_pending")
_INSERT_SESSION = (
    "INSERT INTO sessions (session_id, session_key, origin, platform, chat_id, participant_id, chat_type, "
    "display_name, created_at, updated_at, parent_session_id) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s) "
    "ON CONFLICT (session_id) DO NOTHING")
# The session row's counters follow its route's entry (SQLite lays the entry over the row when it
# reads it, schema 8; here the row is written with the entry).
_SYNC_COUNTERS = (
    "UPDATE sessions SET input_tokens = %s, output_tokens = %s, cache_read_tokens = %s, cache_write_tokens = %s, "
    "total_tokens = %s, estimated_cost_usd = %s, cost_status = %s, updated_at = %s WHERE session_id = %s")
_CLEAR_MARKER = ("UPDATE routes SET turn_session_id = NULL, turn_message_id = NULL, turn_started_ts = NULL "
                 "WHERE session_key = %s")
_FINISH_INBOUND = "UPDATE inbound SET state = 'done', payload = NULL, finished_ts = %s WHERE id = %s"
# An accepted message ('pending'; 'running' when accepted in the transaction that begins its
# turn, docs/behaviour.md §12); a duplicate of its dedupe id inserts nothing and returns no row.
_ACCEPT = ("INSERT INTO inbound (platform, chat_id, message_id, accepted_at, accepted_ts, session_key, payload, "
           "state) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (platform, chat_id, message_id) "
           "DO NOTHING RETURNING id")
_SESSION_COLS = ("session_id, session_key, origin, platform, chat_id, participant_id, chat_type, display_name, "
                 "created_at, updated_at, ended_at, end_reason, parent_session_id, input_tokens, output_tokens, "
                 "cache_read_tokens, cache_write_tokens, total_tokens, estimated_cost_usd, cost_status, title, "
                 "rewind_count")
_OB_COLS = ("id", "session_key", "session_id", "origin", "content", "state", "attempts", "internal",
            "last_error", "message_id", "reply_to", "created_ts", "updated_ts")


def _message_params(session_id: str, row: MessageRow) -> tuple:
    return (session_id, row.role, row.content, row.tool_call_id, row.tool_name, row.tool_calls,
            row.platform_message_id, row.timestamp, row.reasoning)


def _route_params(entry: SessionEntry) -> tuple:
    return (entry.session_key, entry.session_id, entry_json(entry), entry.updated_at.timestamp(),
            bool(entry.suspended), bool(entry.resume_pending))


def _counter_params(entry: SessionEntry) -> tuple:
    return (entry.input_tokens, entry.output_tokens, entry.cache_read_tokens, entry.cache_write_tokens,
            entry.total_tokens, entry.estimated_cost_usd, entry.cost_status, format_timestamp(entry.updated_at),
            entry.session_id)


def tsquery_terms(expression: str) -> list[str]:
    """The words of a core search expression (`fts.match_expression`: quoted terms, implicit AND)."""
    return [term.replace('""', '"') for term in _TERM_RE.findall(expression)]


def default_replica_id() -> str:
    """`<host>:<pid>:<random>`: unique per process, readable in logs and in `session_leases`."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


# What `PostgresBackend.where` is for a DSN libpq cannot parse.
UNPARSABLE_DSN = "(unparsable dsn)"


class PostgresBackend:
    """Routes, sessions, transcripts, intake, ledger and leases in one PostgreSQL database.

    Args:
        dsn: libpq connection string or URI (`[store] dsn`).
        lease_ttl_s: seconds a session lease lasts unless renewed (`[store] lease_ttl_s`).
        replica_id: this replica's holder name (default `default_replica_id()`).
        pool_size: most pooled connections.
        connect_timeout_s: how long `open()` waits for the server.
    """

    degraded = False
    shared = True

    def __init__(self, dsn: str, *, lease_ttl_s: float = 30.0, replica_id: str | None = None,
                 pool_size: int = 8, connect_timeout_s: float = 10.0) -> None:
        self._dsn = dsn
        self.replica_id = replica_id or default_replica_id()
        self.leases = Leases(self.replica_id, lease_ttl_s)
        self._pool_size = pool_size
        self._connect_timeout_s = connect_timeout_s
        self._pool: AsyncConnectionPool | None = None
        self._renewer: asyncio.Task | None = None
        # Intake hints: one LISTEN connection for the engine's life, read by `_listen`.
        self._listener: asyncio.Task | None = None
        self._hinted: list[str] = []
        self._hint = asyncio.Event()
        self.where = self._describe(dsn)

    @staticmethod
    def _describe(dsn: str) -> str:
        """host:port/dbname of the DSN, never its password (log lines and errors name this)."""
        try:
            info = psycopg.conninfo.conninfo_to_dict(dsn)
        except (psycopg.ProgrammingError, UnicodeError):
            return UNPARSABLE_DSN
        return f"{info.get('host', 'localhost')}:{info.get('port', 5432)}/{info.get('dbname', '')}"

    # ---- lifecycle ------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect, migrate and start renewing leases.

        Raises:
            StoreError: the server cannot be reached or a migration failed (one line naming
                host, port and database, never the password); SchemaTooNewError.
        """
        if self.where == UNPARSABLE_DSN:
            # libpq's parse error quotes the DSN around the fault, so it may quote the password
            # (docs/configuration.md §2: the dsn is never logged): only the setting is named.
            raise StoreError("[store] dsn cannot be parsed: expected a libpq connection string "
                             "(host=… dbname=…) or a postgresql:// URI")
        try:
            # One direct attempt first: it fails at once with the server's own reason (no such
            # database, authentication), where the pool would retry until its timeout.
            conn = await asyncio.wait_for(psycopg.AsyncConnection.connect(self._dsn, autocommit=True),
                                          self._connect_timeout_s)
        except (psycopg.Error, OSError, asyncio.TimeoutError) as exc:
            reason = " ".join(str(exc).split()) or type(exc).__name__
            raise StoreError(f"PostgreSQL store {self.where} cannot be reached: {reason}") from None
        try:
            await migrate(conn, self.where)
        except psycopg.Error as exc:  # e.g. a role without rights on the schema: still one line naming the store
            # The server's primary message only: the full text adds the statement and a caret line.
            reason = (getattr(exc.diag, "message_primary", None) or " ".join(str(exc).split())
                      or type(exc).__name__)
            raise StoreError(f"PostgreSQL store {self.where} cannot be used: {reason}") from None
        finally:
            await conn.close()
        pool = AsyncConnectionPool(self._dsn, min_size=1, max_size=self._pool_size, open=False,
                                   kwargs={"autocommit": True}, name=f"hermes-store-{self.replica_id}")
        try:
            await pool.open(wait=True, timeout=self._connect_timeout_s)
        except Exception as exc:
            await pool.close()
            raise StoreError(f"PostgreSQL store {self.where} cannot be reached: {' '.join(str(exc).split())}") from None
        self._pool = pool
        try:  # listening before open() returns: every row accepted from now on is hinted
            listening = await self._listening_connection()
        except (psycopg.Error, OSError) as exc:
            await pool.close()
            self._pool = None
            raise StoreError(f"PostgreSQL store {self.where} cannot be reached: {' '.join(str(exc).split())}") from None
        loop = asyncio.get_running_loop()
        self._renewer = loop.create_task(self._renew_forever(), name="lease renewal")
        self._listener = loop.create_task(self._listen(listening), name="intake hints")

    async def close(self) -> None:
        """Stop renewing, release every held lease, close the pool (idempotent)."""
        tasks = [t for t in (self._renewer, self._listener) if t is not None]
        self._renewer = self._listener = None
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        pool, self._pool = self._pool, None
        if pool is None:
            return
        try:
            async with pool.connection() as conn:
                await self.leases.release_all(conn)
        except psycopg.Error as exc:  # they expire on their own
            log.warning("leases of replica %s not released at close: %s", self.replica_id, exc)
        await pool.close()

    def _p(self) -> AsyncConnectionPool:
        if self._pool is None:
            raise StoreError("the PostgreSQL store is not open")
        return self._pool

    async def _renew_forever(self) -> None:
        while True:
            await asyncio.sleep(self.leases.ttl_s / 3)
            try:
                async with self._p().connection() as conn:
                    await self.leases.renew(conn)
            except (psycopg.Error, StoreError) as exc:  # the next round retries; writes still fence
                log.warning("lease renewal of replica %s failed: %s", self.replica_id, exc)

    # ---- transactions ----------------------------------------------------------------------

    @asynccontextmanager
    async def _tx(self, fence_key: str | None = None, *, fence_session: str | None = None,
                  fence_sql: str | None = None, fence_arg: Any = None) -> AsyncIterator[psycopg.AsyncConnection]:
        """One transaction whose first statement fences the session it writes for: the key
        `fence_key`, the key routed to session id `fence_session`, or the key a row found by
        `fence_sql` (one parameter `fence_arg`) belongs to. A row of no key is not fenced."""
        grant: LeaseGrant | None = None
        async with self._p().connection() as conn:
            async with conn.transaction():
                key = fence_key
                if key is None and fence_session is not None:
                    cur = await conn.execute("SELECT session_key FROM routes WHERE session_id = %s LIMIT 1",
                                             (fence_session,))
                    found = await cur.fetchone()
                    key = found[0] if found else None
                elif key is None and fence_sql is not None:
                    cur = await conn.execute(fence_sql, (fence_arg,))
                    found = await cur.fetchone()
                    key = found[0] if found else None
                if key is not None:
                    grant = await self.leases.fence(conn, key)
                yield conn
            if grant is not None:  # committed: recorded before anything else can run here
                self.leases.granted(grant, in_write=True)

    async def _fetch(self, sql: str, params: Any = (), *, dicts: bool = False) -> list[Any]:
        async with self._p().connection() as conn:
            cur = conn.cursor(row_factory=dict_row) if dicts else conn.cursor()
            await cur.execute(sql, params)
            return await cur.fetchall()

    async def _one(self, sql: str, params: Any = ()) -> Any:
        rows = await self._fetch(sql, params)
        return rows[0] if rows else None

    # ---- leases (LeasedBackend) -------------------------------------------------------------

    async def acquire_lease(self, session_key: str, *, sticky: bool = False) -> LeaseGrant | None:
        """Take the lease of `session_key` (also over an unreleased, expired one: the caller
        then runs that session's crash recovery). None when another replica holds it live.
        A `sticky` lease is never released for being idle (an ingress receiver's)."""
        if sticky:
            self.leases.sticky.add(session_key)
        if session_key in self.leases.held:
            return LeaseGrant(session_key, self.leases.held[session_key], takeover=False)
        async with self._p().connection() as conn:
            async with conn.transaction():
                grant = await self.leases.grant(conn, session_key)
            if grant is not None:
                self.leases.granted(grant)
        if grant is not None:
            if grant.takeover:
                log.warning("replica %s took over session %s from %s (lease token %d)", self.replica_id,
                            session_key, grant.previous_holder, grant.token)
        return grant

    async def release_lease(self, session_key: str) -> None:
        async with self._p().connection() as conn:
            await self.leases.release(conn, session_key)

    def holds_lease(self, session_key: str) -> bool:
        return session_key in self.leases.held

    async def orphaned_leases(self) -> list[str]:
        rows = await self._fetch("SELECT session_key FROM session_leases WHERE holder IS NOT NULL AND "
                                 "expires_at <= now() ORDER BY expires_at")
        return [r[0] for r in rows if r[0] not in self.leases.held]

    async def expire_leases_of(self, holder: str) -> list[str]:
        """End now every live lease `holder` holds (never this replica's): the caller proved
        that process dead (`SessionStore.take_back_own_leases`). Holder and token stay; each
        lease is expired and unreleased, so the next claim is a takeover, as after its expiry:
        it grants token + 1, which refuses any write of the old holder, and runs the session's
        crash recovery (docs/architecture.md §7). Returns the keys expired."""
        rows = await self._fetch("UPDATE session_leases SET expires_at = now() WHERE holder = %s AND holder <> %s "
                                 "AND expires_at > now() RETURNING session_key", (holder, self.replica_id))
        return sorted(r[0] for r in rows)

    async def renew_leases(self) -> list[str]:
        """Renew now (normally every third of the lease time); returns the keys found lost."""
        async with self._p().connection() as conn:
            return await self.leases.renew(conn)

    async def wait_for_intake(self, timeout_s: float) -> list[str]:
        """Wait up to `timeout_s` for `NOTIFY hermes_intake` hints (session keys of rows any
        replica accepted since the last call). An empty list means "poll": hints are never the
        only way work is found (a notification sent while the listener reconnects is lost)."""
        if not self._hint.is_set():
            try:
                await asyncio.wait_for(self._hint.wait(), timeout_s)
            except asyncio.TimeoutError:
                return []
        self._hint.clear()
        keys, self._hinted = self._hinted, []
        return keys

    async def _listening_connection(self) -> psycopg.AsyncConnection:
        conn = await psycopg.AsyncConnection.connect(self._dsn, autocommit=True)
        await conn.execute(f"LISTEN {INTAKE_CHANNEL}")
        return conn

    async def _listen(self, conn: psycopg.AsyncConnection | None) -> None:
        """Hold the LISTEN connection (reconnecting after a failure) and collect its hints."""
        while True:
            try:
                if conn is None:
                    conn = await self._listening_connection()
                    self._hint.set()  # rows accepted while it was down: sweep now
                try:
                    async for note in conn.notifies():
                        self._hinted.append(note.payload)
                        self._hint.set()
                finally:
                    await conn.close()
                    conn = None
            except asyncio.CancelledError:
                raise
            except (psycopg.Error, OSError) as exc:
                log.warning("intake hint listener of replica %s failed (%s); polling meanwhile",
                            self.replica_id, " ".join(str(exc).split()))
                await asyncio.sleep(self.leases.ttl_s / 3)

    # ---- routes ---------------------------------------------------------------------------

    @staticmethod
    def _entry(text: str, where: str) -> SessionEntry | None:
        try:
            return SessionEntry.from_dict(json.loads(text))
        except (ValueError, TypeError) as exc:
            log.warning("PostgreSQL route %s has a damaged entry (%s); ignored", where, exc)
            return None

    async def get_route(self, session_key: str) -> SessionEntry | None:
        row = await self._one("SELECT entry FROM routes WHERE session_key = %s", (session_key,))
        return self._entry(row[0], repr(session_key)) if row else None

    async def route_for_session_id(self, session_id: str) -> SessionEntry | None:
        row = await self._one("SELECT entry FROM routes WHERE session_id = %s LIMIT 1", (session_id,))
        return self._entry(row[0], f"of session {session_id}") if row else None

    async def save(self, entry: SessionEntry, *, new_session: bool = False, parent_session_id: str | None = None,
                   end_session: tuple[str, str] | None = None, reopen_session: str | None = None,
                   usage: TokenUsage | None = None, clear_marker: bool = False) -> None:
        now_iso = format_timestamp(entry.updated_at)
        async with self._tx(entry.session_key) as conn:
            if end_session is not None:
                await conn.execute("UPDATE sessions SET ended_at = %s, end_reason = %s, updated_at = %s "
                                   "WHERE session_id = %s AND ended_at IS NULL",
                                   (now_iso, end_session[1], now_iso, end_session[0]))
            if new_session:
                await conn.execute(_INSERT_SESSION, session_params(entry, parent_session_id))
            if reopen_session is not None:
                await conn.execute("UPDATE sessions SET ended_at = NULL, end_reason = NULL, session_key = %s, "
                                   "updated_at = %s WHERE session_id = %s",
                                   (entry.session_key, now_iso, reopen_session))
            await conn.execute(_UPSERT_ROUTE, _route_params(entry))
            await conn.execute(_SYNC_COUNTERS, _counter_params(entry))
            if clear_marker:
                await conn.execute(_CLEAR_MARKER, (entry.session_key,))

    async def touch_routes(self, entries: list[SessionEntry]) -> None:
        # SessionStore defers no touch on a shared store, so this runs only for a caller that
        # batches touches itself; the whole entry is written (only `updated_at` differs).
        for entry in entries:  # one fenced transaction per key: each is its own lease's
            async with self._tx(entry.session_key) as conn:
                await conn.execute("UPDATE routes SET entry = %s, updated_ts = %s WHERE session_key = %s "
                                   "AND session_id = %s", (entry_json(entry), entry.updated_at.timestamp(),
                                                           entry.session_key, entry.session_id))

    async def delete_routes(self, keys: list[str]) -> list[KeptRoute]:
        """Prune routes, each key in its own transaction with its lease row locked first
        (`Leases.lock_row`, docs/architecture.md §7), and keep the keys whose lease is another
        replica's: a live one (that replica is working on the session: its next write must not
        meet its route gone) or one never released (the replica that takes it over runs the
        session's crash recovery from the route's turn marker). No lease is granted here. Only
        the routes go: pruning never ends a session (docs/behaviour.md §2).

        Returns:
            The routes kept, each with why (empty when every route went).
        """
        kept: list[KeptRoute] = []
        for key in keys:
            async with self._p().connection() as conn:
                async with conn.transaction():
                    reason = self._kept_because(*await self.leases.lock_row(conn, key))
                    if reason is not None:
                        kept.append(KeptRoute(key, reason))
                        continue
                    await conn.execute("DELETE FROM routes WHERE session_key = %s", (key,))
        for route in kept:
            log.info("route %s not pruned: %s", route.session_key, route.reason)
        return kept

    async def routes_kept(self, keys: list[str]) -> list[KeptRoute]:
        """The routes of `keys` that `delete_routes(keys)` would keep now, each with why, in the
        order of `keys` (`sessions prune --dry-run`). The lease rows are read as they stand: no
        row is locked or written, so the answer holds for this moment only."""
        rows = await self._fetch("SELECT session_key, holder, expires_at > now() FROM session_leases "
                                 "WHERE session_key = ANY(%s)", (keys,))
        leases = {key: (holder, bool(live)) for key, holder, live in rows}
        # A key without a lease row reads as released, as `lock_row` would make it.
        reasons = {key: self._kept_because(*leases.get(key, (None, False))) for key in keys}
        return [KeptRoute(key, why) for key, why in reasons.items() if why is not None]

    def _kept_because(self, holder: str | None, live: bool) -> str | None:
        """Why prune keeps a route whose lease row reads `(holder, live)` (`Leases.lock_row`),
        or None when it may go: another replica's lease, live or never released, keeps it."""
        if holder is None or (live and holder == self.replica_id):
            return None
        if live:
            return f"leased by replica {holder}, which is working on it"
        return (f"replica {holder} stopped without releasing its lease: kept for the replica that takes it over "
                "and runs its crash recovery")

    async def adoptable_session(self, session_key: str) -> SessionRow | None:
        # `pruned`: the end reason older gateways gave pruned routes' sessions.
        row = await self._one(
            f"SELECT {_SESSION_COLS} FROM sessions s WHERE s.session_key = %s "
            "AND (s.ended_at IS NULL OR s.end_reason = 'pruned') "
            "AND NOT EXISTS (SELECT 1 FROM routes r WHERE r.session_id = s.session_id) "
            "ORDER BY s.created_at DESC, s.session_id DESC LIMIT 1", (session_key,))
        return SessionRow(*row) if row else None

    async def routes_older_than(self, cutoff_ts: float) -> list[tuple[str, bool]]:
        rows = await self._fetch("SELECT session_key, suspended FROM routes WHERE updated_ts < %s ORDER BY updated_ts",
                                 (cutoff_ts,))
        return [(r[0], bool(r[1])) for r in rows]

    async def list_routes(self, since_ts: float | None) -> list[SessionEntry]:
        if since_ts is None:
            rows = await self._fetch("SELECT entry, session_id FROM routes ORDER BY updated_ts DESC")
        else:
            rows = await self._fetch("SELECT entry, session_id FROM routes WHERE updated_ts >= %s "
                                     "ORDER BY updated_ts DESC", (since_ts,))
        entries = (self._entry(r[0], f"of session {r[1]}") for r in rows)
        return [e for e in entries if e is not None]

    async def resume_pending_routes(self) -> list[SessionEntry]:
        rows = await self._fetch("SELECT entry, session_id FROM routes WHERE resume_pending ORDER BY updated_ts")
        entries = (self._entry(r[0], f"of session {r[1]}") for r in rows)
        return [e for e in entries if e is not None]

    # ---- sessions -------------------------------------------------------------------------

    async def session_info(self, session_id: str) -> SessionRow | None:
        row = await self._one(f"SELECT {_SESSION_COLS} FROM sessions WHERE session_id = %s", (session_id,))
        return SessionRow(*row) if row else None

    async def set_title(self, session_id: str, title: str | None) -> bool:
        async with self._tx(fence_session=session_id) as conn:
            cur = await conn.execute("UPDATE sessions SET title = %s WHERE session_id = %s", (title, session_id))
            return cur.rowcount > 0

    async def recent_sessions(self, platform: str, limit: int) -> list[SessionSummary]:
        rows = await self._fetch(
            # Last activity: the newest active message (an ending is not activity), else creation.
            "SELECT s.session_id, s.origin, s.title, coalesce((SELECT max(m.timestamp) FROM messages m "
            " WHERE m.session_id = s.session_id AND m.active), s.created_at) AS last_activity, "
            "(SELECT count(*) FROM messages m WHERE m.session_id = s.session_id AND m.active), "
            "(SELECT m.content FROM messages m WHERE m.session_id = s.session_id AND m.active "
            " AND m.role = 'user' ORDER BY m.id LIMIT 1) "
            "FROM sessions s WHERE s.platform = %s ORDER BY last_activity DESC, s.session_id DESC LIMIT %s",
            (platform, limit))
        return [SessionSummary(r[0], r[1], r[2], r[3], int(r[4]), r[5]) for r in rows]

    async def has_any_sessions(self) -> bool:
        return await self._one("SELECT 1 WHERE EXISTS (SELECT 1 FROM sessions) OR EXISTS (SELECT 1 FROM routes)") \
            is not None

    async def session_had_turn(self, session_id: str) -> bool:
        return await self._one("SELECT 1 FROM messages WHERE session_id = %s AND role = 'user' LIMIT 1",
                               (session_id,)) is not None

    # ---- transcripts and turns --------------------------------------------------------------

    @staticmethod
    async def _insert_message(conn: psycopg.AsyncConnection, session_id: str, row: MessageRow) -> int:
        cur = await conn.execute(_INSERT_MSG, _message_params(session_id, row))
        return (await cur.fetchone())[0]

    async def append_message(self, session_id: str, row: MessageRow) -> int:
        async with self._tx(fence_session=session_id) as conn:
            return await self._insert_message(conn, session_id, row)

    async def load_messages(self, session_id: str) -> list[dict[str, Any]]:
        try:
            rows = await self._fetch(
                "SELECT role, content, timestamp, platform_message_id, tool_call_id, tool_name, tool_calls, "
                "reasoning FROM messages WHERE session_id = %s AND active ORDER BY id", (session_id,), dicts=True)
        except psycopg.Error as exc:
            raise TranscriptReadError(f"transcript {session_id} could not be read: {exc}") from exc
        return [row_to_message(r) for r in rows]

    async def count_turns(self, session_id: str) -> int:
        row = await self._one("SELECT count(*) FROM messages WHERE session_id = %s AND active AND role = 'user'",
                              (session_id,))
        return int(row[0])

    async def rewrite(self, session_id: str, rows: list[MessageRow], inbound_id: int | None = None,
                      now_ts: float = 0.0, obligation: NewObligation | None = None) -> int | None:
        async with self._tx(fence_session=session_id) as conn:
            await conn.execute("UPDATE messages SET active = false WHERE session_id = %s AND active", (session_id,))
            for row in rows:
                await self._insert_message(conn, session_id, row)
            if inbound_id is not None:
                await conn.execute(_FINISH_INBOUND, (now_ts, inbound_id))
            return await self._insert_obligation(conn, obligation, None) if obligation is not None else None

    async def rewind(self, session_id: str, n: int, inbound_id: int | None = None, now_ts: float = 0.0,
                     again: RetryTurn | None = None,
                     obligation: Callable[[dict], NewObligation] | None = None) -> dict[str, Any] | None:
        fence = {"fence_key": again.session_key} if again is not None else {"fence_session": session_id}
        async with self._tx(**fence) as conn:
            cur = await conn.execute("SELECT id, content FROM messages WHERE session_id = %s AND active AND "
                                     "role = 'user' ORDER BY id DESC LIMIT %s", (session_id, n))
            users = await cur.fetchall()
            if not users or (again is not None and not (users[-1][1] or "").strip()):
                return None
            target_id, target_text = users[-1]
            cur = await conn.execute("UPDATE messages SET active = false WHERE session_id = %s AND active AND id >= %s",
                                     (session_id, target_id))
            rewound = cur.rowcount
            await conn.execute("UPDATE sessions SET rewind_count = rewind_count + 1 WHERE session_id = %s",
                               (session_id,))
            if again is not None:
                await self._begin_turn_in(conn, again.session_key, session_id,
                                          replace(again.row, content=target_text), again.started_ts, inbound_id)
            elif inbound_id is not None:
                await conn.execute(_FINISH_INBOUND, (now_ts, inbound_id))
            result = {"rewound_count": rewound, "turns_undone": len(users), "target_text": target_text}
            if obligation is not None:
                result["obligation_id"] = await self._insert_obligation(conn, obligation(dict(result)), None)
            return result

    async def begin_turn(self, session_key: str, session_id: str, row: MessageRow, started_ts: float,
                         inbound_id: int | None = None, accept: NewIntake | None = None) -> int | None:
        async with self._tx(session_key) as conn:
            cur = await conn.execute("SELECT 1 FROM routes WHERE session_key = %s", (session_key,))
            if await cur.fetchone() is None:
                raise StoreError(f"cannot begin a turn: no session entry for key {session_key!r}")
            if accept is not None:
                # No pg_notify: the replica accepting it runs it (it holds the session's lease).
                cur = await conn.execute(_ACCEPT, (accept.platform, accept.chat_id, accept.message_id, accept.accepted_at,
                                                   accept.accepted_ts, accept.session_key, accept.payload, "running"))
                accepted = await cur.fetchone()
                if accepted is None:
                    return None  # a duplicate: its turn is not begun
            await self._begin_turn_in(conn, session_key, session_id, row, started_ts, inbound_id)
        return accepted[0] if accept is not None else inbound_id

    async def _begin_turn_in(self, conn: psycopg.AsyncConnection, session_key: str, session_id: str, row: MessageRow,
                             started_ts: float, inbound_id: int | None) -> None:
        """`begin_turn`'s writes in the open transaction `conn`: the user row, the key's turn
        marker on it, intake row `inbound_id` 'running'. Raises StoreError without a route
        (the transaction is then rolled back)."""
        message_id = await self._insert_message(conn, session_id, row)
        cur = await conn.execute("UPDATE routes SET turn_session_id = %s, turn_message_id = %s, turn_started_ts = %s "
                                 "WHERE session_key = %s", (session_id, message_id, started_ts, session_key))
        if cur.rowcount == 0:
            raise StoreError(f"cannot begin a turn: no session entry for key {session_key!r}")
        if inbound_id is not None:
            await conn.execute("UPDATE inbound SET state = 'running' WHERE id = %s AND state = 'pending'",
                               (inbound_id,))

    async def resume_turn(self, session_key: str, session_id: str, started_ts: float) -> StoredMessage | None:
        async with self._tx(session_key) as conn:
            cur = await conn.execute(
                "SELECT id, role, content, platform_message_id FROM messages WHERE session_id = %s AND active "
                "AND role IN ('user', 'assistant') ORDER BY id DESC LIMIT 1", (session_id,))
            last = await cur.fetchone()
            if last is None or last[1] != "user":
                return None
            await conn.execute("UPDATE routes SET turn_session_id = %s, turn_message_id = %s, turn_started_ts = %s "
                               "WHERE session_key = %s", (session_id, last[0], started_ts, session_key))
            return StoredMessage(id=last[0], content=last[2], platform_message_id=last[3])

    async def end_turn(self, session_key: str) -> None:
        async with self._tx(session_key) as conn:
            await conn.execute(_CLEAR_MARKER, (session_key,))

    async def turn_markers(self) -> list[TurnMarker]:
        rows = await self._fetch("SELECT session_key, turn_session_id, turn_message_id, turn_started_ts FROM routes "
                                 "WHERE turn_started_ts IS NOT NULL ORDER BY turn_started_ts")
        return [TurnMarker(r[0], r[1], r[2], float(r[3])) for r in rows]

    async def reply_row_after(self, session_id: str, message_id: int | None) -> StoredMessage | None:
        row = await self._one("SELECT id, content FROM messages WHERE session_id = %s AND active AND "
                              "role = 'assistant' AND id > %s ORDER BY id LIMIT 1", (session_id, message_id or 0))
        return StoredMessage(id=row[0], content=row[1]) if row else None

    # ---- intake ---------------------------------------------------------------------------

    async def intake_accept(self, platform: str, chat_id: str, message_id: str, session_key: str | None,
                            payload: str | None, now_iso: str, now_ts: float, *, done: bool = False) -> int | None:
        # Not fenced: any replica may accept a message for any session; the unique key makes a
        # redelivery to another replica a duplicate. The hint wakes the replica that owns it.
        async with self._tx() as conn:
            cur = await conn.execute(_ACCEPT, (platform, chat_id, message_id, now_iso, now_ts, session_key, payload,
                                               "done" if done else "pending"))
            row = await cur.fetchone()
            if row is not None and not done:
                await conn.execute("SELECT pg_notify(%s, %s)", (INTAKE_CHANNEL, session_key or ""))
        return row[0] if row is not None else None

    _INTAKE_KEY = "SELECT session_key FROM inbound WHERE id = %s"

    async def intake_finish(self, inbound_id: int, now_ts: float) -> None:
        async with self._tx(fence_sql=self._INTAKE_KEY, fence_arg=inbound_id) as conn:
            await conn.execute(_FINISH_INBOUND, (now_ts, inbound_id))

    async def intake_open(self) -> list[IntakeRow]:
        rows = await self._fetch("SELECT id, session_key, payload, state FROM inbound WHERE state <> 'done' ORDER BY id")
        return [IntakeRow(*r) for r in rows]

    async def intake_prune(self, before_ts: float) -> int:
        async with self._tx() as conn:
            cur = await conn.execute("DELETE FROM inbound WHERE state = 'done' AND accepted_ts < %s", (before_ts,))
            return cur.rowcount

    async def intake_merge(self, target_id: int, payload: str, absorbed_ids: list[int], now_ts: float) -> None:
        async with self._tx(fence_sql=self._INTAKE_KEY, fence_arg=target_id) as conn:
            await conn.execute("UPDATE inbound SET payload = %s WHERE id = %s AND state = 'pending'",
                               (payload, target_id))
            if absorbed_ids:
                await conn.execute("UPDATE inbound SET state = 'done', payload = NULL, finished_ts = %s "
                                   "WHERE id = ANY(%s)", (now_ts, list(absorbed_ids)))

    # ---- delivery ledger --------------------------------------------------------------------

    async def record_reply(self, session_key: str, session_id: str, row: MessageRow | None,
                           obligation: NewObligation | None, *, before: Sequence[MessageRow] = (),
                           entry: SessionEntry | None = None, inbound_ids: Sequence[int] = (),
                           now_ts: float = 0.0) -> tuple[int | None, int | None]:
        async with self._tx(session_key) as conn:
            for earlier in before:
                await self._insert_message(conn, session_id, earlier)
            message_id = await self._insert_message(conn, session_id, row) if row is not None else None
            ob_id = None
            if obligation is not None:
                ob_id = await self._insert_obligation(
                    conn, obligation, message_id if message_id is not None else obligation.message_id)
            if entry is not None:  # the turn's counters, as `save` writes them
                await conn.execute(_UPSERT_ROUTE, _route_params(entry))
                await conn.execute(_SYNC_COUNTERS, _counter_params(entry))
            await conn.execute(_CLEAR_MARKER, (session_key,))
            if inbound_ids:
                await conn.execute("UPDATE inbound SET state = 'done', payload = NULL, finished_ts = %s "
                                   "WHERE id = ANY(%s)", (now_ts, list(inbound_ids)))
            return message_id, ob_id

    @staticmethod
    async def _insert_obligation(conn: psycopg.AsyncConnection, ob: NewObligation, message_id: int | None) -> int:
        """Record `ob`, carrying transcript row `message_id` (or none), in the open transaction
        `conn`; returns its id."""
        cur = await conn.execute(
            "INSERT INTO delivery_obligations (session_key, session_id, origin, content, state, attempts, "
            "internal, message_id, reply_to, created_at, updated_at, created_ts, updated_ts) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
            (ob.session_key, ob.session_id, ob.origin, ob.content, ob.state, ob.attempts, bool(ob.internal),
             message_id, ob.reply_to, ob.now_iso, ob.now_iso, ob.now_ts, ob.now_ts))
        return (await cur.fetchone())[0]

    async def obligation_for_message(self, message_id: int) -> int | None:
        row = await self._one("SELECT id FROM delivery_obligations WHERE message_id = %s LIMIT 1", (message_id,))
        return row[0] if row else None

    async def obligation_update(self, ob_id: int, state: str, now_iso: str, now_ts: float, *,
                                attempt: bool = False, error: str | None = None,
                                sent_ids: str | None = None) -> None:
        async with self._tx(fence_sql="SELECT session_key FROM delivery_obligations WHERE id = %s",
                            fence_arg=ob_id) as conn:
            await conn.execute(
                "UPDATE delivery_obligations SET state = %s, attempts = attempts + %s, "
                "last_error = coalesce(%s, last_error), sent_ids = coalesce(%s, sent_ids), updated_at = %s, "
                "updated_ts = %s WHERE id = %s",
                (state, 1 if attempt else 0, error, sent_ids, now_iso, now_ts, ob_id))

    async def obligations_finished(self, finished: Sequence[tuple[int, str, str | None, str | None]],
                                   now_iso: str, now_ts: float) -> list[tuple[int, Exception]]:
        # Each in a transaction of its own, fenced by its own session's lease: one obligation of a
        # session this replica lost must not cost the others their state.
        results = await asyncio.gather(*(self.obligation_update(ob_id, state, now_iso, now_ts, error=error,
                                                                sent_ids=sent_ids)
                                         for ob_id, state, error, sent_ids in finished), return_exceptions=True)
        failed = [(ob_id, result) for (ob_id, *_), result in zip(finished, results)
                  if isinstance(result, BaseException)]
        for _, result in failed:
            if not isinstance(result, Exception):  # a cancellation is not an outcome to report
                raise result
        return failed

    async def obligation_by_sent_id(self, platform: str, sent_id: str, since_ts: float) -> tuple[int, str] | None:
        # The updated_ts index bounds the scan to the last day's obligations.
        row = await self._one(
            "SELECT id, state FROM delivery_obligations WHERE updated_ts >= %s AND sent_ids IS NOT NULL "
            "AND sent_ids::jsonb ? %s AND origin::jsonb ->> 'platform' = %s ORDER BY id DESC LIMIT 1",
            (since_ts, sent_id, platform))
        return (int(row[0]), str(row[1])) if row else None

    async def obligations(self, states: tuple[str, ...]) -> list[Obligation]:
        rows = await self._fetch(f"SELECT {', '.join(_OB_COLS)} FROM delivery_obligations WHERE state = ANY(%s) "
                                 f"ORDER BY id", (list(states),))
        return [Obligation(**dict(zip(_OB_COLS, r))) for r in rows]

    async def obligations_prune(self, before_ts: float) -> int:
        async with self._tx() as conn:
            cur = await conn.execute("DELETE FROM delivery_obligations WHERE state IN ('delivered', 'abandoned') "
                                     "AND updated_ts < %s", (before_ts,))
            return cur.rowcount

    # ---- search, mirror, meta, import, aliases -------------------------------------------------

    async def search(self, expression: str, limit: int, offset: int, platform: str | None) -> list[SearchHit]:
        terms = tsquery_terms(expression)
        if not terms:
            return []
        # plainto_tsquery per word, AND-ed: the words are data, never tsquery syntax.
        query = " && ".join("plainto_tsquery('simple', %s)" for _ in terms)
        params: list[Any] = [*terms]
        sql = ("WITH q AS (SELECT " + query + " AS q) "
               "SELECT m.session_id, m.id, ts_headline('simple', coalesce(m.content, ''), q.q, "
               "'StartSel=[, StopSel=], MaxWords=24, MinWords=8, ShortWord=0, HighlightAll=false'), s.origin "
               "FROM messages m CROSS JOIN q LEFT JOIN sessions s ON s.session_id = m.session_id ")
        where = ["m.search @@ q.q", "m.active"]
        if platform is not None:
            where.append("s.platform = %s")
            params.append(platform)
        # The store applies owner scoping to each hit's origin (docs/behaviour.md §2).
        sql += ("WHERE " + " AND ".join(where) +
                " ORDER BY ts_rank(m.search, q.q) DESC, m.id DESC LIMIT %s OFFSET %s")
        params += [limit, offset]
        rows = await self._fetch(sql, params)
        return [SearchHit(r[0], r[1], r[2], r[3]) for r in rows]

    async def fts_check_and_repair(self, force: bool = False) -> bool:
        """False, `force` or not: the tsvector is a generated column, maintained by PostgreSQL
        with its row, so there is no separate index to rebuild."""
        return False

    async def render_mirror(self) -> str:
        rows = await self._fetch("SELECT session_key, entry FROM routes ORDER BY session_key")
        return await asyncio.to_thread(render_from_json_texts, [(r[0], r[1]) for r in rows])

    async def get_meta(self, key: str) -> str | None:
        row = await self._one("SELECT value FROM meta WHERE key = %s", (key,))
        return row[0] if row else None

    async def set_meta(self, key: str, value: str) -> None:
        async with self._tx() as conn:
            await conn.execute("INSERT INTO meta (key, value) VALUES (%s, %s) "
                               "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (key, value))

    async def import_entries(self, entries: Iterable[SessionEntry], replace: bool) -> tuple[int, int]:
        """Add imported entries in one transaction; `(imported, skipped_existing)`.

        With `replace`, an existing route is overwritten only when it is not newer than the
        imported entry (its `updated_ts` at most the entry's `updated_at`): other replicas go on
        updating the shared routes after the imported file was written, and the newer route
        is kept (counted as skipped, logged; docs/operations.md §5). The route row is locked
        from that comparison to the commit, so no replica's update falls between them."""
        imported = skipped = 0
        async with self._tx() as conn:
            for entry in entries:
                cur = await conn.execute("SELECT updated_ts FROM routes WHERE session_key = %s FOR UPDATE",
                                         (entry.session_key,))
                existing = await cur.fetchone()
                if existing is not None and (not replace or existing[0] > entry.updated_at.timestamp()):
                    if replace:
                        log.warning("import kept route %s: updated at %s, after the imported entry (%s)",
                                    entry.session_key, format_timestamp(existing[0]), format_timestamp(entry.updated_at))
                    skipped += 1
                    continue
                await conn.execute(_INSERT_SESSION, session_params(entry))
                await conn.execute(_UPSERT_ROUTE, _route_params(entry))
                await conn.execute(_SYNC_COUNTERS, _counter_params(entry))
                imported += 1
        return imported, skipped

    async def alias_rows(self) -> list[AliasRow]:
        rows = await self._fetch("SELECT platform, alias_id, canonical_id, source, first_seen, last_seen "
                                 "FROM identity_aliases ORDER BY platform, alias_id")
        return [AliasRow(*r) for r in rows]

    async def upsert_alias(self, platform: str, alias_id: str, canonical_id: str, source: str,
                           now_iso: str) -> None:
        async with self._tx() as conn:
            await conn.execute(
                "INSERT INTO identity_aliases (platform, alias_id, canonical_id, source, first_seen, last_seen) "
                "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (platform, alias_id) DO UPDATE SET "
                "canonical_id = excluded.canonical_id, source = excluded.source, last_seen = excluded.last_seen",
                (platform, alias_id, canonical_id, source, now_iso, now_iso))


    # ---- admin removals (RemovalBackend, docs/operations.md §5) ---------------------------------
    # What goes is the core's decision (`hermes_core.store.erasure`); this reads the rows it asks
    # for and removes its plan in one transaction.

    async def all_sessions(self, limit: int, offset: int) -> tuple[list[tuple], int]:
        total = int((await self._one("SELECT count(*) FROM sessions"))[0])
        rows = await self._fetch(
            # `current` by EXISTS: a session two routes point at (one key resumed another's
            # session) is still one row.
            f"SELECT {', '.join('s.' + c for c in ALL_SESSION_COLUMNS)}, "
            "EXISTS (SELECT 1 FROM routes r WHERE r.session_id = s.session_id) FROM sessions s "
            "ORDER BY s.updated_at DESC, s.session_id LIMIT %s OFFSET %s", (limit, offset))
        return [tuple(r) for r in rows], total

    async def session_stored(self, session_id: str) -> bool:
        row = await self._one("SELECT EXISTS (SELECT 1 FROM sessions WHERE session_id = %s) "
                              "OR EXISTS (SELECT 1 FROM messages WHERE session_id = %s)", (session_id, session_id))
        return bool(row[0])

    async def platform_sessions(self, platform: str) -> list[tuple[str, str | None, str | None]]:
        rows = await self._fetch("SELECT session_id, origin, participant_id FROM sessions WHERE platform = %s",
                                 (platform,))
        return [tuple(r) for r in rows]

    async def route_keys(self, session_ids: list[str]) -> list[str]:
        if not session_ids:
            return []
        rows = await self._fetch("SELECT session_key FROM routes WHERE session_id = ANY(%s::text[])",
                                 (list(session_ids),))
        return [r[0] for r in rows]

    async def alias_ids(self, platform: str, canonical_id: str) -> list[str]:
        rows = await self._fetch("SELECT alias_id FROM identity_aliases WHERE platform = %s AND canonical_id = %s",
                                 (platform, canonical_id))
        return [r[0] for r in rows]

    async def intake_payloads(self, platform: str) -> list[tuple[int, str | None, str]]:
        rows = await self._fetch("SELECT id, session_key, payload FROM inbound WHERE platform = %s "
                                 "AND payload IS NOT NULL", (platform,))
        return [tuple(r) for r in rows]

    async def transcript_roles(self, session_id: str) -> list[tuple[int, str, str | None]]:
        rows = await self._fetch("SELECT id, role, content FROM messages WHERE session_id = %s ORDER BY id",
                                 (session_id,))
        return [tuple(r) for r in rows]

    async def session_obligations(self, session_id: str) -> list[tuple[int, int | None, str | None]]:
        rows = await self._fetch("SELECT id, message_id, origin FROM delivery_obligations WHERE session_id = %s",
                                 (session_id,))
        return [tuple(r) for r in rows]

    @staticmethod
    def _removal_statements(plan: RemovalPlan) -> list[tuple[str, str, str, tuple]]:
        statements = [(kind, table, f"{column} = ANY(%s::{'bigint' if column == 'id' else 'text'}[])",
                       (list(values),)) for kind, table, column, values in plan.deletions()]
        if plan.aliases is not None:
            platform, ids = plan.aliases
            statements.append(("aliases", "identity_aliases",
                               "platform = %s AND (alias_id = ANY(%s::text[]) OR canonical_id = ANY(%s::text[]))",
                               (platform, sorted(ids), sorted(ids))))
        return statements

    async def count_removal(self, plan: RemovalPlan) -> dict[str, int]:
        counts: dict[str, int] = {}
        async with self._p().connection() as conn:
            async with conn.transaction():  # one snapshot for every count
                for kind, table, condition, params in self._removal_statements(plan):
                    cur = await conn.execute(f"SELECT count(*) FROM {table} WHERE {condition}", params)
                    counts[kind] = counts.get(kind, 0) + int((await cur.fetchone())[0])
        return counts

    async def apply_removal(self, plan: RemovalPlan) -> dict[str, int]:
        """One transaction (durable at commit): first the lease rows of every session key the
        plan writes for are locked, refused when a running replica holds one
        (`Leases.hold_off`, docs/architecture.md §7), then the deletions and the origin scrubs.
        The full-text vector is a generated column: it goes with its row. Afterwards the
        tables are vacuumed, so the removed rows' versions and index entries do not linger as
        dead tuples (best effort: a role that may not vacuum leaves that to autovacuum)."""
        counts: dict[str, int] = {}
        sids = sorted({*plan.sessions, *plan.scrub})
        async with self._p().connection() as conn:
            async with conn.transaction():
                cur = await conn.execute(
                    "SELECT session_key FROM sessions WHERE session_id = ANY(%(sids)s::text[]) "
                    "OR session_id IN (SELECT session_id FROM messages WHERE id = ANY(%(messages)s::bigint[])) "
                    "UNION SELECT session_key FROM routes WHERE session_id = ANY(%(sids)s::text[]) "
                    "UNION SELECT unnest(%(keys)s::text[]) "
                    "UNION SELECT session_key FROM inbound WHERE id = ANY(%(intake)s::bigint[]) "
                    "UNION SELECT session_key FROM delivery_obligations WHERE id = ANY(%(obligations)s::bigint[])",
                    {"sids": sids, "messages": list(plan.messages), "keys": list(plan.keys),
                     "intake": list(plan.intake), "obligations": list(plan.obligations)})
                keys = [r[0] for r in await cur.fetchall() if r[0] is not None]
                await self.leases.hold_off(conn, keys)
                for kind, table, condition, params in self._removal_statements(plan):
                    cur = await conn.execute(f"DELETE FROM {table} WHERE {condition}", params)
                    counts[kind] = counts.get(kind, 0) + max(cur.rowcount, 0)
                for sid, text in plan.scrub.items():
                    await conn.execute("UPDATE sessions SET origin = %s, participant_id = NULL WHERE session_id = %s",
                                       (text, sid))
                    await conn.execute("UPDATE routes SET entry = jsonb_set(entry::jsonb, '{origin}', %s::jsonb)::text "
                                       "WHERE session_id = %s", (text, sid))
            try:
                await conn.execute("VACUUM messages, sessions, routes, inbound, delivery_obligations, identity_aliases")
            except psycopg.Error as exc:
                log.warning("vacuum after a data removal failed (autovacuum reclaims the rows later): %s",
                            " ".join(str(exc).split()))
        return counts


def create_backend(config: Any) -> PostgresBackend:
    """Entry point of `hermes_core.store_backends` (`postgres`): the engine `[store]` describes.

    Raises:
        StoreError: `[store] dsn` is not set.
    """
    store = config.store
    if store.dsn is None or not store.dsn.get_secret_value().strip():
        raise StoreError('[store] backend = "postgres" needs [store] dsn (e.g. HERMES_STORE__DSN='
                         '"postgresql://hermes@db.internal/hermes")')
    return PostgresBackend(store.dsn.get_secret_value(), lease_ttl_s=store.lease_ttl_s)
