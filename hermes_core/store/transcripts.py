"""Transcript operations of the session store: append, load, rewrite, rewind and full-text
search (seed §3, "State DB and FTS recovery"; docs/behaviour.md §2, §3). Mixed into `SessionStore`."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from functools import partial
from typing import Any, Iterable

from ..model import SessionSource, validate_session_id
from . import fts
from .entries import origin_or_none
from .ledger import Confirmation
from .rows import MESSAGE_COLUMNS, TranscriptReadError, normalize_message, unstorable


class TranscriptOps:
    """Transcript and search methods. Relies on the SessionStore attributes `_b()`, `_now()`,
    `_owned_by()` and `_confirmation()` (`ledger.LedgerOps`)."""

    async def append_to_transcript(self, session_id: str, message: Mapping[str, Any], skip_db: bool = False) -> None:
        """Append one message to the transcript (seed §3).

        Args:
            session_id: path-safe session id.
            message: see `rows.normalize_message` for the accepted keys.
            skip_db: the agent already stored it in SQLite; do nothing (in degraded mode the JSONL
                transcript is still written, since nothing else stored it).
        Raises:
            ValueError: bad message or unsafe id. sqlite3.Error / OSError: the write failed.
        """
        validate_session_id(session_id)
        row = normalize_message(message, self._now)
        backend = self._b()
        if skip_db and not backend.degraded:
            return
        await backend.append_message(session_id, row)

    async def session_exists(self, session_id: str) -> bool:
        """True when the store holds the session row of `session_id` (current or ended) or a
        message of it; cheaper than `session_info`, which builds the whole row.

        Raises:
            ValueError: unsafe id.
        """
        validate_session_id(session_id)
        return await self._b().session_stored(session_id)

    async def import_transcript(self, session_id: str, messages: list[Any]) -> list[tuple[int, str]] | None:
        """Store `messages` as the transcript of a session that has none yet (a legacy `.jsonl`
        transcript's import, `importer`; docs/behaviour.md §3), in one transaction: after a crash
        the session holds all of them or none, so importing it again neither loses nor doubles a
        message. Imports awaited together share their commits (`db.Database.run`).

        Args:
            session_id: path-safe session id.
            messages: the messages, each as `append_to_transcript` takes it.
        Returns:
            None when the session already has a transcript (nothing is written); else the
            messages left out, as `(index in messages, why)`: a bad one (one holding a value
            the store cannot take too, `rows.unstorable`) is skipped, the others are stored.
        Raises:
            ValueError: unsafe id. sqlite3.Error / OSError: the write failed (nothing stored).
        """
        validate_session_id(session_id)
        if await self.load_transcript(session_id):
            return None
        rows, bad = [], []
        for index, message in enumerate(messages):
            try:
                row = normalize_message(message, self._now)
            except (ValueError, TypeError) as exc:
                bad.append((index, str(exc)))
                continue
            # Checked here, not by the database: its error would fail the whole transcript.
            problem = unstorable({name: getattr(row, name) for name in MESSAGE_COLUMNS}, "transcript message")
            if problem is not None:
                bad.append((index, problem))
            else:
                rows.append(row)
        if rows:
            # The transcript is empty (just read): rewriting it appends the rows, all at once.
            await self._b().rewrite(session_id, rows)
        return bad

    async def load_transcript(self, session_id: str) -> list[dict[str, Any]]:
        """Active messages of a session in order (seed §3): dicts with role, content, timestamp
        (ISO UTC) and the optional keys that were set. Unknown id → `[]`.

        Raises:
            ValueError: unsafe id. TranscriptReadError: the read failed (never answered `[]`).
        """
        validate_session_id(session_id)
        try:
            return await self._b().load_messages(session_id)
        except TranscriptReadError:
            raise
        except (sqlite3.Error, OSError) as exc:
            raise TranscriptReadError(f"transcript {session_id} could not be read: {exc}") from exc

    async def count_turns(self, session_id: str) -> int:
        """Number of active user messages in the session."""
        validate_session_id(session_id)
        return await self._b().count_turns(session_id)

    def counts_turns_in_full(self, session_id: str) -> bool:
        """False when `count_turns` can count only part of the session's turns: the store runs
        degraded and the session's earlier transcript is in the unavailable state.db (it was
        taken from sessions.json at the start of the degraded run) or its transcript file could
        not be read at the rebuild (docs/behaviour.md §12)."""
        backend = self._b()
        return not (backend.degraded and (session_id in backend.db.earlier_elsewhere
                                          or session_id in backend.db.unreadable))

    async def rewrite_transcript(self, session_id: str, messages: Iterable[Mapping[str, Any]], *,
                                 inbound_id: int | None = None, confirmation: Confirmation | None = None
                                 ) -> int | None:
        """Replace the active transcript (`/compress`; seed §3) atomically: the old rows are
        soft-deleted and the new ones inserted in one transaction; on any failure the old rows
        stay active. With `inbound_id` (the intake row of the `/compress` that asks), that row is
        finished in the same transaction: a crash after the rewrite never runs the command again
        (docs/behaviour.md §11). With `confirmation` (the command's answer, its `text` a str), its
        delivery obligation is recorded 'attempting' in that transaction too: a crash before
        the send leaves it to the start-up sweep (§6).

        Returns:
            The confirmation's obligation id, None without one.
        Raises:
            ValueError: a bad message (checked before anything changes) or unsafe id.
        """
        validate_session_id(session_id)
        rows = [normalize_message(m, self._now) for m in messages]
        owed = self._confirmation(confirmation, session_id) if confirmation is not None else None
        return await self._b().rewrite(session_id, rows, inbound_id, self._now().timestamp(), owed)

    async def rewind_session(self, session_id: str, n: int = 1, *, inbound_id: int | None = None,
                             confirmation: Confirmation | None = None) -> dict[str, Any] | None:
        """Undo the last `n` user turns by soft delete (seed §3; docs/behaviour.md §2). With
        `inbound_id` (the intake row of the `/undo` that asks), that row is finished in the same
        transaction: a crash after the rewind never runs the command again (docs/behaviour.md §11).
        With `confirmation` (the command's answer, its `text` given this method's result), its
        delivery obligation is recorded 'attempting' in that transaction too: a crash before
        the send leaves it to the start-up sweep (§6).

        Returns:
            `{"rewound_count": rows deactivated, "turns_undone": k, "target_text": text of the
            earliest undone user message}`, with `"obligation_id"` (the confirmation's) when a
            `confirmation` was given; n <= 0 acts as 1; None when there is no user turn (then
            nothing is owed either).
        """
        validate_session_id(session_id)
        n = 1 if n is None or n <= 0 else int(n)
        owed = partial(self._confirmation, confirmation, session_id) if confirmation is not None else None
        return await self._b().rewind(session_id, n, inbound_id, self._now().timestamp(), obligation=owed)

    async def search_transcripts(self, query: str, *, limit: int = 20, owner: SessionSource | None = None
                                 ) -> list[dict[str, Any]]:
        """Full-text search of active messages (FTS5; docs/behaviour.md §3).

        Args:
            query: free text; every word must match (quotes and operators are neutralised).
            limit: maximum results.
            owner: restrict to sessions owned by this source (docs/behaviour.md §2 scoping).
        Returns:
            `[{"session_id", "message_id", "snippet"}]`, best match first.
        """
        expression = fts.match_expression(query)
        if expression is None:
            return []
        limit = max(1, int(limit))
        if owner is None:
            return [hit.as_dict() for hit in await self._b().search(expression, limit, 0, None)]
        # Owner scoping is the one rule of `lookup_by_session_id` (`_owned_by`: canonical ids,
        # shared sessions per chat and thread), applied to the candidates of the owner's platform
        # page by page until `limit` hits are owned.
        owned: dict[str, bool] = {}
        found: list[dict[str, Any]] = []
        page, offset = max(4 * limit, 50), 0
        while len(found) < limit:
            hits = await self._b().search(expression, page, offset, owner.platform)
            for hit in hits:
                if hit.session_id not in owned:
                    owned[hit.session_id] = self._owned_by(origin_or_none(hit.origin), owner)
                if owned[hit.session_id]:
                    found.append(hit.as_dict())
                    if len(found) == limit:
                        break
            if len(hits) < page:
                break
            offset += page
        return found

    async def check_fts(self, force: bool = False) -> bool:
        """Housekeeping: FTS integrity-check (rank=1) and rebuild on damage; with `force`, rebuild
        without the check (`sessions reindex --force`, docs/operations.md §5). Returns True when
        the index was rebuilt. No-op (False) in degraded mode."""
        return await self._b().fts_check_and_repair(force)

