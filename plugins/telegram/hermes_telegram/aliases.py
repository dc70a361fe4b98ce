"""Group → supergroup migrations (docs/adapters.md §1.3, trap TG-T6).

When a basic group becomes a supergroup its `chat.id` changes (`-4…` → `-100…`). Sessions are
keyed on the chat id, so without help every conversation in the group would silently restart.

Design (why an alias and not a re-key): session keys are opaque and the store owns them. The
plugin keeps the *first* chat id as the canonical one and records the new id as its identity
alias in the gateway's store (`BaseAdapter.record_alias`, table `identity_aliases`); the core folds
the new id into the old one before it builds a key, so the same session continues, transcript
intact (docs/behaviour.md §4). Delivery never uses canonical ids: the adapter sends to the newest
id it knows (`ChatMigrations.current`). That map lives in memory; after a restart the first send
to an old id gets Telegram's `ChatMigrated` error, which names the new id, and the map learns it
again.

Gateways before the store kept the migrations in `<HERMES_HOME>/telegram/chat_aliases.json`;
`read_legacy_file` reads such a file once so the adapter can import it (then it is renamed aside).
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

log = logging.getLogger(__name__)

LEGACY_FILE_NAME = "chat_aliases.json"
# The legacy file is renamed to this once its migrations are in the store.
IMPORTED_SUFFIX = ".imported"


class ChatMigrations:
    """In-memory map of migrated chats, old id → new id, for sending to the newest id."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._forward: dict[str, str] = {}

    def record(self, old_chat_id: str, new_chat_id: str) -> bool:
        """Remember that chat `old_chat_id` became `new_chat_id`. Returns False if known already.

        Raises:
            ValueError: the two ids are equal or empty.
        """
        old, new = str(old_chat_id), str(new_chat_id)
        if not old or not new or old == new:
            raise ValueError(f"bad telegram chat migration {old!r} -> {new!r}")
        with self._lock:
            if self._forward.get(old) == new:
                return False
            self._forward[old] = new
        return True

    def current(self, chat_id: str) -> str:
        """The newest id of `chat_id` (follows old → new), for sending. Unknown ids are returned
        unchanged."""
        with self._lock:
            forward = dict(self._forward)
        current, seen = str(chat_id), set()
        while current in forward and current not in seen:
            seen.add(current)
            current = forward[current]
        return current


def read_legacy_file(path: Path | str) -> dict[str, str]:
    """The migrations `{old_id: new_id}` of a legacy `chat_aliases.json`
    (`{"_README": …, "migrations": {old: new}}`).

    Returns `{}` when the file does not exist. Entries that are not id → id are skipped.

    Raises:
        ValueError: the file is not JSON or not an object with a `migrations` object (the
            message names the file and what is wrong).
        OSError: it cannot be read.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{path} is not valid JSON ({exc})") from None
    migrations = data.get("migrations") if isinstance(data, dict) else None
    if not isinstance(migrations, dict):
        raise ValueError(f"{path} has no 'migrations' object")
    return {str(k): str(v) for k, v in migrations.items()
            if isinstance(k, str) and isinstance(v, (str, int)) and not isinstance(v, bool) and k and str(v) != k}
