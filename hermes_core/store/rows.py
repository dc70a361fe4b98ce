"""Transcript message validation and the stored row shape (seed §3)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Callable, Iterable, Sequence

from ..model import format_timestamp, parse_timestamp
from ..model.limits import INT64_MAX, INT64_MIN
from ..model.message import REASONING_KEYS
from .records import MessageRow

ROLES = ("user", "assistant", "system", "tool")
# Optional message keys, in the order they are returned by load_transcript.
OPTIONAL_KEYS = ("platform_message_id", "tool_call_id", "tool_name", "tool_calls")
# The stored columns `row_to_message` reads, in the order the stores select them.
MESSAGE_COLUMNS = ("role", "content", "timestamp", *OPTIONAL_KEYS, "reasoning")


class TranscriptReadError(Exception):
    """A transcript could not be read (I/O or database failure). Never answered with `[]`."""


def unstorable(fields: Mapping[str, Any], what: str) -> str | None:
    """Why the store cannot take a record read from a file it did not write (an older gateway's
    sessions.json entry, a legacy transcript's message; docs/operations.md §5), or None.

    Checked before the record reaches the store, so that one such record is skipped and reported
    on its own rather than failing the transaction that holds the others: the database's own
    error (UTF-8 encoding, SQLite's "int too large") names neither the file nor the record.

    Args:
        fields: the record as stored, `{field name: value}`; values are text, numbers, None or
            JSON-like dicts and lists (walked, keys included).
        what: how the answer names the record (`session entry`, `transcript message`).
    Returns:
        `<what> field '<name>' holds a lone surrogate ('\\ud800'), which the store cannot take`
        (text that is not valid Unicode: UTF-8 cannot encode it), `… holds a NUL character
        (U+0000), which …` (PostgreSQL's text cannot hold it), or `… holds an integer beyond
        64 bits, which …` (outside `INT64_MIN`..`INT64_MAX`), for the first such value; None
        when every value can be stored.
    """
    for name, value in fields.items():
        problem = _unstorable_value(value)
        if problem is not None:
            return f"{what} field {name!r} holds {problem}, which the store cannot take"
    return None


def _unstorable_value(value: Any) -> str | None:
    """`unstorable`'s check of one value: what it holds that the store cannot take, or None."""
    if isinstance(value, str):
        if "\x00" in value:
            # PostgreSQL's text cannot hold it. Skipped on every engine (a record is stored alike
            # everywhere) rather than turned into U+FFFD as `model.text.clean_text` turns the
            # gateway's own text: a key or id so changed would no longer be the one the older
            # gateway's chat has, and a skipped record is named and can be mended and imported.
            return "a NUL character (U+0000)"
        if value.isascii():
            return None
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return f"a lone surrogate ({exc.object[exc.start]!a})"
        return None
    if isinstance(value, int):
        return None if INT64_MIN <= value <= INT64_MAX else "an integer beyond 64 bits"
    if isinstance(value, Mapping):
        value = [item for pair in value.items() for item in pair]
    if isinstance(value, (list, tuple)):
        for item in value:
            problem = _unstorable_value(item)
            if problem is not None:
                return problem
    return None


def normalize_message(message: Mapping[str, Any] | MessageRow, now: Callable[[], datetime]) -> MessageRow:
    """Validate one transcript message and return its storable row.

    Args:
        message: a MessageRow (already validated: returned as it is, so a caller that needs the
            row itself normalises once and hands the row to the store), or
            `{"role": "user"|"assistant"|"system"|"tool", "content": str | None,
            optional "timestamp" (ISO-8601 text, epoch seconds or datetime; default now),
            "platform_message_id", "tool_call_id", "tool_name", "tool_calls" (a list), and the
            reasoning fields `REASONING_KEYS` (any JSON value)}`.
        now: the store's clock (aware UTC).

    Returns:
        The MessageRow (timestamp as ISO UTC text, `tool_calls` and `reasoning` as JSON text or None).

    Raises:
        ValueError: not a mapping, unknown role, non-text content, bad timestamp, non-list
            tool_calls or a reasoning field that is not JSON (the message names the field).
    """
    if isinstance(message, MessageRow):
        return message
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
    ids = {}
    for key in ("platform_message_id", "tool_call_id", "tool_name"):
        value = message.get(key)
        ids[key] = None if value is None or value == "" else str(value)
    reasoning = {key: message[key] for key in REASONING_KEYS if message.get(key) is not None}
    try:
        reasoning_json = json.dumps(reasoning, ensure_ascii=False) if reasoning else None
    except (TypeError, ValueError) as exc:
        raise ValueError(f"transcript message reasoning fields are not JSON-serialisable: {exc}") from None
    return MessageRow(role=role, content=content, timestamp=format_timestamp(stamp), tool_calls=tool_calls,
                      reasoning=reasoning_json, **ids)


def row_to_message(row: Mapping[str, Any] | MessageRow | Sequence[Any]) -> dict[str, Any]:
    """Stored row → the dict load_transcript returns (see `messages_from_values`).

    Args:
        row: a MessageRow, a mapping with the `MESSAGE_COLUMNS` names, or a sequence of them in
            that order.
    Raises:
        TranscriptReadError: stored tool_calls or reasoning fields are not JSON.
    """
    if isinstance(row, MessageRow):
        values: Sequence[Any] = [getattr(row, name) for name in MESSAGE_COLUMNS]
    elif isinstance(row, Mapping):
        values = [row[name] for name in MESSAGE_COLUMNS]
    else:
        values = row
    return messages_from_values((values,))[0]


def messages_from_values(rows: Iterable[Sequence[Any]]) -> list[dict[str, Any]]:
    """Stored rows → the dicts load_transcript returns: role, content, timestamp, then the
    optional keys that are set (`tool_calls` parsed back into a list), then the reasoning fields
    that were stored (`REASONING_KEYS` order).

    One loop over plain value sequences, without a type check per row: this is what a reload
    after an eviction costs per message (docs/behaviour.md §8), so it stays lean. JSON is parsed
    only where something is stored (`tool_calls` / `reasoning` not NULL).

    Args:
        rows: sequences of the `MESSAGE_COLUMNS` values in that order (tuples or `sqlite3.Row`s
            of a query selecting them so; a `tool_calls` value may already be a list, as
            server engines decode JSON columns themselves).
    Raises:
        TranscriptReadError: stored tool_calls or reasoning fields are not JSON.
    """
    out = []
    for role, content, timestamp, platform_message_id, tool_call_id, tool_name, tool_calls, stored in rows:
        message = {"role": role, "content": content, "timestamp": timestamp}
        if platform_message_id is not None:
            message["platform_message_id"] = platform_message_id
        if tool_call_id is not None:
            message["tool_call_id"] = tool_call_id
        if tool_name is not None:
            message["tool_name"] = tool_name
        if tool_calls is not None:
            try:
                message["tool_calls"] = json.loads(tool_calls) if isinstance(tool_calls, str) else tool_calls
            except json.JSONDecodeError as exc:
                raise TranscriptReadError(f"stored tool_calls are not JSON: {exc}") from None
        if stored:
            try:
                reasoning = json.loads(stored)
            except json.JSONDecodeError as exc:
                raise TranscriptReadError(f"stored reasoning fields are not JSON: {exc}") from None
            message.update((key, reasoning[key]) for key in REASONING_KEYS if key in reasoning)
        out.append(message)
    return out
