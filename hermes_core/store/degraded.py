"""Degraded backend: sessions.json is the index, transcripts are `{session_id}.jsonl`
(seed §3 "falls back to JSONL"; docs/behaviour.md §0). Used only when state.db cannot be opened.

Same operations as `SqliteBackend`. Session rows are kept under the `_sessions` key of
sessions.json (loaders of the seed's format skip `_` keys). Per-message state never rewrites the
whole index: turn markers live in the small `turn_markers.json`, accepted inbound ids are
appended to `inbound_seen.jsonl`, a transcript line is one message plus `"active"` (appended;
rewind/rewrite rewrite that one file atomically). The durable intake is an append-only operation
log `inbound.jsonl` (`accept` / `start` / `finish` lines, replayed at open, compacted by pruning);
the delivery ledger is the small `delivery_ledger.json` (rewritten atomically on each change).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterable

from ..model import SessionEntry, SessionSource, TokenUsage, format_timestamp
from .files import read_json_object, read_lines, write_atomic
from .mirror import SESSIONS_FILE_NAME, load_sessions_json, render_from_json_texts
from .rows import TranscriptReadError, jsonl_message_rows, row_to_message

log = logging.getLogger(__name__)

MARKERS_FILE_NAME = "turn_markers.json"
INBOUND_FILE_NAME = "inbound_seen.jsonl"
INTAKE_FILE_NAME = "inbound.jsonl"
LEDGER_FILE_NAME = "delivery_ledger.json"


def _append_line(path: Path, line: str) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())
    os.chmod(path, 0o600)


def _load_intake(path: Path) -> dict[int, dict[str, Any]]:
    """Replay the intake log: `{id: row}` in arrival order; bad lines are skipped (logged)."""
    rows: dict[int, dict[str, Any]] = {}
    for number, line in enumerate(read_lines(path), 1):
        try:
            op = json.loads(line)
            kind, ident = op["op"], int(op["id"])
            if kind == "accept":
                rows[ident] = {k: op.get(k) for k in ("id", "platform", "chat_id", "message_id", "session_key",
                                                      "payload", "accepted_ts")}
                rows[ident]["state"] = op.get("state") or "pending"
            elif kind == "start" and ident in rows:
                rows[ident]["state"] = "running"
            elif kind == "finish" and ident in rows:
                rows[ident].update(state="done", payload=None)
        except (ValueError, TypeError, KeyError) as exc:
            log.warning("%s line %d skipped: %s", path, number, exc)
    return rows


def _load_json_dict(path: Path) -> dict[str, dict[str, Any]]:
    """Lenient: a missing or corrupt file is `{}` (logged); non-dict values are skipped."""
    return {k: v for k, v in read_json_object(path).items() if isinstance(v, dict)}


def _load_inbound(path: Path) -> dict[str, None]:
    seen: dict[str, None] = {}
    for number, line in enumerate(read_lines(path), 1):
        try:
            platform, chat_id, message_id = json.loads(line)
        except (ValueError, TypeError):
            log.warning("%s line %d skipped: not [platform, chat_id, message_id]", path, number)
            continue
        seen["\x1f".join((str(platform), str(chat_id), str(message_id)))] = None
    return seen


class DegradedBackend:
    """sessions.json + JSONL persistence with the SqliteBackend interface.

    Args:
        sessions_dir: where sessions.json and the `.jsonl` transcripts live.
        clock: aware-UTC clock.
    """

    degraded = True

    def __init__(self, sessions_dir: Path, clock: Callable[[], datetime]) -> None:
        self.dir = Path(sessions_dir)
        self._clock = clock
        self.routes: dict[str, SessionEntry] = {}
        self.sessions: dict[str, dict[str, Any]] = {}
        self.markers: dict[str, dict[str, Any]] = {}
        self.inbound: dict[str, None] = {}
        self.intake: dict[int, dict[str, Any]] = {}
        self.ledger: dict[int, dict[str, Any]] = {}
        # Identity aliases live in memory only while degraded: a plugin re-learns them (they
        # come with the payloads or the plugin's own files), and state.db keeps the ones
        # recorded before.
        self.aliases: dict[tuple[str, str], dict[str, Any]] = {}
        self._next_ids: dict[str, int] = {}
        self._io = asyncio.Lock()

    async def open(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        routes, extras = load_sessions_json(self.dir / SESSIONS_FILE_NAME)
        self.routes = routes
        sessions = extras.get("_sessions")
        self.sessions = {k: v for k, v in sessions.items() if isinstance(v, dict)} if isinstance(sessions, dict) else {}
        self.markers = _load_json_dict(self.dir / MARKERS_FILE_NAME)
        self.inbound = _load_inbound(self.dir / INBOUND_FILE_NAME)
        self.intake = _load_intake(self.dir / INTAKE_FILE_NAME)
        for row in self.intake.values():
            self.inbound[self._token(row["platform"], row["chat_id"], row["message_id"])] = None
        ledger = _load_json_dict(self.dir / LEDGER_FILE_NAME)
        self.ledger = {}
        for ident, ob in ledger.items():
            try:
                self.ledger[int(ident)] = ob
            except ValueError:
                log.warning("%s: obligation %r skipped: not a number", LEDGER_FILE_NAME, ident)
        for entry in routes.values():
            self.sessions.setdefault(entry.session_id, self._session_row(entry))

    async def close(self) -> None:
        return None

    async def _persist(self) -> None:
        text = await self.render_mirror()
        await asyncio.to_thread(write_atomic, self.dir / SESSIONS_FILE_NAME, text)

    async def render_mirror(self) -> str:
        items = [(k, json.dumps(e.to_dict(), ensure_ascii=False, separators=(",", ":")))
                 for k, e in self.routes.items()]
        extras = {"_sessions": dict(self.sessions)}
        return render_from_json_texts(items, extras)

    @staticmethod
    def _session_row(entry: SessionEntry, parent: str | None = None) -> dict[str, Any]:
        origin = entry.origin
        return {"session_id": entry.session_id, "session_key": entry.session_key,
                "origin": json.dumps(origin.to_dict()) if origin else None,
                "platform": entry.platform, "chat_id": origin.chat_id if origin else None,
                "participant_id": origin.participant_id if origin else None, "chat_type": entry.chat_type,
                "display_name": entry.display_name, "created_at": format_timestamp(entry.created_at),
                "updated_at": format_timestamp(entry.updated_at), "ended_at": None, "end_reason": None,
                "parent_session_id": parent, "input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0,
                "cache_write_tokens": 0, "total_tokens": 0, "estimated_cost_usd": 0.0, "cost_status": "unknown"}

    # ---- routes ---------------------------------------------------------------------------

    async def get_route(self, session_key: str) -> SessionEntry | None:
        entry = self.routes.get(session_key)
        return entry.copy() if entry else None

    async def route_for_session_id(self, session_id: str) -> SessionEntry | None:
        for entry in self.routes.values():
            if entry.session_id == session_id:
                return entry.copy()
        return None

    async def save(self, entry: SessionEntry, *, new_session: bool = False, parent_session_id: str | None = None,
                   end_session: tuple[str, str] | None = None, reopen_session: str | None = None,
                   usage: TokenUsage | None = None, clear_marker: bool = False) -> None:
        now_iso = format_timestamp(entry.updated_at)
        if end_session is not None and end_session[0] in self.sessions:
            row = self.sessions[end_session[0]]
            if row.get("ended_at") is None:
                row.update(ended_at=now_iso, end_reason=end_session[1])
        if new_session:
            self.sessions.setdefault(entry.session_id, self._session_row(entry, parent_session_id))
        if reopen_session is not None and reopen_session in self.sessions:
            self.sessions[reopen_session].update(ended_at=None, end_reason=None, session_key=entry.session_key)
        if usage is not None and entry.session_id in self.sessions:
            row = self.sessions[entry.session_id]
            for name in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "total_tokens"):
                row[name] = int(row.get(name) or 0) + getattr(usage, name)
            row["estimated_cost_usd"] = float(row.get("estimated_cost_usd") or 0) + usage.estimated_cost_usd
            if usage.cost_status != "unknown":
                row["cost_status"] = usage.cost_status
        if clear_marker and self.markers.pop(entry.session_key, None) is not None:
            await self._persist_markers()
        self.routes[entry.session_key] = entry.copy()
        # Route changes are rare compared with messages; the degraded index is written through
        # only for new sessions and marker changes, the rest goes through the debounced mirror.
        if new_session or end_session or reopen_session:
            await self._persist()

    async def save_many(self, entries: list[SessionEntry]) -> None:
        for entry in entries:
            self.routes[entry.session_key] = entry.copy()

    async def delete_routes(self, keys: list[str], end_reason: str, now_iso: str) -> None:
        for key in keys:
            entry = self.routes.pop(key, None)
            if entry and entry.session_id in self.sessions and self.sessions[entry.session_id].get("ended_at") is None:
                self.sessions[entry.session_id].update(ended_at=now_iso, end_reason=end_reason)
        await self._persist()

    async def routes_older_than(self, cutoff_ts: float) -> list[tuple[str, bool]]:
        return [(k, e.suspended) for k, e in self.routes.items() if e.updated_at.timestamp() < cutoff_ts]

    async def list_routes(self, since_ts: float | None) -> list[SessionEntry]:
        items = [e.copy() for e in self.routes.values() if since_ts is None or e.updated_at.timestamp() >= since_ts]
        items.sort(key=lambda e: e.updated_at, reverse=True)
        return items

    # ---- sessions -------------------------------------------------------------------------

    async def session_info(self, session_id: str) -> dict[str, Any] | None:
        row = self.sessions.get(session_id)
        if row is None and self._path(session_id).exists():
            return {"session_id": session_id, "session_key": "", "created_at": None}
        return dict(row) if row else None

    async def has_any_sessions(self) -> bool:
        return bool(self.sessions or self.routes)

    async def session_had_turn(self, session_id: str) -> bool:
        try:
            rows = await self._read(session_id)
        except TranscriptReadError:
            return True
        return any(r.get("role") == "user" for r in rows)

    # ---- transcripts ----------------------------------------------------------------------

    def _path(self, session_id: str) -> Path:
        return self.dir / f"{session_id}.jsonl"

    async def _read(self, session_id: str) -> list[dict[str, Any]]:
        path = self._path(session_id)

        def read() -> list[dict[str, Any]]:
            try:
                text = path.read_text(encoding="utf-8")
            except FileNotFoundError:
                return []
            except (OSError, UnicodeDecodeError) as exc:
                raise TranscriptReadError(f"transcript {path} could not be read: {exc}") from exc
            return jsonl_message_rows(
                text, lambda number, exc: log.warning("%s line %d skipped: %s", path, number, exc))
        return await asyncio.to_thread(read)

    async def _append_lines(self, session_id: str, rows: list[dict[str, Any]]) -> None:
        path = self._path(session_id)

        def append() -> None:
            with open(path, "a", encoding="utf-8") as fh:
                for row in rows:
                    fh.write(json.dumps(row, ensure_ascii=False) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(path, 0o600)
        await asyncio.to_thread(append)

    async def _rewrite_file(self, session_id: str, rows: list[dict[str, Any]]) -> None:
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        await asyncio.to_thread(write_atomic, self._path(session_id), text)

    async def _next_id(self, session_id: str) -> int:
        if session_id not in self._next_ids:  # read once per session, then O(1) per message
            rows = await self._read(session_id)
            self._next_ids[session_id] = max((int(r.get("id") or 0) for r in rows), default=0) + 1
        return self._next_ids[session_id]

    async def append_message(self, session_id: str, row: dict[str, Any]) -> int:
        async with self._io:
            message_id = await self._next_id(session_id)
            await self._append_lines(session_id, [dict(row, id=message_id, active=1)])
            self._next_ids[session_id] = message_id + 1
            return message_id

    async def _persist_markers(self) -> None:
        text = json.dumps(self.markers, ensure_ascii=False)
        await asyncio.to_thread(write_atomic, self.dir / MARKERS_FILE_NAME, text)

    async def begin_turn(self, session_key: str, session_id: str, row: dict[str, Any], started_ts: float,
                         inbound_id: int | None = None) -> None:
        from .db import StoreError
        if session_key not in self.routes:
            raise StoreError(f"cannot begin a turn: no session entry for key {session_key!r}")
        message_id = await self.append_message(session_id, row)
        self.markers[session_key] = {"session_id": session_id, "message_id": message_id, "started_ts": started_ts}
        await self._persist_markers()
        if inbound_id is not None and inbound_id in self.intake and self.intake[inbound_id]["state"] == "pending":
            self.intake[inbound_id]["state"] = "running"
            await self._intake_log({"op": "start", "id": inbound_id})

    async def set_turn_marker(self, session_key: str, session_id: str, message_id: int, started_ts: float) -> None:
        self.markers[session_key] = {"session_id": session_id, "message_id": message_id, "started_ts": started_ts}
        await self._persist_markers()

    async def unanswered_user_message(self, session_id: str) -> dict[str, Any] | None:
        rows = [r for r in await self._read(session_id)
                if r.get("active", 1) and r.get("role") in ("user", "assistant")]
        if not rows or rows[-1].get("role") != "user":
            return None
        return {"id": int(rows[-1].get("id") or 0), "content": rows[-1].get("content"),
                "platform_message_id": rows[-1].get("platform_message_id")}

    async def reply_row_after(self, session_id: str, message_id: int | None) -> dict[str, Any] | None:
        for r in await self._read(session_id):
            if r.get("active", 1) and r.get("role") == "assistant" and int(r.get("id") or 0) > (message_id or 0):
                return {"id": int(r.get("id") or 0), "content": r.get("content")}
        return None

    async def end_turn(self, session_key: str) -> None:
        if self.markers.pop(session_key, None) is not None:
            await self._persist_markers()

    async def turn_markers(self) -> list[dict[str, Any]]:
        out = [{"session_key": k, "session_id": m.get("session_id"), "message_id": m.get("message_id"),
                "started_ts": float(m.get("started_ts") or 0)} for k, m in self.markers.items()]
        return sorted(out, key=lambda m: m["started_ts"])

    async def reply_after(self, session_id: str, message_id: int | None) -> bool:
        rows = await self._read(session_id)
        return any(r.get("active", 1) and r.get("role") == "assistant" and int(r.get("id") or 0) > (message_id or 0)
                   for r in rows)

    async def load_messages(self, session_id: str) -> list[dict[str, Any]]:
        rows = await self._read(session_id)
        out = []
        for row in rows:
            if not row.get("active", 1):
                continue
            full = {k: row.get(k) for k in ("role", "content", "timestamp", "platform_message_id",
                                            "tool_call_id", "tool_name", "tool_calls")}
            out.append(row_to_message(full))
        return out

    async def count_turns(self, session_id: str) -> int:
        return sum(1 for r in await self._read(session_id) if r.get("active", 1) and r.get("role") == "user")

    async def rewrite(self, session_id: str, rows: list[dict[str, Any]]) -> None:
        async with self._io:
            old = await self._read(session_id)
            next_id = max((int(r.get("id") or 0) for r in old), default=0) + 1
            kept = [dict(r, active=0) for r in old]
            new = [dict(r, id=next_id + i, active=1) for i, r in enumerate(rows)]
            await self._rewrite_file(session_id, kept + new)
            self._next_ids[session_id] = next_id + len(rows)

    async def rewind(self, session_id: str, n: int) -> dict[str, Any] | None:
        async with self._io:
            rows = await self._read(session_id)
            users = [i for i, r in enumerate(rows) if r.get("active", 1) and r.get("role") == "user"]
            if not users:
                return None
            picked = users[-n:]
            start = picked[0]
            count = 0
            for row in rows[start:]:
                if row.get("active", 1):
                    row["active"] = 0
                    count += 1
            await self._rewrite_file(session_id, rows)
            return {"rewound_count": count, "turns_undone": len(picked), "target_text": rows[start].get("content")}

    # ---- intake, search -------------------------------------------------------------------

    @staticmethod
    def _token(platform: Any, chat_id: Any, message_id: Any) -> str:
        return "\x1f".join((str(platform), str(chat_id), str(message_id)))

    async def accept_inbound(self, platform: str, chat_id: str, message_id: str, now_iso: str,
                             now_ts: float = 0.0) -> bool:
        token = "\x1f".join((platform, chat_id, message_id))
        if token in self.inbound:
            return False
        self.inbound[token] = None
        line = json.dumps([platform, chat_id, message_id], ensure_ascii=False) + "\n"
        path = self.dir / INBOUND_FILE_NAME

        def append() -> None:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(line)
                fh.flush()
                os.fsync(fh.fileno())
        await asyncio.to_thread(append)
        return True

    # ---- durable intake (docs/behaviour.md §0, §5) ----------------------------------------------------

    async def _intake_log(self, op: dict[str, Any]) -> None:
        line = json.dumps(op, ensure_ascii=False) + "\n"
        await asyncio.to_thread(_append_line, self.dir / INTAKE_FILE_NAME, line)

    async def intake_accept(self, platform: str, chat_id: str, message_id: str, session_key: str,
                            payload: str, now_iso: str, now_ts: float) -> int | None:
        async with self._io:
            token = self._token(platform, chat_id, message_id)
            if token in self.inbound:
                return None
            ident = max(self.intake, default=0) + 1
            row = {"id": ident, "platform": platform, "chat_id": chat_id, "message_id": message_id,
                   "session_key": session_key, "payload": payload, "accepted_ts": now_ts}
            await self._intake_log(dict(row, op="accept"))  # durable before it counts as accepted
            self.intake[ident] = dict(row, state="pending")
            self.inbound[token] = None
            return ident

    async def intake_finish(self, inbound_id: int, now_ts: float) -> None:
        row = self.intake.get(inbound_id)
        if row is not None and row["state"] != "done":
            await self._intake_log({"op": "finish", "id": inbound_id, "ts": now_ts})
            row.update(state="done", payload=None)

    async def intake_merge(self, target_id: int, payload: str, absorbed_ids: list[int], now_ts: float) -> None:
        # Expressed with the ops every reader of this log knows (a repeated `accept` line replaces
        # the row, importer included), written with one append: a torn tail line is skipped.
        async with self._io:
            row = self.intake.get(target_id)
            if row is None or row["state"] != "pending":
                return
            merged = dict(row, payload=payload)
            lines = [json.dumps(dict(merged, op="accept"), ensure_ascii=False)]
            lines += [json.dumps({"op": "finish", "id": i, "ts": now_ts}) for i in absorbed_ids if i in self.intake]
            await asyncio.to_thread(_append_line, self.dir / INTAKE_FILE_NAME, "\n".join(lines) + "\n")
            self.intake[target_id] = merged
            for ident in absorbed_ids:
                if ident in self.intake:
                    self.intake[ident].update(state="done", payload=None)

    async def intake_open(self) -> list[dict[str, Any]]:
        return [{"id": r["id"], "session_key": r["session_key"], "payload": r["payload"], "state": r["state"]}
                for r in sorted(self.intake.values(), key=lambda r: r["id"]) if r["state"] != "done"]

    async def intake_prune(self, before_ts: float) -> int:
        async with self._io:
            doomed = [i for i, r in self.intake.items()
                      if r["state"] == "done" and float(r.get("accepted_ts") or 0) < before_ts]
            if not doomed:
                return 0
            for ident in doomed:
                row = self.intake.pop(ident)
                self.inbound.pop(self._token(row["platform"], row["chat_id"], row["message_id"]), None)
            # Compact the log: one accept line per kept row, in arrival order.
            text = "".join(json.dumps(dict(r, op="accept"), ensure_ascii=False) + "\n"
                           for r in sorted(self.intake.values(), key=lambda r: r["id"]))
            await asyncio.to_thread(write_atomic, self.dir / INTAKE_FILE_NAME, text)
            return len(doomed)

    # ---- delivery ledger (docs/behaviour.md §6) ------------------------------------------------------

    async def _persist_ledger(self) -> None:
        text = json.dumps({str(k): v for k, v in self.ledger.items()}, ensure_ascii=False)
        await asyncio.to_thread(write_atomic, self.dir / LEDGER_FILE_NAME, text)

    async def record_reply(self, session_key: str, session_id: str, row: dict[str, Any] | None,
                           obligation: dict[str, Any] | None) -> tuple[int | None, int | None]:
        # Not one transaction (no SQLite): reply, then obligation, then the marker, so a crash
        # in between leaves a marked turn with a persisted reply, which recovery turns into an
        # obligation (seed §7).
        message_id = await self.append_message(session_id, row) if row is not None else None
        ob_id = None
        if obligation is not None:
            ob_id = max(self.ledger, default=0) + 1
            self.ledger[ob_id] = {
                "id": ob_id, "session_key": obligation["session_key"], "session_id": obligation["session_id"],
                "origin": obligation["origin"], "content": obligation["content"], "state": "pending",
                "attempts": 0, "internal": int(bool(obligation["internal"])), "last_error": None,
                "message_id": message_id if message_id is not None else obligation.get("message_id"),
                "reply_to": obligation.get("reply_to"), "created_ts": obligation["now_ts"],
                "updated_ts": obligation["now_ts"]}
            await self._persist_ledger()
        await self.end_turn(session_key)
        return message_id, ob_id

    async def obligation_for_message(self, message_id: int) -> int | None:
        for ident, ob in self.ledger.items():
            if ob.get("message_id") == message_id:
                return ident
        return None

    async def obligation_update(self, ob_id: int, state: str, now_iso: str, now_ts: float, *,
                                attempt: bool = False, error: str | None = None) -> None:
        ob = self.ledger.get(ob_id)
        if ob is None:
            return
        ob["state"] = state
        ob["attempts"] = int(ob.get("attempts") or 0) + (1 if attempt else 0)
        if error is not None:
            ob["last_error"] = error
        ob["updated_ts"] = now_ts
        await self._persist_ledger()

    async def obligations(self, states: tuple[str, ...]) -> list[dict[str, Any]]:
        return [dict(ob) for _, ob in sorted(self.ledger.items()) if ob.get("state") in states]

    async def obligations_prune(self, before_ts: float) -> int:
        doomed = [i for i, ob in self.ledger.items()
                  if ob.get("state") in ("delivered", "abandoned") and float(ob.get("updated_ts") or 0) < before_ts]
        for ident in doomed:
            del self.ledger[ident]
        if doomed:
            await self._persist_ledger()
        return len(doomed)

    async def resume_pending_routes(self) -> list[SessionEntry]:
        items = [e.copy() for e in self.routes.values() if e.resume_pending]
        items.sort(key=lambda e: e.updated_at)
        return items

    async def search(self, expression: str, limit: int, owner: SessionSource | None,
                     shared_chat: bool) -> list[dict[str, Any]]:
        # Degraded mode has no index: a linear scan of the JSONL transcripts, all words required.
        words = [w.strip('"').replace('""', '"').lower() for w in expression.split(" ")]
        results = []
        for path in sorted(self.dir.glob("*.jsonl")):
            session_id = path.stem
            if owner is not None:
                row = self.sessions.get(session_id) or {}
                if row.get("platform") != owner.platform:
                    continue
                if row.get("participant_id") != (owner.participant_id or "") and not (
                        shared_chat and row.get("chat_id") == owner.chat_id):
                    continue
            for msg in await self._read(session_id):
                text = (msg.get("content") or "")
                if msg.get("active", 1) and all(w in text.lower() for w in words):
                    results.append({"session_id": session_id, "message_id": msg.get("id"), "snippet": text[:120]})
                    if len(results) >= limit:
                        return results
        return results

    async def fts_check_and_repair(self) -> bool:
        return False

    async def get_meta(self, key: str) -> str | None:
        return None  # no signature: the degraded index is its own truth

    async def set_meta(self, key: str, value: str) -> None:
        return None

    async def alias_rows(self) -> list[dict[str, Any]]:
        return [dict(self.aliases[k]) for k in sorted(self.aliases)]

    async def upsert_alias(self, platform: str, alias_id: str, canonical_id: str, source: str,
                           now_iso: str) -> None:
        row = self.aliases.get((platform, alias_id))
        first = row["first_seen"] if row else now_iso
        self.aliases[(platform, alias_id)] = {"platform": platform, "alias_id": alias_id,
                                              "canonical_id": canonical_id, "source": source,
                                              "first_seen": first, "last_seen": now_iso}

    async def import_entries(self, entries: Iterable[SessionEntry], replace: bool) -> tuple[int, int]:
        imported = skipped = 0
        for entry in entries:
            if entry.session_key in self.routes and not replace:
                skipped += 1
                continue
            self.routes[entry.session_key] = entry.copy()
            self.sessions.setdefault(entry.session_id, self._session_row(entry))
            imported += 1
        await self._persist()
        return imported, skipped
