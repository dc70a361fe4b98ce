"""Listing every session, deleting one, and erasing one person's data (docs/operations.md §5).

Mixed into `SessionStore`; these are admin operations run by the CLI with the home lock held
(never beside a running gateway) on a healthy `state.db` (refused in degraded mode: the journal
would have to carry the deletions too).

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
`sessions.json` is rewritten from SQLite.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, replace
from typing import Any

from ..model import SessionSource, validate_session_id
from ..model.text import sender_label
from . import fts
from .db import StoreError
from .entries import origin_or_none

log = logging.getLogger(__name__)

_LIST_COLUMNS = ("session_id", "session_key", "title", "platform", "chat_type", "display_name", "created_at",
                 "updated_at", "ended_at", "end_reason", "total_tokens")


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


@dataclass
class _Plan:
    """The rows one removal deletes, found before the one write transaction."""

    sessions: list[str] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    messages: list[int] = field(default_factory=list)
    intake: list[int] = field(default_factory=list)
    obligations: list[int] = field(default_factory=list)
    # Shared sessions whose stored origin (the first sender) is the person: `{session_id: origin}`
    # with the sender's ids and name removed, the chat kept.
    scrub: dict[str, SessionSource] = field(default_factory=dict)
    aliases: tuple[str, set[str]] | None = None


class ErasureOps:
    """`SessionStore` mixin (module docstring)."""

    def _healthy_db(self):
        backend = self._b()
        if backend.degraded:
            raise StoreError(self.degraded_reason or "state.db cannot be opened; the store is degraded")
        if getattr(backend, "db", None) is None:  # a server engine ([store] backend): not built there yet
            raise StoreError("erasing and deleting are built for the SQLite store (state.db) only")
        return backend.db

    async def list_all_sessions(self, *, limit: int, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
        """Every stored session (ended ones included), most recently updated first.

        Returns:
            `(rows, total)`: at most `limit` rows from `offset` (dicts of `_LIST_COLUMNS` plus
            `current`: the session is its key's current one), and the number of sessions.
        """
        await self._flush_touched()
        db = getattr(self._b(), "db", None)
        if db is None:  # a server engine ([store] backend): not built there yet
            raise StoreError("listing every stored session (--all) is built for the SQLite store (state.db) only")
        total = int(await db.fetchval("SELECT count(*) FROM sessions") or 0)
        rows = await db.fetchall(
            f"SELECT {', '.join('s.' + c for c in _LIST_COLUMNS)}, r.session_key IS NOT NULL "
            "FROM sessions s LEFT JOIN routes r ON r.session_id = s.session_id "
            "ORDER BY s.updated_at DESC, s.session_id LIMIT ? OFFSET ?", (limit, offset))
        return [dict(zip(_LIST_COLUMNS + ("current",), (*r[:-1], bool(r[-1])))) for r in rows], total

    async def delete_session(self, session_id: str, *, dry_run: bool = False) -> ErasureReport | None:
        """Delete one session: its row, transcript (and index), obligations, its `.jsonl` file,
        and the route when the session is its key's current one (with the key's intake rows and
        turn marker). None when no such session exists.

        Raises:
            ValueError: `session_id` is not path-safe. StoreError: the store is degraded.
        """
        validate_session_id(session_id)
        db = self._healthy_db()
        if (await db.fetchone("SELECT 1 FROM sessions WHERE session_id = ?", (session_id,)) is None
                and await db.fetchone("SELECT 1 FROM messages WHERE session_id = ?", (session_id,)) is None):
            return None
        plan = _Plan(sessions=[session_id])
        plan.keys = await self._keys_of(plan.sessions)
        return await self._apply(plan, ErasureReport(dry_run=dry_run, sessions=[session_id]))

    async def erase_user(self, platform: str, user_id: str, *, dry_run: bool = False) -> ErasureReport:
        """Erase one person's data (module docstring); with `dry_run`, only count it.

        Raises:
            StoreError: the store is degraded. sqlite3.Error: a failed write (nothing is removed:
            one transaction).
        """
        db = self._healthy_db()
        ids = await self._person_ids(platform, user_id)
        plan = _Plan(aliases=(platform, ids))
        shared = []
        for sid, origin_text, participant in await db.fetchall(
                "SELECT session_id, origin, participant_id FROM sessions WHERE platform = ?", (platform,)):
            origin = origin_or_none(origin_text)
            theirs = origin is not None and bool({origin.user_id, origin.user_id_alt} & ids)
            if origin is not None and self._shared(origin):
                shared.append(sid)
                if theirs or participant in ids:
                    plan.scrub[sid] = replace(origin, user_id=None, user_id_alt=None, user_name=None)
            elif participant in ids or (origin is not None and {origin.user_id, origin.user_id_alt} & ids):
                plan.sessions.append(sid)
        plan.keys = await self._keys_of(plan.sessions)
        prefixes = await self._sender_prefixes(platform, ids)
        trimmed = []
        for sid in shared:
            rows = await self._their_turns(sid, prefixes)
            if rows:
                trimmed.append(sid)
                plan.messages += rows
        doomed_messages = set(plan.messages)
        for sid in shared:
            for ident, message_id, origin_text in await db.fetchall(
                    "SELECT id, message_id, origin FROM delivery_obligations WHERE session_id = ?", (sid,)):
                origin = origin_or_none(origin_text)
                if message_id in doomed_messages or (origin is not None and {origin.user_id, origin.user_id_alt} & ids):
                    plan.obligations.append(ident)
        for ident, key, payload in await db.fetchall(
                "SELECT id, session_key, payload FROM inbound WHERE platform = ? AND payload IS NOT NULL", (platform,)):
            if key not in plan.keys and _payload_sender(payload) & ids:
                plan.intake.append(ident)  # still waiting (in a shared chat): it must not run after the erase
        report = ErasureReport(dry_run=dry_run, sessions=list(plan.sessions), trimmed_sessions=trimmed)
        return await self._apply(plan, report)

    # ---- helpers ---------------------------------------------------------------------------

    async def _keys_of(self, session_ids: list[str]) -> list[str]:
        if not session_ids:
            return []
        rows = await self._b().db.fetchall(
            f"SELECT session_key FROM routes WHERE session_id IN ({','.join('?' * len(session_ids))})", session_ids)
        return [r[0] for r in rows]

    async def _person_ids(self, platform: str, user_id: str) -> set[str]:
        """`user_id`, its canonical id and every alias folded into that canonical id."""
        canonical = self.canonical_id(platform, "user", user_id) or user_id
        ids = {user_id, canonical}
        for (alias,) in await self._b().db.fetchall(
                "SELECT alias_id FROM identity_aliases WHERE platform = ? AND canonical_id = ?", (platform, canonical)):
            ids.add(alias)
        return ids

    async def _sender_prefixes(self, platform: str, ids: set[str]) -> set[str]:
        """Every sender prefix their messages can carry: their ids and the display names the
        stored origins and waiting intake payloads give them."""
        db = self._b().db
        names = set(ids)
        for (text,) in await db.fetchall("SELECT origin FROM sessions WHERE platform = ?", (platform,)):
            origin = origin_or_none(text)
            if origin is not None and origin.user_name and {origin.user_id, origin.user_id_alt} & ids:
                names.add(origin.user_name)
        for (payload,) in await db.fetchall(
                "SELECT payload FROM inbound WHERE platform = ? AND payload IS NOT NULL", (platform,)):
            source = _payload_source(payload)
            if source is not None and source.user_name and {source.user_id, source.user_id_alt} & ids:
                names.add(source.user_name)
        return {sender_label(name) for name in names}

    async def _their_turns(self, session_id: str, prefixes: set[str]) -> list[int]:
        """Ids of the rows of `session_id` that are their turns: each user message starting
        with one of `prefixes`, and the rows after it up to the next user message."""
        rows = await self._b().db.fetchall(
            "SELECT id, role, content FROM messages WHERE session_id = ? ORDER BY id", (session_id,))
        doomed, theirs = [], False
        for ident, role, content in rows:
            if role == "user":
                theirs = any((content or "").startswith(p) for p in prefixes)
            if theirs:
                doomed.append(ident)
        return doomed

    async def _apply(self, plan: _Plan, report: ErasureReport) -> ErasureReport:
        """Count (dry run) or delete everything `plan` names in one transaction, then the files,
        caches, stuck-loop counts and sessions.json."""
        db = self._b().db

        def where(column: str, values: list) -> tuple[str, list]:
            return f"{column} IN ({','.join('?' * len(values)) or 'NULL'})", list(values)

        statements = [
            ("messages", "messages", *where("session_id", plan.sessions)),
            ("messages", "messages", *where("id", plan.messages)),
            ("obligations", "delivery_obligations", *where("session_id", plan.sessions)),
            ("obligations", "delivery_obligations", *where("id", plan.obligations)),
            ("sessions", "sessions", *where("session_id", plan.sessions)),
            ("routes", "routes", *where("session_key", plan.keys)),
            ("intake", "inbound", *where("session_key", plan.keys)),
            ("intake", "inbound", *where("id", plan.intake)),
        ]
        if plan.aliases is not None:
            platform, ids = plan.aliases
            alias_where, params = where("alias_id", sorted(ids))
            canon_where, more = where("canonical_id", sorted(ids))
            statements.append(("aliases", "identity_aliases",
                               f"platform = ? AND ({alias_where} OR {canon_where})", [platform, *params, *more]))
        files = [self.sessions_dir / f"{sid}.jsonl" for sid in plan.sessions]
        report.keys = list(plan.keys)
        if report.dry_run:
            for kind, table, condition, params in statements:
                report.add(kind, int(await db.fetchval(f"SELECT count(*) FROM {table} WHERE {condition}", params) or 0))
            report.add("origins", len(plan.scrub))
            report.add("files", sum(1 for f in files if f.exists()))
            return report
        async with db.write() as conn:
            for kind, table, condition, params in statements:
                cur = await conn.execute(f"DELETE FROM {table} WHERE {condition}", params)
                report.add(kind, max(cur.rowcount, 0))
            for sid, origin in plan.scrub.items():
                text = json.dumps(origin.to_dict(), ensure_ascii=False)
                await conn.execute("UPDATE sessions SET origin = ?, participant_id = NULL WHERE session_id = ?",
                                   (text, sid))
                await conn.execute("UPDATE routes SET entry = json_set(entry, '$.origin', json(?)) "
                                   "WHERE session_id = ?", (text, sid))
            report.add("origins", len(plan.scrub))
            # Deleted index entries linger in older FTS segments until they are merged; merging
            # now (secure_delete is on) leaves none of the removed words in the file. The
            # messages still waiting to be indexed are indexed first, so the index left is whole.
            await fts.catch_up_async(conn)
            await conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('optimize')")
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

    async def _forget_keys(self, keys: list[str]) -> None:
        for key in keys:
            self._cache.pop(key, None)
            self._touched.pop(key, None)
        await self._load_aliases(self._b())
        if self._mirror is not None:
            self._mirror.mark_dirty()
            await self._mirror.flush()



def _payload_source(payload: str | None) -> SessionSource | None:
    try:
        data = json.loads(payload or "")
        return SessionSource.from_dict(data["source"])
    except (TypeError, ValueError, KeyError):
        return None


def _payload_sender(payload: str | None) -> set[str]:
    source = _payload_source(payload)
    return {i for i in (source.user_id, source.user_id_alt) if i} if source is not None else set()
