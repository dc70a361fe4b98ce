"""`hermes-gateway doctor`: everything `run` needs, checked without starting a gateway
(docs/operations.md §1).

Each check gives one `Check` (`ok`, `warn`, `fail`, or `fixed` after a `--fix` repair) whose
detail is one line naming the file, key or plugin. A `fail` is something that stops `run` (or
loses data if left alone); a `warn` is worth knowing but does not stop the gateway.

Nothing here writes unless `fix=True` (but for the probes of the home and state.db checks: an
empty directory made and removed at once in place of a missing HERMES_HOME, an empty file made
and removed at once in the home and in state.db's folder), and then only safe repairs: permissions tightened
to owner-only, the full-text index rebuilt from the stored messages, `sessions.json` rebuilt
from `state.db`. Repairs that need the store are refused while a gateway holds the home.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ..sdk.errors import describe_failure
from ..dirs import (nearest_existing, not_a_file, this_user, why_dir_uncreatable, why_dir_unwritable,
                    why_file_unwritable)
from ..store.home_lock import LOCK_FILE_NAME, home_is_locked
from ..store.session_store import sessions_dir_in_the_way

OK, WARN, FAIL, FIXED = "ok", "warn", "fail", "fixed"
# Free space under HERMES_HOME below which the check fails (SQLite's WAL and the sessions.json
# rewrite need room) or warns.
DISK_FAIL_BYTES = 100 * 1024 * 1024
DISK_WARN_BYTES = 1024 * 1024 * 1024
# Seconds `--online` waits for one platform to answer.
ONLINE_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class Check:
    """One doctor finding: `name` (e.g. `state.db`), `status` (ok / warn / fail / fixed) and a
    one-line `detail`."""

    name: str
    status: str
    detail: str

    def as_dict(self) -> dict[str, str]:
        """JSON-ready dict (`doctor --json` rows)."""
        return {"check": self.name, "status": self.status, "detail": self.detail}


def load_for_run(config: Any, *, raise_on_fatal: bool = True) -> tuple[Any, Any, dict[str, Any]]:
    """Load plugins, overrides, adapter classes and platform settings exactly as `run` does.

    Args:
        config: a loaded GatewayConfig.
        raise_on_fatal: False keeps going past a plugin or deployment override that fails to
            load (only recorded in the report), to check what the others provide.
    Returns:
        `(pm, report, {platform: validated settings})`.
    Raises:
        PluginLoadError, AdapterLoadError, PluginSettingsError (a ConfigError), or
        pluggy.PluginValidationError: what would stop `run`, one line each.
    """
    from ..plugin_system.adapters import resolve_adapter_classes
    from ..plugin_system.manager import create_plugin_manager
    from ..plugin_system.settings import validate_plugin_settings

    pm, report = create_plugin_manager(config, raise_on_fatal=raise_on_fatal)
    classes = resolve_adapter_classes(config.enabled_platforms(), report, config=config)
    settings = validate_plugin_settings(pm, config, adapter_classes=classes, report=report)
    return pm, report, settings


def check_plugins(config: Any) -> tuple[list[Check], dict[str, Any] | str]:
    """Plugins, overrides and each enabled platform's adapter and settings (`run` needs them).

    Returns the checks and the validated platform settings. When loading fails (a `fail` row),
    the settings are validated again with what does load (a deployment override that cannot be
    imported does not hide the platforms' credentials); when even that fails, the second item
    is why, in words, for the rows that could not be checked."""
    try:
        _pm, report, settings = load_for_run(config)
    except Exception as exc:  # every loader error carries one line naming the plugin or key
        failed = [Check("plugins", FAIL, " ".join(str(exc).split()) or describe_failure(exc))]
        try:
            return failed, load_for_run(config, raise_on_fatal=False)[2]
        except Exception as again:
            why = " ".join(str(again).split()) or describe_failure(again)
            # A colon, not parentheses: the loader's line often ends in its own (installed
            # platforms: …), and the row reads `not checked, since …`.
            return failed, f"the platforms' settings could not be loaded: {why}"
    checks = [Check(f"plugin {r.name}", WARN, f"{r.status}: {r.error}") for r in report.failed()]
    checks += [Check(f"plugin {r.name}", WARN, warning) for r in report.records for warning in r.warnings]
    checks += [Check("plugins", WARN, warning) for warning in report.warnings]  # e.g. HERMES_PLUGINS typos
    loaded = sorted({r.name for r in report.records if r.status == "loaded"})
    checks.insert(0, Check("plugins", OK, f"{len(loaded)} loaded" + (f": {', '.join(loaded)}" if loaded else "")))
    return checks, settings


def check_access(config: Any, settings: dict[str, Any]) -> list[Check]:
    """Each enabled network platform allows somebody (docs/behaviour.md §9): a table without
    `allowed_users`, `allowed_chats`, `allowed_roles` or `allow_all = true` refuses everyone
    (a warning: the gateway runs, and says the same at start)."""
    from ..pipeline.access import refusing_platforms
    from ..plugin_system.settings import common_platform_settings

    common = common_platform_settings(config, settings)
    refusing = set(refusing_platforms(config.enabled_platforms(), common))
    return [Check(f"access {platform}", WARN if platform in refusing else OK,
                  "no allowed_users/allow_all configured: every message will be refused" if platform in refusing
                  else "allow-list set")
            for platform in config.enabled_platforms() if platform != "local"]


def check_credentials(config: Any, settings: dict[str, Any]) -> list[Check]:
    """Each enabled platform's credentials are present (the settings model's
    `missing_credentials()`; values are never shown)."""
    checks = []
    for platform in config.enabled_platforms():
        model = settings.get(platform)
        missing = model.missing_credentials() if hasattr(model, "missing_credentials") else []
        if missing:
            names = ", ".join(f"platforms.{platform}.{key} (HERMES_PLATFORMS__{platform.upper()}__{key.upper()})"
                              for key in missing)
            checks.append(Check(f"credentials {platform}", FAIL, f"not set: {names}"))
        else:
            checks.append(Check(f"credentials {platform}", OK, "present" if model is not None else "none needed"))
    return checks


def check_secrets(config: Any, settings: dict[str, Any] | str) -> list[Check]:
    """A warning naming the secret settings (API keys, tokens, the store's DSN) the config file
    writes out, with the variable each belongs in: docs/configuration.md §1 keeps secrets in the
    environment or an uncommitted `.env` file, never in the config file, which is often copied,
    shared or committed. No row when it holds none; values are never shown.

    Args:
        settings: the platforms' validated settings models (`check_plugins`), or the reason
            they did not load (then only the core's own secrets are looked for).
    """
    from ..settings import GatewayConfig, config_file_path, secrets_in_config_file

    tables: dict[tuple[str, ...], Any] = {(): GatewayConfig}
    if isinstance(settings, dict):
        tables.update({("platforms", platform): type(model) for platform, model in settings.items()
                       if isinstance(model, BaseModel)})
    path = config_file_path(config.home)
    keys = secrets_in_config_file(path, tables)
    if not keys:
        return []
    variables = ", ".join("HERMES_" + key.replace(".", "__").upper() for key in keys)
    return [Check("secrets", WARN, f"config file {path} holds {', '.join(keys)}: keep secrets in the environment "
                                   f"({variables}) or an uncommitted .env file, not in the config file")]


async def check_online(config: Any, settings: dict[str, Any]) -> list[Check]:
    """`--online`: each enabled platform's adapter reaches its platform with the configured
    credentials (`BaseAdapter.check_online`); nothing is received or sent."""
    from ..plugin_system.adapters import resolve_adapter_classes
    from ..plugin_system.manager import create_plugin_manager

    # Past a deployment override that fails to load (its own `fail` row): the platforms are
    # reached all the same.
    _pm, report = create_plugin_manager(config, raise_on_fatal=False)
    classes = resolve_adapter_classes(config.enabled_platforms(), report, config=config)
    checks = []
    for platform, cls in sorted(classes.items()):
        try:
            adapter = cls(settings.get(platform))
            who = await asyncio.wait_for(adapter.check_online(), ONLINE_TIMEOUT_S)
        except Exception as exc:  # one line naming what failed; adapters never put secrets in it
            checks.append(Check(f"online {platform}", FAIL, describe_failure(exc)))
            continue
        if who is None:
            checks.append(Check(f"online {platform}", WARN, "this platform has no online check"))
        else:
            checks.append(Check(f"online {platform}", OK, f"reachable: {who}"))
    return checks


def _private(path: Path, fix: bool) -> Check | None:
    """A warning (or a fix) when `path` is readable or writable by group or others. The fix
    takes their bits away and leaves the owner's as they are: a file the operator made
    read-only stays read-only (never granted a write)."""
    try:
        current = stat.S_IMODE(path.stat().st_mode)
    except (FileNotFoundError, NotADirectoryError):  # missing, or a file where its folder belongs
        return None
    if current & 0o077 == 0:
        return None
    private = current & ~0o077
    if fix:
        os.chmod(path, private)
        return Check(f"permissions {path.name}", FIXED, f"{path} was {current:04o}, now {private:04o}")
    return Check(f"permissions {path.name}", WARN,
                 f"{path} is {current:04o}: group or others can read personal data (--fix sets {private:04o})")


def _why_home_uncreatable(home: Path) -> str | None:
    """Why the first start could not create the missing `home` (its nearest existing ancestor
    is not a directory, or refuses a new one), or None. Learnt as the start would: an empty
    directory is created in that ancestor and removed at once."""
    place = nearest_existing(home)
    try:
        os.rmdir(tempfile.mkdtemp(dir=place, prefix=".hermes-doctor-"))
    except OSError as exc:
        return f"HERMES_HOME {why_dir_uncreatable(home, exc)}"
    return None


def check_home(config: Any, fix: bool) -> list[Check]:
    """HERMES_HOME exists, is a writable directory, and it and its data files are owner-only."""
    home = Path(config.home)
    if not home.exists():
        obstacle = _why_home_uncreatable(home)
        if obstacle is not None:
            return [Check("home", FAIL, obstacle)]
        return [Check("home", WARN, f"HERMES_HOME {home} does not exist yet (the first start creates it)")]
    if not home.is_dir():
        return [Check("home", FAIL, f"HERMES_HOME {home} exists and is not a directory")]
    unwritable = why_dir_unwritable(home)  # the start's own probe (app.check_home)
    if unwritable is not None:
        return [Check("home", FAIL, f"HERMES_HOME {home} is not writable by {this_user()}: {unwritable}")]
    checks = [Check("home", OK, str(home))]
    in_the_way = sessions_dir_in_the_way(config.sessions_dir)
    if in_the_way is not None:
        checks.append(Check("sessions", FAIL, in_the_way))
    folders = (home, config.sessions_dir)
    files = (config.db_path, home / "gateway.log", config.sessions_dir / "sessions.json")
    # A directory where one of the files belongs has its own failing row (`not_a_file`): its mode
    # is beside the point, and `--fix` must not change what the operator is told to move away.
    for path in (*folders, *(f for f in files if not_a_file(f) is None)):
        finding = _private(Path(path), fix)
        if finding is not None:
            checks.append(finding)
    return checks


def check_lock(config: Any) -> tuple[Check, int | None]:
    """Who holds the home lock (informational). Returns the check and the holder's pid (0:
    unknown pid, None: nobody); a `fail` when something other than a file is in the lock
    file's place (the start could not take the lock)."""
    obstacle = not_a_file(Path(config.home) / LOCK_FILE_NAME)
    if obstacle is not None:
        return Check("lock", FAIL, f"{obstacle} (no gateway can start while it is there)"), None
    pid = home_is_locked(Path(config.home))
    if pid is None:
        return Check("lock", OK, "no gateway holds this home"), None
    return Check("lock", OK, f"a gateway holds this home (pid {pid or 'unknown'})"), pid


def _empty_database(path: Path, mirror: Path) -> Check | None:
    """A warning when `state.db` holds no session (a 0-byte or new file, or one a read-only
    command has since given its schema) while the sessions.json mirror still lists sessions: the
    database was replaced or truncated, and the next start would take the routes sessions.json
    lists but not their transcripts (docs/behaviour.md §3)."""
    from ..store.mirror import load_sessions_json

    listed = len(load_sessions_json(mirror)[0])
    if not listed:
        return None
    return Check("state.db", WARN, f"{path} holds no session but {mirror} lists {listed} session(s): state.db "
                                   "was replaced or truncated; restore it from a backup before the next start "
                                   "(docs/operations.md §1), which would take those routes but not their "
                                   "transcripts")


def _adoption_cut_short(conn: sqlite3.Connection) -> Check | None:
    """A warning while state.db marks an adoption of sessions.json under way
    (`SessionStore._adopt_sessions_json`): it was cut short (a crash, a failed write), and until
    the next start finishes it some routes or legacy transcripts are not in state.db yet
    (docs/behaviour.md §3)."""
    from ..store.session_store import ADOPTING_META

    if not conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone():
        return None  # a schema before the meta table: no adoption ever marked
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (ADOPTING_META,)).fetchone()
    if not row or not row[0]:
        return None
    return Check("sessions.json adoption", WARN, f"taking the routes and legacy transcripts {row[0]} lists was cut "
                                                "short at an earlier start: the next start finishes it; until then "
                                                "those sessions may be missing or show no messages")


async def check_store(config: Any) -> Check:
    """`store`: a server store (`[store] backend`, docs/architecture.md §7) opens as `run` opens
    it — which creates or upgrades its schema, as `run` would — within `ONLINE_TIMEOUT_S`. Such
    a home has no state.db and no degraded files, so those checks are not made; a failure is
    the one line `run` would stop with, naming host, port and database, never the password."""
    from ..store.backends import create_store_backend
    from ..store.db import StoreError

    name = config.store.backend
    backend = None
    try:
        backend = create_store_backend(config)
        await asyncio.wait_for(backend.open(), ONLINE_TIMEOUT_S)
    except StoreError as exc:
        return Check("store", FAIL, " ".join(str(exc).split()))
    except asyncio.TimeoutError:
        return Check("store", FAIL, f"[store] backend {name!r} did not open within {ONLINE_TIMEOUT_S:.0f} s")
    finally:
        if backend is not None:
            try:
                await backend.close()
            except Exception:  # a half-open engine: the finding above is what matters
                pass
    return Check("store", OK, f"{name}: {getattr(backend, 'where', 'opened')}")


def check_database(config: Any) -> list[Check]:
    """`state.db`: opens, passes SQLite's integrity check, schema not newer than this gateway,
    every table, index and trigger of its schema version present, full-text index consistent
    with the messages (FTS5 integrity-check, rank = 1)."""
    from ..store.db import schema_version
    from ..store.fts import FTS_BATCHES_SCHEMA, INTEGRITY_CHECK, catch_up, is_fts_damage, named_damage
    from ..store.mirror import SESSIONS_FILE_NAME
    from ..store.sqlite_backend import HOLDS_SESSIONS, missing_schema_objects

    path = Path(config.db_path)
    if not path.exists():
        return [Check("state.db", WARN, f"{path} does not exist yet (the first start creates it)")]
    obstacle = not_a_file(path)
    if obstacle is not None:
        return [Check("state.db", FAIL, f"{obstacle} (the gateway would run degraded beside it)")]
    unwritable = _why_database_unwritable(path)
    if unwritable is not None:
        # Said as what it is: SQLite's own words ("attempt to write a readonly database") read
        # as a broken file. The checks below need to write (FTS5's check is an INSERT).
        return [Check("state.db", FAIL, f"{path} is not writable by {this_user()}: {unwritable}; `run` writes it "
                                        "(and its -wal and -shm files beside it): give that user write access, "
                                        "then run doctor again to check the file itself")]
    try:
        # Read-write but writing nothing: FTS5's integrity-check is an INSERT statement, which
        # a read-only connection refuses. A running gateway waits for the check (its writes
        # wait for the lock, up to busy_timeout_s); its readers are not disturbed (WAL).
        conn = sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=config.storage.busy_timeout_s)
    except sqlite3.Error as exc:
        return [Check("state.db", FAIL, f"{path} cannot be opened: {exc} (the gateway would run degraded)")]
    try:
        try:
            result = [row[0] for row in conn.execute("PRAGMA integrity_check").fetchall()]
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        except sqlite3.DatabaseError as exc:
            return [Check("state.db", FAIL, f"{path} is not a usable SQLite database: {exc}")]
        if result != ["ok"]:
            return [Check("state.db", FAIL, f"{path} is damaged: {'; '.join(result[:3])}")]
        if version > schema_version():
            return [Check("state.db", FAIL, f"{path} has schema {version}, newer than this gateway's "
                                            f"{schema_version()}: upgrade hermes-gateway")]
        missing = missing_schema_objects(conn, version)  # none at schema 0: no migration ran
        if missing:
            return [Check("state.db", FAIL, f"{path} lacks {', '.join(missing)} of its schema {version}; "
                                            "--fix does not re-create what is missing: restore state.db from "
                                            "a backup (docs/operations.md §1)")]
        ok = Check("state.db", OK, f"integrity ok, schema {version}")
        adopting = _adoption_cut_short(conn)
        if version == 0 or not conn.execute(HOLDS_SESSIONS).fetchone()[0]:
            if adopting is not None:  # cut short before its routes committed: why state.db is empty
                return [ok, adopting]
            empty = _empty_database(path, Path(config.sessions_dir) / SESSIONS_FILE_NAME)
            if empty is not None:
                return [empty]
            if version == 0:
                return [ok]  # a new file: nothing more to check
        checks = [ok] + ([adopting] if adopting is not None else [])
        try:
            # From schema 7 the messages still waiting to be indexed are indexed first (the check
            # compares the index with every message), in a transaction rolled back after the check.
            conn.execute("BEGIN IMMEDIATE")
            try:
                if version >= FTS_BATCHES_SCHEMA:
                    catch_up(conn)
                conn.execute(INTEGRITY_CHECK)
            finally:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            checks.append(Check("full-text index", OK, "consistent with the messages"))
        except sqlite3.DatabaseError as exc:
            # Without a shadow table FTS5 says only "SQL logic error": the schema tells.
            damage = named_damage(conn, exc, version)
            if not is_fts_damage(damage):
                raise
            checks.append(Check("full-text index", FAIL, f"damaged ({damage}); --fix or `sessions reindex` "
                                                         "rebuilds it from the messages"))
        return checks
    finally:
        conn.close()


def _why_database_unwritable(path: Path) -> str | None:
    """Why `run` could not write state.db at `path` (an existing file), or None: the file
    cannot be opened for writing, or its folder refuses the -wal and -shm files (learnt as the
    home check learns it, by creating and removing a file there)."""
    unwritable = why_file_unwritable(path)
    if unwritable is not None:
        return unwritable
    unwritable = why_dir_unwritable(path.parent)
    if unwritable is not None:
        return f"its folder {path.parent} refuses new files ({unwritable})"
    return None


def _check_journal(sessions_dir: Path) -> Check:
    """The `degraded journal` row: whether the next healthy start merges the journal of
    `sessions_dir`, or what must be repaired first (docs/behaviour.md §12)."""
    from ..store.db import StoreError
    from ..store.journal import JOURNAL_FILE_NAME, read_journal

    journal = sessions_dir / JOURNAL_FILE_NAME
    try:
        damaged = read_journal(sessions_dir).damaged_lines
    except StoreError as exc:  # a damaged header: the message names the line and the repair
        return Check("degraded journal", WARN, str(exc))
    except OSError as exc:
        return Check("degraded journal", WARN, f"{journal} cannot be read ({exc.strerror or exc}): it is not "
                                               "merged until it can be")
    if damaged:
        return Check("degraded journal", WARN, f"{journal} line(s) {', '.join(map(str, damaged))} hold the damaged "
                                               "record of a committed transaction: it is not merged until the line "
                                               "is repaired, or removed to merge the rest without it")
    return Check("degraded journal", WARN, f"{journal} holds work of a degraded run; the next start with a healthy "
                                           "state.db merges it")


def check_leftovers(config: Any) -> list[Check]:
    """Files of a degraded run: the journal (merged at the next healthy start), the damaged
    transcripts a merge kept aside (docs/behaviour.md §12) and the files of an older gateway's
    degraded run (never merged automatically); the kept copies of a sessions.json whose entries
    were skipped (`check_kept_copies`); a missing or unreadable sessions.json."""
    from ..store.journal import pending_journal
    from ..store.merge import DAMAGED_DIR_NAME
    from ..store.session_store import OLD_DEGRADED_MARKER

    if sessions_dir_in_the_way(config.sessions_dir) is not None:
        return []  # nothing of the folder to look at: the `sessions` row (check_home) says what to do
    checks = []
    if pending_journal(config.sessions_dir) is not None:
        checks.append(_check_journal(config.sessions_dir))
    kept = sorted(p for p in (config.sessions_dir / DAMAGED_DIR_NAME).glob("*/*") if p.is_file())
    if kept:
        checks.append(Check("damaged transcripts", WARN, f"{len(kept)} degraded transcript(s) were merged without "
                                                         f"line(s) that could not be read: {', '.join(map(str, kept))}; "
                                                         "recover what you can from them, then delete them"))
    if (row := check_kept_copies(config)) is not None:
        checks.append(row)
    if (config.sessions_dir / OLD_DEGRADED_MARKER).exists():
        checks.append(Check("degraded files", WARN, f"{config.sessions_dir} holds an older gateway's degraded run "
                                                    f"({OLD_DEGRADED_MARKER}): `hermes-gateway sessions import "
                                                    f"{config.sessions_dir}`, then delete the marker"))
    mirror = config.sessions_dir / "sessions.json"
    if config.db_path.exists() and not mirror.exists():
        checks.append(Check("sessions.json", WARN, f"{mirror} is missing (rebuilt from state.db at the next "
                                                   "start, or by --fix)"))
    elif mirror.exists() and not mirror.is_file():
        # Nothing can be written over a directory: neither the gateway nor --fix rebuilds it.
        checks.append(Check("sessions.json", FAIL, f"{not_a_file(mirror)}; sessions.json is then rebuilt from "
                                                   "state.db at the next start, or by --fix"))
    elif mirror.exists():
        import json
        try:
            json.loads(mirror.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            why = (exc.strerror or "unreadable" if isinstance(exc, OSError) else
                   "not UTF-8" if isinstance(exc, UnicodeDecodeError) else "not valid JSON")
            checks.append(Check("sessions.json", WARN, f"{mirror} cannot be read ({why}); rebuilt "
                                                       "from state.db at the next start, or by --fix"))
    return checks or [Check("leftovers", OK, "no degraded-mode files")]


def check_kept_copies(config: Any) -> Check | None:
    """The `skipped entries` row: the copies of an older gateway's sessions.json kept because
    taking it skipped entries (`mirror.kept_skipped_copies`, docs/behaviour.md §3), each named,
    or None when there are none. On either store: the copies are files of the home."""
    from ..store.mirror import kept_skipped_copies

    kept = kept_skipped_copies(config.sessions_dir)
    if not kept:
        return None
    return Check("skipped entries", WARN, f"{len(kept)} copy(ies) of an older sessions.json hold entries that were "
                                          f"skipped when it was taken: {', '.join(map(str, kept))}; recover the "
                                          "entries you need from them, then delete them")


def check_disk(config: Any) -> Check:
    """Free space on the file system of HERMES_HOME (or its nearest existing parent)."""
    place = nearest_existing(config.home)
    free = shutil.disk_usage(place).free
    text = f"{free / 1024 ** 3:.1f} GiB free on {place}"
    if free < DISK_FAIL_BYTES:
        return Check("disk", FAIL, text + " (below 100 MiB: writes will fail)")
    if free < DISK_WARN_BYTES:
        return Check("disk", WARN, text + " (below 1 GiB)")
    return Check("disk", OK, text)


async def repair_store(config: Any, checks: list[Check]) -> list[Check]:
    """`--fix` with the store: rebuild a damaged full-text index, rewrite a missing or unreadable
    sessions.json. Takes the home lock (refused while a gateway runs). Returns the checks with
    the repaired ones replaced by `fixed`."""
    from ..store import SessionStore

    # sessions.json fails only when a directory stands in its place, which nothing writes over
    # (check_leftovers): only its warnings (missing, unreadable) are repaired.
    repairable = {"full-text index": (FAIL, WARN), "sessions.json": (WARN,)}
    wanted = {c.name for c in checks if c.status in repairable.get(c.name, ())}
    if not wanted or not config.db_path.exists() or sessions_dir_in_the_way(config.sessions_dir) is not None:
        return checks  # (the store cannot open while a file stands where sessions/ belongs)
    if home_is_locked(Path(config.home)) is not None:
        note = Check("fix", WARN, "a gateway holds this home: the index and sessions.json repairs need it stopped")
        return checks + [note]
    store = SessionStore(config.sessions_dir, config, lock_home=True)
    await store.open()  # a stale or missing sessions.json is marked for rewrite by the open itself
    try:
        rebuilt = await store.check_fts() if "full-text index" in wanted else False
        await store.flush_mirror()
    finally:
        await store.close()
    fixed = {"full-text index": Check("full-text index", FIXED, "rebuilt from the stored messages")
             if rebuilt else None,
             "sessions.json": Check("sessions.json", FIXED, "rewritten from state.db")}
    return [fixed.get(c.name) or c if c.name in wanted else c for c in checks]


async def run_doctor(config: Any, *, fix: bool = False, online: bool = False) -> list[Check]:
    """Every check in order: home, lock, plugins, credentials (and with `online`, each platform
    reached), secrets in the config file, state.db, leftovers, disk.

    Args:
        config: a loaded GatewayConfig (a config that does not load is the CLI's own first check).
        fix: apply the safe repairs (module docstring).
        online: reach each enabled platform with its credentials (`check_online`).
    """
    checks = check_home(config, fix)
    lock, _pid = check_lock(config)
    checks.append(lock)
    plugin_checks, settings = check_plugins(config)
    checks += plugin_checks
    if not config.enabled_platforms():
        checks.append(Check("platforms", FAIL, "no platform is enabled: set `enabled = true` in a "
                                               "[platforms.<name>] table"))
    if isinstance(settings, str):
        # Each row still appears, saying why it was not checked (docs/operations.md §1).
        checks += [Check(f"{name} {platform}", WARN, f"not checked, since {settings}")
                   for name in ("credentials", "access") for platform in config.enabled_platforms()
                   if name == "credentials" or platform != "local"]
    else:
        checks += check_credentials(config, settings)
        checks += check_access(config, settings)
        if online:
            checks += await check_online(config, settings)
    checks += check_secrets(config, settings)
    if not config.store.builtin:
        checks.append(await check_store(config))
        if (row := check_kept_copies(config)) is not None:  # the leftovers of state.db are not checked
            checks.append(row)
    elif Path(config.home).is_dir():
        checks += check_database(config)
        checks += check_leftovers(config)
    checks.append(check_disk(config))
    if fix:
        checks = await repair_store(config, checks)
    return checks
