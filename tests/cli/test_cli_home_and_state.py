"""HERMES_HOME / HERMES_CONFIG handling, owner-only file modes, admin commands on a home without
state, `sessions import DIR` and `sessions reindex` — each through the installed console script
as a real subprocess (docs/behaviour.md §0)."""

from __future__ import annotations

import json
import os
import select
import sqlite3
import stat
import subprocess
from pathlib import Path

import pytest
from cli_helpers import SCRIPT, bound_by_file_modes, gateway_env, run

def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# ---- item 1: an empty HERMES_HOME is unset ---------------------------------------------------

def test_empty_hermes_home_means_default_home_not_the_current_folder(tmp_path):
    fake_user_home = tmp_path / "user"
    fake_user_home.mkdir()
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    code, out, err = run(["chat"], gateway_env("", HOME=str(fake_user_home)), cwd, stdin="hello\n")
    assert (code, out, err) == (0, "echo: hello\n", "")
    assert sorted(p.name for p in cwd.iterdir()) == []  # nothing written into the current folder
    assert (fake_user_home / ".hermes" / "state.db").is_file()
    # the config file is looked up in the same home: a bad value there is reported from it
    (fake_user_home / ".hermes" / "hermes.toml").write_text("group_sessions_per_user = \"maybe\"\n")
    code, out, err = run(["sessions", "list"], gateway_env("", HOME=str(fake_user_home)), cwd)
    assert code == 2
    assert err.endswith(f"(config file {fake_user_home / '.hermes' / 'hermes.toml'})\n")


def test_empty_hermes_home_in_process_agrees_with_config_path(tmp_path, monkeypatch):
    from hermes_core.settings import config_file_path, load_config

    monkeypatch.setenv("HERMES_HOME", "")
    monkeypatch.delenv("HERMES_CONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    config = load_config()
    assert config.home == tmp_path / ".hermes"
    assert config_file_path() == tmp_path / ".hermes" / "hermes.toml"


def test_a_relative_hermes_home_is_named_by_its_absolute_path(tmp_path):
    # docs/configuration.md §1: made absolute once, against the directory the command starts in
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    home = tmp_path / "cwd" / "relative" / "home"
    code, out, err = run(["chat"], gateway_env("relative/home"), cwd, stdin="hello\n")
    assert (code, out, err) == (0, "echo: hello\n", "")
    assert json.loads((home / "status.json").read_text())["home"] == str(home)
    assert f"state.db {home}/state.db: applying migration" in (home / "gateway.log").read_text()
    code, out, err = run(["status"], gateway_env("relative/home"), cwd)
    assert code == 3
    assert out.startswith(f"no gateway is running on {home} (last seen ")
    code, out, err = run(["doctor"], gateway_env("relative/home"), cwd)
    assert code == 0
    assert [line.split() for line in out.splitlines() if line.startswith("home ")] == [["home", "ok", str(home)]]


# ---- item 2: an explicit HERMES_CONFIG must exist ----------------------------------------------

@pytest.mark.parametrize("args", [["chat"], ["run"], ["sessions", "list"], ["plugins"]], ids=" ".join)
def test_missing_explicit_config_file_stops_start_up(tmp_path, args):
    missing = tmp_path / "nonexistent.toml"
    code, out, err = run(args, gateway_env(tmp_path / "home", HERMES_CONFIG=str(missing)), tmp_path)
    assert (code, out, err) == (2, "", f"hermes-gateway: error: config file {missing} (HERMES_CONFIG) does not exist\n")
    assert not (tmp_path / "home").exists()


def test_absent_default_config_file_is_fine(tmp_path):
    code, out, err = run(["chat"], gateway_env(tmp_path / "home"), tmp_path, stdin="hi\n")
    assert (code, out, err) == (0, "echo: hi\n", "")


# ---- item 3: read-only admin commands never create a store ------------------------------------

@pytest.mark.parametrize("args", [["sessions", "list"], ["sessions", "show", "x"], ["sessions", "search", "x"],
                                  ["sessions", "export", "x"], ["sessions", "prune", "--days", "1"],
                                  ["sessions", "reindex"]], ids=" ".join)
def test_admin_commands_on_a_home_without_state_create_nothing(tmp_path, args):
    home = tmp_path / "typo"
    code, out, err = run(args, gateway_env(home), tmp_path)
    assert (code, out, err) == (2, "", f"hermes-gateway: error: no gateway state at {home} "
                                       f"(state.db not found at {home / 'state.db'})\n")
    assert not home.exists()
    home.mkdir()  # an existing but empty folder stays empty too
    assert run(args, gateway_env(home), tmp_path)[0] == 2
    assert list(home.iterdir()) == []


@pytest.mark.parametrize("args", [["sessions", "list"], ["sessions", "show", "x"], ["sessions", "export", "x"],
                                  ["sessions", "erase-user", "telegram", "111"]], ids=" ".join)
def test_admin_commands_on_a_home_that_is_a_file_say_so(tmp_path, args):
    # `status` says a HERMES_HOME that is a file is one (docs/operations.md §2); the sessions
    # commands used to look for state.db inside it ("state.db not found at <file>/state.db").
    home = tmp_path / "afile"
    home.write_text("not a folder")
    code, out, err = run(args, gateway_env(home), tmp_path)
    assert (code, out, err) == (2, "", f"hermes-gateway: error: no gateway state at {home}: it is a file, "
                                       "not a directory (HERMES_HOME)\n")
    assert home.read_text() == "not a folder"


@pytest.mark.parametrize("args", [["sessions", "list"], ["sessions", "show", "agent:main:local:dm:terminal"],
                                  ["sessions", "search", "hello"], ["sessions", "export", "x"],
                                  ["sessions", "prune", "--days", "1", "--yes"], ["sessions", "import", "{sessions_dir}"],
                                  ["sessions", "delete", "x", "--yes"],
                                  ["sessions", "erase-user", "local", "terminal", "--yes"],
                                  ["sessions", "reindex"]], ids=" ".join)
def test_admin_commands_refuse_a_state_db_that_cannot_be_opened(tmp_path, args):
    """The gateway runs degraded on such a file (docs/behaviour.md §12); the admin commands do
    not: that copy holds no transcripts, so a listing or export would come out empty and a
    write would go to its journal instead of state.db."""
    home = tmp_path / "home"
    assert run(["chat"], gateway_env(home), tmp_path, stdin="hello\n")[0] == 0
    (home / "state.db").write_bytes(b"not a database" * 100)
    before = sorted(p.name for p in (home / "sessions").iterdir())
    code, out, err = run([a.format(sessions_dir=home / "sessions") for a in args], gateway_env(home), tmp_path)
    assert (code, out, err) == (2, "", f"hermes-gateway: error: state.db {home / 'state.db'} cannot be opened: "
                                       "file is not a database\n")
    assert sorted(p.name for p in (home / "sessions").iterdir()) == before  # no journal begun


# ---- read-only commands write nothing into the home -------------------------------------------

def _files(home: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under `home` (relative) → (mode, size, mtime in ns)."""
    return {str(p.relative_to(home)): (p.stat().st_mode, p.stat().st_size, p.stat().st_mtime_ns)
            for p in [home, *home.rglob("*")]}


def _read_only_commands(home: Path, cwd: Path, prefix: list[str] | None = None) -> None:
    """`sessions list`, `show`, `search` on `home` (one chat: "hello pelican") answer as they
    should (docs/operations.md §5)."""
    env = gateway_env(home)
    code, out, err = run(["sessions", "list", "--json"], env, cwd, prefix=prefix)
    assert (code, err, [r["session_key"] for r in json.loads(out)]) == (0, "", ["agent:main:local:dm:terminal"])
    code, out, err = run(["sessions", "show", "agent:main:local:dm:terminal", "--json"], env, cwd, prefix=prefix)
    assert (code, err) == (0, "")
    assert [m["content"] for m in json.loads(out)["messages"]] == ["hello pelican", "echo: hello pelican"]
    # Two messages: both still wait for the index's next batch of 64, and are found all the same.
    code, out, err = run(["sessions", "search", "pelican", "--json"], env, cwd, prefix=prefix)
    assert (code, err) == (0, "")
    assert sorted(hit["snippet"] for hit in json.loads(out)) == ["echo: hello [pelican]", "hello [pelican]"]


def test_read_only_commands_leave_state_db_as_it_was(tmp_path):
    """A read opens state.db read-only: the file's mode, size and time stay as they were, and
    nothing else in the home changes but the empty -wal and the -shm any SQLite reader of a WAL
    database may leave beside it (docs/operations.md §5)."""
    home = tmp_path / "home"
    assert run(["chat"], gateway_env(home), tmp_path, stdin="hello pelican\n")[0] == 0
    (home / "state.db").chmod(0o640)  # the operator's choice: a read does not "fix" it
    before = _files(home)
    _read_only_commands(home, tmp_path)
    after = _files(home)
    assert after["state.db"] == before["state.db"]
    assert after["state.db-wal"][1] == 0
    readers = {".", "state.db-wal", "state.db-shm"}
    assert {k: v for k, v in after.items() if k not in readers} == {k: v for k, v in before.items() if k not in readers}


def test_a_read_beside_a_gateway_starting_is_never_torn(tmp_path):
    """A read that overlaps a gateway's start and its checkpoints sees a whole database each time
    (docs/operations.md §5): read state.db over and over, through the same read-only open the
    commands use (opened before the gateway starts, when no -wal exists), while a chat writes
    1,500 messages and their replies into it and checkpoints them."""
    import asyncio

    from hermes_core.store.db import Database

    home = tmp_path / "home"
    assert run(["chat"], gateway_env(home), tmp_path, stdin="hello pelican\n")[0] == 0
    assert not (home / "state.db-wal").exists()  # the clean stop took the -wal in

    async def read_while_writing() -> tuple[int, int]:
        writer = await asyncio.create_subprocess_exec(
            SCRIPT, "chat", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL, env=gateway_env(home))
        db = Database(home / "state.db", read_only=True)
        await db.open()
        try:
            writer.stdin.write("".join(f"racer {i}\n" for i in range(1500)).encode())
            await writer.stdin.drain()
            writer.stdin.close()  # the chat answers every line, then stops
            ended = asyncio.ensure_future(writer.wait())
            deadline = asyncio.get_running_loop().time() + 120
            while not ended.done():
                assert asyncio.get_running_loop().time() < deadline, "the chat did not finish"
                await db.fetchval("SELECT count(*) FROM messages")
                assert await db.fetchval("PRAGMA quick_check") == "ok"
            return await ended, await db.fetchval("SELECT count(*) FROM messages")
        finally:
            await db.close()
            if writer.returncode is None:
                writer.kill()
                await writer.wait()

    # every message and its reply, seen by the same connection once the chat stopped
    assert asyncio.run(read_while_writing()) == (0, 2 + 2 * 1500)


def test_read_only_commands_work_on_a_home_nobody_may_write(tmp_path):
    """A home the user cannot write (`chmod -R a-w`): the read-only commands answer, writing
    nothing; doctor names what `run` would need (docs/operations.md §1, §5)."""
    import pwd

    home = tmp_path / "home"
    assert run(["chat"], gateway_env(home), tmp_path, stdin="hello pelican\n")[0] == 0
    paths = [home, *home.rglob("*")]
    for path in paths:
        path.chmod(stat.S_IMODE(path.stat().st_mode) & ~0o222)
    prefix = bound_by_file_modes()
    try:
        before = _files(home)
        _read_only_commands(home, tmp_path, prefix)
        assert _files(home) == before
        code, out, err = run(["doctor", "--json"], gateway_env(home), tmp_path, prefix=prefix)
        checks = {row["check"]: row for row in json.loads(out)}
        user = f"user {pwd.getpwuid(os.geteuid()).pw_name} (uid {os.geteuid()})"
        assert (code, checks["home"]["detail"], checks["state.db"]) == (
            1, f"HERMES_HOME {home} is not writable by {user}: Permission denied",
            {"check": "state.db", "status": "fail",
             "detail": f"{home / 'state.db'} is not writable by {user}: Permission denied; `run` writes it (and its "
                       "-wal and -shm files beside it): give that user write access, then run doctor again to "
                       "check the file itself"})
    finally:
        for path in paths:
            path.chmod(stat.S_IMODE(path.stat().st_mode) | 0o200)


def test_a_gateway_on_a_state_db_it_may_only_read_runs_degraded(tmp_path):
    """docs/behaviour.md §12: a state.db the gateway's user may read but not write (its mode)
    would fail every write; the open says so, and the gateway runs degraded (every message
    answered, kept in the journal) instead of refusing each message."""
    home = tmp_path / "home"
    assert run(["chat"], gateway_env(home), tmp_path, stdin="hello pelican\n")[0] == 0
    (home / "state.db").chmod(0o444)
    try:
        code, out, err = run(["chat"], gateway_env(home), tmp_path, stdin="again\n", prefix=bound_by_file_modes())
        # group and others lose their bits, the owner is not given a write behind the operator's back
        assert _mode(home / "state.db") == 0o400
    finally:
        (home / "state.db").chmod(0o600)
    assert (code, out) == (0, "echo: again\n")
    assert err == (f"hermes-gateway: ERROR: state.db {home / 'state.db'} cannot be opened: it opens for reading only "
                   "(attempt to write a readonly database): `hermes-gateway doctor` says why; running DEGRADED on an "
                   f"in-memory copy journaled to {home / 'sessions' / 'journal.jsonl'} + {{session_id}}.jsonl "
                   "transcripts\n")
    assert (home / "sessions" / "journal.jsonl").is_file()


def test_a_read_only_command_refuses_a_wal_it_cannot_read(tmp_path):
    """state.db with a -wal file holding writes (a gateway stopped without taking it in) in a
    folder the user cannot write: SQLite could not read through the -wal there, and reading the
    file alone would miss those writes, so the command says so in one line."""
    home = tmp_path / "home"
    assert run(["chat"], gateway_env(home), tmp_path, stdin="hello pelican\n")[0] == 0
    copy = tmp_path / "copy"
    copy.mkdir()
    conn = sqlite3.connect(home / "state.db")
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute("CREATE TABLE later (x)")  # a write that stays in the -wal
    for name in ("state.db", "state.db-wal"):  # as a crash leaves them (the -shm goes with the reboot)
        (copy / name).write_bytes((home / name).read_bytes())
    conn.close()
    (home / "state.db").replace(tmp_path / "state.db.old")
    for name in ("state.db", "state.db-wal"):
        (copy / name).replace(home / name)
    home.chmod(0o500)
    try:
        assert run(["sessions", "list"], gateway_env(home), tmp_path, prefix=bound_by_file_modes()) == (
            2, "", f"hermes-gateway: error: state.db {home / 'state.db'} cannot be opened: it cannot be read here: "
                   "its folder is not writable and state.db-wal holds writes not yet in it (a gateway that can write "
                   "the folder takes them in at its next start)\n")
    finally:
        home.chmod(0o700)


# ---- item 4: owner-only modes --------------------------------------------------------------------

def test_new_home_and_its_files_are_owner_only(tmp_path):
    home = tmp_path / "new" / "home"
    code, out, err = run(["chat"], gateway_env(home), tmp_path, stdin="hello\n")
    assert (code, err) == (0, "")
    assert _mode(home) == 0o700
    assert _mode(home / "sessions") == 0o700
    assert _mode(home / "state.db") == 0o600
    assert _mode(home / "gateway.log") == 0o600
    assert _mode(home / "sessions" / "sessions.json") == 0o600
    assert _mode(home / "gateway.lock") == 0o600


async def test_state_db_wal_and_shm_are_owner_only_while_open(tmp_path):
    from hermes_core.model import SessionSource
    from hermes_core.settings import GatewayConfig
    from hermes_core.store import SessionStore

    config = GatewayConfig(home=tmp_path / "home")
    async with SessionStore(config.sessions_dir, config) as store:
        entry = await store.get_or_create_session(SessionSource(platform="local", chat_id="c"))
        await store.append_to_transcript(entry.session_id, {"role": "user", "content": "x"})
        assert _mode(config.db_path) == 0o600
        assert _mode(Path(str(config.db_path) + "-wal")) == 0o600
        assert _mode(Path(str(config.db_path) + "-shm")) == 0o600
        assert _mode(config.home) == 0o700


def test_existing_home_keeps_its_mode(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    os.chmod(home, 0o750)
    assert run(["chat"], gateway_env(home), tmp_path, stdin="hi\n")[0] == 0
    assert _mode(home) == 0o750


# ---- item 7: import from a folder, key mismatch, reindex ----------------------------------------

def _old_gateway_dir(tmp_path: Path) -> Path:
    old = tmp_path / "old" / "sessions"
    old.mkdir(parents=True)
    (old / "sessions.json").write_text(json.dumps({
        "agent:main:telegram:dm:1": {"session_key": "agent:main:telegram:dm:1",
                                     "session_id": "20250101_000000_aaaaaaa1",
                                     "created_at": "2025-01-01T00:00:00", "updated_at": "2025-01-01T00:00:00",
                                     "platform": "telegram", "chat_type": "dm"},
        "agent:main:telegram:dm:2": {"session_key": "agent:main:telegram:dm:999",
                                     "session_id": "20250101_000000_aaaaaaa2",
                                     "created_at": "2025-01-01T00:00:00", "updated_at": "2025-01-01T00:00:00",
                                     "platform": "telegram", "chat_type": "dm"}}))
    (old / "20250101_000000_aaaaaaa1.jsonl").write_text(
        json.dumps({"role": "user", "content": "hello from the old gateway",
                    "timestamp": "2025-01-01T00:00:01+00:00"}) + "\n")
    return old


def test_import_accepts_the_folder_and_warns_about_a_key_mismatch(tmp_path):
    home = tmp_path / "home"
    old = _old_gateway_dir(tmp_path)
    code, out, err = run(["sessions", "import", str(old)], gateway_env(home), tmp_path)
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "imported 2 session(s), kept 0 existing, 1 message(s) from 1 legacy transcript(s)",
        "warning agent:main:telegram:dm:2: inner session_key 'agent:main:telegram:dm:999' differs from "
        "its key; imported under 'agent:main:telegram:dm:2'"]
    code, out, err = run(["sessions", "list", "--json"], gateway_env(home), tmp_path)
    assert sorted((r["session_key"], r["session_id"]) for r in json.loads(out)) == [
        ("agent:main:telegram:dm:1", "20250101_000000_aaaaaaa1"),
        ("agent:main:telegram:dm:2", "20250101_000000_aaaaaaa2")]
    code, out, err = run(["sessions", "import", str(old), "--json"], gateway_env(home), tmp_path)
    report = json.loads(out)
    assert (report["imported"], report["skipped_existing"], report["warnings"]) == (0, 2, [
        "agent:main:telegram:dm:2: inner session_key 'agent:main:telegram:dm:999' differs from its key; "
        "imported under 'agent:main:telegram:dm:2'"])


def test_import_of_a_folder_without_sessions_json_names_the_file(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out, err = run(["sessions", "import", str(empty)], gateway_env(tmp_path / "home"), tmp_path)
    assert (code, out, err) == (2, "", f"hermes-gateway: error: no sessions.json at {empty / 'sessions.json'}\n")


@pytest.mark.parametrize("name, content, error", [
    ("missing.json", None, "no sessions.json at {path}"),
    ("notjson.json", "garbage{", "{path} is not valid JSON: Expecting value: line 1 column 1 (char 0)"),
    ("list.json", "[1, 2]", "{path} does not hold a JSON object of session entries"),
])
def test_an_import_that_cannot_read_its_file_creates_no_home(tmp_path, name, content, error):
    """README "Using it": the admin commands never create a home, except `sessions import`, which
    may fill a new one; a file it cannot read (a mistyped path) fills nothing, so it creates no
    home either (no state.db, gateway.log or .clean_shutdown in a HERMES_HOME that was not there)."""
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    home = tmp_path / "home"
    code, out, err = run(["sessions", "import", str(path)], gateway_env(home), tmp_path)
    assert (code, out, err) == (2, "", f"hermes-gateway: error: {error.format(path=path)}\n")
    assert not home.exists()


def test_an_import_of_a_file_or_folder_it_may_not_read_says_so_and_creates_no_home(tmp_path):
    """docs/operations.md §5: a file `import` cannot read is refused in one line before the home is
    touched; one it may not read said `[Errno 13] Permission denied: '…'`."""
    old = _old_gateway_dir(tmp_path)
    (old / "sessions.json").chmod(0o000)
    closed = tmp_path / "closed"
    (closed / "sessions").mkdir(parents=True)
    closed.chmod(0o000)
    home = tmp_path / "home"
    try:
        for path, error in [(old, f"{old / 'sessions.json'} cannot be read: Permission denied"),
                            (closed / "sessions", f"{closed / 'sessions'} cannot be read: Permission denied")]:
            code, out, err = run(["sessions", "import", str(path)], gateway_env(home), tmp_path,
                                 prefix=bound_by_file_modes())
            assert (code, out, err) == (2, "", f"hermes-gateway: error: {error}\n")
    finally:
        closed.chmod(0o700)
    assert not home.exists()


def test_an_import_into_a_home_it_cannot_make_or_write_says_why_in_words(tmp_path):
    """docs/operations.md §5: `import` may make the home; what is in the way is said as the start
    says it, not as the lock file's OSError (`[Errno 17] File exists: '…'`, `[Errno 13] Permission
    denied: '…/gateway.lock'`)."""
    old = _old_gateway_dir(tmp_path)
    (tmp_path / "a-file").write_text("not a folder")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    for home, error in [
        (tmp_path / "a-file", f"HERMES_HOME {tmp_path / 'a-file'} exists and is not a directory"),
        (tmp_path / "a-file" / "home",
         f"HERMES_HOME {tmp_path / 'a-file' / 'home'} cannot be created: {tmp_path / 'a-file'} is not a directory"),
        (locked / "home", f"HERMES_HOME {locked / 'home'} cannot be created in {locked}: Permission denied"),
        (locked, f"HERMES_HOME {locked} is not writable: Permission denied"),
    ]:
        code, out, err = run(["sessions", "import", str(old)], gateway_env(home), tmp_path,
                             prefix=bound_by_file_modes())
        assert (code, out, err) == (2, "", f"hermes-gateway: error: {error}\n")
    assert list(locked.iterdir()) == []


def test_reindex_reports_healthy_then_rebuilds_a_damaged_index(tmp_path):
    home = tmp_path / "home"
    assert run(["chat"], gateway_env(home), tmp_path, stdin="the lighthouse keeper\n")[0] == 0
    code, out, err = run(["sessions", "reindex"], gateway_env(home), tmp_path)
    assert (code, out, err) == (0, "full-text index is healthy: no rebuild needed\n", "")

    with sqlite3.connect(home / "state.db") as conn:  # damage the index's shadow table
        conn.execute("DELETE FROM messages_fts_data WHERE id > 10")
    code, out, err = run(["sessions", "reindex", "--json"], gateway_env(home), tmp_path)
    assert (code, out) == (0, '{"rebuilt": true}\n')
    code, out, err = run(["sessions", "reindex"], gateway_env(home), tmp_path)
    assert (code, out) == (0, "full-text index is healthy: no rebuild needed\n")
    code, out, err = run(["sessions", "search", "lighthouse", "--json"], gateway_env(home), tmp_path)
    assert [r["snippet"] for r in json.loads(out)] == ["the [lighthouse] keeper", "echo: the [lighthouse] keeper"]


def _home_with_an_indexed_batch(tmp_path: Path) -> Path:
    """A home whose 64 messages (32 lines and their echoes) are in the index: messages are
    indexed in batches of 64 (docs/behaviour.md §3), and an empty index reads no shadow table.
    The other lines' words sort before "lighthouse" and fill several pages of the segment, so
    finding "lighthouse" needs the terms table `messages_fts_idx`."""
    home = tmp_path / "home"
    lines = "the lighthouse keeper\n" + "".join(" ".join(f"a{i}x{j}" for j in range(40)) + "\n" for i in range(31))
    assert run(["chat"], gateway_env(home), tmp_path, stdin=lines)[0] == 0
    with sqlite3.connect(home / "state.db") as conn:
        assert conn.execute("SELECT indexed_through FROM fts_progress").fetchone() == (64,)
    return home


@pytest.mark.parametrize("damage", [
    "UPDATE messages_fts_config SET v = 0 WHERE k = 'version'",  # "invalid fts5 file format …"
    "DROP TABLE messages_fts", "DROP TABLE fts_progress",  # "no such table: …"
    "DROP TABLE messages_fts_idx", "DROP TABLE messages_fts_docsize",  # "SQL logic error"
    "DELETE FROM messages_fts_data WHERE id = 10"])  # its structure record: "vtable constructor failed"
def test_a_search_on_any_index_damage_says_reindex_which_mends_it(tmp_path, damage):
    """docs/operations.md §5: whatever SQLite's words for the index's damage, the read-only
    search names the index and `sessions reindex`, which rebuilds it."""
    home = _home_with_an_indexed_batch(tmp_path)
    with sqlite3.connect(home / "state.db") as conn:
        conn.execute(damage)
    assert run(["sessions", "search", "lighthouse"], gateway_env(home), tmp_path) == (
        2, "", f"hermes-gateway: error: the full-text index of state.db {home / 'state.db'} is damaged: "
               "`hermes-gateway sessions reindex` rebuilds it from the messages (none is lost)\n")
    assert run(["sessions", "reindex", "--json"], gateway_env(home), tmp_path)[:2] == (0, '{"rebuilt": true}\n')
    code, out, err = run(["sessions", "search", "lighthouse", "--json"], gateway_env(home), tmp_path)
    assert [r["snippet"] for r in json.loads(out)] == ["the [lighthouse] keeper", "echo: the [lighthouse] keeper"]


def test_a_search_meeting_a_bare_malformed_names_the_file_and_the_index_and_doctor(tmp_path):
    """docs/operations.md §5: a damaged index may say only "database disk image is malformed",
    as a damaged file does, and the read-only search cannot run the index check that tells
    them apart: it names both remedies and `doctor`, which tells which."""
    home = _home_with_an_indexed_batch(tmp_path)
    with sqlite3.connect(home / "state.db") as conn:
        conn.execute("DELETE FROM messages_fts_data WHERE id > 10")
    assert run(["sessions", "search", "lighthouse"], gateway_env(home), tmp_path) == (
        2, "", f"hermes-gateway: error: state.db {home / 'state.db'} or its full-text index is damaged: "
               "`hermes-gateway doctor` tells which; a damaged index is rebuilt by `hermes-gateway sessions "
               "reindex` (no message is lost), a damaged state.db is restored from a backup (docs/operations.md "
               "§1)\n")


def test_reindex_force_rebuilds_an_index_whose_check_passes_but_misses_messages(tmp_path):
    """docs/operations.md §5: an index that lost the rows of `messages_fts_idx` passes FTS5's
    check while a search misses the messages; `reindex --force` rebuilds it all the same."""
    home = _home_with_an_indexed_batch(tmp_path)
    with sqlite3.connect(home / "state.db") as conn:
        conn.execute("DELETE FROM messages_fts_idx")
    assert run(["sessions", "search", "lighthouse", "--json"], gateway_env(home), tmp_path)[:2] == (0, "[]\n")
    assert run(["sessions", "reindex"], gateway_env(home), tmp_path) == (
        0, "full-text index is healthy: no rebuild needed\n", "")
    assert run(["sessions", "reindex", "--force"], gateway_env(home), tmp_path) == (
        0, "full-text index rebuilt from the stored messages (--force: without checking it)\n", "")
    code, out, err = run(["sessions", "search", "lighthouse", "--json"], gateway_env(home), tmp_path)
    assert [r["snippet"] for r in json.loads(out)] == ["the [lighthouse] keeper", "echo: the [lighthouse] keeper"]
    assert run(["sessions", "reindex", "--force", "--json"], gateway_env(home), tmp_path)[:2] == (
        0, '{"rebuilt": true}\n')


def test_a_dropped_index_costs_no_message_and_reindex_re_creates_it(tmp_path):
    home = tmp_path / "home"
    assert run(["chat"], gateway_env(home), tmp_path, stdin="first\n")[:2] == (0, "echo: first\n")
    with sqlite3.connect(home / "state.db") as conn:
        conn.execute("DROP TABLE messages_fts")
    code, out, err = run(["chat"], gateway_env(home), tmp_path, stdin="hi\n")
    assert (code, out) == (0, "echo: hi\n")  # accepted, recorded and answered
    assert "write hit a damaged full-text index" in err and "job failed" not in err
    code, out, _ = run(["sessions", "show", "agent:main:local:dm:terminal", "--json"], gateway_env(home), tmp_path)
    assert [m["content"] for m in json.loads(out)["messages"]] == ["first", "echo: first", "hi", "echo: hi"]
    code, out, _ = run(["sessions", "search", "hi", "--json"], gateway_env(home), tmp_path)
    assert (code, [r["snippet"] for r in json.loads(out)]) == (0, ["[hi]", "echo: [hi]"])

    with sqlite3.connect(home / "state.db") as conn:
        conn.execute("DROP TABLE messages_fts")
    code, out, err = run(["sessions", "reindex"], gateway_env(home), tmp_path)
    assert (code, out) == (0, "full-text index was damaged: rebuilt from the stored messages\n")
    code, out, err = run(["sessions", "reindex"], gateway_env(home), tmp_path)
    assert (code, out, err) == (0, "full-text index is healthy: no rebuild needed\n", "")
    code, out, _ = run(["sessions", "search", "first", "--json"], gateway_env(home), tmp_path)
    assert [r["snippet"] for r in json.loads(out)] == ["[first]", "echo: [first]"]


def test_reindex_refuses_while_a_gateway_holds_the_home(tmp_path):
    home = tmp_path / "home"
    assert run(["chat"], gateway_env(home), tmp_path, stdin="hi\n")[0] == 0
    holder = subprocess.Popen([SCRIPT, "chat"], env=gateway_env(home), cwd=tmp_path, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        holder.stdin.write("wait\n")
        holder.stdin.flush()
        assert select.select([holder.stdout], [], [], 60)[0], "the gateway did not answer"
        assert holder.stdout.readline() == "echo: wait\n"  # the gateway is up and holds the lock
        code, out, err = run(["sessions", "reindex"], gateway_env(home), tmp_path)
        assert (code, out) == (2, "")
        assert err == (f"hermes-gateway: error: a gateway is running on HERMES_HOME {home} "
                       f"(pid {holder.pid}); stop it first\n")
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
