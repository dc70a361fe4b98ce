"""One gateway per `HERMES_HOME` (docs/behaviour.md §3): an exclusive `fcntl` lock on `<home>/gateway.lock`.

The lock belongs to the open file description, so it is released by the kernel when the holder
exits or is killed; a stale file left behind by a crash never blocks the next start.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from ..dirs import ensure_private_dir, not_a_file
from .db import StoreError

LOCK_FILE_NAME = "gateway.lock"


class HomeLockedError(Exception):
    """Another gateway (or a writer) holds the lock on this HERMES_HOME; the message names the
    home and the holder's pid."""

    def __init__(self, home: Path, pid: int | None) -> None:
        self.home = home
        self.pid = pid
        holder = f"pid {pid}" if pid else "another process"
        super().__init__(f"HERMES_HOME {home} is in use by another gateway ({holder}); "
                         f"stop it or use a different HERMES_HOME")


class HomeLock:
    """Exclusive, non-blocking lock on `<home>/gateway.lock`.

    Args:
        home: the HERMES_HOME directory (created if missing).
    """

    def __init__(self, home: Path) -> None:
        self.home = Path(home)
        self.path = self.home / LOCK_FILE_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock and write our pid into the file.

        Raises:
            HomeLockedError: another open file description holds the lock.
            StoreError: something other than a file is in the lock file's place (`cannot take
                the home lock: <home>/gateway.lock is a directory, not a file: move it away`).
            OSError: the home or lock file cannot be created.
        """
        if self._fd is not None:
            return
        ensure_private_dir(self.home)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            obstacle = not_a_file(self.path)
            if obstacle is None:
                raise
            # Said in words: the OSError's "Is a directory" names neither the file's role nor the fix.
            raise StoreError(f"cannot take the home lock: {obstacle}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(fd)
            os.close(fd)
            raise HomeLockedError(self.home, pid) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        """Release the lock (idempotent). The file stays; only the lock matters."""
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    @property
    def held(self) -> bool:
        """True while this object holds the lock."""
        return self._fd is not None


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None


def home_is_locked(home: Path) -> int | None:
    """Return the holder's pid (or 0 if unknown) when a gateway holds `home`, else None.

    Used by the admin CLI to refuse writes while a gateway runs; it probes with a shared lock and
    releases it immediately.
    """
    path = Path(home) / LOCK_FILE_NAME
    if not path.exists():
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_pid(fd) or 0
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
