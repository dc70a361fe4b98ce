"""Import an existing gateway's `sessions.json` (seed §3 format) into the store
(`hermes-gateway sessions import PATH`).

The seed's entries are read leniently: legacy/unknown fields are ignored, naive timestamps are
host local time (docs/behaviour.md §0), `_`-prefixed keys and bad entries are skipped one at a time and
reported. Legacy `{session_id}.jsonl` transcripts beside the file (seed §3 "legacy") are imported
for sessions that have no transcript in the store yet, bad lines skipped one at a time and
reported. An entry or a message holding a value the store cannot take (a lone surrogate, an
integer beyond 64 bits) is such a bad one: it is found before the store sees it
(`mirror.entries_from_data`, `SessionStore.import_transcript`), so it never fails the others.
Importing the home's own sessions.json (a start adopting it, or `sessions import` of the home's
`sessions/`) keeps that file aside first when entries were skipped
(`mirror.keep_skipped_original`): the mirror rewrites it from the store, without them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..model import format_timestamp
from .mirror import SESSIONS_FILE_NAME, entries_from_data, keep_skipped_original

if TYPE_CHECKING:  # the CLI passes an open store; no import of the store's module needed here
    from .session_store import SessionStore

log = logging.getLogger(__name__)

# Legacy transcripts imported together (their commits shared), and the seconds between two
# progress lines of a long import.
IMPORT_BATCH = 256
PROGRESS_EVERY_S = 5.0


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
    # The home's own sessions.json as it was, kept aside because entries of it were skipped
    # (`mirror.keep_skipped_original`); None when nothing needed keeping or the copy failed.
    kept_original: Path | None = None

    def as_dict(self) -> dict:
        return {"imported": self.imported, "skipped_existing": self.skipped_existing,
                "transcripts": self.transcripts, "messages": self.messages, "skipped": list(self.skipped),
                "warnings": list(self.warnings), "kept_newer": list(self.kept_newer),
                "kept_original": None if self.kept_original is None else str(self.kept_original)}


def read_sessions_json(path: Path) -> tuple[Path, dict]:
    """Read an older gateway's sessions.json for `import_sessions_json`, before any store is
    opened: a path it cannot read must not leave a new home behind (README "Using it").

    Args:
        path: the sessions.json, or the folder holding it.
    Returns:
        `(the file's path, its JSON object)`.
    Raises:
        FileNotFoundError: no such file (`no sessions.json at <path>`). ValueError: it is not
            (UTF-8) JSON, or not a JSON object. OSError: it cannot be read.
    """
    path = Path(path)
    try:
        if path.is_dir():  # the older gateway's sessions folder: its sessions.json is the index
            path = path / SESSIONS_FILE_NAME
        if not path.is_file():
            raise FileNotFoundError(f"no sessions.json at {path}")
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from None
    except FileNotFoundError:
        raise
    except OSError as exc:  # in words, not "[Errno 13] Permission denied: '…'"
        raise OSError(f"{path} cannot be read: {exc.strerror or exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} does not hold a JSON object of session entries")
    return path, data


async def import_sessions_json(store: SessionStore, path: Path, *, replace: bool = False,
                               read: tuple[Path, dict] | None = None) -> ImportReport:
    """Read `path` (once) and add its entries (routes + session rows) to the open `store`.

    A legacy `{session_id}.jsonl` beside the file is imported only into a session that exists in
    the store after the import (a route imported now, or a session row already there) and that
    has no transcript yet: messages never land under a session that was never created (a route
    kept because its key already exists points at *our* session, not the file's).

    Args:
        store: an open store (holding the home lock: this writes).
        path: an older gateway's sessions.json, or the folder holding it.
        replace: overwrite routes whose session key already exists (default: keep ours).
        read: what `read_sessions_json(path)` returned, when the caller read the file before
            opening the store; read here otherwise.
    Returns:
        An ImportReport; `skipped` has one line per bad entry (`<key>: <why>`, a value the store
        cannot take included), per transcript not imported and per bad transcript line
        (`<file name> line <n>: <why>`); `kept_original` where the file was kept when it is the
        store's own sessions.json and entries were skipped (module docstring).
    Raises:
        as `read_sessions_json`; what a write raises (the routes go in one transaction).
    """
    started = time.monotonic()  # the progress clock covers the routes too (`_import_legacy_transcripts`)
    path, data = read if read is not None else read_sessions_json(path)
    report = ImportReport()
    entries, _extras = entries_from_data(data, path, report.skipped, report.warnings)
    if report.skipped and _same_file(path, store.sessions_file):
        # Before the first write: any write marks the mirror for a rewrite (module docstring).
        report.kept_original = keep_skipped_original(path, len(report.skipped))
    if len(entries) > IMPORT_BATCH:
        # The routes go in one transaction, with no progress line of their own (20,000 take seconds).
        log.info("importing %s: taking %d route(s), then the legacy transcripts beside them", path, len(entries))
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
    legacy: list[tuple[str, str, Path]] = []  # (session key, session id, its .jsonl), once per id
    seen: set[str] = set()
    for key, entry in entries.items():
        sid = entry.session_id
        transcript = path.parent / f"{sid}.jsonl"
        if sid not in seen and transcript.is_file():
            seen.add(sid)
            legacy.append((key, sid, transcript))
    await _import_legacy_transcripts(store, legacy, report, started)
    return report


def _same_file(path: Path, other: Path) -> bool:
    """True when `path` and `other` are one file (False when either is missing)."""
    try:
        return os.path.samefile(path, other)
    except OSError:
        return False


async def _import_legacy_transcripts(store: SessionStore, legacy: list[tuple[str, str, Path]],
                                     report: ImportReport, last_said: float) -> None:
    """Import the legacy transcripts `legacy` lists, `IMPORT_BATCH` at a time: each transcript
    in one transaction (all of its messages or none, `SessionStore.import_transcript`), and the
    transcripts of a batch awaited together, so that they share their commits (one commit per
    message took 22.8 s for 20,000 transcripts). Progress is logged every `PROGRESS_EVERY_S`,
    the first line that long after `last_said` (`time.monotonic()` seconds: when the import
    began, so the time its routes took counts)."""
    for start in range(0, len(legacy), IMPORT_BATCH):
        batch = legacy[start:start + IMPORT_BATCH]
        counts = await asyncio.gather(*(_import_legacy_transcript(store, *item) for item in batch),
                                      return_exceptions=True)
        for failure in counts:  # raised once every import of the batch has ended: none goes on unawaited
            if isinstance(failure, BaseException):
                raise failure
        # Reported in the order the file lists them, whatever order the writes finished in.
        for count, lines in counts:
            report.skipped += lines
            if count:
                report.transcripts += 1
                report.messages += count
        if time.monotonic() - last_said >= PROGRESS_EVERY_S and start + len(batch) < len(legacy):
            last_said = time.monotonic()
            log.info("importing legacy transcripts from %s: %d of %d read, %d message(s) taken so far",
                     legacy[0][2].parent, start + len(batch), len(legacy), report.messages)


async def _import_legacy_transcript(store: SessionStore, key: str, session_id: str, legacy: Path
                                    ) -> tuple[int, list[str]]:
    """Import one legacy transcript into session `session_id` (listed under `key`), if that
    session exists and has no transcript yet. Bad lines are skipped one at a time. Returns the
    number of messages stored and the report's lines for what was skipped."""
    if not await store.session_exists(session_id):
        log.warning("%s not imported: the route %r already exists and points elsewhere", legacy, key)
        return 0, [f"{legacy.name}: route {key} kept as it was; transcript not imported"]
    skipped: list[tuple[int, str]] = []
    numbers, messages = [], []
    for number, line in enumerate(legacy.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            messages.append(json.loads(line))
        except ValueError as exc:
            skipped.append((number, str(exc)))
            continue
        numbers.append(number)
    bad = await store.import_transcript(session_id, messages)
    if bad is None:
        return 0, []  # imported before: never doubled
    skipped += [(numbers[index], why) for index, why in bad]
    for number, why in sorted(skipped):
        log.warning("%s line %d skipped: %s", legacy, number, why)
    return len(messages) - len(bad), [f"{legacy.name} line {number}: {why}" for number, why in sorted(skipped)]
