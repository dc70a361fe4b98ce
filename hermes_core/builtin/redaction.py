"""Default pseudonymisation (seed §9, SPEC.md §7): deterministic short hashes of canonical ids."""

from __future__ import annotations

import hashlib

from ..markers import hookimpl


def _hex12(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()[:12]


def pseudonymize_id(kind: str, value: str) -> str:
    """Pseudonym of an already-canonical id.

    Args:
        kind: `"user"` → `user_<12hex>`; `"chat"` → `<prefix>:<12hex>` when the id has a
            `prefix:` part (e.g. Signal `group:…`), else `<12hex>`.
        value: the canonical id.
    """
    if kind == "user":
        return f"user_{_hex12(value)}"
    prefix, sep, rest = value.partition(":")
    if sep and prefix and rest:
        return f"{prefix}:{_hex12(rest)}"
    return _hex12(value)


@hookimpl(trylast=True)
def hermes_pseudonymize(platform, kind, value):
    """Core default: `pseudonymize_id` of the value (callers pass the canonical id)."""
    return pseudonymize_id(kind, value)
