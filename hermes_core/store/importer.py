"""Import an existing gateway's `sessions.json` (seed §3 format) into the store
(`hermes-gateway sessions import PATH`).

The seed's entries are read leniently: legacy/unknown fields are ignored, naive timestamps are
host local time (SPEC.md §0), `_`-prefixed keys and bad entries are skipped one at a time and
reported. Legacy `{session_id}.jsonl` transcripts beside the file (seed §3 "legacy") are imported
for sessions that have no transcript in the store yet.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from .mirror import load_sessions_json
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

    def as_dict(self) -> dict:
        return {"imported": self.imported, "skipped_existing": self.skipped_existing,
                "transcripts": self.transcripts, "messages": self.messages, "skipped": list(self.skipped)}


async def import_sessions_json(store: SessionStore, path: Path, *, replace: bool = False) -> ImportReport:
    """Read `path` and add its entries (routes + session rows) to the open `store`.

    Args:
        store: an open store (holding the home lock: this writes).
        path: an older gateway's sessions.json.
        replace: overwrite routes whose session key already exists (default: keep ours).
    Returns:
        An ImportReport.
    Raises:
        FileNotFoundError: `path` does not exist. ValueError: `path` is not a JSON object.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no sessions.json at {path}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} does not hold a JSON object of session entries")
    report = ImportReport()
    entries, _extras = load_sessions_json(path, report.skipped)
    report.imported, report.skipped_existing = await store.import_entries(entries.values(), replace=replace)
    for entry in entries.values():
        legacy = path.parent / f"{entry.session_id}.jsonl"
        if not legacy.is_file() or await store.load_transcript(entry.session_id):
            continue
        count = 0
        for number, line in enumerate(legacy.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if not line.strip():
                continue
            try:
                message = json.loads(line)
                await store.append_to_transcript(entry.session_id, message)
            except (ValueError, TypeError) as exc:
                report.skipped.append(f"{legacy.name} line {number}: {exc}")
                log.warning("%s line %d skipped: %s", legacy, number, exc)
                continue
            count += 1
        if count:
            report.transcripts += 1
            report.messages += count
    return report
