"""Time helpers: every timestamp in hermes_core is timezone-aware UTC (docs/behaviour.md §0).

Naive timestamps found in old files are read as *host local time* and converted to UTC, as the
seed's §7 says for markers written by older builds.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Callable

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    """Return the current time as an aware UTC datetime."""
    return datetime.now(timezone.utc)


def parse_timestamp(value: str | float | int | datetime | None) -> datetime | None:
    """Parse an ISO-8601 string, epoch seconds or datetime into an aware UTC datetime.

    Args:
        value: ISO-8601 text (with or without offset), epoch seconds, a datetime, or None.

    Returns:
        An aware UTC datetime, or None when `value` is None or empty.

    Raises:
        ValueError: `value` is a string that is not ISO-8601.
    """
    if value is None or value == "":
        return None
    if isinstance(value, datetime) and value.tzinfo is timezone.utc:
        return value  # already what every timestamp here is (the common case: a clock's reading)
    if isinstance(value, datetime):
        dt = value
    elif isinstance(value, (int, float)):
        return datetime.fromtimestamp(float(value), timezone.utc)
    else:
        dt = datetime.fromisoformat(str(value))
    if dt.tzinfo is None:
        # Old builds wrote host-local naive times: astimezone() interprets them as local.
        dt = dt.astimezone()
    return dt.astimezone(timezone.utc)


def format_timestamp(value: str | float | int | datetime | None) -> str | None:
    """Format a time as ISO-8601 UTC with offset (`2026-01-02T03:04:05.000006+00:00`): an aware
    datetime, or anything `parse_timestamp` reads (a naive datetime as host local time, ISO text,
    epoch seconds). None → None.

    Raises:
        ValueError: `value` is a string that is not ISO-8601.
    """
    if value is None:
        return None
    if getattr(value, "tzinfo", None) is not timezone.utc:  # the common case, a UTC clock's reading, skips this
        value = parse_timestamp(value)
    return value.isoformat()
