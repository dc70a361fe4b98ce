"""The store contract (hermes_core.testing.StoreBackendContract) on the built-in SQLite engine,
on `state.db` and on the degraded engine's journaled in-memory database (docs/architecture.md §7)."""

from __future__ import annotations

import pytest

from hermes_core.store.db import Database
from hermes_core.store.journal import JournaledDatabase
from hermes_core.store.sqlite_backend import SqliteBackend
from hermes_core.testing import StoreBackendContract


class TestSqliteStoreContract(StoreBackendContract):
    @pytest.fixture
    async def store_backend(self, tmp_path):
        backend = SqliteBackend(Database(tmp_path / "state.db"))
        await backend.open()
        yield backend
        await backend.close()


class TestDegradedStoreContract(StoreBackendContract):
    @pytest.fixture
    async def store_backend(self, tmp_path):
        db = JournaledDatabase(tmp_path / "sessions")
        backend = SqliteBackend(db)
        await backend.open()
        await db.start_journal()
        yield backend
        await backend.close()
