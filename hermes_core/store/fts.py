"""The derived full-text index `messages_fts` (seed "State DB and FTS recovery"; docs/behaviour.md §3).

`messages_fts` is an FTS5 external-content table over `messages`. It holds no canonical data, so
damage is repaired by `'rebuild'` from `messages` and no message is ever lost. Damage is detected
with `integrity-check` in its `rank = 1` form, which also compares the index with the content
table (the plain form misses rows that are missing from the index).
"""

from __future__ import annotations

import logging
import re
import sqlite3

from .db import Database

log = logging.getLogger(__name__)

FTS_TABLE = "messages_fts"
_TOKEN_RE = re.compile(r"\w+", re.UNICODE)


def is_fts_damage(exc: BaseException) -> bool:
    """True when `exc` reports damage of the FTS index rather than of the database.

    FTS5 reports a damaged index as `SQLITE_CORRUPT_VTAB` (whose text is the bare "database disk
    image is malformed"), or with a message naming the FTS table/module. A plain `SQLITE_CORRUPT`
    "database disk image is malformed" that names neither is damage of the database file itself:
    rebuilding the index would not help, so it is not treated as FTS damage.
    """
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    if getattr(exc, "sqlite_errorname", None) == "SQLITE_CORRUPT_VTAB":
        return True
    text = str(exc).lower()
    return FTS_TABLE in text or "fts5" in text


async def confirm_damage(db: Database, exc: BaseException) -> bool:
    """Decide whether `exc`, raised by a statement that touched `messages_fts`, is index damage.

    A query that ranks or snippets FTS rows reports a damaged index as a plain `SQLITE_CORRUPT`
    "database disk image is malformed", indistinguishable by its text from a damaged database.
    So a bare corruption error is only treated as FTS damage when the index's own
    integrity-check confirms it.
    """
    if is_fts_damage(exc):
        return True
    if isinstance(exc, sqlite3.DatabaseError) and getattr(exc, "sqlite_errorname", "") == "SQLITE_CORRUPT":
        try:
            return not await integrity_ok(db)
        except sqlite3.DatabaseError:
            return False
    return False


async def integrity_ok(db: Database) -> bool:
    """Run `integrity-check` (rank = 1 form). True when the index matches `messages`.

    Raises:
        sqlite3.DatabaseError: the database itself (not the index) is damaged.
    """
    try:
        await db.execute(f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rank) VALUES ('integrity-check', 1)")
    except sqlite3.DatabaseError as exc:
        if is_fts_damage(exc):
            log.warning("full-text index %s is damaged: %s", FTS_TABLE, exc)
            return False
        raise
    return True


async def rebuild(db: Database) -> None:
    """Rebuild `messages_fts` from `messages` (keeps every message), then optimise it."""
    async with db.write() as conn:
        await conn.execute(f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('rebuild')")
    await db.execute(f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('optimize')")
    log.warning("full-text index %s rebuilt from messages", FTS_TABLE)


async def check_and_repair(db: Database) -> bool:
    """Housekeeping step: integrity-check, and rebuild on failure.

    Returns:
        True when the index was damaged and has been rebuilt, False when it was healthy.
    """
    if await integrity_ok(db):
        return False
    await rebuild(db)
    return True


def match_expression(query: str) -> str | None:
    """Turn free user text into a safe FTS5 MATCH expression: every word becomes a quoted term
    (implicit AND), so quotes, `*`, `-` or `NEAR` typed by a user cannot raise a syntax error.

    Returns:
        The expression, or None when `query` has no word characters.
    """
    terms = _TOKEN_RE.findall(query or "")
    if not terms:
        return None
    return " ".join('"' + term.replace('"', '""') + '"' for term in terms)
