"""Small file primitives of the store and its neighbours: the atomic write every state file uses
(sessions.json, degraded transcripts, `.clean_shutdown`, `restart_counts.json`) and the lenient
readers that treat a missing or unreadable file as empty, logging why (docs/behaviour.md §3: a corrupt file
never crashes start-up)."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from ..model.timeutil import parse_timestamp

log = logging.getLogger(__name__)

# Written by a gateway's clean stop, consumed by the next start (seed §7; docs/behaviour.md §6).
CLEAN_SHUTDOWN = ".clean_shutdown"


def write_atomic(path: Path, text: str | bytes, mode: int = 0o600) -> None:
    """Write `text` to `path` atomically: temp file beside it, fsync, chmod, rename, fsync dir.
    A `str` is written as UTF-8, `bytes` as they are (a copy of a file byte for byte).

    Raises:
        OSError: the directory is not writable or the disk is full (the old file is untouched).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with (os.fdopen(fd, "wb") if isinstance(text, bytes) else os.fdopen(fd, "w", encoding="utf-8")) as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


class WriteFailures:
    """A file rewritten again and again (the sessions.json mirror, status.json) meets a run of
    failed writes (a full disk, a file-size limit): the first failure of the run is one WARNING
    naming the file and the reason, the rest are silent, and the first write that succeeds again
    is one INFO line (docs/operations.md §4), as `gateway.log` itself does on stderr. What a
    failed write costs (retried later, shown stale) is the caller's `consequence`.

    Args:
        logger: the caller's logger.
        what: the words before the path in the lines (`"sessions.json mirror"`, `"status:"`).
        path: the file.
        consequence: the end of the warning, after the reason.
    """

    def __init__(self, logger: logging.Logger, what: str, path: Path, consequence: str) -> None:
        self._log = logger
        self._what = what
        self._path = path
        self._consequence = consequence
        self.failing = False
        self.failed_attempts = 0  # failed writes of the current (or last) run

    def failed(self, exc: BaseException) -> None:
        """A write failed: said once per run of failures."""
        self.failed_attempts += 1
        if self.failing:
            return
        self.failing = True
        self._log.warning("%s %s cannot be written (%s): %s", self._what, self._path,
                          _reason(exc), self._consequence)

    def succeeded(self) -> None:
        """A write succeeded: ends a run of failures with one INFO line."""
        if not self.failing:
            return
        self.failing = False
        self._log.info("%s %s written again after %d failed attempt(s)", self._what, self._path,
                       self.failed_attempts)
        self.failed_attempts = 0


def _reason(exc: BaseException) -> str:
    """`No space left on device` rather than `[Errno 28] No space left on device: '/…/.x.tmp'`."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def says_clean(marker_text: str) -> bool:
    """True when the text of a `.clean_shutdown` marker says the last run stopped cleanly: empty,
    as `GatewayApp.stop` and upstream write it, or a timestamp, as older builds wrote. Anything
    else (`invalid`, written when the marker could not be removed) says it did not."""
    text = marker_text.strip()
    if not text:
        return True
    try:
        return parse_timestamp(text) is not None
    except ValueError:
        return False


def read_lines(path: Path) -> list[str]:
    """The lines of a UTF-8 text file; `[]` when it is missing or unreadable (logged)."""
    try:
        return Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("%s unreadable (%s); ignored", path, exc)
        return []


def read_json_object(path: Path) -> dict[str, Any]:
    """A JSON object file as a dict; `{}` when it is missing, unreadable, not JSON or not an
    object (logged, except when missing)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("%s unreadable (%s); ignored", path, exc)
        return {}
    if not isinstance(data, dict):
        log.warning("%s is not a JSON object; ignored", path)
        return {}
    return data
