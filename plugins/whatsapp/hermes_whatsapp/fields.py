"""Typed access to the fields of a WhatsApp payload (docs/adapters.md §0.5).

Every helper names the dotted path of the field it rejects (`MalformedPayload(field, problem)`),
never its value: values are message text and phone numbers. Ids must be valid Unicode (they
become keys, database rows and send targets); free text (names, message bodies) has lone
surrogates replaced instead, so one bad character never loses a message.
"""

from __future__ import annotations

from typing import Mapping

from hermes_core.sdk import MalformedPayload, field_bool, field_id, field_list, field_object, field_text, type_name

# Longest id accepted (a BSUID is a country code, a dot and up to 128 alphanumerics; JIDs are
# far shorter). Anything longer is somebody's garbage, not an id.
MAX_ID_LENGTH = 256
# Timestamps are epoch seconds; anything past year 9999 is not one.
MAX_TIMESTAMP = 253402300799


# The generic readers are the SDK's (`hermes_core.sdk.payload`); WhatsApp's own formats follow.
obj, items, text, flag = field_object, field_list, field_text, field_bool


def ident(data: Mapping, key: str, path: str, *, required: bool = False) -> str | None:
    """An id field (the SDK's `field_id`): a non-empty string of valid Unicode, at most
    `MAX_ID_LENGTH` characters. Numbers are refused (an integer id has lost its `+` or digits)."""
    return field_id(data, key, path, required=required, max_length=MAX_ID_LENGTH)


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
