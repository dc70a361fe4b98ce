"""Typed access to the fields of a WhatsApp payload (docs/adapters.md §0.5).

Every helper names the dotted path of the field it rejects (`MalformedPayload(field, problem)`),
never its value: values are message text and phone numbers. Ids must be valid Unicode (they
become keys, database rows and send targets); free text (names, message bodies) has lone
surrogates replaced instead, so one bad character never loses a message.
"""

from __future__ import annotations

import re
from typing import Mapping

from hermes_core.sdk import MalformedPayload, field_list, field_object, type_name

# Longest id accepted (a BSUID is a country code, a dot and up to 128 alphanumerics; JIDs are
# far shorter). Anything longer is somebody's garbage, not an id.
MAX_ID_LENGTH = 256
# Timestamps are epoch seconds; anything past year 9999 is not one.
MAX_TIMESTAMP = 253402300799
_SURROGATE = re.compile("[\ud800-\udfff]")


# The object and list readers are the SDK's; the WhatsApp-specific ones follow.
obj, items = field_object, field_list


def text(data: Mapping, key: str, path: str) -> str | None:
    """A free-text string field (lone surrogates replaced), None when absent."""
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise MalformedPayload(f"{path}.{key}", f"must be a string, got {type_name(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        value = _SURROGATE.sub("\ufffd", value)
    return value


def ident(data: Mapping, key: str, path: str, *, required: bool = False) -> str | None:
    """An id field: a non-empty string of valid Unicode, at most `MAX_ID_LENGTH` characters.
    Numbers are refused (ids are strings on the wire; an integer id has lost its `+` or digits)."""
    value = data.get(key)
    if value is None or value == "":
        if required:
            raise MalformedPayload(f"{path}.{key}", "is missing")
        return None
    if not isinstance(value, str):
        raise MalformedPayload(f"{path}.{key}", f"must be a string, got {type_name(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise MalformedPayload(f"{path}.{key}", "is not valid Unicode (lone surrogate)") from None
    value = value.strip()
    if not value:
        if required:
            raise MalformedPayload(f"{path}.{key}", "is empty")
        return None
    if len(value) > MAX_ID_LENGTH:
        raise MalformedPayload(f"{path}.{key}", f"is longer than {MAX_ID_LENGTH} characters")
    return value


def flag(data: Mapping, key: str, path: str) -> bool:
    """A boolean field, False when absent."""
    value = data.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise MalformedPayload(f"{path}.{key}", f"must be a boolean, got {type_name(value)}")
    return value


def timestamp(data: Mapping, key: str, path: str) -> int | None:
    """Epoch seconds given as an integer or a string of digits (Cloud API), None when absent.
    Baileys may send a protobuf Long as `{"low", "high"}`: read as well."""
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, dict) and isinstance(value.get("low"), int) and isinstance(value.get("high"), int):
        value = (value["high"] << 32) | (value["low"] & 0xFFFFFFFF)
    elif isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 12:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise MalformedPayload(f"{path}.{key}", f"must be epoch seconds, got {type_name(value)}")
    if not 0 <= value <= MAX_TIMESTAMP:
        raise MalformedPayload(f"{path}.{key}", f"is out of range (0..{MAX_TIMESTAMP})")
    return value
