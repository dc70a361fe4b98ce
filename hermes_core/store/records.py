"""Typed records exchanged between the session store and its engine (`backend.StoreBackend`).

Times: `*_ts` are epoch seconds (UTC), `*_iso` / `*_at` ISO-8601 UTC text. Ids are the engine's
integer row ids. The public `SessionStore` API keeps handing out plain dicts (`as_dict()`), the
shape its callers and the admin CLI's `--json` output use.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class MessageRow:
    """One transcript message ready to store (`rows.normalize_message`): `tool_calls` and
    `reasoning` (the reasoning fields as one object) are JSON text or None; empty optional ids
    are None."""

    role: str
    content: str | None
    timestamp: str
    platform_message_id: str | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    tool_calls: str | None = None
    reasoning: str | None = None


@dataclass(frozen=True, slots=True)
class RetryTurn:
    """`/retry`'s turn, begun again in the transaction of its rewind (`StoreBackend.rewind`,
    docs/behaviour.md §11): the key whose turn marker is set, the user row to append (its
    `content` becomes the rewound message's text) and the marker's start time (epoch seconds)."""

    session_key: str
    row: MessageRow
    started_ts: float


@dataclass(frozen=True, slots=True)
class SessionSummary:
    """One line of a `/resume` listing: the session, its origin (JSON text), title, last
    activity (ISO UTC: its newest active message, else its creation), active message count and
    first active user message."""

    session_id: str
    origin: str | None
    title: str | None
    last_activity: str
    message_count: int
    first_user_text: str | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class KeptRoute:
    """A route an engine shared by replicas did not prune: its session key and why (another
    replica holds its lease, docs/architecture.md §7)."""

    session_key: str
    reason: str


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A stored transcript row as recovery needs it: its id, text and platform message id."""

    id: int
    content: str | None
    platform_message_id: str | None = None


@dataclass(frozen=True, slots=True)
class TurnMarker:
    """A turn in flight (docs/behaviour.md §6): set with the user message `message_id`."""

    session_key: str
    session_id: str
    message_id: int | None
    started_ts: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class IntakeRow:
    """An intake row not finished yet: `payload` is the event's JSON text; `state` is
    'pending' or 'running' (docs/behaviour.md §5)."""

    id: int
    session_key: str | None
    payload: str | None
    state: str


@dataclass(frozen=True, slots=True)
class NewIntake:
    """An inbound message to accept (docs/behaviour.md §5): its dedupe id `(platform, chat_id,
    message_id)`, the session key it is routed to, the event's JSON text and when it was
    accepted (ISO-8601 UTC text and epoch seconds)."""

    platform: str
    chat_id: str
    message_id: str
    session_key: str | None
    payload: str
    accepted_at: str
    accepted_ts: float


@dataclass(frozen=True, slots=True)
class NewObligation:
    """A delivery obligation to record (docs/behaviour.md §6): `origin` is the chat's
    SessionSource as JSON text; `message_id` the transcript row it carries (when it is not the
    reply recorded in the same call); `state` / `attempts` 'pending' / 0, or 'attempting' / 1 for
    a reply whose send starts as soon as it is recorded (the live path)."""

    session_key: str
    session_id: str
    origin: str | None
    content: str
    internal: bool
    reply_to: str | None
    now_iso: str
    now_ts: float
    message_id: int | None = None
    state: str = "pending"
    attempts: int = 0


@dataclass(frozen=True, slots=True)
class Obligation:
    """A stored delivery obligation (the `delivery_obligations` row; `origin` JSON text)."""

    id: int
    session_key: str | None
    session_id: str | None
    origin: str | None
    content: str
    state: str
    attempts: int
    internal: bool
    last_error: str | None
    message_id: int | None
    reply_to: str | None
    created_ts: float | None
    updated_ts: float | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One full-text match: the session, the message row, a snippet with `[` `]` marks, and the
    session's origin (JSON text, for owner scoping; not part of `as_dict`)."""

    session_id: str
    message_id: int
    snippet: str
    origin: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "message_id": self.message_id, "snippet": self.snippet}


@dataclass(frozen=True, slots=True)
class AliasRow:
    """A stored identity alias (docs/behaviour.md §4)."""

    platform: str
    alias_id: str
    canonical_id: str
    source: str
    first_seen: str
    last_seen: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class SessionRow:
    """A `sessions` row (one session id: origin JSON, key, counters, end)."""

    session_id: str
    session_key: str
    origin: str | None
    platform: str | None
    chat_id: str | None
    participant_id: str | None
    chat_type: str | None
    display_name: str | None
    created_at: str
    updated_at: str
    ended_at: str | None
    end_reason: str | None
    parent_session_id: str | None
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    total_tokens: int
    estimated_cost_usd: float
    cost_status: str
    title: str | None = None
    rewind_count: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# The columns of `RemovalBackend.all_sessions` rows, in order (`sessions list --all`), then
# `current` (a route points at the session).
ALL_SESSION_COLUMNS = ("session_id", "session_key", "title", "platform", "chat_type", "display_name", "created_at",
                       "updated_at", "ended_at", "end_reason", "total_tokens")


@dataclass
class RemovalPlan:
    """The rows one deletion or erasure removes (docs/operations.md §5), found by the core's
    `erasure.ErasureOps` before the engine removes them in one transaction
    (`RemovalBackend.apply_removal`).

    `sessions` are deleted whole (rows, transcripts, obligations); `keys` are the routes (and
    their intake rows and turn markers) that go with them; `messages`, `intake` and
    `obligations` are single rows by id (a person's turns in a shared session); `scrub` maps a
    shared session to its stored origin with the person's ids and name removed (JSON text),
    written to the session row (`participant_id` cleared) and its route's entry; `aliases`
    is `(platform, ids)`: every identity alias naming one of `ids`, as alias or canonical id.
    """

    sessions: list[str] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    messages: list[int] = field(default_factory=list)
    intake: list[int] = field(default_factory=list)
    obligations: list[int] = field(default_factory=list)
    scrub: dict[str, str] = field(default_factory=dict)
    aliases: tuple[str, set[str]] | None = None

    def deletions(self) -> list[tuple[str, str, str, list]]:
        """`(kind, table, column, values)`: each DELETE of the plan is `column IN values` (the
        aliases' apart), in the order both engines run them; `kind` is the report's count."""
        return [
            ("messages", "messages", "session_id", list(self.sessions)),
            ("messages", "messages", "id", list(self.messages)),
            ("obligations", "delivery_obligations", "session_id", list(self.sessions)),
            ("obligations", "delivery_obligations", "id", list(self.obligations)),
            ("sessions", "sessions", "session_id", list(self.sessions)),
            ("routes", "routes", "session_key", list(self.keys)),
            ("intake", "inbound", "session_key", list(self.keys)),
            ("intake", "inbound", "id", list(self.intake)),
        ]


@dataclass(frozen=True, slots=True)
class SentOutcome:
    """The outcome of one send, to record on its obligation (`finish_deliveries`): delivered or
    failed with `error`, and the platform message ids of the chunks that went out (None entries
    skipped)."""

    obligation_id: int
    delivered: bool
    error: str | None = None
    sent_ids: tuple[str | None, ...] = ()


@dataclass(frozen=True, slots=True)
class ReportMatch:
    """The obligation a platform's delivery report found (`SessionStore.settle_sent_message`,
    docs/behaviour.md §6 "Delivery reports"): its id, and whether the report changed its state
    (False: already in that state, a confirmation after a failure, or 'abandoned')."""

    obligation_id: int
    changed: bool
