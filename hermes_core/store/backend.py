"""The engine interface behind `SessionStore` (seed §3; docs/behaviour.md §0, §12).

The built-in engine is `SqliteBackend`: the same SQL runs on `state.db` and, when that cannot be
opened, on the journaled in-memory database of degraded mode (`journal.JournaledDatabase`). This
Protocol is what the state machine needs from an engine, with typed records (`records.py`)
instead of untyped dicts; other engines come from the `hermes_core.store_backends` entry-point
group (`backends.py`) and must pass `hermes_core.testing.StoreBackendContract`. An engine shared
by several gateway replicas also implements `LeasedBackend` (below).

Each method is atomic on its own and returns once its writes are durable. Times: `*_ts` epoch
seconds UTC, `*_iso` ISO-8601 UTC text.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Protocol, Sequence, runtime_checkable

from ..model import SessionEntry, TokenUsage
from .db import StoreError
from .records import (AliasRow, IntakeRow, KeptRoute, MessageRow, NewIntake, NewObligation, Obligation, RemovalPlan,
                      RetryTurn, SearchHit, SessionRow, SessionSummary, StoredMessage, TurnMarker)


class StoreBackend(Protocol):
    """What the session store's engine provides."""

    @property
    def degraded(self) -> bool:
        """True on the degraded engine (in memory, made durable by the journal)."""

    @property
    def shared(self) -> bool:
        """True when other gateway replicas write the same database (a server engine): the
        store then caches no entry and writes touch times through."""

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

    async def touch_routes(self, entries: list[SessionEntry]) -> None:
        """Write the touch time of many routes at once (the batched `updated_at` bumps of
        `get_or_create_session`, docs/behaviour.md §2): the route of each entry's key, if it
        still points at the entry's session, takes the entry's `updated_at` (in its stored
        entry and its `updated_ts`). A key whose route is gone or points at another session is
        left as it is: the touch never brings back a pruned route."""

    async def delete_routes(self, keys: list[str]) -> list[KeptRoute] | None:
        """Remove routes (pruning); their sessions are not ended. An engine shared by replicas
        keeps the keys another replica holds (`LeasedBackend`) and returns them, each with why;
        None or empty when every route went."""

    async def adoptable_session(self, session_key: str) -> SessionRow | None:
        """The most recent session of `session_key` that no route points at and that was not
        ended (or was ended as `pruned` by an older gateway), or None: what the next message on
        a pruned key re-adopts."""

    async def routes_older_than(self, cutoff_ts: float) -> list[tuple[str, bool]]:
        """`(session_key, suspended)` of routes with `updated_at` before `cutoff_ts`."""

    async def list_routes(self, since_ts: float | None) -> list[SessionEntry]:
        """Entries (optionally only those updated at/after `since_ts`), newest first."""

    async def resume_pending_routes(self) -> list[SessionEntry]:
        """Entries with `resume_pending=True`, oldest first."""

    # sessions ------------------------------------------------------------------------------

    async def session_info(self, session_id: str) -> SessionRow | None:
        """The session row, or None."""

    async def set_title(self, session_id: str, title: str | None) -> bool:
        """Set the session row's display title; False when the session does not exist."""

    async def recent_sessions(self, platform: str, limit: int) -> list[SessionSummary]:
        """Up to `limit` sessions of `platform`, most recently active first."""

    async def has_any_sessions(self) -> bool:
        """True when any session or route was ever stored."""

    async def session_had_turn(self, session_id: str) -> bool:
        """True when the session has any user message (active or rewound)."""

    # transcripts and turns -------------------------------------------------------------

    async def append_message(self, session_id: str, row: MessageRow) -> int:
        """Append one row; returns its message id."""

    async def load_messages(self, session_id: str) -> list[dict]:
        """Active rows in order as load_transcript dicts; raises TranscriptReadError on failure."""

    async def count_turns(self, session_id: str) -> int:
        """Number of active user rows."""

    async def rewrite(self, session_id: str, rows: list[MessageRow], inbound_id: int | None = None,
                      now_ts: float = 0.0, obligation: NewObligation | None = None) -> int | None:
        """Deactivate the active rows and append `rows`, all or nothing; in the same transaction,
        intake row `inbound_id` (the `/compress`'s) is finished at `now_ts` (epoch seconds), so a
        crash after the rewrite never runs the command again, and `obligation` (the command's
        answer, carrying no transcript row) is recorded in its `state`, so a crash before its
        send leaves it owed (docs/behaviour.md §6, §11). Returns the obligation's id, None
        without one."""

    async def rewind(self, session_id: str, n: int, inbound_id: int | None = None, now_ts: float = 0.0,
                     again: RetryTurn | None = None,
                     obligation: Callable[[dict], NewObligation] | None = None) -> dict | None:
        """Deactivate from the n-th last active user row on (n >= 1) and count the rewind on the
        session row (`rewind_count`), in one transaction; docs/behaviour.md §2 return value. In
        the same transaction, intake row `inbound_id` (the command's) is finished at `now_ts`,
        or, with `again` (`/retry`), the turn begins again as `begin_turn` begins one: `again.row`
        with the rewound message's text is appended, the key's turn marker set on it and intake
        row `inbound_id` made 'running' (so a crash never runs the command twice, and the retried
        message is answered by crash recovery). With `obligation` (`/undo`'s answer), the
        obligation it returns when given that return value is recorded in the same transaction
        (carrying no transcript row), and the return value also holds its id as `obligation_id`.
        None, with nothing changed, without an active user row or, with `again`, when the last
        one has no text (nothing to run again)."""

    async def begin_turn(self, session_key: str, session_id: str, row: MessageRow, started_ts: float,
                         inbound_id: int | None = None, accept: NewIntake | None = None) -> int | None:
        """Append the user row and set the key's turn marker together (and move intake row
        `inbound_id` from 'pending' to 'running'). With `accept`, the message is accepted in the
        same transaction, its intake row written 'running' at once: returns its intake id, or None
        for a duplicate of its dedupe id (then nothing is written). Without it returns
        `inbound_id`. Raises StoreError when the key has no route (nothing is written)."""

    async def resume_turn(self, session_key: str, session_id: str, started_ts: float) -> StoredMessage | None:
        """When the session's last active user row has no assistant row after it, set the key's
        turn marker on it and return it; else None (nothing changed)."""

    async def end_turn(self, session_key: str) -> None:
        """Clear the key's turn marker (no-op without one)."""

    async def turn_markers(self) -> list[TurnMarker]:
        """Every turn marker, oldest first."""

    async def reply_row_after(self, session_id: str, message_id: int | None) -> StoredMessage | None:
        """The first active assistant row after `message_id`, or None."""

    # intake (docs/behaviour.md §5) ------------------------------------------------------------

    async def intake_accept(self, platform: str, chat_id: str, message_id: str, session_key: str | None,
                            payload: str | None, now_iso: str, now_ts: float, *, done: bool = False) -> int | None:
        """Persist one inbound message (JSON `payload`) as 'pending' — or only its dedupe key
        (`done`) — in one write. Returns its intake id (increasing in arrival order), or None
        for a duplicate of `(platform, chat_id, message_id)`."""

    async def intake_finish(self, inbound_id: int, now_ts: float) -> None:
        """Mark an intake row 'done' and drop its payload (the id stays for dedupe)."""

    async def intake_open(self) -> list[IntakeRow]:
        """Rows not 'done', in arrival order."""

    async def intake_prune(self, before_ts: float) -> int:
        """Delete 'done' rows accepted before `before_ts`; returns how many."""

    async def intake_merge(self, target_id: int, payload: str, absorbed_ids: list[int], now_ts: float) -> None:
        """One atomic write: row `target_id` (still 'pending') takes `payload` (the merged event)
        and the `absorbed_ids` rows become 'done' (busy-input burst merge, docs/behaviour.md §5)."""

    # delivery ledger (docs/behaviour.md §6) ---------------------------------------------------

    async def record_reply(self, session_key: str, session_id: str, row: MessageRow | None,
                           obligation: NewObligation | None, *, before: Sequence[MessageRow] = (),
                           entry: SessionEntry | None = None, inbound_ids: Sequence[int] = (),
                           now_ts: float = 0.0) -> tuple[int | None, int | None]:
        """Append the rows `before` (user messages a steered turn took), then the assistant `row`
        (if any), record `obligation` (if any, in its `state`) carrying that row, clear the key's
        turn marker, save `entry` (the route with the turn's counters, as `save` would; None:
        leave it) and finish the intake rows `inbound_ids` at `now_ts` (epoch s) — one
        transaction, the turn's last but one commit (docs/behaviour.md §12). Returns
        `(message_id, obligation_id)`."""

    async def obligation_for_message(self, message_id: int) -> int | None:
        """The obligation carrying transcript row `message_id`, or None."""

    async def obligation_update(self, ob_id: int, state: str, now_iso: str, now_ts: float, *,
                                attempt: bool = False, error: str | None = None,
                                sent_ids: str | None = None) -> None:
        """Set an obligation's state (counting an attempt when `attempt`; `sent_ids`, a JSON
        array text, replaces the recorded platform message ids when given)."""

    async def obligations_finished(self, finished: Sequence[tuple[int, str, str | None, str | None]],
                                   now_iso: str, now_ts: float) -> list[tuple[int, Exception]]:
        """Set the final state of several obligations, each `(ob_id, state, error, sent_ids)` as
        in `obligation_update` (no attempt counted), in as few writes as the engine allows: the
        outcomes of sends recorded together (docs/behaviour.md §6, §12). Returns the obligations
        whose state could not be set, each with its error (empty when all were)."""

    async def obligation_by_sent_id(self, platform: str, sent_id: str, since_ts: float) -> tuple[int, str] | None:
        """`(id, state)` of the newest obligation to `platform` changed at or after `since_ts`
        whose `sent_ids` hold `sent_id`, or None."""

    async def obligations(self, states: tuple[str, ...]) -> list[Obligation]:
        """Obligations in `states`, oldest first."""

    async def obligations_prune(self, before_ts: float) -> int:
        """Delete delivered/abandoned obligations last changed before `before_ts`."""

    # search, mirror, meta, import, aliases -----------------------------------------------------

    async def search(self, expression: str, limit: int, offset: int, platform: str | None) -> list[SearchHit]:
        """Matches of an FTS5 expression (fts.match_expression), best first, from the `offset`-th
        on; with `platform`, only in sessions of that platform. Each hit carries its session's
        origin (the store applies owner scoping to it)."""

    async def fts_check_and_repair(self, force: bool = False) -> bool:
        """Integrity-check the full-text index, rebuild on damage (with `force`: rebuild without
        the check); True when rebuilt."""

    async def render_mirror(self) -> str:
        """The full sessions.json text."""

    async def get_meta(self, key: str) -> str | None:
        """A stored fact about the store (e.g. `mirror_signature`)."""

    async def set_meta(self, key: str, value: str) -> None:
        """Store a fact about the store."""

    async def import_entries(self, entries: Iterable[SessionEntry], replace: bool) -> tuple[int, int]:
        """Add imported entries (routes + session rows); `(imported, skipped_existing)`."""

    async def alias_rows(self) -> list[AliasRow]:
        """Every identity alias, ordered by platform then alias id."""

    async def upsert_alias(self, platform: str, alias_id: str, canonical_id: str, source: str,
                           now_iso: str) -> None:
        """Insert the alias, or point an existing `(platform, alias_id)` at `canonical_id` (source
        replaced, `last_seen` = now, `first_seen` kept)."""


# ---- admin removals (`sessions list --all`, `delete`, `erase-user`) ---------------------------


@runtime_checkable
class RemovalBackend(Protocol):
    """What an engine adds for listing every session, deleting one and erasing a person
    (docs/operations.md §5). The core's `erasure.ErasureOps` decides what goes (one engine of
    rules for every store); the engine only reads the rows it asks for and removes a
    `RemovalPlan` in one transaction. An engine without these methods refuses the three
    commands in one line."""

    async def all_sessions(self, limit: int, offset: int) -> tuple[list[tuple], int]:
        """Every session row, most recently updated first (then by id): at most `limit` tuples
        of `records.ALL_SESSION_COLUMNS` plus `current` (bool) from `offset`, and the total."""

    async def session_stored(self, session_id: str) -> bool:
        """True when a session row or any transcript row of `session_id` exists."""

    async def platform_sessions(self, platform: str) -> list[tuple[str, str | None, str | None]]:
        """`(session_id, origin JSON text, participant_id)` of every session of `platform`."""

    async def route_keys(self, session_ids: list[str]) -> list[str]:
        """The keys of the routes pointing at any of `session_ids`."""

    async def alias_ids(self, platform: str, canonical_id: str) -> list[str]:
        """The alias ids folded into `canonical_id` on `platform`."""

    async def intake_payloads(self, platform: str) -> list[tuple[int, str | None, str]]:
        """`(id, session_key, payload)` of every intake row of `platform` still holding a payload."""

    async def transcript_roles(self, session_id: str) -> list[tuple[int, str, str | None]]:
        """`(id, role, content)` of every transcript row of the session (rewound ones too), by id."""

    async def session_obligations(self, session_id: str) -> list[tuple[int, int | None, str | None]]:
        """`(id, message_id, origin JSON text)` of every delivery obligation of the session."""

    async def count_removal(self, plan: RemovalPlan) -> dict[str, int]:
        """The rows `plan` would remove per kind (`RemovalPlan.deletions` kinds and `aliases`),
        nothing changed."""

    async def apply_removal(self, plan: RemovalPlan) -> dict[str, int]:
        """Remove everything `plan` names and scrub its origins in one transaction, durable when
        it returns, leaving none of the removed text searchable; the rows removed per kind.
        Raises when the transaction fails (then nothing is removed)."""


# ---- leases (engines shared by several gateway replicas) --------------------------------------


class LeaseLostError(StoreError):
    """A write for `session_key` was refused because this replica does not hold that session's
    lease (it expired and another replica took it over, or another replica holds it): nothing
    of the write was stored. The replica must stop working on that session."""

    def __init__(self, session_key: str, message: str) -> None:
        super().__init__(message)
        self.session_key = session_key


@dataclass(frozen=True, slots=True)
class LeaseGrant:
    """A lease this replica now holds: `token` is the fencing counter every write of the
    session checks; `takeover` is True when the previous grant was never released (its holder
    crashed, stalled or was partitioned), so that session's crash recovery must run first."""

    session_key: str
    token: int
    takeover: bool
    previous_holder: str | None = None


_LEASE_SCOPE: ContextVar[dict[str, int] | None] = ContextVar("hermes_lease_scope", default=None)


@contextmanager
def lease_scope(tokens: dict[str, int] | None = None) -> Iterator[dict[str, int]]:
    """Run one unit of work (a job of the runner) under the lease tokens it first writes with.

    Inside the scope, the first write for a session key fixes the token of the lease this
    replica holds (or is granted) at that moment; every later write of the scope must carry
    that same token. So work begun under a lease this replica lost can never write again, not
    even after the replica took the session back under a new token. Yields the `{key: token}`
    map (tasks started inside the scope share it).

    Args:
        tokens: the map of a scope to continue (`scope_tokens()` of work that left a write to be
            done later, off its task); None starts a new one.
    """
    tokens = {} if tokens is None else tokens
    reset = _LEASE_SCOPE.set(tokens)
    try:
        yield tokens
    finally:
        _LEASE_SCOPE.reset(reset)


def scope_tokens() -> dict[str, int] | None:
    """The `{key: token}` map of the enclosing `lease_scope`, or None outside any."""
    return _LEASE_SCOPE.get()


@runtime_checkable
class LeasedBackend(Protocol):
    """What a shared engine adds: per-session leases with fencing (docs/architecture.md §7).

    Every write for a session key checks, in its own transaction, that this replica holds the
    key's lease with the token it was granted — inside a `lease_scope`, the token the scope
    first wrote with — raising LeaseLostError otherwise; a key never leased, or released, is
    granted in that same transaction. Lease times are the database's."""

    replica_id: str

    async def acquire_lease(self, session_key: str, *, sticky: bool = False) -> LeaseGrant | None:
        """Take (or keep) the lease of a key. None when another replica holds it live. A
        `sticky` lease (an ingress receiver's) is renewed until released, never released for
        being idle."""

    async def release_lease(self, session_key: str) -> None:
        """Give the lease up (no-op when not held)."""

    def holds_lease(self, session_key: str) -> bool:
        """True when this replica believes it holds the key's lease (writes still verify)."""

    async def orphaned_leases(self) -> list[str]:
        """Keys whose lease expired without being released (their holder crashed or stalled),
        oldest expiry first: each needs a takeover."""

    async def routes_kept(self, keys: list[str]) -> list[KeptRoute]:
        """The routes of `keys` that `delete_routes(keys)` would keep now, each with why, read
        without locking or writing anything (`sessions prune --dry-run`)."""

    async def wait_for_intake(self, timeout_s: float) -> list[str]:
        """Wait up to `timeout_s` seconds for hints that other replicas accepted input (the
        session keys hinted); an empty list means "poll now" — hints may be lost."""
