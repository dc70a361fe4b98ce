"""SessionEntry: the record that maps a session key to its current session id (seed §2)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from typing import Any, Mapping

from .source import SessionSource
from .timeutil import format_timestamp, parse_timestamp

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

    def to_dict(self) -> dict[str, Any]:
        """Serialise for sessions.json: datetimes as ISO-8601 UTC, origin via `SessionSource.to_dict`."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in _DATETIME_FIELDS:
            out[name] = format_timestamp(out[name])
        out["origin"] = self.origin.to_dict() if self.origin else None
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "SessionEntry":
        """Rebuild an entry; unknown (legacy) keys are ignored, naive times are read as local time.

        Raises:
            ValueError: `session_key`, `session_id` or `created_at` is missing or malformed
                (the message names the field).
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"session entry must be a JSON object, got {type(data).__name__}")
        for required in ("session_key", "session_id", "created_at"):
            if not data.get(required):
                raise ValueError(f"session entry field {required!r} is missing")
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        for name in _DATETIME_FIELDS:
            try:
                kwargs[name] = parse_timestamp(kwargs.get(name))
            except (TypeError, ValueError) as exc:
                raise ValueError(f"session entry field {name!r} is not a timestamp: {exc}") from None
        kwargs["updated_at"] = kwargs["updated_at"] or kwargs["created_at"]
        origin = kwargs.get("origin")
        kwargs["origin"] = SessionSource.from_dict(origin) if origin else None
        if kwargs.get("platform") is None and kwargs["origin"] is not None:
            kwargs["platform"] = kwargs["origin"].platform
        return cls(**kwargs)

    def copy(self) -> "SessionEntry":
        """Return an independent copy (callers may mutate it without touching the store)."""
        return SessionEntry(**{f.name: getattr(self, f.name) for f in fields(self)})
