"""Import an existing gateway's `sessions.json` (seed §3 format) into the store
(`hermes-gateway sessions import PATH`).

The seed's entries are read leniently: legacy/unknown fields are ignored, naive timestamps are
host local time (docs/behaviour.md §0), `_`-prefixed keys and bad entries are skipped one at a time and
reported. Legacy `{session_id}.jsonl` transcripts beside the file (seed §3 "legacy") are imported
for sessions that have no transcript in the store yet.

`merge_degraded_writes` reuses the same readers to bring what a degraded run wrote (SQLite
unopenable: sessions.json + `{session_id}.jsonl`, docs/behaviour.md §0) into SQLite once it opens again.
Not merged: the degraded `delivery_ledger.json` (a reply recorded but not yet delivered while
degraded is in the merged transcript, but SQLite's ledger does not owe it).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..model import validate_session_id
from .degraded import INTAKE_FILE_NAME, MARKERS_FILE_NAME
from .mirror import SESSIONS_FILE_NAME, entries_from_data, load_sessions_json
from .rows import jsonl_message_rows

if TYPE_CHECKING:  # the store calls merge_degraded_writes at open: no import cycle at run time
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

    def as_dict(self) -> dict:
        return {"imported": self.imported, "skipped_existing": self.skipped_existing,
                "transcripts": self.transcripts, "messages": self.messages, "skipped": list(self.skipped),
                "warnings": list(self.warnings)}


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


# ---- merging what a degraded run wrote (docs/behaviour.md §0 "nothing accepted is ever lost") ---------

DEGRADED_MARKER_NAME = ".degraded-since"
MERGED_SUFFIX = ".merged"
# Slack for file-system timestamp granularity when picking transcripts written since the marker.
_MTIME_SLACK_S = 2.0


@dataclass
class MergeReport:
    """What `merge_degraded_writes` did: routes taken from the degraded index, messages added."""

    sessions: int = 0
    messages: int = 0
    pending: int = 0   # accepted messages whose turn never began, handed to SQLite's intake
    resumed: int = 0   # routes marked resume_pending for a turn the degraded run left running
    skipped: list[str] = field(default_factory=list)


def write_degraded_marker(sessions_dir: Path, now_ts: float) -> None:
    """Leave `<sessions_dir>/.degraded-since` (epoch seconds, wall clock) when the store falls
    back to degraded mode; an existing marker is kept (the earliest start of unmerged writes).

    Raises:
        OSError: the folder is not writable (the caller logs it; degraded mode goes on).
    """
    marker = Path(sessions_dir) / DEGRADED_MARKER_NAME
    if marker.exists():
        return
    fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(f"{now_ts:.6f}\n")
        fh.flush()
        os.fsync(fh.fileno())


def read_degraded_marker(sessions_dir: Path) -> float | None:
    """The epoch seconds stored in the marker; None without a marker. An unreadable marker
    counts as 0 (merge every transcript there: the merge never doubles a message)."""
    marker = Path(sessions_dir) / DEGRADED_MARKER_NAME
    try:
        text = marker.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError):
        return 0.0
    try:
        return float(text)
    except ValueError:
        return 0.0


def _message_key(message: dict) -> tuple:
    return (message.get("role"), message.get("content"), message.get("timestamp"),
            message.get("tool_call_id"), message.get("platform_message_id"))


def _degraded_rows(path: Path, report: MergeReport) -> list[dict]:
    """Active messages of one degraded `{session_id}.jsonl` (the DegradedBackend's row shape:
    `rows.normalize_message` plus `id` and `active`), as `load_transcript` returns them."""
    def bad_line(number: int, exc: ValueError) -> None:
        report.skipped.append(f"{path.name} line {number}: {exc}")
        log.warning("%s line %d not merged: %s", path, number, exc)

    rows = []
    for row in jsonl_message_rows(path.read_text(encoding="utf-8", errors="replace"), bad_line):
        if not row.get("active", 1):
            continue  # rewound while degraded
        message = {k: row.get(k) for k in ("role", "content", "timestamp", "platform_message_id",
                                           "tool_call_id", "tool_name") if row.get(k) is not None}
        tool_calls = row.get("tool_calls")
        if isinstance(tool_calls, str):
            try:
                tool_calls = json.loads(tool_calls)
            except ValueError:
                tool_calls = None
        if tool_calls is not None:
            message["tool_calls"] = tool_calls
        rows.append(message)
    return rows


async def merge_degraded_writes(store: SessionStore, since_ts: float) -> MergeReport:
    """Bring what a degraded run wrote (sessions.json + `{session_id}.jsonl`) into SQLite.

    Called by `SessionStore.open` when SQLite is healthy again and the degraded marker is there.
    Idempotent (a crash half-way is redone at the next open without doubling anything):

    * session rows the degraded index kept (`_sessions`) that SQLite lacks are inserted, and an
      end recorded while degraded (e.g. by `/new`) is copied (`SessionStore.merge_session_rows`);
    * routes: a degraded entry replaces the SQLite route when SQLite has none for its key or
      an older one (`updated_at`): the chat continues the session it used while degraded
      (e.g. after a `/new`), with its token counters;
    * transcripts: every `{session_id}.jsonl` modified since `since_ts` (epoch seconds) is read
      and its active messages that SQLite does not hold yet (same role, content, timestamp,
      tool call id and platform message id) are appended in file order; the file is then
      renamed `{session_id}.jsonl.merged` (kept for audit, never read again);
    * intake: messages accepted while degraded whose turn never began are accepted again by
      SQLite's intake (answered by the start-up replay); turns left running are marked
      `resume_pending` (`_merge_intake`, `_merge_turn_markers`); both files are set aside as
      `.merged`. The degraded delivery ledger is not merged (see the module docstring).

    Args:
        store: an open, non-degraded store (holding the home lock).
        since_ts: the marker's time (`read_degraded_marker`).
    Returns:
        A MergeReport (sessions = routes taken over, messages = messages added).
    Raises:
        sqlite3.Error / OSError: a write failed (the marker stays; the next open retries).
    """
    report = MergeReport()
    sessions_dir = store.sessions_dir
    entries, extras = load_sessions_json(sessions_dir / SESSIONS_FILE_NAME, report.skipped)
    degraded_sessions = extras.get("_sessions") if isinstance(extras.get("_sessions"), dict) else {}
    # Session rows first: a session begun (and perhaps ended by /new) while degraded must exist
    # in SQLite for `sessions show` / lookups, with its parent and end as the degraded run kept them.
    await store.merge_session_rows([dict(row, session_id=str(sid)) for sid, row in degraded_sessions.items()
                                    if isinstance(row, dict)])
    # Transcripts are the `.jsonl` files of sessions the degraded index knows (routes and its
    # `_sessions` rows) or SQLite knows; the degraded intake logs (`inbound*.jsonl`) are not.
    known = {e.session_id for e in entries.values()} | {str(k) for k in degraded_sessions}
    newer = []
    for key, entry in entries.items():
        current = await store.get_entry(key)
        if current is None or current.updated_at < entry.updated_at:
            newer.append(entry)
    if newer:
        await store.import_entries(newer, replace=True)
        report.sessions = len(newer)
    for path in sorted(sessions_dir.glob("*.jsonl")):
        session_id = path.name[: -len(".jsonl")]
        try:
            if path.stat().st_mtime < since_ts - _MTIME_SLACK_S:
                continue  # older than the degraded run (e.g. a legacy transcript)
            validate_session_id(session_id)
        except (OSError, ValueError):
            continue  # not a transcript file of ours
        if session_id not in known and await store.session_info(session_id) is None:
            continue
        present = {_message_key(m) for m in await store.load_transcript(session_id)}
        for message in _degraded_rows(path, report):
            key = _message_key(message)
            if key in present:
                continue
            try:
                await store.append_to_transcript(session_id, message)
            except (ValueError, TypeError) as exc:
                report.skipped.append(f"{path.name}: {exc}")
                log.warning("%s: a message was not merged: %s", path, exc)
                continue
            present.add(key)
            report.messages += 1
        # Set aside (kept for audit): a later degraded run must start from an empty file, not
        # replay this one over a transcript that may have been rewound in SQLite since.
        os.replace(path, path.with_name(path.name + MERGED_SUFFIX))
    await _merge_intake(store, sessions_dir / INTAKE_FILE_NAME, report)
    await _merge_turn_markers(store, sessions_dir / MARKERS_FILE_NAME, report)
    return report


def _open_intake_rows(path: Path, report: MergeReport) -> list[dict]:
    """Replay the degraded intake log (`accept` / `start` / `finish` lines): the rows never
    finished, in arrival order, as `{"id", "session_key", "state", "payload"}`."""
    rows: dict[int, dict] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    for number, line in enumerate(lines, 1):
        try:
            op = json.loads(line)
            kind, ident = op["op"], int(op["id"])
        except (ValueError, TypeError, KeyError) as exc:
            report.skipped.append(f"{path.name} line {number}: {exc}")
            continue
        if kind == "accept":
            rows[ident] = {"id": ident, "session_key": op.get("session_key"), "payload": op.get("payload"),
                           "state": op.get("state") or "pending"}
        elif kind == "start" and ident in rows:
            rows[ident]["state"] = "running"
        elif kind == "finish":
            rows.pop(ident, None)
    return [rows[i] for i in sorted(rows)]


async def _merge_intake(store: SessionStore, path: Path, report: MergeReport) -> None:
    """Messages accepted while degraded whose turn never began are accepted again by SQLite's
    durable intake (docs/behaviour.md §5), so the gateway's start-up replay answers them; a platform
    message id already in SQLite is not accepted twice. 'running' rows are left to the turn
    markers (`_merge_turn_markers`): their user message is already in the transcript."""
    for row in _open_intake_rows(path, report):
        if row["state"] != "pending":
            continue
        try:
            event = json.loads(row["payload"])
            if not isinstance(event, dict) or not row["session_key"]:
                raise ValueError("not an inbound event")
            if await store.accept_inbound_event(str(row["session_key"]), event) is not None:
                report.pending += 1
        except (TypeError, ValueError) as exc:
            report.skipped.append(f"{path.name} row {row['id']}: {exc}")
            log.warning("%s: intake row %s not merged: %s", path, row["id"], exc)
    if path.exists():
        # A later degraded run must not replay these rows a second time.
        os.replace(path, path.with_name(path.name + MERGED_SUFFIX))


async def _merge_turn_markers(store: SessionStore, path: Path, report: MergeReport) -> None:
    """A turn that was running when a degraded run ended (crash, drain timeout) is marked
    `resume_pending` ("restart_interrupted", seed §7) on its route when the route still points at
    that session: the start-up recovery then answers its user message (and does nothing if the
    transcript shows the reply was recorded)."""
    try:
        markers = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return
    except (OSError, ValueError) as exc:
        report.skipped.append(f"{path.name}: {exc}")
        markers = {}
    for key, marker in (markers.items() if isinstance(markers, dict) else ()):
        entry = await store.get_entry(key)
        if entry is None or not isinstance(marker, dict) or marker.get("session_id") != entry.session_id:
            continue
        if await store.mark_resume_pending(key, "restart_interrupted"):
            report.resumed += 1
    os.replace(path, path.with_name(path.name + MERGED_SUFFIX))

