"""The derived full-text index `messages_fts` (seed "State DB and FTS recovery"; docs/behaviour.md §3).

`messages_fts` is an FTS5 external-content table over `messages`. It holds no canonical data, so
damage is repaired by `'rebuild'` from `messages` and no message is ever lost. Damage is detected
with `integrity-check` in its `rank = 1` form, which also compares the index with the content
table (the plain form misses rows that are missing from the index).

Messages are indexed in batches (schema 7, `migrations/0007_fewer_pages_per_commit.sql`): the
index holds exactly the messages with an id up to `fts_progress.indexed_through`, and the insert
trigger indexes the waiting ones once 64 wait. Whatever reads the index as a whole — a search,
the integrity check, erasure's merge of the segments — first indexes what is waiting
(`CATCH_UP`), in the same transaction or just before, so it sees every message.

An index that `'rebuild'` cannot rebuild (the table or its mark `fts_progress` dropped, the
`_idx` or `_docsize` shadow table gone, its own records too damaged to open it) is dropped with
its mark and both are re-created from the migrations' own definitions (`index_definitions`),
then rebuilt the same way.
"""

from __future__ import annotations

import logging
import re
import sqlite3

import aiosqlite

from .db import Database, caused_by, migrated_schema, schema_version

log = logging.getLogger(__name__)

FTS_TABLE = "messages_fts"
FTS_BATCHES_SCHEMA = 7  # the schema version from which messages are indexed in batches
# Index the messages waiting above the mark, then move the mark (writes nothing when none wait).
CATCH_UP = (
    f"INSERT INTO {FTS_TABLE}(rowid, content) SELECT id, content FROM messages "
    "WHERE id > (SELECT indexed_through FROM fts_progress) ORDER BY id",
    "UPDATE fts_progress SET indexed_through = (SELECT max(id) FROM messages) "
    "WHERE indexed_through < (SELECT max(id) FROM messages)",
)
_INDEX_TABLES = (FTS_TABLE, "fts_progress")
INTEGRITY_CHECK = f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rank) VALUES ('integrity-check', 1)"
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
    return FTS_TABLE in text or "fts5" in text or "fts_progress" in text


def is_index_damage(exc: BaseException) -> bool:
    """`is_fts_damage` of `exc` or of what it wraps (`db.caused_by`, as `db.is_damaged`): a
    command's failure that a rebuild of the index mends, unlike damage of the file itself."""
    return caused_by(exc, is_fts_damage)


def missing_index_tables(conn: sqlite3.Connection, version: int | None = None) -> list[str]:
    """The index's tables (`is_index_table`: `messages_fts`, its FTS5 shadow tables, `fts_progress`)
    that the migrations up to `version` (default: this code's newest schema) create and `conn`'s
    database lacks, sorted by name; a read only.

    Why: without its `_idx` or `_docsize` shadow table every statement on `messages_fts` fails
    with a bare SQLITE_ERROR "SQL logic error", which names neither the index nor the table, so
    only the schema tells that it is index damage (module docstring).

    Raises:
        sqlite3.DatabaseError: the schema itself cannot be read (the database is damaged).
    """
    present = {name for (name,) in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
    wanted = migrated_schema(schema_version() if version is None else version)
    return sorted(name for name, (kind, _sql) in wanted.items()
                  if kind == "table" and is_index_table(name) and name not in present)


def named_damage(conn: sqlite3.Connection, exc: sqlite3.DatabaseError,
                 version: int | None = None) -> sqlite3.DatabaseError:
    """`exc`, raised by a statement on the index over `conn`, said as index damage when it is:
    unchanged when `is_fts_damage` already recognises it or the index has all its tables;
    otherwise a new `sqlite3.DatabaseError` "full-text index messages_fts lacks its table(s) …"
    (`missing_index_tables` up to `version`), which `is_fts_damage` recognises. A read only, so
    a read-only connection can tell it too.

    Raises:
        sqlite3.DatabaseError: the schema itself cannot be read (the database is damaged).
    """
    if is_fts_damage(exc):
        return exc
    missing = missing_index_tables(conn, version)
    if not missing:
        return exc
    return sqlite3.DatabaseError(f"full-text index {FTS_TABLE} lacks its table(s) {', '.join(missing)}")


async def _lacks_tables(db: Database, exc: sqlite3.DatabaseError) -> bool:
    """True when `exc`, which `is_fts_damage` does not recognise, is damage all the same: the
    index lacks one of its tables (`named_damage`, logged). False when the schema cannot be read
    either (damage of the database, not of the index)."""
    try:
        named = await db.read(lambda conn: named_damage(conn, exc))
    except sqlite3.DatabaseError:
        return False
    if named is not exc:
        log.warning("%s", named)
    return named is not exc


async def confirm_damage(db: Database, exc: BaseException) -> bool:
    """Decide whether `exc`, raised by a statement that touched `messages_fts`, is index damage.

    A query that ranks or snippets FTS rows reports a damaged index as a plain `SQLITE_CORRUPT`
    "database disk image is malformed", indistinguishable by its text from a damaged database.
    So a bare corruption error is only treated as FTS damage when the index's own
    integrity-check confirms it. Any other error is index damage when the index lacks one of
    its tables (`missing_index_tables`: FTS5 then says only "SQL logic error").
    """
    if is_fts_damage(exc):
        return True
    if isinstance(exc, sqlite3.DatabaseError) and await _lacks_tables(db, exc):
        return True
    if isinstance(exc, sqlite3.DatabaseError) and getattr(exc, "sqlite_errorname", "") == "SQLITE_CORRUPT":
        try:
            return not await integrity_ok(db)
        except sqlite3.DatabaseError:
            return False
    return False


def catch_up(conn: sqlite3.Connection) -> None:
    """Index the messages still waiting (module docstring), in the caller's transaction (a
    `Database.run` work function).

    Raises:
        sqlite3.DatabaseError: the index (or the database) is damaged.
    """
    for sql in CATCH_UP:
        conn.execute(sql)


async def catch_up_async(conn: aiosqlite.Connection) -> None:
    """`catch_up` inside a `Database.write()` block (`conn` is the block's connection)."""
    for sql in CATCH_UP:
        await conn.execute(sql)


async def integrity_ok(db: Database) -> bool:
    """Index what waits, then run `integrity-check` (rank = 1 form), in one transaction of their
    own: no write comes between the two (the check compares the index with every message). True
    when the index matches `messages`; False when it does not, or lacks one of its tables
    (`missing_index_tables`).

    Raises:
        sqlite3.DatabaseError: the database itself (not the index) is damaged.
    """
    try:
        async with db.write() as conn:
            await catch_up_async(conn)
            await conn.execute(INTEGRITY_CHECK)
    except sqlite3.DatabaseError as exc:
        if is_fts_damage(exc) or await _lacks_tables(db, exc):
            log.warning("full-text index %s is damaged: %s", FTS_TABLE, exc)
            return False
        raise
    return True


def index_definitions() -> tuple[str, ...]:
    """The `CREATE` statements of the index and its mark (`_INDEX_TABLES`) exactly as the
    migrations leave them (`db.migrated_schema`), so `rebuild` re-creates the schema's own
    definitions."""
    found = migrated_schema(schema_version())
    return tuple(found[name][1] for name in _INDEX_TABLES)


def is_index_table(name: str) -> bool:
    """True for the index's own tables (`messages_fts`, its FTS5 shadow tables and the mark
    `fts_progress`): the index check reports them and `rebuild` re-creates them."""
    return name in _INDEX_TABLES or name.startswith(f"{FTS_TABLE}_")


async def _rebuild_in(conn: aiosqlite.Connection) -> None:
    await conn.execute(f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('rebuild')")
    # Every message is indexed now; the row is written whole, so a lost one comes back too.
    await conn.execute("INSERT OR REPLACE INTO fts_progress (id, indexed_through) "
                       "VALUES (1, coalesce((SELECT max(id) FROM messages), 0))")


async def _drop_index(conn: aiosqlite.Connection) -> None:
    """Drop the index and its mark inside the caller's transaction. An FTS5 table whose own
    records are too damaged to open it ("vtable constructor failed") cannot be dropped by `DROP
    TABLE`, which opens it first: its row in `sqlite_schema` is then removed directly (the
    schema version bumped, so every connection reloads the schema) and its shadow tables, plain
    tables, are dropped by name. They hold nothing canonical (module docstring)."""
    try:
        await conn.execute(f"DROP TABLE IF EXISTS {FTS_TABLE}")
    except sqlite3.DatabaseError as exc:
        log.warning("full-text index %s cannot be dropped (%s); removing it from the schema", FTS_TABLE, exc)
        version = (await (await conn.execute("PRAGMA schema_version")).fetchone())[0]
        await conn.execute("PRAGMA writable_schema = ON")
        try:
            await conn.execute("DELETE FROM sqlite_schema WHERE type = 'table' AND name = ?", (FTS_TABLE,))
            await conn.execute(f"PRAGMA schema_version = {int(version) + 1}")
        finally:
            await conn.execute("PRAGMA writable_schema = OFF")
        shadows = await (await conn.execute(
            "SELECT name FROM sqlite_schema WHERE type = 'table' AND name LIKE ? ESCAPE '\\'",
            (FTS_TABLE.replace("_", "\\_") + "\\_%",))).fetchall()
        for (name,) in shadows:
            await conn.execute(f'DROP TABLE "{name}"')
    await conn.execute("DROP TABLE IF EXISTS fts_progress")


async def rebuild(db: Database) -> None:
    """Rebuild `messages_fts` from `messages` (keeps every message), then optimise it. When the
    rebuild fails (module docstring), the index and its mark are dropped, re-created from the
    migrations' definitions and rebuilt, in one transaction: they hold nothing canonical.

    Raises:
        sqlite3.DatabaseError: the database itself is damaged, so the index could not be
            re-created or rebuilt; the second transaction changed nothing.
    """
    try:
        async with db.write() as conn:
            await _rebuild_in(conn)
    except sqlite3.DatabaseError as exc:
        log.warning("full-text index %s cannot be rebuilt (%s); re-creating it", FTS_TABLE, exc)
        async with db.write() as conn:
            # The triggers on `messages` are not dropped with these tables and stay as they are.
            await _drop_index(conn)
            for definition in index_definitions():
                await conn.execute(definition)
            await _rebuild_in(conn)
    await db.execute(f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('optimize')")
    log.warning("full-text index %s rebuilt from messages", FTS_TABLE)


async def check_and_repair(db: Database, *, force: bool = False) -> bool:
    """Housekeeping step: integrity-check, and rebuild on failure. With `force` the index is
    rebuilt without the check: FTS5's check passes an index that lost rows of `_idx` (the terms'
    pages) although a search then misses messages (docs/operations.md §5).

    Returns:
        True when the index was damaged (or `force`) and has been rebuilt, False when it was
        healthy.
    """
    if not force and await integrity_ok(db):
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
