"""A real PostgreSQL for this plugin's tests: one throw-away cluster per test session on
127.0.0.1, a fresh database per test. Without a server the tests skip, unless HERMES_REQUIRE_PG=1
(CI), where they fail."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from hermes_postgres.cluster import REQUIRE_ENV, ClusterUnavailable, ThrowawayCluster


@pytest.fixture(scope="session")
def pg_cluster():
    root = Path(tempfile.mkdtemp(prefix="hermes-pg-"))
    root.chmod(0o755)  # the server runs as the postgres user when the tests run as root
    try:
        cluster = ThrowawayCluster(root / "cluster").start()
    except ClusterUnavailable as exc:
        if os.environ.get(REQUIRE_ENV, "") == "1":
            pytest.fail(f"PostgreSQL is required ({REQUIRE_ENV}=1) but cannot be started: {exc}")
        pytest.skip(f"PostgreSQL cannot be started: {exc}")
    yield cluster
    cluster.stop()


@pytest.fixture
def pg_dsn(pg_cluster):
    dsn = pg_cluster.create_database()
    yield dsn
    pg_cluster.drop_database(dsn)
