"""Schema migrations of the PostgreSQL store (docs/architecture.md §7).

Ordered `migrations/NNNN_name.sql` files, each applied in its own transaction and recorded in
`hermes_schema(version, name, applied_at)`. Replicas starting together serialise on an advisory
lock, so each migration runs exactly once; a database newer than the code is refused.
"""

from __future__ import annotations

import logging
import re
from importlib import resources

import psycopg
from hermes_core.store.db import SchemaTooNewError, StoreError

log = logging.getLogger(__name__)

_MIGRATION_RE = re.compile(r"^(\d{4})_[A-Za-z0-9_]+\.sql$")
# pg_advisory_lock key of the migration step: any fixed 64-bit number private to this store.
MIGRATION_LOCK = 0x6865726D6573  # "hermes"


def migrations() -> list[tuple[int, str, str]]:
    """The packaged migrations as `(version, file name, sql)`, ordered by version."""
    found = []
    for item in resources.files("hermes_postgres.migrations").iterdir():
        match = _MIGRATION_RE.match(item.name)
        if match:
            found.append((int(match.group(1)), item.name, item.read_text(encoding="utf-8")))
    return sorted(found)


async def migrate(conn: psycopg.AsyncConnection, where: str) -> int:
    """Apply the pending migrations on `conn` (autocommit). Returns the schema version.

    Raises:
        SchemaTooNewError: the database has a version above the newest migration known here.
        StoreError: a migration failed (its transaction is rolled back; earlier ones stay).
    """
    known = migrations()
    newest = known[-1][0]
    await conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
    try:
        await conn.execute("CREATE TABLE IF NOT EXISTS hermes_schema (version INTEGER PRIMARY KEY, "
                           "name TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")
        cur = await conn.execute("SELECT coalesce(max(version), 0) FROM hermes_schema")
        current = (await cur.fetchone())[0]
        if current > newest:
            raise SchemaTooNewError(f"PostgreSQL store {where} has schema version {current}, newer than this "
                                    f"gateway's {newest}; upgrade hermes-gateway-postgres")
        for version, name, sql in known:
            if version <= current:
                continue
            log.info("PostgreSQL store %s: applying migration %s", where, name)
            try:
                async with conn.transaction():
                    await conn.execute(sql)
                    await conn.execute("INSERT INTO hermes_schema (version, name) VALUES (%s, %s)", (version, name))
            except psycopg.Error as exc:
                raise StoreError(f"PostgreSQL store {where}: migration {name} failed: {exc}") from exc
            current = version
        return current
    finally:
        await conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))
