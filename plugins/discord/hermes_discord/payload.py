"""Typed reads of Discord JSON payloads that name the offending field (docs/adapters.md §2.4 D-T8).

Discord sends snowflakes as strings of decimal digits (JavaScript-safe); they are kept as strings
everywhere (keys, SessionSource ids). A read that finds a missing field, a wrong type, a snowflake
that is not a 64-bit unsigned number, or a string with a lone surrogate raises
`MalformedPayload` with the dotted path of the field (`"d.author.id"`), so the adapter can log
exactly what was wrong and skip the payload. Error texts name the field, never its value
(values may be message text).
"""

from __future__ import annotations

from typing import Any, Mapping

from hermes_core.sdk import MalformedPayload, field_bool, field_int, field_list, field_object, type_name

SNOWFLAKE_MAX = 2**64 - 1

__all__ = ["MalformedPayload", "SNOWFLAKE_MAX", "array", "boolean", "integer", "obj", "snowflake",
           "snowflake_value", "string"]


def _check_text(value: str, path: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise MalformedPayload(path, "contains a lone surrogate") from None
    return value


def obj(data: Mapping, key: str, path: str, *, required: bool = True) -> dict | None:
    """`data[key]` as a dict: the SDK's `field_object`, required unless told otherwise."""
    return field_object(data, key, path, required=required)


def snowflake(data: Mapping, key: str, path: str, *, required: bool = True) -> str | None:
    """`data[key]` as a snowflake string (decimal digits, at most 2**64 - 1)."""
    value = data.get(key)
    if value is None:
        if required:
            raise MalformedPayload(f"{path}.{key}", "is missing")
        return None
    return snowflake_value(value, f"{path}.{key}")


def snowflake_value(value: Any, path: str) -> str:
    """Check one snowflake value (see `snowflake`)."""
    if not isinstance(value, str):
        raise MalformedPayload(path, f"must be a snowflake string, got {type_name(value)}")
    if not value.isascii() or not value.isdigit() or len(value) > 20 or int(value) > SNOWFLAKE_MAX:
        raise MalformedPayload(path, "is not a snowflake (a 64-bit unsigned decimal number)")
    return value


def string(data: Mapping, key: str, path: str, *, required: bool = False) -> str | None:
    """`data[key]` as a string (None when absent/null and not required)."""
    value = data.get(key)
    if value is None:
        if required:
            raise MalformedPayload(f"{path}.{key}", "is missing")
        return None
    if not isinstance(value, str):
        raise MalformedPayload(f"{path}.{key}", f"must be a string, got {type_name(value)}")
    return _check_text(value, f"{path}.{key}")


def integer(data: Mapping, key: str, path: str, *, required: bool = True) -> int | None:
    """`data[key]` as an int: the SDK's `field_int` (booleans refused), required unless told otherwise."""
    return field_int(data, key, path, required=required)


# Booleans and arrays as the SDK reads them (absent or null: False, []).
boolean, array = field_bool, field_list
