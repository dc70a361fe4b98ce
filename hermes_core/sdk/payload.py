"""Typed access to the fields of a platform payload (docs/plugins.md "Mapping"; docs/adapters.md §0.5).

Each reader takes the containing object, the key and the dotted path of that object, and raises
`MalformedPayload(path.key, problem)` naming the field, never its value (values are message text,
phone numbers). One copy for every plugin's mapping function.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import MalformedPayload


def type_name(value: Any) -> str:
    """The JSON-ish name a problem message gives a wrong value (`int`, `str`, `list`)."""
    return type(value).__name__


def field_object(data: Mapping, key: str, path: str, *, required: bool = False) -> dict | None:
    """`data[key]` as an object; None when absent or null.

    Raises:
        MalformedPayload: not an object ("must be an object, got int"), or absent when `required`.
    """
    value = data.get(key)
    if value is None:
        if required:
            raise MalformedPayload(f"{path}.{key}", "is missing")
        return None
    if not isinstance(value, dict):
        raise MalformedPayload(f"{path}.{key}", f"must be an object, got {type_name(value)}")
    return value


def field_list(data: Mapping, key: str, path: str) -> list:
    """`data[key]` as a list; `[]` when absent or null.

    Raises:
        MalformedPayload: not a list ("must be a list, got dict").
    """
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise MalformedPayload(f"{path}.{key}", f"must be a list, got {type_name(value)}")
    return value
