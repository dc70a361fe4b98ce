"""Listing every session, deleting one, and erasing one person's data (docs/operations.md §5).

Mixed into `SessionStore`; these are admin operations run by the CLI with the home lock held
(never beside a running gateway) on a healthy store (refused in degraded mode: the journal would
have to carry the deletions too). What goes is decided here, for every engine; the engine
(`backend.RemovalBackend`: `state.db`, or a server store such as PostgreSQL, docs/architecture.md
§7) reads the rows asked for and removes the plan in one transaction — on a store shared by
replicas, only sessions no running replica holds (their leases).

Erasing a person (`erase_user(platform, user_id)`): the person is the canonical user id and
every alias folded into it (docs/behaviour.md §4). Sessions that are theirs alone (a DM, or a
group session isolated per user: the session row's `participant_id` is one of their ids and
the chat is not shared) are deleted whole: session rows, transcript rows (the full-text index
follows through its triggers), the route, delivery obligations, intake rows, turn marker and
`{session_id}.jsonl` files. In a shared multi-user session only their turns go: each user
message carrying their sender prefix (`[name] `, docs/behaviour.md §7 — the names come from the
origins, intake payloads and ids stored for them) and the assistant and tool rows answering
it, up to the next user message. Their identity aliases go too, and the session keys that
named them are dropped from `restart_counts.json` (by the CLI, which owns that file's module);
`sessions.json` is rewritten from the store, and the copies of an older `sessions.json` kept
because an import skipped entries (`sessions.json.skipped`, `.skipped.2`, …, docs/behaviour.md
§3) lose their entries too (`kept_entries`).
"""

from __future__ import annotations

import json
import logging
import stat
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..model import SessionSource, validate_session_id
from ..model.text import sender_label
from .backend import RemovalBackend
from .db import StoreError
from .entries import origin_or_none
from .files import write_atomic
from .journal import JOURNAL_FILE_NAME
from .merge import DAMAGED_DIR_NAME, MERGED_DIR_NAME
from .mirror import kept_skipped_copies
from .records import ALL_SESSION_COLUMNS, RemovalPlan

log = logging.getLogger(__name__)


@dataclass
class ErasureReport:
    """What a delete or erase removed (or, with `dry_run`, would remove): counts per kind and
    the ids of the sessions deleted whole / trimmed."""

    dry_run: bool = False
    sessions: list[str] = field(default_factory=list)
    trimmed_sessions: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    keys: list[str] = field(default_factory=list)

    def add(self, kind: str, n: int) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + int(n)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dict (`--json`)."""
        return {"dry_run": self.dry_run, "sessions": list(self.sessions), "session_keys": list(self.keys),
                "trimmed_sessions": list(self.trimmed_sessions), "counts": dict(sorted(self.counts.items()))}


class ErasureOps:
    """`SessionStore` mixin (module docstring)."""

    def _removal_backend(self, what: str, *, degraded_ok: bool = False) -> RemovalBackend:
        """The open engine as a `RemovalBackend`. Raises StoreError naming `what` when it has no
        admin removals, or when the store is degraded (unless `degraded_ok`: a read only)."""
        backend = self._b()
        if backend.degraded and not degraded_ok:
            raise StoreError(self.degraded_reason or "state.db cannot be opened; the store is degraded")
        if not isinstance(backend, RemovalBackend):  # an engine without the admin removals
            # Both built-in engines have them; a third-party engine may not (docs/architecture.md).
            raise StoreError(f"{what} not available with [store] backend = {self.config.store.backend!r}: "
                             f"its engine does not implement the admin operations (RemovalBackend)")
        return backend

    async def list_all_sessions(self, *, limit: int, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
        """Every stored session (ended ones included), most recently updated first.

        Returns:
            `(rows, total)`: at most `limit` rows from `offset` (dicts of `ALL_SESSION_COLUMNS`
            plus `current`: the session is its key's current one), and the number of sessions.
        """
        await self._flush_touched()
        backend = self._removal_backend("listing every stored session (--all) is", degraded_ok=True)
        rows, total = await backend.all_sessions(limit, offset)
        return [dict(zip(ALL_SESSION_COLUMNS + ("current",), row)) for row in rows], total

    async def delete_session(self, session_id: str, *, dry_run: bool = False) -> ErasureReport | None:
        """Delete one session: its row, transcript (and index), obligations, its `.jsonl` file,
        and the route when the session is its key's current one (with the key's intake rows and
        turn marker). None when no such session exists.

        Raises:
            ValueError: `session_id` is not path-safe. StoreError: the store is degraded.
        """
        validate_session_id(session_id)
        backend = self._removal_backend("erasing and deleting are")
        if not await backend.session_stored(session_id):
            return None
        plan = RemovalPlan(sessions=[session_id])
        plan.keys = await backend.route_keys(plan.sessions)
        return await self._apply(backend, plan, ErasureReport(dry_run=dry_run, sessions=[session_id]))

    async def erase_user(self, platform: str, user_id: str, *, dry_run: bool = False) -> ErasureReport:
        """Erase one person's data (module docstring); with `dry_run`, only count it.

        Raises:
            StoreError: the store is degraded (a server engine: a session of theirs is leased by
            a running replica). sqlite3.Error / the engine's error: a failed write (nothing is
            removed: one transaction).
        """
        backend = self._removal_backend("erasing and deleting are")
        ids = await self._person_ids(backend, platform, user_id)
        plan = RemovalPlan(aliases=(platform, ids))
        shared = []
        for sid, origin_text, participant in await backend.platform_sessions(platform):
            origin = origin_or_none(origin_text)
            theirs = origin is not None and bool({origin.user_id, origin.user_id_alt} & ids)
            if origin is not None and self._shared(origin):
                shared.append(sid)
                if theirs or participant in ids:
                    scrubbed = replace(origin, user_id=None, user_id_alt=None, user_name=None)
                    plan.scrub[sid] = json.dumps(scrubbed.to_dict(), ensure_ascii=False)
            elif participant in ids or (origin is not None and {origin.user_id, origin.user_id_alt} & ids):
                plan.sessions.append(sid)
        plan.keys = await backend.route_keys(plan.sessions)
        prefixes = await self._sender_prefixes(backend, platform, ids)
        trimmed = []
        for sid in shared:
            rows = _their_turns(await backend.transcript_roles(sid), prefixes)
            if rows:
                trimmed.append(sid)
                plan.messages += rows
        doomed_messages = set(plan.messages)
        for sid in shared:
            for ident, message_id, origin_text in await backend.session_obligations(sid):
                origin = origin_or_none(origin_text)
                if message_id in doomed_messages or (origin is not None and {origin.user_id, origin.user_id_alt} & ids):
                    plan.obligations.append(ident)
        for ident, key, payload in await backend.intake_payloads(platform):
            if key not in plan.keys and _payload_sender(payload) & ids:
                plan.intake.append(ident)  # still waiting (in a shared chat): it must not run after the erase
        report = ErasureReport(dry_run=dry_run, sessions=list(plan.sessions), trimmed_sessions=trimmed)
        kept = [(path, *_kept_without_them(path, platform, ids, self._shared))
                for path in kept_skipped_copies(self.sessions_dir)]  # read before anything is removed
        report = await self._apply(backend, plan, report)
        removed = 0
        for path, data, n in kept:
            if n and (dry_run or _rewrite_kept(path, data)):
                removed += n
        report.add("kept_entries", removed)
        return report

    # ---- helpers ---------------------------------------------------------------------------

    async def _person_ids(self, backend: RemovalBackend, platform: str, user_id: str) -> set[str]:
        """`user_id`, its canonical id and every alias folded into that canonical id."""
        canonical = self.canonical_id(platform, "user", user_id) or user_id
        return {user_id, canonical, *await backend.alias_ids(platform, canonical)}

    async def _sender_prefixes(self, backend: RemovalBackend, platform: str, ids: set[str]) -> set[str]:
        """Every sender prefix their messages can carry: their ids and the display names the
        stored origins and waiting intake payloads give them."""
        names = set(ids)
        for _sid, text, _participant in await backend.platform_sessions(platform):
            origin = origin_or_none(text)
            if origin is not None and origin.user_name and {origin.user_id, origin.user_id_alt} & ids:
                names.add(origin.user_name)
        for _ident, _key, payload in await backend.intake_payloads(platform):
            source = _payload_source(payload)
            if source is not None and source.user_name and {source.user_id, source.user_id_alt} & ids:
                names.add(source.user_name)
        return {sender_label(name) for name in names}

    async def _apply(self, backend: RemovalBackend, plan: RemovalPlan, report: ErasureReport) -> ErasureReport:
        """Count (dry run) or remove everything `plan` names (the engine's one transaction),
        then the files, caches, stuck-loop counts and sessions.json."""
        files = self._files_of(plan)
        report.keys = list(plan.keys)
        if report.dry_run:
            for kind, n in (await backend.count_removal(plan)).items():
                report.add(kind, n)
            report.add("origins", len(plan.scrub))
            report.add("files", sum(1 for f in files if f.exists()))
            return report
        for kind, n in (await backend.apply_removal(plan)).items():
            report.add(kind, n)
        report.add("origins", len(plan.scrub))
        # Counts only: the log must not name whom the data was about.
        log.info("data removal: %s", ", ".join(f"{k} {v}" for k, v in sorted(report.counts.items())))
        removed = 0
        for path in files:
            if path.exists():
                path.unlink()
                removed += 1
        report.add("files", removed)
        await self._forget_keys(plan.keys)
        return report

    def _files_of(self, plan: RemovalPlan) -> list[Path]:
        """The files holding what `plan` removes: the `{session_id}.jsonl` of each session deleted
        whole, and what merged degraded runs set aside (`sessions/merged/` and
        `sessions/damaged/`, docs/behaviour.md §12) for every session the plan touches: its
        transcript copies, and each set-aside journal that names it. Those are copies of rows
        already in state.db, kept to recover from; they must not outlive a deletion or an
        erasure (docs/operations.md §5). A set-aside journal holds other sessions' rows too and
        goes whole: it is a copy."""
        files = [self.sessions_dir / f"{sid}.jsonl" for sid in plan.sessions]
        touched = set(plan.sessions) | set(plan.scrub)
        for folder in (MERGED_DIR_NAME, DAMAGED_DIR_NAME):
            for path in sorted((self.sessions_dir / folder).glob("*/*.jsonl")):
                if path.stem in touched or (path.name == JOURNAL_FILE_NAME and _names_any(path, touched)):
                    files.append(path)
        return files

    async def _forget_keys(self, keys: list[str]) -> None:
        for key in keys:
            self._cache.pop(key, None)
            self._touched.pop(key, None)
        await self._load_aliases(self._b())
        if self._mirror is not None:
            self._mirror.mark_dirty()
            await self._mirror.flush()


def _their_turns(rows: list[tuple[int, str, str | None]], prefixes: set[str]) -> list[int]:
    """Ids of the transcript `rows` that are their turns: each user message starting with one
    of `prefixes`, and the rows after it up to the next user message."""
    doomed, theirs = [], False
    for ident, role, content in rows:
        if role == "user":
            theirs = any((content or "").startswith(p) for p in prefixes)
        if theirs:
            doomed.append(ident)
    return doomed


def _payload_source(payload: str | None) -> SessionSource | None:
    try:
        data = json.loads(payload or "")
        return SessionSource.from_dict(data["source"])
    except (TypeError, ValueError, KeyError):
        return None


def _payload_sender(payload: str | None) -> set[str]:
    source = _payload_source(payload)
    return {i for i in (source.user_id, source.user_id_alt) if i} if source is not None else set()


def _kept_without_them(path: Path, platform: str, ids: set[str], shared: Callable[[SessionSource], bool]
                       ) -> tuple[dict[str, Any] | None, int]:
    """A kept `sessions.json.skipped` copy (seed §3 layout: session key -> entry) without the
    erased person's entries, by the rule `erase_user` applies to the sessions: an entry of
    `platform` whose origin names one of `ids` (its `user_id` or `user_id_alt`) goes whole,
    unless its chat is a shared multi-user session (`shared`), where the origin only loses
    their id and name; every other key and entry stays as it was.

    Returns:
        `(the file's object without them, entries removed or scrubbed)`, or `(None, 0)` when
        the file cannot be read as a JSON object: logged as a warning naming it, it is left
        for the operator (`doctor` lists it, docs/operations.md §1).
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError("not a JSON object of session entries")
    except (OSError, ValueError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        why = exc.strerror or exc if isinstance(exc, OSError) else exc
        log.warning("kept sessions.json copy %s could not be read (%s); not checked for the erased person's "
                    "entries: it may still hold them", path, why)
        return None, 0
    changed = 0
    for key, entry in list(data.items()):
        raw = entry.get("origin") if isinstance(entry, dict) else None
        try:
            origin = SessionSource.from_dict(raw) if raw else None
        except (TypeError, ValueError):
            origin = None
        if origin is None or origin.platform != platform or not {origin.user_id, origin.user_id_alt} & ids:
            continue
        changed += 1
        if shared(origin):  # the chat's other members keep its route; only who they were goes
            entry["origin"] = {**raw, "user_id": None, "user_id_alt": None, "user_name": None}
        else:
            del data[key]
    return data, changed


def _rewrite_kept(path: Path, data: dict[str, Any]) -> bool:
    """Write `data` over the kept copy at `path` atomically with its mode (`write_atomic`);
    JSON with ASCII escapes, so a lone surrogate the copy was kept for stays writable.
    False when it could not be written (logged as an error: the copy still holds them)."""
    try:
        write_atomic(path, json.dumps(data, indent=2) + "\n", mode=stat.S_IMODE(path.stat().st_mode))
    except OSError as exc:
        log.error("kept sessions.json copy %s could not be rewritten (%s): it still holds the erased person's "
                  "entries; delete it", path, exc.strerror or exc)
        return False
    return True


def _names_any(path: Path, session_ids: set[str]) -> bool:
    """True when the set-aside journal at `path` names one of `session_ids` (its lines carry the
    session id of every row they hold). An unreadable file names none: it is left for the
    operator, as `doctor` lists it."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        log.warning("set-aside journal %s could not be read (%s); not checked for the removed sessions", path, exc)
        return False
    return any(sid in text for sid in session_ids)
