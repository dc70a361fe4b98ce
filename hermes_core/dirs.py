"""The directories the gateway creates and checks (HERMES_HOME, `sessions/`, a merge's target):
created owner-only, and, when one cannot be created or written, why, in words that name the
obstacle. It imports nothing of the package, so the store, the app, the CLI and doctor can all
use it (docs/architecture.md "Import order")."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


PRIVATE_DIR_MODE = 0o700


def ensure_private_dir(path: Path | str) -> Path:
    """Create directory `path` (and missing parents) if needed; a directory created here is
    owner-only (0700): HERMES_HOME and `sessions/` hold transcripts, which are personal data.
    An existing directory keeps the mode its owner chose.

    Returns the path. Raises OSError (FileExistsError: a non-directory is in the way)."""
    path = Path(path)
    if path.is_dir():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir(mode=PRIVATE_DIR_MODE)
    except FileExistsError:
        if not path.is_dir():
            raise
        return path  # created by a concurrent start-up: its creator set the mode
    os.chmod(path, PRIVATE_DIR_MODE)  # mkdir's mode is masked by the umask; be explicit
    return path


def nearest_existing(path: Path | str) -> Path:
    """`path` itself when it exists, else its nearest ancestor that does (where creating `path`
    would begin). An ancestor that cannot be looked at counts as missing."""
    place = Path(path)
    while not os.path.exists(place) and place != place.parent:
        place = place.parent
    return place


def why_dir_uncreatable(path: Path | str, exc: OSError) -> str:
    """Why directory `path` could not be created (`exc`: what creating it raised), naming the
    obstacle: `path` itself is not a directory, an ancestor of it is not one, or the nearest
    existing ancestor refused the new directory (`… cannot be created in /proc: No such file
    or directory`)."""
    path = Path(path)
    place = nearest_existing(path)
    if place == path:
        return f"{path} exists and is not a directory"
    if not place.is_dir():
        return f"{path} cannot be created: {place} is not a directory"
    return f"{path} cannot be created in {place}: {exc.strerror or exc}"


def not_a_file(path: Path | str) -> str | None:
    """The line saying that `path`, where the gateway keeps one of its files (`state.db`,
    `gateway.lock`, `sessions.json`…), is something else, with what to do: `<path> is a
    directory, not a file: move it away` (`… is not a regular file: …` for a socket, a FIFO, a
    device); None when `path` is missing or a regular file (a symlink counts as what it points
    to). Callers add what follows from it; doctor's rows and the start say it alike
    (docs/operations.md §1)."""
    path = Path(path)
    try:
        if not os.path.exists(path) or path.is_file():
            return None
        kind = "a directory, not a file" if path.is_dir() else "not a regular file"
    except OSError:  # cannot be looked at: the open that follows says why
        return None
    return f"{path} is {kind}: move it away"


def why_dir_unwritable(path: Path | str) -> str | None:
    """Why a file cannot be created in the existing directory `path` (`"Permission denied"`,
    `"Read-only file system"`…), learnt by creating and removing one; None when it can. Not
    `os.access`: it says yes to root everywhere, also where the first write fails (sysfs)."""
    try:
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-check-"):
            pass
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def why_home_unusable(home: Path | str) -> str | None:
    """Create HERMES_HOME `home` if needed (owner-only, `ensure_private_dir`) and prove a file can
    be created in it; None when it can. Otherwise the one line that says why, as the start and
    `sessions import` both say it (docs/operations.md §5): `HERMES_HOME <home> exists and is not
    a directory`, `HERMES_HOME <home> cannot be created in <folder>: Permission denied`,
    `HERMES_HOME <home> is not writable: Permission denied`."""
    try:
        ensure_private_dir(home)
    except OSError as exc:
        # A file in the way is ensure_private_dir's FileExistsError: the first reason given.
        return f"HERMES_HOME {why_dir_uncreatable(home, exc)}"
    unwritable = why_dir_unwritable(home)
    return None if unwritable is None else f"HERMES_HOME {home} is not writable: {unwritable}"


def this_user() -> str:
    """Who this process writes as, for "not writable by …" lines: `user <name> (uid <n>)`, or
    `uid <n>` when the uid has no passwd entry (some containers)."""
    import pwd

    uid = os.geteuid()
    try:
        return f"user {pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def why_file_unwritable(path: Path | str) -> str | None:
    """Why the existing file `path` cannot be written in place, learnt by opening it for
    writing (nothing is written, its times stay as they are): `"Permission denied"`,
    `"Read-only file system"`…; None when it can. Not `os.access`, for the reason
    `why_dir_unwritable` gives."""
    try:
        os.close(os.open(path, os.O_WRONLY))
    except OSError as exc:
        return exc.strerror or str(exc)
    return None
