"""Import an existing gateway's `sessions.json` (seed §3 format) into the store
(`hermes-gateway sessions import PATH`).

The seed's entries are read leniently: legacy/unknown fields are ignored, naive timestamps are
host local time (docs/behaviour.md §0), `_`-prefixed keys and bad entries are skipped one at a time and
reported. Legacy `{session_id}.jsonl` transcripts beside the file (seed §3 "legacy") are imported
for sessions that have no transcript in the store yet.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..model import format_timestamp
from .mirror import SESSIONS_FILE_NAME, entries_from_data

if TYPE_CHECKING:  # the CLI passes an open store; no import of the store's module needed here
    from .session_store import SessionStore

log = logging.getLogger(__name__)


@dataclass
class ImportReport:
    """What an import did: counts and one line per skipped entry or transcript line."""

    imported: int = 0
    skipped_existing: int = 0
    transcripts: int = 0
    messages: int = 0
    skipped: list[str] = field(default_factory=list)
    # Accepted with a remark (an entry whose inner session_key differs from its dict key).
    warnings: list[str] = field(default_factory=list)
    # `--replace` on a server store: routes kept because they are newer than the file's entry,
    # one line each (`<key>: …`).
    kept_newer: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"imported": self.imported, "skipped_existing": self.skipped_existing,
                "transcripts": self.transcripts, "messages": self.messages, "skipped": list(self.skipped),
                "warnings": list(self.warnings), "kept_newer": list(self.kept_newer)}


async def import_sessions_json(store: SessionStore, path: Path, *, replace: bool = False) -> ImportReport:
    """Read `path` (once) and add its entries (routes + session rows) to the open `store`.

    A legacy `{session_id}.jsonl` beside the file is imported only into a session that exists in
    the store after the import (a route imported now, or a session row already there) and that
    has no transcript yet: messages never land under a session that was never created (a route
    kept because its key already exists points at *our* session, not the file's).

    Args:
        store: an open store (holding the home lock: this writes).
        path: an older gateway's sessions.json, or the folder holding it.
        replace: overwrite routes whose session key already exists (default: keep ours).
    Returns:
        An ImportReport; `skipped` has one line per bad entry, per transcript not imported and
        per bad transcript line.
    Raises:
        FileNotFoundError: `path` does not exist. ValueError: `path` is not a JSON object.
    """
    path = Path(path)
    if path.is_dir():  # the older gateway's sessions folder: its sessions.json is the index
        path = path / SESSIONS_FILE_NAME
    if not path.is_file():
        raise FileNotFoundError(f"no sessions.json at {path}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} does not hold a JSON object of session entries")
    report = ImportReport()
    entries, _extras = entries_from_data(data, path, report.skipped, report.warnings)
    existing = {key for key in entries if await store.get_entry(key) is not None}
    wanted = [e for key, e in entries.items() if replace or key not in existing]
    imported, skipped_existing = await store.import_entries(wanted, replace=replace)
    report.imported = imported
    report.skipped_existing = skipped_existing + (0 if replace else len(existing))
    if replace and skipped_existing:
        # A server store keeps a route newer than the file's entry (other replicas updated it
        # since): name each, as the route now stored says.
        for key in sorted(existing):
            stored = await store.get_entry(key)
            if stored is not None and stored.updated_at > entries[key].updated_at:
                report.kept_newer.append(f"{key}: the store's route (updated {format_timestamp(stored.updated_at)}) "
                                         f"is newer than the file's ({format_timestamp(entries[key].updated_at)})")
    done: set[str] = set()
    for key, entry in entries.items():
        sid = entry.session_id
        legacy = path.parent / f"{sid}.jsonl"
        if sid in done or not legacy.is_file():
            continue
        done.add(sid)
        if await store.session_info(sid) is None:
            report.skipped.append(f"{legacy.name}: route {key} kept as it was; transcript not imported")
            log.warning("%s not imported: the route %r already exists and points elsewhere", legacy, key)
            continue
        if await store.load_transcript(sid):
            continue  # imported before: never doubled
        count = await _import_legacy_lines(store, sid, legacy, report)
        if count:
            report.transcripts += 1
            report.messages += count
    return report


async def _import_legacy_lines(store: SessionStore, session_id: str, legacy: Path, report: ImportReport) -> int:
    """Append the messages of a legacy transcript; bad lines are reported and skipped one at a
    time (the store validates each message). Returns the number appended."""
    count = 0
    for number, line in enumerate(legacy.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            await store.append_to_transcript(session_id, json.loads(line))
        except (ValueError, TypeError) as exc:
            report.skipped.append(f"{legacy.name} line {number}: {exc}")
            log.warning("%s line %d skipped: %s", legacy, number, exc)
            continue
        count += 1
    return count
