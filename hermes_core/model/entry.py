"""SessionEntry: the record that maps a session key to its current session id (seed §2)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .ids import validate_session_id
from .source import SessionSource
from .timeutil import format_timestamp, parse_timestamp, utc_now

if TYPE_CHECKING:
    from .usage import TokenUsage

log = logging.getLogger(__name__)

_DATETIME_FIELDS = ("created_at", "updated_at", "last_resume_marked_at")

# The seed's `_AUTO_RESUME_REASONS` (§7): why an entry was marked `resume_pending`. A turn cut off
# by a restart drain, a shutdown drain or a crash resumes once at start-up.
AUTO_RESUME_REASONS = frozenset({"restart_timeout", "shutdown_timeout", "restart_interrupted"})


@dataclass(slots=True)
class SessionEntry:
    """Per-session metadata (seed §2): key → id, origin, token/cost counters and the state-machine
    flags `suspended`, `resume_pending`, `is_fresh_reset`, `was_auto_reset`.

    Times are aware UTC datetimes. Token counters are in tokens; `estimated_cost_usd` in USD.
    """

    session_key: str
    session_id: str
    created_at: datetime
    updated_at: datetime
    origin: SessionSource | None = None
    display_name: str | None = None
    platform: str | None = None
    chat_type: str = "dm"
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    total_tokens: int = 0
    estimated_cost_usd: float = 0.0
    cost_status: str = "unknown"
    last_prompt_tokens: int = 0
    # State machine (seed §2 "boolean flags").
    was_auto_reset: bool = False
    auto_reset_reason: str | None = None
    reset_had_activity: bool = False
    is_fresh_reset: bool = False
    expiry_finalized: bool = False
    suspended: bool = False
    resume_pending: bool = False
    resume_reason: str | None = None
    last_resume_marked_at: datetime | None = None
    # Why `suspended` was set: "stop" (`/stop`) or "stuck_loop" (3+ restarts, docs/behaviour.md §6).
    suspend_reason: str | None = None
    # A one-shot notice owed to the chat at its next message ("stuck_loop": the session that
    # message replaces was suspended by the stuck-loop rule); cleared once told.
    pending_notice: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Serialise for sessions.json: datetimes as ISO-8601 UTC, origin via `SessionSource.to_dict`."""
        out = {name: getattr(self, name) for name in _FIELD_NAMES}
        for name in _DATETIME_FIELDS:
            out[name] = format_timestamp(out[name])
        out["origin"] = self.origin.to_dict() if self.origin else None
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "SessionEntry":
        """Rebuild an entry, leniently per field (docs/behaviour.md §2): a malformed optional field
        (a bad `last_resume_marked_at`, a flag that is not a boolean, a counter that is not a
        number, an unreadable origin) takes its default and is logged as a warning naming the
        field, so one damaged field never costs the entry and its route. A missing or bad
        `created_at` falls back to `updated_at` (then to now). Unknown (legacy) keys are
        ignored; naive times are read as local time.

        Raises:
            ValueError: `data` is not a mapping, or `session_key` / `session_id` is missing or
                not a path-safe string (the message names the field).
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"session entry must be a JSON object, got {type(data).__name__}")
        key = data.get("session_key")
        if not key or not isinstance(key, str):
            raise ValueError("session entry field 'session_key' is missing")
        sid = data.get("session_id")
        if not sid:
            raise ValueError("session entry field 'session_id' is missing")
        try:
            validate_session_id(sid)
        except ValueError as exc:
            raise ValueError(f"session entry field 'session_id' is invalid: {exc}") from None
        kwargs: dict[str, Any] = {"session_key": key, "session_id": sid}
        bad: list[str] = []
        for f in fields(cls):
            if f.name in kwargs or f.name not in data or f.name == "origin":
                continue
            value = _field_value(f.name, f.type, data[f.name])
            if value is _BAD:
                bad.append(f.name)
            else:
                kwargs[f.name] = value
        origin = data.get("origin")
        if origin:
            try:
                kwargs["origin"] = SessionSource.from_dict(origin)
            except (ValueError, TypeError):
                bad.append("origin")
        created = kwargs.get("created_at") or kwargs.get("updated_at")
        if created is None:
            created = utc_now()
            if "created_at" not in bad:
                bad.append("created_at")
        kwargs["created_at"] = created
        kwargs["updated_at"] = kwargs.get("updated_at") or created
        if kwargs.get("platform") is None and kwargs.get("origin") is not None:
            kwargs["platform"] = kwargs["origin"].platform
        if bad:
            log.warning("session entry %r: malformed field(s) %s replaced by their defaults",
                        key, ", ".join(repr(name) for name in bad))
        return cls(**kwargs)

    def add_usage(self, usage: "TokenUsage | None", last_prompt_tokens: int | None = None) -> None:
        """Count one turn (seed §3 `update_session`): `last_prompt_tokens` recorded, `usage` added
        to the token and cost counters (`cost_status` takes the usage's unless it is "unknown")."""
        if last_prompt_tokens is not None:
            self.last_prompt_tokens = int(last_prompt_tokens)
        if usage is None:
            return
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.cache_read_tokens += usage.cache_read_tokens
        self.cache_write_tokens += usage.cache_write_tokens
        self.total_tokens += usage.total_tokens
        self.estimated_cost_usd += usage.estimated_cost_usd
        if usage.cost_status != "unknown":
            self.cost_status = usage.cost_status

    def copy(self) -> "SessionEntry":
        """Return an independent copy (callers may mutate it without touching the store): field
        by field, without `__init__`, since the store hands out one per message."""
        new = object.__new__(SessionEntry)
        for name in _FIELD_NAMES:
            setattr(new, name, getattr(self, name))
        return new


# Read on every reply (the stored entry JSON): computed once, not by `fields()` per call.
_FIELD_NAMES = tuple(f.name for f in fields(SessionEntry))
_BAD = object()


def _field_value(name: str, annotation: str, value: Any) -> Any:
    """`value` checked against a field's declared type; `_BAD` when it does not fit."""
    if name in _DATETIME_FIELDS:
        try:
            return parse_timestamp(value)
        except (TypeError, ValueError, OverflowError, OSError):
            return _BAD
    if value is None:
        return None if "None" in annotation else _BAD
    if annotation == "bool":
        return value if isinstance(value, bool) else _BAD
    if annotation == "int":
        return value if isinstance(value, int) and not isinstance(value, bool) else _BAD
    if annotation == "float":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return float(value) if ok else _BAD
    if annotation.startswith("str"):
        return value if isinstance(value, str) else _BAD
    return value
