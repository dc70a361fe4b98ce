"""The core's store contract (hermes_core.testing.StoreBackendContract) on PostgreSQL."""

from __future__ import annotations

import pytest

from hermes_core.testing import StoreBackendContract
from hermes_postgres.backend import PostgresBackend


class TestPostgresStoreContract(StoreBackendContract):
    @pytest.fixture
    async def store_backend(self, pg_dsn):
        backend = PostgresBackend(pg_dsn, lease_ttl_s=30)
        await backend.open()
        yield backend
        await backend.close()
