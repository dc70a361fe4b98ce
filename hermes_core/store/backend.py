"""The persistence interface behind `SessionStore` (seed §3), implemented by `SqliteBackend`
(canonical, docs/behaviour.md §0) and `DegradedBackend` (sessions.json + JSONL when SQLite cannot open).

The state machine never talks to SQLite or files directly; it calls these methods. Each method is
atomic on its own. Times are aware UTC; `*_ts` values are epoch seconds; `*_iso` values are
ISO-8601 UTC strings; transcript rows are the dicts of `rows.normalize_message`.
"""

from __future__ import annotations

from typing import Any, Iterable, Protocol

from ..model import SessionEntry, SessionSource, TokenUsage


class StoreBackend(Protocol):
    """What a session-store backend provides."""

    degraded: bool  # True for the JSONL fallback

    async def open(self) -> None:
        """Open the storage. Raises sqlite3.Error / OSError / StoreError when it cannot."""

    async def close(self) -> None:
        """Release the storage (idempotent)."""

    # routes (session key -> current entry) -----------------------------------------------

    async def get_route(self, session_key: str) -> SessionEntry | None:
        """The stored entry of a key (a private object), or None."""

    async def route_for_session_id(self, session_id: str) -> SessionEntry | None:
        """The entry of the route pointing at `session_id`, or None."""

    async def save(self, entry: SessionEntry, *, new_session: bool = False, parent_session_id: str | None = None,
                   end_session: tuple[str, str] | None = None, reopen_session: str | None = None,
                   usage: TokenUsage | None = None, clear_marker: bool = False) -> None:
        """Upsert the route of `entry.session_key`, atomically with: ending the session
        `end_session = (session_id, end_reason)`, creating `entry.session_id`'s session row
        (`new_session`, with `parent_session_id`), reopening `reopen_session`, and clearing the
        key's turn marker. The session row's counters follow the entry's."""

    async def save_many(self, entries: list[SessionEntry]) -> None:
        """Upsert many routes at once (batched touch times)."""

    async def delete_routes(self, keys: list[str], end_reason: str, now_iso: str) -> None:
        """Remove routes (pruning); their sessions are ended with `end_reason`, transcripts stay."""

    async def routes_older_than(self, cutoff_ts: float) -> list[tuple[str, bool]]:
        """`(session_key, suspended)` of routes with `updated_at` before `cutoff_ts`."""

    async def list_routes(self, since_ts: float | None) -> list[SessionEntry]:
        """Entries (optionally only those updated at/after `since_ts`), newest first."""

    # sessions ------------------------------------------------------------------------------

    async def session_info(self, session_id: str) -> dict[str, Any] | None:
        """The session row (columns of the `sessions` table), or None."""

    async def has_any_sessions(self) -> bool:
        """True when any session or route was ever stored."""

    async def session_had_turn(self, session_id: str) -> bool:
        """True when the session has any user message (active or rewound)."""

    # transcripts ---------------------------------------------------------------------------

    async def append_message(self, session_id: str, row: dict[str, Any]) -> int:
        """Append one row; returns its message id."""

    async def begin_turn(self, session_key: str, session_id: str, row: dict[str, Any], started_ts: float,
                         inbound_id: int | None = None) -> None:
        """Append the user row and set the key's turn marker together (and move intake row
        `inbound_id` from 'pending' to 'running'). Raises StoreError when the key has no route
        (nothing is written)."""

    async def set_turn_marker(self, session_key: str, session_id: str, message_id: int, started_ts: float) -> None:
        """Set the key's turn marker on an existing user row (a resumed turn)."""

    async def unanswered_user_message(self, session_id: str) -> dict[str, Any] | None:
        """`{"id", "content", "platform_message_id"}` of the last active user row when no
        assistant row follows it, else None."""

    async def reply_row_after(self, session_id: str, message_id: int | None) -> dict[str, Any] | None:
        """`{"id", "content"}` of the first active assistant row after `message_id`, or None."""

    async def end_turn(self, session_key: str) -> None:
        """Clear the key's turn marker (no-op without one)."""

    async def turn_markers(self) -> list[dict[str, Any]]:
        """`[{"session_key", "session_id", "message_id", "started_ts"}]`, oldest first."""

    async def reply_after(self, session_id: str, message_id: int | None) -> bool:
        """True when an active assistant row follows message `message_id`."""

    async def load_messages(self, session_id: str) -> list[dict[str, Any]]:
        """Active rows in order as load_transcript dicts; raises TranscriptReadError on failure."""

    async def count_turns(self, session_id: str) -> int:
        """Number of active user rows."""

    async def rewrite(self, session_id: str, rows: list[dict[str, Any]]) -> None:
        """Deactivate the active rows and append `rows`, all or nothing."""

    async def rewind(self, session_id: str, n: int) -> dict[str, Any] | None:
        """Deactivate from the n-th last active user row on (n >= 1); docs/behaviour.md §2 return value."""

    # intake, search, mirror, meta, import ------------------------------------------------

    async def accept_inbound(self, platform: str, chat_id: str, message_id: str, now_iso: str,
                             now_ts: float = 0.0) -> bool:
        """Record an inbound id only (state 'done'); False when it was recorded before."""

    async def intake_accept(self, platform: str, chat_id: str, message_id: str, session_key: str,
                            payload: str, now_iso: str, now_ts: float) -> int | None:
        """Persist one inbound event (JSON `payload`) as 'pending' together with its dedupe id.
        Returns its intake id (increasing in arrival order), or None for a duplicate."""

    async def intake_finish(self, inbound_id: int, now_ts: float) -> None:
        """Mark an intake row 'done' and drop its payload (the id stays for dedupe)."""

    async def intake_open(self) -> list[dict[str, Any]]:
        """`[{"id", "session_key", "payload", "state"}]` of rows not 'done', in arrival order."""

    async def intake_prune(self, before_ts: float) -> int:
        """Delete 'done' rows accepted before `before_ts`; returns how many."""

    async def intake_merge(self, target_id: int, payload: str, absorbed_ids: list[int], now_ts: float) -> None:
        """One atomic write: row `target_id` (still 'pending') takes `payload` (the merged event)
        and the `absorbed_ids` rows become 'done' (busy-input burst merge, docs/behaviour.md §5)."""

    async def record_reply(self, session_key: str, session_id: str, row: dict[str, Any] | None,
                           obligation: dict[str, Any] | None) -> tuple[int | None, int | None]:
        """Append the assistant `row` (if any), record `obligation` (if any; keys session_key,
        session_id, origin (JSON), content, internal, reply_to, message_id, now_iso, now_ts) as
        'pending', and clear the key's turn marker — one transaction on SQLite. Returns
        `(message_id, obligation_id)`."""

    async def obligation_for_message(self, message_id: int) -> int | None:
        """The obligation carrying transcript row `message_id`, or None."""

    async def obligation_update(self, ob_id: int, state: str, now_iso: str, now_ts: float, *,
                                attempt: bool = False, error: str | None = None) -> None:
        """Set an obligation's state (counting an attempt when `attempt`)."""

    async def obligations(self, states: tuple[str, ...]) -> list[dict[str, Any]]:
        """Obligations in `states`, oldest first (dicts with the ledger columns)."""

    async def obligations_prune(self, before_ts: float) -> int:
        """Delete delivered/abandoned obligations last changed before `before_ts`."""

    async def resume_pending_routes(self) -> list[SessionEntry]:
        """Entries with `resume_pending=True`, oldest first."""

    async def search(self, expression: str, limit: int, owner: SessionSource | None,
                     shared_chat: bool) -> list[dict[str, Any]]:
        """`[{"session_id", "message_id", "snippet"}]` for an FTS5 expression (fts.match_expression)."""

    async def fts_check_and_repair(self) -> bool:
        """Integrity-check the full-text index, rebuild on damage; True when rebuilt."""

    async def render_mirror(self) -> str:
        """The full sessions.json text."""

    async def get_meta(self, key: str) -> str | None:
        """A stored fact about the store (e.g. `mirror_signature`)."""

    async def set_meta(self, key: str, value: str) -> None:
        """Store a fact about the store."""

    async def import_entries(self, entries: Iterable[SessionEntry], replace: bool) -> tuple[int, int]:
        """Add imported entries (routes + session rows); `(imported, skipped_existing)`."""

    # identity aliases (docs/behaviour.md §4) ---------------------------------------------------

    async def alias_rows(self) -> list[dict[str, Any]]:
        """Every alias: `{"platform", "alias_id", "canonical_id", "source", "first_seen",
        "last_seen"}`, ordered by platform then alias id."""

    async def upsert_alias(self, platform: str, alias_id: str, canonical_id: str, source: str,
                           now_iso: str) -> None:
        """Insert the alias, or point an existing `(platform, alias_id)` at `canonical_id` (source
        replaced, `last_seen` = now, `first_seen` kept)."""
