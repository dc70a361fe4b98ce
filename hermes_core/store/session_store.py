"""SessionStore: the seed's §3 store on SQLite, with a degraded JSONL mode (seed §2, §3, §7;
docs/behaviour.md §0, §2, §3, §6, §12).

The state machine (suspended → resume_pending → existing) lives here; persistence is delegated to
one engine, `SqliteBackend` (`backend.StoreBackend`), on `state.db` — or, when SQLite cannot open
it, on an in-memory database made durable by the journal and `{session_id}.jsonl` transcripts
(`journal.JournaledDatabase`), merged back into `state.db` at the next healthy open
(`merge.merge_journal`). Entries are cached in a bounded LRU, written through, so per-message
work is O(1) in the number of sessions. Callers always receive copies.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sqlite3
from collections import OrderedDict
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterable, TypeVar

from ..keys import Canonicalizer, build_session_key, canonical_with_aliases, is_shared_multi_user_session
from ..model import (
    SessionEntry,
    SessionSource,
    TokenUsage,
    new_session_id,
    utc_now,
    validate_session_id,
)
from ..dirs import ensure_private_dir, not_a_file
from ..settings import GatewayConfig
from .aliases import AliasMap, AliasOps
from .backend import StoreBackend
from .backends import create_store_backend
from .claims import ClaimOps
from .db import Database, SchemaTooNewError, StoreError
from .home_lock import HomeLock
from .importer import import_sessions_json
from .keylocks import KeyedLocks
from .journal import JOURNAL_FILE_NAME, JournaledDatabase, pending_journal
from .merge import DAMAGED_DIR_NAME, merge_journal
from .mirror import SESSIONS_FILE_NAME, MirrorWriter, file_signature, keep_skipped_original, load_sessions_json
from .entries import entry_from_session_row, parse_or_none
from .erasure import ErasureOps
from .sqlite_backend import SqliteBackend
from .transcripts import TranscriptOps
from .turns import TurnOps

log = logging.getLogger(__name__)
T = TypeVar("T")

# Left by the degraded mode of gateways before the journal (sessions.json as the index,
# inbound.jsonl, turn_markers.json, delivery_ledger.json).
OLD_DEGRADED_MARKER = ".degraded-since"
# The meta key marking an adoption of sessions.json under way (`_adopt_sessions_json`): the
# path it takes from, "" when none is.
ADOPTING_META = "adopting_sessions_json"
# Seconds an `updated_at` bump waits in memory for its turn's save before a sessions.json
# rewrite writes it on its own (docs/behaviour.md §3 `sessions.json`): longer than a turn at
# 10,000 sessions in flight (a few seconds), short enough that a crash loses little.
TOUCH_WRITE_BEHIND_S = 30.0


def sessions_dir_in_the_way(sessions_dir: Path | str) -> str | None:
    """The one line saying that something other than a folder sits where `sessions/` belongs
    (`<home>/sessions exists and is not a directory (the folder of sessions.json): move it
    away`), or None when it is a folder or missing. Opening the store for writing stops with it
    (StoreError) and doctor fails its `sessions` row with it (docs/operations.md §1)."""
    path = Path(sessions_dir)
    if os.path.lexists(path) and not path.is_dir():
        return f"{path} exists and is not a directory (the folder of {SESSIONS_FILE_NAME}): move it away"
    return None


class SessionStore(TurnOps, TranscriptOps, AliasOps, ErasureOps, ClaimOps):
    """Routes session keys to sessions and stores transcripts (seed §3).

    Args:
        sessions_dir: directory of `sessions.json` (and of `{session_id}.jsonl` when degraded).
        config: the gateway config (`db_path`, key flags, `[storage]`, `session_store_max_age_days`).
        has_active_processes_fn: `(session_key) -> bool`; a key for which it returns True (or
            raises) is never pruned.
        key_fn: `(SessionSource) -> str`; default `build_session_key` with the config's two flags.
        shared_fn: `(SessionSource) -> bool`, "is this a shared multi-user session" for owner
            scoping (seed §5; the `hermes_session_shared` hook in a gateway); default
            `is_shared_multi_user_session` with the config's two flags.
        canonical_fn: `(platform, kind, value) -> str` folding id aliases (kind `"user"` or
            `"chat"`) before owner ids are compared (the `hermes_canonical_identity` hook chain
            in a gateway, whose builtin consults this store's aliases); default: this store's
            identity aliases, then `keys.default_canonical_identity` (WhatsApp normalisation).
        clock: returns the current aware UTC datetime.
        lock_home: take the exclusive lock on `config.home` at open (HomeLockedError if taken).
        degraded_fallback: when state.db cannot be opened, run degraded (True, a gateway) or
            raise StoreError naming why (False: the admin commands, which must not answer from,
            or write to, a copy that holds no transcripts).
        adopt_sessions_json: an open with the home lock on a state.db that holds no session
            takes the routes sessions.json lists (`_adopt_sessions_json`); False for `sessions
            import`, which imports them itself and reports what it did.
        read_only: open state.db read-only (`Database` `read_only`; the read-only `sessions`
            commands, docs/operations.md §5): nothing is created or written in the home, every
            write raises (sqlite3.OperationalError), an older schema is refused (StoreError)
            rather than upgraded. Only with `lock_home=False` and `degraded_fallback=False`.

    Use `await store.open()` / `await store.close()` or `async with store:`.

    `database_class` is the state.db writer (`db.Database`); `benchmarks/` subclass the store to
    measure a baseline writer beside it.
    """

    database_class = Database

    def __init__(self, sessions_dir: Path, config: GatewayConfig,
                 has_active_processes_fn: Callable[[str], bool] | None = None, *,
                 key_fn: Callable[[SessionSource], str] | None = None,
                 shared_fn: Callable[[SessionSource], bool] | None = None,
                 canonical_fn: Canonicalizer | None = None,
                 clock: Callable[[], datetime] = utc_now, lock_home: bool = True,
                 degraded_fallback: bool = True, adopt_sessions_json: bool = True,
                 read_only: bool = False) -> None:
        if read_only and (lock_home or degraded_fallback):
            raise ValueError("a read-only store takes no home lock and has no degraded fallback")
        self.read_only = read_only
        self.sessions_dir = Path(sessions_dir)
        self._degraded_fallback = degraded_fallback
        self._may_adopt = adopt_sessions_json
        self.config = config
        self.has_active_processes_fn = has_active_processes_fn
        self._key_fn = key_fn
        self._shared_fn = shared_fn
        self._aliases = AliasMap()
        self._alias_lock = asyncio.Lock()
        self._alias_written: dict[tuple[str, str], float] = {}
        self._canonical_fn = canonical_fn or self._canonical_by_aliases
        self._clock = clock
        self._lock_home = lock_home
        self._home_lock = HomeLock(config.home)
        self._backend: StoreBackend | None = None
        self._mirror: MirrorWriter | None = None
        # size:mtime_ns of a sessions.json found current at open (see _withdraw_mirror_signature).
        self._mirror_verified: str | None = None
        self._cache: OrderedDict[str, SessionEntry] = OrderedDict()
        # Entries whose only change is an `updated_at` bump from get_or_create_session, with the
        # time the key's first unwritten bump was made: written behind. The turn that follows
        # normally saves the whole entry within seconds (which drops the bump), so a mirror
        # rewrite writes, in one batch, only the keys pending for TOUCH_WRITE_BEHIND_S or longer
        # (docs/behaviour.md §3 `sessions.json`); any listing, prune and close write them all.
        # A crash can lose at most that window of bumps, never a message, a flag or a counter.
        self._touched: dict[str, tuple[SessionEntry, datetime]] = {}
        self._touch_timer: asyncio.TimerHandle | None = None
        # Serialises state-machine transitions per key: read-modify-write of one entry is never
        # interleaved (concurrent get_or_create_session calls for one key create one row), while
        # transitions of different keys overlap and share group commits (docs/behaviour.md §12).
        self._locks = KeyedLocks()
        self.degraded_reason: str | None = None
        # True when this open took the routes of sessions.json into a state.db that held no
        # session (`_adopt_sessions_json`): no run of this gateway wrote that file before.
        self.adopted_sessions_json = False
        self.cache_size = config.storage.entry_cache_size

    # ---- lifecycle ------------------------------------------------------------------------

    @property
    def sessions_file(self) -> Path:
        """`<sessions_dir>/sessions.json`."""
        return self.sessions_dir / SESSIONS_FILE_NAME

    @property
    def degraded(self) -> bool:
        """True when SQLite could not be opened and the store runs on sessions.json + JSONL."""
        return bool(self._backend is not None and self._backend.degraded)

    @property
    def is_open(self) -> bool:
        """True between `open()` and `close()`."""
        return self._backend is not None

    async def open(self) -> None:
        """Take the home lock, open SQLite (or fall back to degraded mode), start the mirror.

        Raises:
            HomeLockedError: another gateway holds `config.home` (only with lock_home=True).
            StoreError: neither SQLite nor the degraded journal can be used; or state.db cannot
                be opened and `degraded_fallback` is False.
        """
        if self._backend is not None:
            return
        if self._lock_home:
            self._home_lock.acquire()
        try:
            if not self.read_only:
                in_the_way = sessions_dir_in_the_way(self.sessions_dir)
                if in_the_way is not None:  # else mkdir's bare "File exists"
                    raise StoreError(in_the_way)
                ensure_private_dir(self.sessions_dir)  # sessions.json, and the journal when degraded
            if self.config.store.builtin:
                backend = await self._open_sqlite()
            else:
                # A server engine: no degraded fallback (a private copy would fork the
                # conversations other replicas see); failing to open fails the start.
                backend = create_store_backend(self.config)
                await backend.open()
            if backend.shared:
                # Other replicas write the same rows: nothing may be served from memory or
                # written behind (a late touch could overwrite a newer entry).
                self.cache_size = 0
            # Our own healthy state.db: what a degraded run journaled is merged into it, and an
            # empty one takes sessions.json's routes (below, once the store is usable).
            own_state_db = self._lock_home and isinstance(backend, SqliteBackend) and not backend.degraded
            merged = False
            if own_state_db:
                merged = await self._merge_journal(backend)
                self._warn_old_degraded_files()
            await self._load_aliases(backend)
            self._backend = backend
            self._mirror = MirrorWriter(self.sessions_file, lambda: self._render_mirror(backend),
                                        self.config.storage.mirror_debounce_s)
            adopted = own_state_db and self._may_adopt and await self._adopt_sessions_json(backend)
            self.adopted_sessions_json = bool(adopted)
            # A deleted, corrupt or foreign sessions.json is rebuilt from the canonical store soon
            # after start. It is recognised without parsing it (open stays O(1) in the number of
            # sessions): the file's size and mtime must equal the signature recorded at the last
            # clean close. A store opened without the home lock (the admin CLI reading beside a
            # gateway) leaves the file alone.
            self._mirror_verified = None
            if self._lock_home and (merged or adopted or backend.degraded or await self._mirror_stale(backend)):
                self._mirror.mark_dirty()
            elif self._lock_home:
                await self._withdraw_mirror_signature(backend)
            self._mirror.start()
        except BaseException:
            self._home_lock.release()
            raise

    async def _open_sqlite(self) -> SqliteBackend:
        """`state.db`, or the degraded engine when it cannot be opened (docs/behaviour.md §12)."""
        backend = SqliteBackend(self.database_class(self.config.db_path, self.config.storage.busy_timeout_s,
                                                    read_only=self.read_only))
        try:
            if not self.read_only:
                ensure_private_dir(self.config.db_path.parent)
            await backend.open()
        except SchemaTooNewError:
            raise
        except (sqlite3.Error, OSError, StoreError) as exc:
            # A directory in its place: said in words, not as SQLite's "unable to open database file".
            obstacle = not_a_file(self.config.db_path)
            self.degraded_reason = (f"state.db {obstacle}" if obstacle is not None
                                    else f"state.db {self.config.db_path} cannot be opened: {exc}")
            if not self._degraded_fallback:
                raise StoreError(self.degraded_reason) from exc
            # Announced once, loudly: the gateway keeps working but without SQLite.
            log.error("%s; running DEGRADED on an in-memory copy journaled to %s + {session_id}.jsonl "
                      "transcripts", self.degraded_reason, self.sessions_dir / JOURNAL_FILE_NAME)
            backend = await self._open_degraded()
        return backend

    async def _open_degraded(self) -> SqliteBackend:
        """The same engine on an in-memory database, rebuilt from the journal of the sessions
        folder, or — the first degraded start since the last merge — seeded with the routes
        sessions.json holds (docs/behaviour.md §12); a file whose entries were skipped is kept
        aside first (`mirror.keep_skipped_original`, docs/behaviour.md §3). Without the home lock
        nothing is written."""
        db = JournaledDatabase(self.sessions_dir, read_only=not self._lock_home)
        backend = SqliteBackend(db)
        await backend.open()
        try:
            if db.fresh:
                skipped: list[str] = []
                entries, _extras = load_sessions_json(self.sessions_file, skipped)
                if skipped and self._lock_home:  # the mirror rewrites it from this copy, without them
                    keep_skipped_original(self.sessions_file, len(skipped))
                with db.seeding():
                    if entries:
                        await backend.import_entries(list(entries.values()), replace=True)
                await db.start_journal()
        except BaseException:
            await backend.close()
            raise
        return backend

    async def _adopt_sessions_json(self, backend: SqliteBackend) -> bool:
        """A state.db with no session while sessions.json lists some (a new state.db beside an
        older gateway's sessions folder, or one truncated or replaced since the last run) takes
        the routes it lists, and the legacy `.jsonl` transcripts beside it, as `sessions import`
        does (docs/behaviour.md §3): otherwise the mirror would be rewritten from the empty
        database and the last record of those chats would go. Not while a degraded journal
        waits to be merged (its merge failed just now): the journal holds those routes itself,
        and its own `.jsonl` transcripts beside sessions.json would be imported once here and
        once more by the merge. Said in one warning. Returns True when something was taken.

        An adoption cut short (a crash, a write that failed) is finished by the next open: it is
        marked in state.db before the first write and unmarked after the last, and importing
        again keeps the routes taken and imports only the transcripts still missing, each whole
        (`SessionStore.import_transcript`): no message is lost or doubled.

        Raises:
            what a write raises (the routes go in one transaction: all or none).
        """
        if not self.sessions_file.is_file() or pending_journal(self.sessions_dir) is not None:
            return False
        resuming = bool(await backend.get_meta(ADOPTING_META))
        if not resuming and await backend.has_any_sessions():
            return False
        await backend.set_meta(ADOPTING_META, str(self.sessions_file))
        try:
            report = await import_sessions_json(self, self.sessions_file)
        except (OSError, ValueError) as exc:  # unreadable, not JSON: the mirror rewrite replaces it
            log.warning("%s; nothing taken from it", exc)
            report = None
        await backend.set_meta(ADOPTING_META, "")
        if report is not None and resuming:
            log.warning("finished taking the routes and legacy transcripts %s lists, cut short at an earlier start: "
                        "%d more route(s) and %d message(s) from %d .jsonl transcript(s)", self.sessions_file,
                        report.imported, report.messages, report.transcripts)
            return True
        if report is None or not report.imported:
            return False
        legacy = (f" and {report.messages} message(s) from {report.transcripts} .jsonl transcript(s)"
                  if report.transcripts else "")
        log.warning("state.db %s held no session while %s lists %d: took their routes%s from it, as `sessions "
                    "import` does; if state.db was truncated or replaced, stop the gateway and restore it from a "
                    "backup (docs/operations.md §1)", self.config.db_path, self.sessions_file, report.imported,
                    legacy)
        return True

    def _warn_old_degraded_files(self) -> None:
        """A degraded run of a gateway before docs/behaviour.md §12 left its own files (marked by
        `.degraded-since`); they are not merged automatically. Said at every start until the
        operator has dealt with them."""
        if (self.sessions_dir / OLD_DEGRADED_MARKER).exists():
            log.warning("%s holds the files of a degraded run of an older gateway (%s); they are not merged "
                        "automatically: `hermes-gateway sessions import %s` takes its routes and the transcripts "
                        "of sessions state.db lacks; then delete %s", self.sessions_dir, OLD_DEGRADED_MARKER,
                        self.sessions_dir, self.sessions_dir / OLD_DEGRADED_MARKER)

    async def _merge_journal(self, backend: SqliteBackend) -> bool:
        """SQLite is healthy: merge what a degraded run journaled (docs/behaviour.md §0 "nothing
        accepted is ever lost", §12). A failed merge leaves the journal where it is (merged at the
        next open, never adding anything twice) and the store opens anyway. Returns True if a
        journal was merged."""
        try:
            report = await merge_journal(backend.db, self.sessions_dir)
        except Exception as exc:  # never blocks start-up: SQLite is healthy, the journal stays
            log.error("merging the degraded journal %s into %s failed (%s: %s); retried at the next start",
                      self.sessions_dir / JOURNAL_FILE_NAME, self.config.db_path, type(exc).__name__, exc)
            return False
        if report is None:
            return False
        self._cache.clear()
        extra = "".join([
            f", {report.pending} waiting message(s) requeued" if report.pending else "",
            f", {report.owed} reply(ies) still to deliver" if report.owed else "",
            f", {report.interrupted} interrupted turn(s) to recover" if report.interrupted else "",
            f"; {len(report.skipped)} row(s) skipped, see the log" if report.skipped else "",
            f"; {len(report.damaged)} damaged transcript(s) merged without their unreadable line(s), kept in "
            f"{self.sessions_dir / DAMAGED_DIR_NAME}, see the log" if report.damaged else ""])
        log.warning("state.db is back: merged %d session(s) and %d message(s) written while running "
                    "degraded%s", report.sessions, report.messages, extra)
        return True

    async def close(self) -> None:
        """Flush sessions.json, close SQLite and release the home lock (idempotent)."""
        backend, self._backend = self._backend, None
        mirror, self._mirror = self._mirror, None
        if self._touch_timer is not None:
            self._touch_timer.cancel()
            self._touch_timer = None
        try:
            if backend is not None and self._touched:
                try:
                    await self._flush_touched(backend)
                except Exception as exc:  # closing must go on; SQLite keeps the last saved state
                    log.warning("session touch times not saved at close: %s", exc)
            if mirror is not None and backend is not None:
                # The backend is still open here; _backend is None so no new work starts.
                try:
                    await mirror.close()
                    # Vouch only for a file we wrote, or found current at open and never had to
                    # rewrite, and nobody touched since (docs/behaviour.md §3).
                    signature = mirror.last_signature or self._mirror_verified
                    if self._lock_home and signature and signature == file_signature(self.sessions_file):
                        await backend.set_meta("mirror_signature", signature)
                except Exception as exc:  # SQLite has everything; the next start rewrites it
                    log.warning("sessions.json not written at close: %s", exc)
        finally:
            try:
                if backend is not None:
                    await backend.close()
            finally:
                self._cache.clear()
                self._home_lock.release()

    async def __aenter__(self) -> "SessionStore":
        await self.open()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def _b(self) -> StoreBackend:
        if self._backend is None:
            raise StoreError("the session store is not open (call await store.open())")
        return self._backend

    async def _mirror_stale(self, backend) -> bool:
        current = file_signature(self.sessions_file)
        return current is None or current != await backend.get_meta("mirror_signature")

    async def _withdraw_mirror_signature(self, backend) -> None:
        """The file is current at open; the recorded signature vouches for it only until this run
        changes a route. It is withdrawn now and recorded again at a clean close that wrote the
        file (or found it untouched), so a run whose rewrites all failed (a full disk, at close
        too) or that never closed leaves a file the next start knows is stale and rewrites
        (docs/behaviour.md §3): a later degraded start reads sessions.json."""
        signature = file_signature(self.sessions_file)
        try:
            await backend.set_meta("mirror_signature", "")
        except Exception as exc:  # cannot withdraw it: rewrite now rather than vouch blindly
            log.warning("sessions.json: its recorded signature cannot be cleared in the store (%s); "
                        "rewriting the file", exc)
            self._mirror.mark_dirty()
            return
        self._mirror_verified = signature

    async def _flush_touched(self, backend=None) -> None:
        """Write the pending touch times. Holds every key: a flush interleaved with a transition
        (e.g. a reset) could otherwise write an entry that is no longer current."""
        if not self._touched:
            return
        async with self._locks.hold_all():
            await self._flush_touched_locked(backend)

    async def _flush_touched_locked(self, backend=None) -> None:
        if self._touched:
            pending, self._touched = self._touched, {}
            await self._write_touches(backend or self._b(), pending)

    async def _write_touches(self, backend, pending: dict[str, tuple[SessionEntry, datetime]]) -> None:
        """Write the bumps `pending` (taken out of `_touched`); on failure they are put back."""
        try:
            await backend.touch_routes([entry for entry, _since in pending.values()])
        except BaseException:
            for key, touch in pending.items():
                self._touched.setdefault(key, touch)
            raise

    async def _flush_stale_touches(self, backend) -> None:
        """Write the bumps pending for TOUCH_WRITE_BEHIND_S or longer (their turn has not saved
        the entry: a slow agent, a command that runs no turn); the younger ones are left for
        their turn's save, and a rewrite is scheduled for when they come of age. No stale bump:
        no statement and no lock."""
        cutoff = self._now() - timedelta(seconds=TOUCH_WRITE_BEHIND_S)
        if any(since <= cutoff for _entry, since in self._touched.values()):
            async with self._locks.hold_all():
                stale = [key for key, (_entry, since) in self._touched.items() if since <= cutoff]
                await self._write_touches(backend, {key: self._touched.pop(key) for key in stale})
        if self._touched and self._mirror is not None and self._touch_timer is None:
            self._touch_timer = asyncio.get_running_loop().call_later(TOUCH_WRITE_BEHIND_S, self._touches_due)

    def _touches_due(self) -> None:
        self._touch_timer = None
        if self._mirror is not None:
            self._mirror.mark_dirty()

    async def _render_mirror(self, backend) -> str:
        await self._flush_stale_touches(backend)
        return await backend.render_mirror()

    async def flush_mirror(self) -> None:
        """Write sessions.json now (normally debounced)."""
        if self._mirror is not None:
            await self._mirror.flush()

    # ---- keys and cache -------------------------------------------------------------------

    def session_key(self, source: SessionSource) -> str:
        """The session key for `source` (seed §4): `key_fn`, else `build_session_key` with the
        config's `group_sessions_per_user` / `thread_sessions_per_user`."""
        if self._key_fn is not None:
            return self._key_fn(source)
        return build_session_key(source, self.config.group_sessions_per_user,
                                 self.config.thread_sessions_per_user, canonicalize=self._canonical_fn)

    def _canonical_by_aliases(self, platform: str, kind: str, value: str) -> str:
        """The store's own canonicaliser (no plugin manager): stored aliases, then the core's
        normalisation (docs/behaviour.md §4)."""
        return canonical_with_aliases(platform, kind, value, self.resolve_identity)

    def _remember(self, entry: SessionEntry) -> None:
        self._cache[entry.session_key] = entry
        self._cache.move_to_end(entry.session_key)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    async def _load(self, session_key: str) -> SessionEntry | None:
        entry = self._cache.get(session_key)
        if entry is not None:
            self._cache.move_to_end(session_key)
            return entry
        entry = await self._b().get_route(session_key)
        if entry is not None:
            self._remember(entry)
        return entry

    async def _save(self, entry: SessionEntry, **kwargs: Any) -> None:
        await self._write_entry(entry, lambda: self._b().save(entry, **kwargs))

    async def _write_entry(self, entry: SessionEntry, write: Callable[[], Awaitable[T]]) -> T:
        """Run `write()`, a backend write that stores `entry` (the key's lock is held), and keep
        the cache and the sessions.json mirror in step with it."""
        self._touched.pop(entry.session_key, None)
        try:
            result = await write()
        except BaseException:
            # The cache may hold a half-mutated entry; drop it so the next read reloads.
            self._cache.pop(entry.session_key, None)
            raise
        self._remember(entry)
        if self._mirror is not None:
            self._mirror.mark_dirty()
        return result

    def _now(self) -> datetime:
        return self._clock()

    def _fresh_entry(self, session_key: str, source: SessionSource | None, now: datetime,
                     template: SessionEntry | None = None, display_name: str | None = None) -> SessionEntry:
        origin = source if source is not None else (template.origin if template else None)
        return SessionEntry(
            session_key=session_key, session_id=new_session_id(now), created_at=now, updated_at=now,
            origin=origin,
            display_name=display_name or (origin.chat_name if origin else None)
            or (template.display_name if template else None),
            platform=(origin.platform if origin else (template.platform if template else None)),
            chat_type=(origin.chat_type if origin else (template.chat_type if template else "dm")),
        )

    # ---- the state machine (seed §2) ----------------------------------------------------

    async def get_or_create_session(self, source: SessionSource, force_new: bool = False) -> SessionEntry:
        """Return the session entry for `source`, creating or auto-resetting it (seed §2, §3).

        Priority (docs/behaviour.md §2): suspended → new session id with `was_auto_reset=True`,
        `auto_reset_reason="suspended"`, `reset_had_activity` = the old session had a turn;
        else resume_pending → same id, flag kept; else the existing entry with `updated_at`
        bumped. No entry → the key's most recent session nothing ended, re-adopted (a pruned
        route), else a fresh entry; `force_new=True` → a fresh entry (ending the previous SQLite
        session like a reset). Concurrent calls for one key create one row.

        Returns:
            A copy of the stored entry.
        Raises:
            StoreError: the store is not open; sqlite3.Error on a failed write.
        """
        key = self.session_key(source)
        async with self._locks.hold(key):
            now = self._now()
            entry = await self._load(key)
            if entry is not None and not force_new:
                if entry.suspended:
                    had_turn = await self._b().session_had_turn(entry.session_id)
                    new = self._fresh_entry(key, source, now, template=entry)
                    new.was_auto_reset = True
                    new.auto_reset_reason = "suspended"
                    new.reset_had_activity = had_turn
                    if entry.suspend_reason == "stuck_loop":
                        new.pending_notice = "stuck_loop"
                    await self._save(new, new_session=True, parent_session_id=entry.session_id,
                                     end_session=(entry.session_id, "suspended"), clear_marker=True)
                    return new.copy()
                entry.updated_at = now
                if self._b().shared:
                    await self._save(entry)
                    return entry.copy()
                self._remember(entry)
                _, since = self._touched.get(key, (None, now))  # a renewed bump keeps its age
                self._touched[key] = (entry, since)
                if self._mirror is not None:
                    self._mirror.mark_dirty()
                return entry.copy()
            if entry is None and not force_new:
                adopted = await self._readopt(key, source, now)
                if adopted is not None:
                    return adopted
            new = self._fresh_entry(key, source, now, template=entry)
            end = (entry.session_id, "reset") if entry is not None else None
            await self._save(new, new_session=True, end_session=end,
                             parent_session_id=entry.session_id if entry else None,
                             clear_marker=entry is not None)
            return new.copy()

    async def _readopt(self, key: str, source: SessionSource, now: datetime) -> SessionEntry | None:
        """A key without a route (pruned) takes back its most recent session that nothing ended
        (docs/behaviour.md §2: pruning frees a route, never a conversation). None when there is
        none."""
        row = await self._b().adoptable_session(key)
        if row is None:
            return None
        entry = entry_from_session_row(row.as_dict())
        entry.origin = source
        entry.platform = source.platform
        entry.chat_type = source.chat_type
        entry.display_name = source.chat_name or entry.display_name
        entry.updated_at = now
        await self._save(entry, reopen_session=entry.session_id)
        log.info("session key %r re-adopted session %s", key, entry.session_id)
        return entry.copy()

    def continues_plainly(self, session_key: str) -> bool:
        """True when the next turn of `session_key` surely goes on in its current session with
        nothing written or told first: its entry is in memory, not suspended, owes no pending
        notice, on a store of this process alone. Then `get_or_create_session` only bumps it in
        memory, and a message may be accepted in the transaction that begins its turn
        (docs/behaviour.md §12): a duplicate found there has changed nothing. Reads nothing."""
        entry = self._cache.get(session_key)
        return (entry is not None and not entry.suspended and not entry.pending_notice
                and not self._b().shared)

    async def get_entry(self, session_key: str) -> SessionEntry | None:
        """The current entry for `session_key` (a copy), or None. Changes nothing."""
        entry = await self._load(session_key)
        return entry.copy() if entry else None

    async def reset_session(self, session_key: str, display_name: str | None = None, *,
                            title: str | None = None) -> SessionEntry | None:
        """Explicit `/new` / `/reset` (seed §3): end the old SQLite session (`end_reason="reset"`),
        start a new session id with `is_fresh_reset=True`, clear suspended/resume flags and the
        turn marker. `title` (`/new <title>`) becomes the new session's display title.
        Returns the new entry (copy), or None when the key has no entry."""
        async with self._locks.hold(session_key):
            entry = await self._load(session_key)
            if entry is None:
                return None
            now = self._now()
            new = self._fresh_entry(session_key, None, now, template=entry, display_name=display_name)
            new.is_fresh_reset = True
            await self._save(new, new_session=True, parent_session_id=entry.session_id,
                             end_session=(entry.session_id, "reset"), clear_marker=True)
            if title:
                await self._b().set_title(new.session_id, title)
            return new.copy()

    async def switch_session(self, session_key: str, target_session_id: str, *,
                             expected_session_id: str | None = None) -> SessionEntry | None:
        """Point `session_key` at an existing session (`/resume`; seed §3), compare-and-swap.

        Ends the current SQLite session (`end_reason="session_switch"`) and reopens the target;
        the entry takes the target's token counters; suspended/resume flags are cleared.

        Returns:
            The new entry (copy), or None when the key has no entry, when `expected_session_id`
            is given and the key no longer points at it (nothing is changed), or when the
            target session does not exist.
        Raises:
            ValueError: `target_session_id` is not path-safe.
        """
        validate_session_id(target_session_id)
        async with self._locks.hold(session_key):
            entry = await self._load(session_key)
            if entry is None:
                return None
            if expected_session_id is not None and entry.session_id != expected_session_id:
                return None
            if entry.session_id == target_session_id:
                return entry.copy()
            row = await self._b().session_info(target_session_id)
            if row is None:
                return None
            info = row.as_dict()
            now = self._now()
            new = entry.copy()
            new.session_id = target_session_id
            new.updated_at = now
            new.created_at = parse_or_none(info.get("created_at")) or now
            for name in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
                         "total_tokens"):
                setattr(new, name, int(info.get(name) or 0))
            new.estimated_cost_usd = float(info.get("estimated_cost_usd") or 0.0)
            new.cost_status = info.get("cost_status") or "unknown"
            new.last_prompt_tokens = 0
            new.suspended = new.resume_pending = new.is_fresh_reset = new.was_auto_reset = False
            new.resume_reason = new.auto_reset_reason = new.suspend_reason = new.pending_notice = None
            await self._save(new, end_session=(entry.session_id, "session_switch"),
                             reopen_session=target_session_id, clear_marker=True)
            return new.copy()

    async def clear_fresh_reset(self, session_key: str) -> bool:
        """Clear `is_fresh_reset` after the first turn of a `/new` / `/reset` session has re-injected
        the chat's instructions (seed §2). Returns True when a flag was cleared."""
        async with self._locks.hold(session_key):
            entry = await self._load(session_key)
            if entry is None or not entry.is_fresh_reset:
                return False
            entry.is_fresh_reset = False
            await self._save(entry)
            return True

    async def set_session_title(self, session_id: str, title: str | None) -> bool:
        """Name a session (`/new <title>`, `/title <text>`; docs/behaviour.md §11). `None` removes
        the title. Returns False when the session does not exist.

        Raises:
            ValueError: `session_id` is not path-safe.
        """
        validate_session_id(session_id)
        return await self._b().set_title(session_id, title)

    async def recent_sessions(self, owner: SessionSource, *, limit: int = 10, scan: int = 500
                              ) -> list[dict[str, Any]]:
        """The sessions `owner` may switch to (docs/behaviour.md §2 owner scoping), most recently
        active first (`/resume`; docs/behaviour.md §11).

        Args:
            owner: the SessionSource of the requesting message.
            limit: sessions returned at most.
            scan: the most recent sessions of the platform examined (bounds the cost).
        Returns:
            `[{"session_id", "title", "last_activity" (ISO UTC: the newest active message, else the
            creation), "message_count", "first_user_text"}]`.
        """
        await self._flush_touched()
        found = []
        for row in await self._b().recent_sessions(owner.platform, scan):
            try:
                origin = SessionSource.from_dict(json.loads(row.origin)) if row.origin else None
            except (ValueError, TypeError) as exc:
                log.warning("session %s has an unreadable origin (%s); not listed", row.session_id, exc)
                continue
            if self._owned_by(origin, owner):
                summary = row.as_dict()
                del summary["origin"]
                found.append(summary)
                if len(found) >= limit:
                    break
        return found

    async def suspend_session(self, session_key: str, reason: str = "stop") -> bool:
        """`/stop` or stuck-loop escalation (seed §2): mark `suspended=True`; the next
        get_or_create_session starts a new session id.

        Args:
            reason: `"stop"` or `"stuck_loop"`; after a stuck-loop suspension the new entry
                carries `pending_notice="stuck_loop"`, told to the chat once
                (`take_pending_notice`, docs/behaviour.md §6).
        Returns:
            False when the key is unknown."""
        async with self._locks.hold(session_key):
            entry = await self._load(session_key)
            if entry is None:
                return False
            entry.suspended = True
            entry.suspend_reason = reason
            await self._save(entry)
            return True

    async def take_pending_notice(self, session_key: str) -> str | None:
        """The entry's one-shot `pending_notice` (e.g. `"stuck_loop"`), cleared as it is read so
        it is told once; None when there is none."""
        async with self._locks.hold(session_key):
            entry = await self._load(session_key)
            if entry is None or not entry.pending_notice:
                return None
            notice, entry.pending_notice = entry.pending_notice, None
            await self._save(entry)
            return notice

    async def mark_resume_pending(self, session_key: str, reason: str) -> bool:
        """Drain timeout / crash recovery (seed §7): set `resume_pending=True`, `resume_reason`,
        `last_resume_marked_at`. Never acts on a suspended entry.

        Args:
            reason: `"restart_timeout"`, `"shutdown_timeout"` or `"restart_interrupted"`.
        Returns:
            True when marked; False for an unknown key or a suspended entry.
        """
        async with self._locks.hold(session_key):
            return await self._mark_resume_locked(session_key, reason)

    async def _mark_resume_locked(self, session_key: str, reason: str, clear_marker: bool = False,
                                  keep_reason: bool = False) -> bool:
        entry = await self._load(session_key)
        if entry is None or entry.suspended:
            return False
        if not (keep_reason and entry.resume_pending and entry.resume_reason):
            entry.resume_reason = reason
            entry.last_resume_marked_at = self._now()
        entry.resume_pending = True
        await self._save(entry, clear_marker=clear_marker)
        return True

    async def clear_resume_pending(self, session_key: str) -> bool:
        """Clear `resume_pending`, `resume_reason` and `last_resume_marked_at` after a turn that
        really completed (docs/behaviour.md §2). Returns True when a flag was cleared."""
        async with self._locks.hold(session_key):
            entry = await self._load(session_key)
            if entry is None or not entry.resume_pending:
                return False
            entry.resume_pending = False
            entry.resume_reason = None
            entry.last_resume_marked_at = None
            await self._save(entry)
            return True

    async def update_session(self, session_key: str, last_prompt_tokens: int | None = None, *,
                             usage: TokenUsage | None = None) -> None:
        """After a turn (seed §3): bump `updated_at`, record `last_prompt_tokens`, and add `usage`
        to the entry's and the SQLite session's token/cost counters (`cost_status` takes the
        usage's status unless that is "unknown"). An unknown key is ignored (logged)."""
        async with self._locks.hold(session_key):
            entry = await self._load(session_key)
            if entry is None:
                log.warning("update_session: no entry for key %r; ignored", session_key)
                return
            entry.updated_at = self._now()
            entry.add_usage(usage, last_prompt_tokens)
            await self._save(entry, usage=usage)

    # ---- listing, lookup, pruning ---------------------------------------------------------

    async def list_sessions(self, active_minutes: int | None = None) -> list[SessionEntry]:
        """All entries, newest `updated_at` first; with `active_minutes`, only those updated in
        the last that many minutes (seed §3)."""
        await self._flush_touched()
        since = None
        if active_minutes is not None:
            try:
                since = (self._now() - timedelta(minutes=active_minutes)).timestamp()
            except OverflowError:  # a window reaching before year 1: every entry is in it
                since = None
        return await self._b().list_routes(since)

    async def lookup_by_session_id(self, session_id: str, *, owner: SessionSource | None = None
                                   ) -> SessionEntry | None:
        """The entry for a stored session id (seed §3): the route pointing at it, else an entry
        rebuilt from its SQLite session row (an ended session). With `owner`, only a session the
        owner may reach is returned: a private one of the same platform and (canonical) user, a
        shared one of the same chat and thread (`_owned_by`, docs/behaviour.md §2).

        Raises:
            ValueError: `session_id` is not path-safe.
        """
        validate_session_id(session_id)
        await self._flush_touched()
        entry = await self._b().route_for_session_id(session_id)
        if entry is None:
            row = await self._b().session_info(session_id)
            entry = entry_from_session_row(row.as_dict()) if row is not None else None
        if entry is None:
            return None
        if owner is not None and not self._owned_by(entry.origin, owner):
            return None
        return entry

    def _shared(self, source: SessionSource) -> bool:
        """Whether `source`'s chat is a shared multi-user session: `shared_fn` when given (the
        deployment's / plugins' answer), else the pure rule with the config's flags."""
        if self._shared_fn is not None:
            return bool(self._shared_fn(source))
        return is_shared_multi_user_session(
            source, group_sessions_per_user=self.config.group_sessions_per_user,
            thread_sessions_per_user=self.config.thread_sessions_per_user)

    def canonical_id(self, platform: str, kind: str, value: str | None) -> str | None:
        """`value` folded into its canonical id (kind `"user"` or `"chat"`; the
        `hermes_canonical_identity` chain, stored aliases included; docs/behaviour.md §4), or None
        for an empty value. Pure lookup: nothing is written."""
        if not value:
            return None
        return self._canonical_fn(platform, kind, value) or value

    def _owned_by(self, origin: SessionSource | None, owner: SessionSource) -> bool:
        """docs/behaviour.md §2 owner scoping, judged on the session (its `origin`): a private
        session is reachable by the same platform and the same person (canonical participant
        ids, so `+1555…` and `1555…:12@s.whatsapp.net` are one user); a shared multi-user session
        only from the same (canonical) chat and the same thread — a member of thread A never
        reaches a session of thread B, nor another member's private session in the same chat."""
        if origin is None or origin.platform != owner.platform:
            return False
        platform = owner.platform
        if self._shared(origin):
            chat = self.canonical_id(platform, "chat", origin.chat_id)
            return (bool(chat) and self.canonical_id(platform, "chat", owner.chat_id) == chat
                    and (origin.thread_id or None) == (owner.thread_id or None))
        mine = self.canonical_id(platform, "user", owner.participant_id)
        return bool(mine) and self.canonical_id(platform, "user", origin.participant_id) == mine

    async def has_any_sessions(self) -> bool:
        """True when any session was ever created (SQLite history, not only live routes)."""
        return await self._b().has_any_sessions()

    async def prune_old_entries(self, max_age_days: float | None = None) -> int:
        """`prune_routes(max_age_days)`, counted.

        Returns:
            The number of routes removed.
        """
        removed, _kept = await self.prune_routes(max_age_days)
        return len(removed)

    async def prune_routes(self, max_age_days: float | None = None) -> tuple[list[str], dict[str, str]]:
        """Remove routes idle longer than `max_age_days` (default `session_store_max_age_days`),
        measured from `updated_at` (seed §3, docs/behaviour.md §2). `<= 0` disables. Suspended entries and
        keys for which `has_active_processes_fn(key)` is true or raises are kept, and so, on an
        engine shared by replicas, are the keys another replica holds the lease of
        (docs/architecture.md §7). Only the route goes: the SQLite session is not ended (seed
        §10: time never ends a transcript) and the next message on the key re-adopts it
        (`get_or_create_session`).

        Returns:
            `(removed, kept)`: the session keys removed, and `{session key: why it was kept}`
            for the candidates the engine kept (e.g. "leased by replica …, which is working on
            it").
        """
        async with self._locks.hold_all():
            doomed = await self._prune_doomed_locked(max_age_days)
            if not doomed:
                return [], {}
            kept = {k.session_key: k.reason for k in await self._b().delete_routes(doomed) or ()}
            removed = [key for key in doomed if key not in kept]
            for key in removed:
                self._cache.pop(key, None)
            if removed and self._mirror is not None:
                self._mirror.mark_dirty()
            return removed, kept

    async def prune_candidates(self, max_age_days: float | None = None) -> tuple[list[str], dict[str, str]]:
        """What `prune_routes(max_age_days)` would do now (`sessions prune --dry-run`).
        Changes nothing: on an engine shared by replicas the leases are read, not locked.

        Returns:
            `(would remove, kept)`: the session keys, oldest first, and `{session key: why it
            would be kept}` for the candidates whose lease another replica holds.
        """
        async with self._locks.hold_all():
            doomed = await self._prune_doomed_locked(max_age_days)
            if not doomed or not self.leased:
                return doomed, {}
            kept = {k.session_key: k.reason for k in await self._b().routes_kept(doomed)}
            return [key for key in doomed if key not in kept], kept

    async def _prune_doomed_locked(self, max_age_days: float | None) -> list[str]:
        days = self.config.session_store_max_age_days if max_age_days is None else max_age_days
        if days is None or days <= 0:
            return []
        try:
            cutoff = (self._now() - timedelta(days=days)).timestamp()
        except OverflowError:  # an age reaching before year 1: no route is that old
            return []
        await self._flush_touched_locked()
        doomed = []
        for key, suspended in await self._b().routes_older_than(cutoff):
            if suspended:
                continue
            if self.has_active_processes_fn is not None:
                try:
                    if self.has_active_processes_fn(key):
                        continue
                except Exception as exc:  # unknown → keep: pruning must never kill live work
                    log.warning("has_active_processes_fn(%r) raised %s; entry kept", key, exc)
                    continue
            doomed.append(key)
        return doomed

    async def import_entries(self, entries: Iterable[SessionEntry], *, replace: bool = False) -> tuple[int, int]:
        """Insert entries read from an older gateway's sessions.json (see `importer`).

        Returns:
            `(imported, skipped because the key already has a route)`."""
        result = await self._b().import_entries(list(entries), replace)
        self._cache.clear()
        if self._mirror is not None:
            self._mirror.mark_dirty()
        return result

    async def session_info(self, session_id: str) -> dict[str, Any] | None:
        """The stored session row (SQLite columns) or None."""
        validate_session_id(session_id)
        row = await self._b().session_info(session_id)
        return row.as_dict() if row is not None else None
