"""Session ids and path-safety checks (seed §2, docs/behaviour.md §2)."""

from __future__ import annotations

import re
import secrets
from datetime import datetime

from .timeutil import utc_now

SESSION_ID_RE = re.compile(r"^\d{8}_\d{6}_[0-9a-f]{8}$")


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
    empty, containing `/` or `\\`, a NUL byte, or `..`.

    Raises:
        ValueError: the id is not a non-empty path-safe string (the message quotes it).
    """
    if not isinstance(session_id, str) or not session_id:
        raise ValueError(f"session id must be a non-empty string, got {session_id!r}")
    if "/" in session_id or "\\" in session_id or "\x00" in session_id or ".." in session_id:
        raise ValueError(f"session id {session_id!r} is not path-safe")
    return session_id
