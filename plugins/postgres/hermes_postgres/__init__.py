"""PostgreSQL store for hermes_core (`[store] backend = "postgres"`; docs/architecture.md §7).

Several gateway replicas share one database: per-session leases with fencing (`leases.py`),
intake dedupe by the intake's unique key, LISTEN/NOTIFY hints with polling as the fallback, and
full-text search on a generated tsvector. `backend.create_backend` is the entry point of the
core's `hermes_core.store_backends` group.
"""
