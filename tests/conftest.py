"""Fixtures shared by the core's test folders."""

from __future__ import annotations

import pytest


@pytest.fixture
def thread_calls(monkeypatch):
    """`watch(db) -> list`: from then on, the name of every function handed to `db`'s SQLite
    thread is appended to the list (every aiosqlite call goes through `Connection._execute`)."""
    def watch(db) -> list[str]:
        calls: list[str] = []
        real = db.conn._execute

        async def counted(fn, *args, **kwargs):
            calls.append(getattr(fn, "__name__", repr(fn)))
            return await real(fn, *args, **kwargs)

        monkeypatch.setattr(db.conn, "_execute", counted)
        return calls
    return watch
