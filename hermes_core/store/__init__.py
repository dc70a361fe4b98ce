"""The session store (seed §3, "State DB and FTS recovery"; docs/behaviour.md §0, §2, §3, §6).

SQLite (`state.db`, WAL, FTS5) is canonical; `sessions.json` is its atomic mirror; when SQLite
cannot be opened the store runs degraded on sessions.json + `{session_id}.jsonl`.
"""

from .db import SchemaTooNewError, StoreError, is_damaged, is_disk_full
from .home_lock import HomeLockedError
from .rows import TranscriptReadError
from .session_store import SessionStore

__all__ = ["HomeLockedError", "SchemaTooNewError", "SessionStore", "StoreError", "TranscriptReadError", "is_damaged",
           "is_disk_full"]
