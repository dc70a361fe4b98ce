"""`hermes-gateway doctor` through the installed console script (docs/operations.md §1): each
check's finding on a real home, the exit code, and the safe repairs of `--fix`."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import stat
from pathlib import Path

import pytest
from cli_helpers import gateway_env, run

from hermes_core.settings import GatewayConfig
from hermes_core.store import SessionStore
from hermes_core.store.fts import catch_up


def _doctor(home: Path, cwd: Path, *args: str, **env: str) -> tuple[int, dict[str, dict]]:
    code, out, err = run(["doctor", "--json", *args], gateway_env(home, **env), cwd)
    assert err == ""
    return code, {row["check"]: row for row in json.loads(out)}


# The platform ids of the adapters `scripts/install.sh` installs (every `plugins/*` package).
INSTALLED = "installed platforms: discord, local, signal, slack, telegram, whatsapp, whatsapp_cloud"


def _this_user() -> str:
    """How doctor names the user it runs as (docs/operations.md §1)."""
    import pwd

    return f"user {pwd.getpwuid(os.geteuid()).pw_name} (uid {os.geteuid()})"


def _home_with_a_chat(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    code, out, _err = run(["chat"], gateway_env(home), tmp_path, stdin="hello pelican\n")
    assert (code, out) == (0, "echo: hello pelican\n")
    return home


def test_a_healthy_home_passes_every_check(tmp_path):
    home = _home_with_a_chat(tmp_path)
    code, checks = _doctor(home, tmp_path)
    assert code == 0
    assert {name: row["status"] for name, row in checks.items()} == {
        "config": "ok", "home": "ok", "lock": "ok", "plugins": "ok", "credentials local": "ok",
        "state.db": "ok", "full-text index": "ok", "leftovers": "ok", "disk": "ok"}
    assert checks["state.db"]["detail"] == "integrity ok, schema 8"
    assert checks["lock"]["detail"] == "no gateway holds this home"


def test_a_home_the_start_cannot_create_fails_naming_the_obstacle(tmp_path):
    """docs/operations.md §1: a missing home only warns when its nearest existing ancestor
    would take it; the probe leaves nothing behind."""
    (tmp_path / "afile").write_text("x")
    home = tmp_path / "afile" / "sub"
    code, checks = _doctor(home, tmp_path)
    assert (code, checks["home"]["status"], checks["home"]["detail"]) == (
        1, "fail", f"HERMES_HOME {home} cannot be created: {tmp_path / 'afile'} is not a directory")
    code, checks = _doctor(Path("/proc/nonexist/x"), tmp_path)
    assert (code, checks["home"]["status"], checks["home"]["detail"]) == (
        1, "fail", "HERMES_HOME /proc/nonexist/x cannot be created in /proc: No such file or directory")
    code, checks = _doctor(tmp_path / "new" / "home", tmp_path)
    assert (checks["home"]["status"], checks["home"]["detail"]) == (
        "warn", f"HERMES_HOME {tmp_path / 'new' / 'home'} does not exist yet (the first start creates it)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_a_home_nothing_can_be_written_in_fails_as_the_start_does(tmp_path):
    """docs/operations.md §1: doctor learns whether the home is writable the way the start does,
    by creating a file there. As root, `os.access` says yes everywhere, also on sysfs, which
    refuses new files even to root: doctor said "home ok" where chat then refused to start."""
    if os.geteuid() == 0:
        home = Path("/sys/kernel")
    else:
        home = tmp_path / "ro"
        home.mkdir()
        home.chmod(0o500)
    code, checks = _doctor(home, tmp_path)
    assert (code, checks["home"]["status"], checks["home"]["detail"]) == (
        1, "fail", f"HERMES_HOME {home} is not writable by {_this_user()}: Permission denied")


def test_a_broken_override_fails_with_the_loaders_line(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "hermes.toml").write_text('[plugins]\noverrides = ["no_such_override_mod"]\n')
    code, checks = _doctor(home, tmp_path)
    assert code == 1
    assert checks["plugins"]["status"] == "fail"
    assert checks["plugins"]["detail"] == ("deployment override 'no_such_override_mod' failed: "
                                           "ModuleNotFoundError: No module named 'no_such_override_mod'")


def test_an_invalid_config_is_a_failed_check_with_the_precise_message(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "hermes.toml").write_text("[agent]\ngateway_timeout = 0\n")
    code, checks = _doctor(home, tmp_path)
    assert code == 1
    assert list(checks) == ["config"]
    assert checks["config"]["detail"] == (
        "invalid config value for 'agent.gateway_timeout': Input should be greater than 0, got 0 "
        f"(config file {home / 'hermes.toml'})")


def test_an_enabled_platform_without_its_token_names_the_variable(tmp_path):
    home = tmp_path / "home"
    code, checks = _doctor(home, tmp_path, HERMES_PLATFORMS__TELEGRAM__ENABLED="true")
    assert code == 1
    assert checks["credentials telegram"] == {
        "check": "credentials telegram", "status": "fail",
        "detail": "not set: platforms.telegram.bot_token (HERMES_PLATFORMS__TELEGRAM__BOT_TOKEN)"}
    code, checks = _doctor(home, tmp_path, HERMES_PLATFORMS__TELEGRAM__ENABLED="true",
                           HERMES_PLATFORMS__TELEGRAM__BOT_TOKEN="123:abc")
    assert checks["credentials telegram"]["status"] == "ok"
    assert "123:abc" not in json.dumps(checks)
    # docs/behaviour.md §9: without an allow-list the platform refuses everyone (a warning).
    assert checks["access telegram"] == {
        "check": "access telegram", "status": "warn",
        "detail": "no allowed_users/allow_all configured: every message will be refused"}
    code, checks = _doctor(home, tmp_path, HERMES_PLATFORMS__TELEGRAM__ENABLED="true",
                           HERMES_PLATFORMS__TELEGRAM__BOT_TOKEN="123:abc",
                           HERMES_PLATFORMS__TELEGRAM__ALLOW_ALL="true")
    assert checks["access telegram"]["status"] == "ok"
    # An allow-list from the environment: comma-separated ids (or a JSON list).
    code, checks = _doctor(home, tmp_path, HERMES_PLATFORMS__TELEGRAM__ENABLED="true",
                           HERMES_PLATFORMS__TELEGRAM__BOT_TOKEN="123:abc",
                           HERMES_PLATFORMS__TELEGRAM__ALLOWED_USERS="111222333, 444555666")
    assert (code, checks["access telegram"]["status"]) == (0, "ok")


def test_a_token_written_in_the_config_file_is_a_warning_naming_the_key_not_the_value(tmp_path):
    # docs/configuration.md §1: secrets belong in the environment or a .env file, never in
    # hermes.toml; doctor says which of them the file holds (a row only when it holds one).
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "hermes.toml").write_text('[agent.openai]\napi_key = "sk-filesecret0123456789"\n\n'
                                      '[platforms.telegram]\nenabled = true\nallow_all = true\n'
                                      'bot_token = "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"\n')
    code, checks = _doctor(home, tmp_path)
    assert code == 0
    assert checks["secrets"] == {
        "check": "secrets", "status": "warn",
        "detail": f"config file {home / 'hermes.toml'} holds agent.openai.api_key, platforms.telegram.bot_token: "
                  "keep secrets in the environment (HERMES_AGENT__OPENAI__API_KEY, "
                  "HERMES_PLATFORMS__TELEGRAM__BOT_TOKEN) or an uncommitted .env file, not in the config file"}
    assert "filesecret" not in json.dumps(checks) and "AAHdq" not in json.dumps(checks)
    (home / "hermes.toml").write_text('[platforms.telegram]\nenabled = true\nallow_all = true\n')
    code, checks = _doctor(home, tmp_path, HERMES_PLATFORMS__TELEGRAM__BOT_TOKEN="123:abc")
    assert (code, "secrets" in checks) == (0, False)


def test_a_file_in_place_of_the_sessions_folder_fails_in_one_line_and_stops_the_start(tmp_path):
    # docs/operations.md §1: doctor names what `run` needs, here the folder of sessions.json;
    # the start says the same in one line rather than "File exists".
    home = _home_with_a_chat(tmp_path)
    for path in (home / "sessions").iterdir():
        path.unlink()
    (home / "sessions").rmdir()
    (home / "sessions").write_text("not a folder\n")
    code, checks = _doctor(home, tmp_path)
    assert code == 1
    assert checks["sessions"] == {
        "check": "sessions", "status": "fail",
        "detail": f"{home / 'sessions'} exists and is not a directory (the folder of sessions.json): move it away"}
    # Nothing in the folder can be looked at or repaired: no sessions.json row, and --fix changes nothing.
    assert "sessions.json" not in checks
    code, fixed = _doctor(home, tmp_path, "--fix")
    assert (code, fixed["sessions"]) == (1, checks["sessions"])
    assert (home / "sessions").read_text() == "not a folder\n"
    code, out, err = run(["chat"], gateway_env(home), tmp_path, stdin="hello again\n")
    assert (code, out, err) == (2, "", f"hermes-gateway: error: {home / 'sessions'} exists and is not a directory "
                                       "(the folder of sessions.json): move it away\n")


def test_a_directory_in_place_of_state_db_is_named_as_one_not_as_missing_or_unwritable(tmp_path):
    # docs/operations.md §1, §5: what stands where state.db belongs is said as what it is; giving
    # the user write access (doctor's words for an unwritable file) or "not found" would mislead.
    home = _home_with_a_chat(tmp_path)
    for suffix in ("", "-wal", "-shm"):
        (home / f"state.db{suffix}").unlink(missing_ok=True)
    (home / "state.db").mkdir()
    (home / "state.db").chmod(0o755)  # a directory's usual mode: its own row, no permissions warning
    code, checks = _doctor(home, tmp_path)
    assert code == 1
    assert checks["state.db"] == {
        "check": "state.db", "status": "fail",
        "detail": f"{home / 'state.db'} is a directory, not a file: move it away (the gateway would run "
                  "degraded beside it)"}
    assert "permissions state.db" not in checks
    code, out, err = run(["sessions", "list"], gateway_env(home), tmp_path)
    assert (code, out, err) == (2, "", f"hermes-gateway: error: no gateway state at {home} "
                                       f"({home / 'state.db'} is a directory, not a file: move it away)\n")


def test_fix_rebuilds_a_damaged_index_and_the_mirror_and_tightens_modes(tmp_path):
    home = _home_with_a_chat(tmp_path)
    with sqlite3.connect(home / "state.db") as conn:
        catch_up(conn)  # the chat's messages wait for a batch of 64 (docs/behaviour.md §3): index them
        conn.execute("INSERT INTO messages_fts(messages_fts, rowid, content) "
                     "SELECT 'delete', id, content FROM messages WHERE role = 'user'")
    (home / "sessions" / "sessions.json").unlink()
    (home / "state.db").chmod(0o644)
    code, checks = _doctor(home, tmp_path)
    assert code == 1
    assert checks["full-text index"]["status"] == "fail"
    assert checks["sessions.json"]["status"] == "warn"
    assert checks["permissions state.db"]["detail"] == (
        f"{home / 'state.db'} is 0644: group or others can read personal data (--fix sets 0600)")

    code, checks = _doctor(home, tmp_path, "--fix")
    assert code == 0
    assert {n: checks[n]["status"] for n in ("full-text index", "sessions.json", "permissions state.db")} == {
        "full-text index": "fixed", "sessions.json": "fixed", "permissions state.db": "fixed"}
    assert stat.S_IMODE((home / "state.db").stat().st_mode) == 0o600
    assert list(json.loads((home / "sessions" / "sessions.json").read_text())) == [
        "_README", "agent:main:local:dm:terminal"]
    code, out, _ = run(["sessions", "search", "pelican", "--json"], gateway_env(home), tmp_path)
    assert sorted(r["message_id"] for r in json.loads(out)) == [1, 2]  # the question and the echo, indexed again

    code, checks = _doctor(home, tmp_path)
    assert code == 0
    assert "permissions state.db" not in checks and checks["full-text index"]["status"] == "ok"


def test_fix_takes_group_and_others_bits_away_and_never_grants_the_owner_a_write(tmp_path):
    # docs/operations.md §1: --fix tightens modes; a state.db the operator made read-only
    # (0444) becomes 0400, not 0600.
    home = _home_with_a_chat(tmp_path)
    (home / "state.db").chmod(0o444)
    try:
        code, checks = _doctor(home, tmp_path, "--fix")
        assert checks["permissions state.db"] == {
            "check": "permissions state.db", "status": "fixed",
            "detail": f"{home / 'state.db'} was 0444, now 0400"}
        assert stat.S_IMODE((home / "state.db").stat().st_mode) == 0o400
    finally:
        (home / "state.db").chmod(0o600)


def test_fix_re_creates_a_dropped_index(tmp_path):
    home = _home_with_a_chat(tmp_path)
    with sqlite3.connect(home / "state.db") as conn:
        conn.execute("DROP TABLE messages_fts")
    code, checks = _doctor(home, tmp_path)
    assert (code, checks["full-text index"]["detail"]) == (
        1, "damaged (no such table: messages_fts); --fix or `sessions reindex` rebuilds it from the messages")
    code, checks = _doctor(home, tmp_path, "--fix")
    assert (code, checks["full-text index"]["status"]) == (0, "fixed")
    code, out, _ = run(["sessions", "search", "pelican", "--json"], gateway_env(home), tmp_path)
    assert sorted(r["message_id"] for r in json.loads(out)) == [1, 2]
    code, checks = _doctor(home, tmp_path)
    assert (code, checks["full-text index"]["status"]) == (0, "ok")


@pytest.mark.parametrize("shadow", ["messages_fts_idx", "messages_fts_docsize"])
def test_a_dropped_shadow_table_of_the_index_is_index_damage_that_reindex_mends(tmp_path, shadow):
    """docs/behaviour.md §3: without a shadow table FTS5 says only "SQL logic error"; the
    index check names the missing table instead, and `sessions reindex` re-creates the index."""
    home = _home_with_a_chat(tmp_path)
    with sqlite3.connect(home / "state.db") as conn:
        conn.execute(f"DROP TABLE {shadow}")
    code, checks = _doctor(home, tmp_path)
    assert (code, checks["state.db"]["status"], checks["full-text index"]["detail"]) == (
        1, "ok", f"damaged (full-text index messages_fts lacks its table(s) {shadow}); --fix or `sessions reindex` rebuilds it from the messages")
    assert run(["sessions", "reindex"], gateway_env(home), tmp_path) == (
        0, "full-text index was damaged: rebuilt from the stored messages\n", "")
    code, out, _ = run(["sessions", "search", "pelican", "--json"], gateway_env(home), tmp_path)
    assert sorted(r["message_id"] for r in json.loads(out)) == [1, 2]
    code, checks = _doctor(home, tmp_path)
    assert (code, checks["full-text index"]["status"]) == (0, "ok")


def test_a_dropped_table_fails_the_state_db_check_naming_it_and_fix_leaves_it(tmp_path):
    """docs/operations.md §1: what the migrations create is compared with what state.db holds.
    The start makes the same comparison: it runs degraded, naming what is missing, instead of
    failing every message that needs it (docs/behaviour.md §3)."""
    home = _home_with_a_chat(tmp_path)
    with sqlite3.connect(home / "state.db") as conn:
        conn.execute("DROP TABLE inbound")
        conn.execute("DROP TRIGGER routes_leave_ad")
    expected = (f"{home / 'state.db'} lacks table inbound, index inbound_by_accepted, index inbound_open, "
                "trigger routes_leave_ad of its schema 8; --fix does not re-create what is missing: restore "
                "state.db from a backup (docs/operations.md §1)")
    code, checks = _doctor(home, tmp_path)
    assert (code, checks["state.db"]["status"], checks["state.db"]["detail"]) == (1, "fail", expected)
    code, checks = _doctor(home, tmp_path, "--fix")
    assert (code, checks["state.db"]["status"], checks["state.db"]["detail"]) == (1, "fail", expected)
    with sqlite3.connect(home / "state.db") as conn:
        assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'inbound'").fetchone() == (0,)
    code, out, err = run(["chat"], gateway_env(home), tmp_path, stdin="still there?\n")
    assert (code, out) == (0, "echo: still there?\n")
    assert err.startswith(f"hermes-gateway: ERROR: state.db {home / 'state.db'} cannot be opened: it lacks table "
                          "inbound, index inbound_by_accepted, index inbound_open, trigger routes_leave_ad of its "
                          "schema 8: restore it from a backup (docs/operations.md §1); running DEGRADED"), err


def test_the_schema_check_reads_the_migrations_of_the_files_version():
    """An older schema is compared with what its own migrations created (the store upgrades it
    at open), not with the newest schema."""
    from hermes_core.store.sqlite_backend import missing_schema_objects
    from hermes_core.store.db import migrations

    conn = sqlite3.connect(":memory:")
    for number, _name, sql in migrations():
        if number <= 3:
            conn.executescript(sql)
    assert missing_schema_objects(conn, 3) == []
    assert missing_schema_objects(conn, 4) == ["table identity_aliases", "index identity_aliases_by_canonical"]
    conn.execute("DROP TABLE messages_fts")  # the full-text index check reports this one
    assert missing_schema_objects(conn, 3) == []


def test_a_degraded_journal_is_reported(tmp_path):
    home = _home_with_a_chat(tmp_path)
    (home / "sessions" / "journal.jsonl").write_text("")
    code, checks = _doctor(home, tmp_path)
    assert code == 0
    assert checks["degraded journal"]["status"] == "warn"


def test_kept_copies_of_a_sessions_json_with_skipped_entries_are_each_named(tmp_path):
    """docs/operations.md §1: the `sessions.json.skipped` copies an import or adoption kept
    (docs/behaviour.md §3) are a warning naming each and what to do; --fix leaves them."""
    home = _home_with_a_chat(tmp_path)
    sessions = home / "sessions"
    for name in ("sessions.json.skipped", "sessions.json.skipped.2"):
        (sessions / name).write_text("{}")
    (sessions / "sessions.json.skipped.old").write_text("{}")  # not a name the import gives a copy
    for args in ((), ("--fix",)):
        code, checks = _doctor(home, tmp_path, *args)
        assert (code, checks["skipped entries"]) == (0, {
            "check": "skipped entries", "status": "warn",
            "detail": f"2 copy(ies) of an older sessions.json hold entries that were skipped when it was taken: "
                      f"{sessions / 'sessions.json.skipped'}, {sessions / 'sessions.json.skipped.2'}; recover the "
                      "entries you need from them, then delete them"})
        assert "leftovers" not in checks
    assert (sessions / "sessions.json.skipped").read_text() == "{}"


def test_a_directory_in_place_of_sessions_json_is_named_and_fix_leaves_it(tmp_path):
    home = _home_with_a_chat(tmp_path)
    mirror = home / "sessions" / "sessions.json"
    mirror.unlink()
    mirror.mkdir()
    (mirror / "keep.txt").write_text("someone's")
    for args in ((), ("--fix",)):
        code, checks = _doctor(home, tmp_path, *args)
        assert (code, checks["sessions.json"]) == (1, {
            "check": "sessions.json", "status": "fail",
            "detail": f"{mirror} is a directory, not a file: move it away; sessions.json is then rebuilt from "
                      "state.db at the next start, or by --fix"})
    assert (mirror / "keep.txt").read_text() == "someone's"  # nothing of it removed


def test_a_directory_in_place_of_gateway_lock_fails_the_lock_row(tmp_path):
    # docs/operations.md §1 `lock`: every start would stop on it
    home = _home_with_a_chat(tmp_path)
    (home / "gateway.lock").unlink()
    (home / "gateway.lock").mkdir()
    code, checks = _doctor(home, tmp_path)
    assert (code, checks["lock"]) == (1, {
        "check": "lock", "status": "fail",
        "detail": f"{home / 'gateway.lock'} is a directory, not a file: move it away (no gateway can start "
                  "while it is there)"})


def test_an_emptied_state_db_beside_a_mirror_that_lists_sessions_is_a_warning(tmp_path):
    """A 0-byte state.db is a valid empty database (schema 0), but with sessions.json still
    listing a session it was replaced or truncated: doctor says so before the next start
    would take those routes but not their transcripts."""
    home = _home_with_a_chat(tmp_path)
    (home / "state.db").write_bytes(b"")
    code, checks = _doctor(home, tmp_path)
    assert (code, checks["state.db"]["status"], checks["state.db"]["detail"]) == (
        0, "warn", f"{home / 'state.db'} holds no session but {home / 'sessions' / 'sessions.json'} lists 1 "
                   "session(s): state.db was replaced or truncated; restore it from a backup before the next start "
                   "(docs/operations.md §1), which would take those routes but not their transcripts")
    # A read-only command leaves it as it is (opening it would write its schema) ...
    assert run(["sessions", "list"], gateway_env(home), tmp_path) == (
        2, "", f"hermes-gateway: error: state.db {home / 'state.db'} is empty (0 bytes): nothing to show; "
               "`hermes-gateway doctor` says what to do\n")
    assert (home / "state.db").stat().st_size == 0
    # ... and once something has given it its schema, it still holds no session, and doctor still
    # says so (it looks at the sessions, not at the schema version).
    asyncio.run(_open_and_close_unlocked(home))
    assert sqlite3.connect(home / "state.db").execute("PRAGMA user_version").fetchone()[0] > 0
    code, again = _doctor(home, tmp_path)
    assert again["state.db"] == checks["state.db"]


async def _open_and_close_unlocked(home: Path) -> None:
    """Open the store as a reader beside a gateway would (no home lock: nothing is taken from
    sessions.json), which applies the schema, and close it."""
    config = GatewayConfig(home=home)
    store = SessionStore(config.sessions_dir, config, lock_home=False)
    await store.open()
    await store.close()


def test_a_broken_override_still_reports_credentials_and_access(tmp_path):
    """docs/operations.md §1: a deployment override that fails to load is the `plugins` row's
    failure; the enabled platforms' credentials and access are still checked with what loads."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "hermes.toml").write_text('[plugins]\noverrides = ["no_such_override_mod"]\n')
    code, checks = _doctor(home, tmp_path, HERMES_PLATFORMS__TELEGRAM__ENABLED="true")
    assert (code, checks["plugins"]["status"]) == (1, "fail")
    assert checks["credentials telegram"] == {
        "check": "credentials telegram", "status": "fail",
        "detail": "not set: platforms.telegram.bot_token (HERMES_PLATFORMS__TELEGRAM__BOT_TOKEN)"}
    assert checks["access telegram"] == {
        "check": "access telegram", "status": "warn",
        "detail": "no allowed_users/allow_all configured: every message will be refused"}


def test_rows_that_cannot_be_checked_say_why(tmp_path):
    """When even the platforms' settings do not load (an enabled platform without its adapter),
    each credentials and access row is there, saying why it was not checked."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "hermes.toml").write_text('[plugins]\noverrides = ["no_such_override_mod"]\n'
                                      '[platforms.nosuch]\nenabled = true\n')
    code, checks = _doctor(home, tmp_path)
    why = ("not checked, since the platforms' settings could not be loaded: platform 'nosuch' is enabled but "
           f"its adapter cannot be loaded: no adapter entry point is installed ({INSTALLED})")
    assert (code, checks["plugins"]["status"]) == (1, "fail")
    assert checks["credentials nosuch"] == {"check": "credentials nosuch", "status": "warn", "detail": why}
    assert checks["access nosuch"] == {"check": "access nosuch", "status": "warn", "detail": why}


@pytest.mark.parametrize("enabled", [True, False])
def test_a_misspelt_platform_table_names_the_installed_platforms(tmp_path, enabled):
    """docs/configuration.md §2 `[platforms.<id>]`: enabled, the table stops `run` (a `fail`);
    disabled, it is a `warn` row where it was a log line nobody saw. Both name the close id."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "hermes.toml").write_text(f"[platforms.local]\nenabled = true\n"
                                      f"[platforms.telegrm]\nenabled = {str(enabled).lower()}\n")
    code, out, err = run(["doctor", "--json"], gateway_env(home), tmp_path)
    rows = [row for row in json.loads(out) if row["check"] == "plugins"]
    if enabled:
        why = ("platform 'telegrm' is enabled but its adapter cannot be loaded: no adapter entry point is installed"
               f" ({INSTALLED}; did you mean telegram?)")
        assert (code, err, rows) == (1, "", [{"check": "plugins", "status": "fail", "detail": why}])
        # The rows it keeps from being checked give the same reason, in one pair of parentheses.
        assert [row for row in json.loads(out) if row["check"].endswith(" telegrm")] == [
            {"check": f"{name} telegrm", "status": "warn",
             "detail": f"not checked, since the platforms' settings could not be loaded: {why}"}
            for name in ("credentials", "access")]
    else:
        assert (code, err, rows[1:]) == (0, "", [{"check": "plugins", "status": "warn", "detail": (
            "[platforms.telegrm] is configured but no installed plugin provides it; ignored"
            f" ({INSTALLED}; did you mean telegram?)")}])


def test_an_access_entry_that_can_never_match_is_a_failed_row_naming_it(tmp_path):
    # docs/behaviour.md §9: a username where Telegram sends numeric ids is refused at load; the
    # plugins row says which key and entry, and which forms work.
    home = tmp_path / "home"
    code, checks = _doctor(home, tmp_path, HERMES_PLATFORMS__TELEGRAM__ENABLED="true",
                           HERMES_PLATFORMS__TELEGRAM__BOT_TOKEN="123:abc",
                           HERMES_PLATFORMS__TELEGRAM__ALLOWED_USERS="111222333,@alice")
    assert code == 1
    assert checks["plugins"]["status"] == "fail"
    assert checks["plugins"]["detail"].startswith(
        "invalid settings in [platforms.telegram]: platforms.telegram.allowed_users: "
        "'@alice' can never match a Telegram user: write a numeric user id (123456789; a @username is not one)")
    assert "123:abc" not in json.dumps(checks)
