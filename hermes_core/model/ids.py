"""Session ids and path-safety checks (seed §2, docs/behaviour.md §2)."""

from __future__ import annotations

import re
import secrets
from datetime import datetime

from .timeutil import utc_now

SESSION_ID_RE = re.compile(r"^\d{8}_\d{6}_[0-9a-f]{8}$")
# Stems of the store's own files in the sessions folder (docs/behaviour.md §12): a session named
# like one would have its `{session_id}.jsonl` transcript collide with the degraded journal or a
# file an older gateway left there. Compared case-insensitively (case-insensitive file systems).
RESERVED_SESSION_IDS = frozenset({"journal", "sessions", "merged", "inbound", "inbound_seen", "turn_markers",
                                  "delivery_ledger"})


def new_session_id(now: datetime | None = None) -> str:
    """Return a fresh session id `YYYYMMDD_HHMMSS_<8 lowercase hex>` from the UTC clock.

    Args:
        now: the aware UTC time to stamp (default: the current time).
    """
    stamp = (now or utc_now()).strftime("%Y%m%d_%H%M%S")
    return f"{stamp}_{secrets.token_hex(4)}"


def validate_session_id(session_id: str) -> str:
    """Return `session_id` if it is safe to use in a file name, else raise.

    Ids written by other gateways may have other shapes, so only path-unsafe ids are refused:
    empty, containing `/` or `\\`, a NUL byte, or `..`, starting with `.` (hidden and temporary
    files), or naming one of the store's own files (`RESERVED_SESSION_IDS`).

    Raises:
        ValueError: the id is not a non-empty path-safe string (the message quotes it).
    """
    if not isinstance(session_id, str) or not session_id:
        raise ValueError(f"session id must be a non-empty string, got {session_id!r}")
    if ("/" in session_id or "\\" in session_id or "\x00" in session_id or ".." in session_id
            or session_id.startswith(".")):
        raise ValueError(f"session id {session_id!r} is not path-safe")
    if session_id.casefold() in RESERVED_SESSION_IDS:
        raise ValueError(f"session id {session_id!r} names one of the store's own files")
    return session_id
