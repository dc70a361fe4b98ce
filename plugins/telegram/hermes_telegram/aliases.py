"""Group → supergroup migration aliases (docs/platforms.md §1.3, trap TG-T6).

When a basic group becomes a supergroup its `chat.id` changes (`-4…` → `-100…`). Sessions are
keyed on the chat id, so without help every conversation in the group would silently restart.

Design (why an alias and not a re-key): session keys are opaque and the store owns them; the
store's `switch_session` moves a key to another session id, not a session to another key. So the
plugin keeps the *first* chat id as the canonical one: the `hermes_canonical_identity` hookimpl
maps a migrated chat's new id to its original id for `kind == "chat"`, and the key built for a
message in the new supergroup is the old key — the same session continues, transcript intact.
Delivery never uses canonical ids (docs/behaviour.md §4): the adapter sends to `current(chat_id)`, the
newest id, so replies routed from an old stored origin still reach the supergroup.

The aliases live in a small JSON file, `<HERMES_HOME>/telegram/chat_aliases.json`, written
atomically (temp file, fsync, rename) and re-read when another process changed it.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from pathlib import Path

log = logging.getLogger(__name__)

FILE_NAME = "chat_aliases.json"
_README = ("hermes_telegram: Telegram group -> supergroup migrations, old chat id -> new chat id. "
           "Session keys keep the oldest id; sends go to the newest.")


class ChatAliasStore:
    """Persistent map of migrated Telegram chat ids.

    Args:
        path: the JSON file (created on the first `record`).

    The file holds `{"_README": …, "migrations": {old_id: new_id}}` with ids as strings.
    A corrupt file is logged and treated as empty (it is rebuilt on the next `record`); no
    method raises for a bad file.
    """

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._forward: dict[str, str] = {}
        self._mtime: float | None = None

    def _refresh(self) -> None:
        try:
            mtime = self.path.stat().st_mtime
        except FileNotFoundError:
            self._forward, self._mtime = {}, None
            return
        if mtime == self._mtime:
            return
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            migrations = data.get("migrations", {}) if isinstance(data, dict) else {}
            self._forward = {str(k): str(v) for k, v in migrations.items()
                             if isinstance(k, str) and isinstance(v, (str, int))}
        except (OSError, ValueError, AttributeError) as exc:
            log.warning("telegram chat alias file %s is unreadable (%s); ignoring it", self.path, exc)
            self._forward = {}
        self._mtime = mtime

    def record(self, old_chat_id: str, new_chat_id: str) -> bool:
        """Remember that chat `old_chat_id` became `new_chat_id`. Returns False if known already.

        Raises:
            ValueError: the two ids are equal or empty.
            OSError: the file cannot be written (the caller logs it; the send still proceeds).
        """
        old, new = str(old_chat_id), str(new_chat_id)
        if not old or not new or old == new:
            raise ValueError(f"bad telegram chat migration {old!r} -> {new!r}")
        with self._lock:
            self._refresh()
            if self._forward.get(old) == new:
                return False
            self._forward[old] = new
            self._write()
        log.info("telegram chat %s migrated to %s; its sessions continue under the old key", old, new)
        return True

    def _write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        payload = {"_README": _README, "migrations": dict(sorted(self._forward.items()))}
        fd, tmp = tempfile.mkstemp(prefix=".chat_aliases.", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(payload, fh, indent=2)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self._mtime = self.path.stat().st_mtime

    def canonical(self, chat_id: str) -> str | None:
        """The original id of a migrated chat (follows new → old back to the first id), or None
        when `chat_id` is not the result of a migration."""
        with self._lock:
            self._refresh()
            backward = {new: old for old, new in self._forward.items()}
        current, seen = str(chat_id), set()
        while current in backward and current not in seen:
            seen.add(current)
            current = backward[current]
        return current if seen else None

    def current(self, chat_id: str) -> str:
        """The newest id of `chat_id` (follows old → new), for sending. Unknown ids are returned
        unchanged."""
        with self._lock:
            self._refresh()
            forward = dict(self._forward)
        current, seen = str(chat_id), set()
        while current in forward and current not in seen:
            seen.add(current)
            current = forward[current]
        return current
