"""Typed access to the fields of a platform payload (docs/plugins.md "Mapping"; docs/adapters.md §0.5).

Each reader takes the containing object, the key and the dotted path of that object, and raises
`MalformedPayload(path.key, problem)` naming the field, never its value (values are message text,
phone numbers). One copy for every plugin's mapping function; a plugin keeps only the readers
of its platform's own formats (snowflakes, Slack ts, protobuf Longs).

Strings come in two kinds: free text (names, bodies, captions), in which a lone surrogate becomes
U+FFFD so one bad character never loses a message (docs/behaviour.md §7), and ids, which become
session keys, database rows and send targets and so must be valid Unicode as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..model.text import clean_text
from .errors import MalformedPayload


def type_name(value: Any) -> str:
    """The JSON-ish name a problem message gives a wrong value (`int`, `str`, `list`)."""
    return type(value).__name__


def _present(data: Mapping, key: str, path: str, required: bool, kind: type, described: str) -> Any:
    """`data[key]` when it is set and of `kind` (booleans are no `int`); None when absent or null.

    Raises:
        MalformedPayload: of another type ("must be <described>, got str"), or absent when
            `required` ("is missing").
    """
    value = data.get(key)
    if value is None:
        if required:
            raise MalformedPayload(f"{path}.{key}", "is missing")
        return None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise MalformedPayload(f"{path}.{key}", f"must be {described}, got {type_name(value)}")
    return value


def field_object(data: Mapping, key: str, path: str, *, required: bool = False) -> dict | None:
    """`data[key]` as an object; None when absent or null.

    Raises:
        MalformedPayload: not an object ("must be an object, got int"), or absent when `required`.
    """
    return _present(data, key, path, required, dict, "an object")


def field_list(data: Mapping, key: str, path: str) -> list:
    """`data[key]` as a list; `[]` when absent or null.

    Raises:
        MalformedPayload: not a list ("must be a list, got dict").
    """
    value = _present(data, key, path, False, list, "a list")
    return [] if value is None else value


def field_int(data: Mapping, key: str, path: str, *, required: bool = False, low: int | None = None,
              high: int | None = None) -> int | None:
    """`data[key]` as an integer within `low..high` (each bound optional); None when absent or
    null. Booleans are refused: JSON `true` is not a count or a timestamp.

    Raises:
        MalformedPayload: not an integer ("must be an integer, got str"), outside the bounds
            ("is out of range (0..100)"), or absent when `required`.
    """
    value = _present(data, key, path, required, int, "an integer")
    if value is None:
        return None
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f"{'' if low is None else low}..{'' if high is None else high}"
        raise MalformedPayload(f"{path}.{key}", f"is out of range ({bounds})")
    return value


def field_bool(data: Mapping, key: str, path: str) -> bool:
    """`data[key]` as a boolean; False when absent or null.

    Raises:
        MalformedPayload: not a boolean ("must be a boolean, got int").
    """
    return _present(data, key, path, False, bool, "a boolean") is True


def field_text(data: Mapping, key: str, path: str, *, required: bool = False) -> str | None:
    """`data[key]` as free text (a name, a body, a caption): lone surrogates become U+FFFD and a
    surrogate pair split in two is joined (`model.text.clean_text`); None when absent or null.

    Raises:
        MalformedPayload: not a string ("must be a string, got int"), or absent when `required`.
    """
    value = _present(data, key, path, required, str, "a string")
    return clean_text(value) if value else value


def field_id(data: Mapping, key: str, path: str, *, required: bool = False,
             max_length: int | None = None) -> str | None:
    """`data[key]` as an id: a string of valid Unicode, surrounding whitespace removed; None when
    absent, null or blank. Numbers are refused: ids are strings on the wire, and one sent as a
    number has lost a leading `+` or zero, or its precision.

    Args:
        max_length: the longest id accepted, in characters (None: no limit); anything longer is
            garbage, not an id.

    Raises:
        MalformedPayload: not a string, not valid Unicode ("is not valid Unicode (lone
            surrogate)"), longer than `max_length`, or absent ("is missing") or blank ("is empty")
            when `required`.
    """
    value = _present(data, key, path, required, str, "a string")
    if value is None:
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise MalformedPayload(f"{path}.{key}", "is not valid Unicode (lone surrogate)") from None
    value = value.strip()
    if not value:
        if required:
            raise MalformedPayload(f"{path}.{key}", "is empty")
        return None
    if max_length is not None and len(value) > max_length:
        raise MalformedPayload(f"{path}.{key}", f"is longer than {max_length} characters")
    return value
