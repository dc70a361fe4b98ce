"""The integers the store can hold (docs/behaviour.md §3): SQLite's INTEGER and PostgreSQL's
bigint are signed 64-bit. Kept in the model, which every layer imports (the token counters here,
the store's check of an older gateway's files, the CLI, the conversation commands), so that
none keeps a copy of the bound nor imports the store only for it.
"""

from __future__ import annotations

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
