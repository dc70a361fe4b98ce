"""Transcript message validation and the row shape shared by both backends (seed §3)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Callable, Mapping

from ..model import format_timestamp, parse_timestamp

ROLES = ("user", "assistant", "system", "tool")
# Optional message keys, in the order they are returned by load_transcript.
OPTIONAL_KEYS = ("platform_message_id", "tool_call_id", "tool_name", "tool_calls")


class TranscriptReadError(Exception):
    """A transcript could not be read (I/O or database failure). Never answered with `[]`."""


def normalize_message(message: Mapping[str, Any], now: Callable[[], datetime]) -> dict[str, Any]:
    """Validate one transcript message and return its storable row.

    Args:
        message: `{"role": "user"|"assistant"|"system"|"tool", "content": str | None,
            optional "timestamp" (ISO-8601 text, epoch seconds or datetime; default now),
            "platform_message_id", "tool_call_id", "tool_name", "tool_calls" (a list)}`.
        now: the store's clock (aware UTC).

    Returns:
        `{"role", "content", "timestamp" (ISO UTC), "platform_message_id", "tool_call_id",
        "tool_name", "tool_calls" (JSON text or None)}`.

    Raises:
        ValueError: not a mapping, unknown role, non-text content, bad timestamp or non-list
            tool_calls (the message names the field).
    """
    if not isinstance(message, Mapping):
        raise ValueError(f"transcript message must be a dict, got {type(message).__name__}")
    role = message.get("role")
    if role not in ROLES:
        raise ValueError(f"transcript message field 'role' must be one of {', '.join(ROLES)}; got {role!r}")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise ValueError(f"transcript message field 'content' must be text, got {type(content).__name__}")
    try:
        stamp = parse_timestamp(message.get("timestamp")) or now()
    except (TypeError, ValueError) as exc:
        raise ValueError(f"transcript message field 'timestamp' is not a timestamp: {exc}") from None
    tool_calls = message.get("tool_calls")
    if tool_calls is not None:
        if not isinstance(tool_calls, list):
            raise ValueError("transcript message field 'tool_calls' must be a list")
        try:
            tool_calls = json.dumps(tool_calls, ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"transcript message field 'tool_calls' is not JSON-serialisable: {exc}") from None
    row = {"role": role, "content": content, "timestamp": format_timestamp(stamp), "tool_calls": tool_calls}
    for key in ("platform_message_id", "tool_call_id", "tool_name"):
        value = message.get(key)
        row[key] = None if value is None or value == "" else str(value)
    return row


def row_to_message(row: Mapping[str, Any]) -> dict[str, Any]:
    """Stored row → the dict load_transcript returns: role, content, timestamp, then the optional
    keys that are set (`tool_calls` parsed back into a list)."""
    out = {"role": row["role"], "content": row["content"], "timestamp": row["timestamp"]}
    for key in OPTIONAL_KEYS:
        value = row[key]
        if value is None:
            continue
        if key == "tool_calls":
            try:
                value = json.loads(value) if isinstance(value, str) else value
            except json.JSONDecodeError as exc:
                raise TranscriptReadError(f"stored tool_calls are not JSON: {exc}") from None
        out[key] = value
    return out


def jsonl_message_rows(text: str, on_bad_line: Callable[[int, ValueError], None]) -> list[dict[str, Any]]:
    """Parse a `{session_id}.jsonl` transcript (one JSON message object per line).

    Blank lines are passed over; a line that is not a JSON object with a `role` is reported to
    `on_bad_line(line_number, error)` (1-based) and skipped, so one bad line loses nothing else.
    """
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row, dict) or "role" not in row:
                raise ValueError("not a message object")
        except ValueError as exc:
            on_bad_line(number, exc)
            continue
        rows.append(row)
    return rows
