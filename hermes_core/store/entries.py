"""Small helpers on SessionEntry used by the store: rebuilding an entry from a
`sessions` row (seed §2 fields)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ..model import SessionEntry, SessionSource, parse_timestamp, utc_now

def parse_or_none(value: Any) -> datetime | None:
    """parse_timestamp, but None for a malformed value (rows written by other tools)."""
    try:
        return parse_timestamp(value)
    except (TypeError, ValueError):
        return None


def origin_or_none(text: str | None) -> SessionSource | None:
    """The SessionSource stored as JSON text with a session or an obligation (`origin`), or None
    when absent or unreadable (rows written by other tools)."""
    if not text:
        return None
    try:
        return SessionSource.from_dict(json.loads(text))
    except (TypeError, ValueError):
        return None


def entry_from_session_row(info: Mapping[str, Any]) -> SessionEntry:
    """An entry rebuilt from a `sessions` row (a session no route points at any more)."""
    origin = origin_or_none(info.get("origin"))
    created = parse_or_none(info.get("created_at")) or utc_now()
    return SessionEntry(
        session_key=info["session_key"], session_id=info["session_id"], created_at=created,
        updated_at=parse_or_none(info.get("updated_at")) or created, origin=origin,
        display_name=info.get("display_name"), platform=info.get("platform"),
        chat_type=info.get("chat_type") or "dm",
        input_tokens=int(info.get("input_tokens") or 0), output_tokens=int(info.get("output_tokens") or 0),
        cache_read_tokens=int(info.get("cache_read_tokens") or 0),
        cache_write_tokens=int(info.get("cache_write_tokens") or 0),
        total_tokens=int(info.get("total_tokens") or 0),
        estimated_cost_usd=float(info.get("estimated_cost_usd") or 0.0),
        cost_status=info.get("cost_status") or "unknown")

