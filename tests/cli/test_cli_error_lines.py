"""README: a failed start prints ONE line on stderr (`hermes-gateway: error: …`) and exits 2 —
no warning before it that contradicts it, nothing printed twice; HERMES_DEBUG=1 shows the
traceback of what really failed. Real subprocesses of the console script, with a broken plugin
installed as a real distribution (dist-info + entry point) on PYTHONPATH."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from cli_helpers import SCRIPT, gateway_env

BROKEN_WARNING = ("hermes-gateway: WARNING: plugin broken failed to load and is skipped: "
                  "ZeroDivisionError: division by zero\n")


@pytest.fixture
def site(tmp_path) -> Path:
    """A folder holding the distribution `hermes-gateway-broken` whose hooks module raises."""
    root = tmp_path / "site"
    (root / "broken_pkg").mkdir(parents=True)
    (root / "broken_pkg" / "__init__.py").write_text("")
    (root / "broken_pkg" / "hooks.py").write_text("1 / 0\n")
    info = root / "hermes_gateway_broken-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hermes-gateway-broken\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[hermes_core.plugins]\nbroken = broken_pkg.hooks\n")
    return root


def _run(tmp_path: Path, args: list[str], site: Path | None = None, stdin: str = "hi\n",
         **extra: str) -> tuple[int, str, str]:
    env = gateway_env(tmp_path / "home", XDG_CACHE_HOME=str(tmp_path / "cache"), **extra)
    if site is not None:
        env["PYTHONPATH"] = str(site)
    proc = subprocess.run([SCRIPT, *args], env=env, cwd=tmp_path, input=stdin, capture_output=True,
                          text=True, timeout=60)
    return proc.returncode, proc.stdout, proc.stderr


def test_missing_override_module_is_one_line(tmp_path):
    code, out, err = _run(tmp_path, ["chat"], HERMES_PLUGINS__OVERRIDES='["nonexistent_mod"]')
    assert (code, out, err) == (2, "", "hermes-gateway: error: deployment override 'nonexistent_mod' failed: "
                                       "ModuleNotFoundError: No module named 'nonexistent_mod'\n")
    # The log file says it too, for an operator who only reads gateway.log.
    log = (tmp_path / "home" / "gateway.log").read_text()
    assert ("gateway did not start: deployment override 'nonexistent_mod' failed: "
            "ModuleNotFoundError: No module named 'nonexistent_mod'") in log


def test_enabled_broken_plugin_is_one_line_without_a_skipped_warning(tmp_path, site):
    code, out, err = _run(tmp_path, ["chat"], site, HERMES_PLUGINS__ENABLED='["broken"]')
    assert (code, out, err) == (2, "", "hermes-gateway: error: plugin 'broken' failed to load and is listed in "
                                       "[plugins] enabled: ZeroDivisionError: division by zero\n")
    # the log file still has the loader's line
    assert "plugin broken failed to load" in (tmp_path / "home" / "gateway.log").read_text()


def test_optional_broken_plugin_is_warned_about_once_and_chat_goes_on(tmp_path, site):
    code, out, err = _run(tmp_path, ["chat"], site)
    assert (code, out, err) == (0, "echo: hi\n", BROKEN_WARNING)


def test_a_name_in_hermes_plugins_that_is_not_installed_is_one_warning_and_chat_goes_on(tmp_path, site):
    # docs/configuration.md §2: the line names the unknown name and the installed plugins.
    from importlib.metadata import entry_points

    # "broken" comes from `site` (on the subprocess's PYTHONPATH only).
    installed = sorted({*(ep.name for ep in entry_points(group="hermes_core.plugins")), "broken"})
    code, out, err = _run(tmp_path, ["chat"], site, HERMES_PLUGINS="nosuch")
    assert (code, out, err) == (0, "echo: hi\n", "hermes-gateway: WARNING: HERMES_PLUGINS: no plugin named "
                                                 f"'nosuch' is installed (installed: {', '.join(installed)})\n")
    # doctor reports it as a warning of its `plugins` check (docs/operations.md §1).
    code, out, err = _run(tmp_path, ["doctor", "--json"], site, HERMES_PLUGINS="nosuch")
    assert {"check": "plugins", "status": "warn", "detail": ("HERMES_PLUGINS: no plugin named 'nosuch' is "
                                                             f"installed (installed: {', '.join(installed)})")} \
        in json.loads(out)


def test_a_variable_for_a_section_that_does_not_exist_is_one_warning_and_chat_goes_on(tmp_path):
    # docs/configuration.md §1: a typo in a HERMES_<SECTION>__<KEY> variable's section is named
    # on stderr by every command that loads the config, with the section it may have meant.
    warning = ("hermes-gateway: WARNING: environment variable HERMES_AGNET__BACKEND sets nothing: there is no "
               "setting 'agnet' (did you mean HERMES_AGENT__…?)\n")
    code, out, err = _run(tmp_path, ["chat"], HERMES_AGNET__BACKEND="openai")
    assert (code, out, err) == (0, "echo: hi\n", warning)
    code, _out, err = _run(tmp_path, ["status"], HERMES_AGNET__BACKEND="openai")
    assert (code, err) == (3, warning)


def test_plugins_listing_reports_a_broken_plugin_once(tmp_path, site):
    code, out, err = _run(tmp_path, ["plugins"], site)
    assert (code, err) == (0, "")
    assert out.count("ZeroDivisionError: division by zero") == 1
    assert "    error: ZeroDivisionError: division by zero\n" in out


def test_bad_toml_debug_traceback_shows_the_parser_error(tmp_path):
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "hermes.toml").write_text("x = [\n")
    line = (f"config file {tmp_path / 'home' / 'hermes.toml'} is not valid TOML: "
            "Invalid value (at end of document)")
    code, out, err = _run(tmp_path, ["chat"])
    assert (code, out, err) == (2, "", f"hermes-gateway: error: {line}\n")
    code, out, err = _run(tmp_path, ["chat"], HERMES_DEBUG="1")
    assert code == 1
    assert "Traceback (most recent call last):" in err
    assert "tomllib.TOMLDecodeError: Invalid value (at end of document)\n" in err
    assert err.endswith(f"hermes_core.cli.common.CliError: {line}\n")


def test_an_unexpected_failure_is_one_line_in_words(capsys, monkeypatch):
    # Not `unexpected KeyError: 'result'`: what failed, in words; the traceback stays for the log
    # and for HERMES_DEBUG=1.
    import typer

    from hermes_core.cli.common import run_async

    monkeypatch.delenv("HERMES_DEBUG", raising=False)

    async def broken():
        return {}["result"]

    with pytest.raises(typer.Exit) as info:
        run_async(broken)
    assert info.value.exit_code == 2
    assert capsys.readouterr().err == ("hermes-gateway: error: unexpected failure: 'result' is missing "
                                       "(HERMES_DEBUG=1 shows the traceback)\n")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize("args", [["--version"], ["plugins"], ["sessions", "list"], ["doctor"]], ids=" ".join)
def test_output_that_cannot_be_written_is_one_line(tmp_path, args):
    """stdout on a full disk (/dev/full answers every write with ENOSPC): one line, exit 2."""
    env = gateway_env(tmp_path / "home", XDG_CACHE_HOME=str(tmp_path / "cache"))
    assert subprocess.run([SCRIPT, "chat"], env=env, cwd=tmp_path, input=b"hi\n", capture_output=True,
                          timeout=60).returncode == 0
    with open("/dev/full", "w") as full:
        proc = subprocess.run([SCRIPT, *args], env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=60)
    assert (proc.returncode, proc.stderr.splitlines()[-1:]) == (
        2, ["hermes-gateway: error: cannot write output: No space left on device"])
    assert "Traceback" not in proc.stderr


def test_a_dsn_without_a_server_backend_is_one_warning_naming_both_settings(tmp_path):
    """docs/configuration.md §2: `[store] dsn` is used only by a server store. A replica set
    given only HERMES_STORE__DSN would run each replica on its own state.db (conversations
    forked); every command that loads the config says so once, never showing the DSN."""
    from cli_helpers import run

    env = gateway_env(tmp_path / "home", HERMES_STORE__DSN="postgresql://hermes:s3cret-pw@db.internal/hermes")
    warning = ('hermes-gateway: WARNING: [store] dsn is set but [store] backend is "sqlite": the dsn is not used '
               'and this gateway keeps its own state.db (set [store] backend = "postgres" to share a PostgreSQL '
               'store)\n')
    assert run(["chat"], env, tmp_path, stdin="hi\n") == (0, "echo: hi\n", warning)
    code, _out, err = run(["status"], env, tmp_path)
    assert (code, err) == (3, warning)
    env["HERMES_STORE__BACKEND"] = "sqlite"
    env["HERMES_STORE__DSN"] = " "
    assert run(["chat"], env, tmp_path, stdin="hi\n") == (0, "echo: hi\n", "")


def test_legacy_session_reset_settings_are_one_cli_warning_on_every_command_that_loads_the_config(tmp_path):
    """docs/configuration.md §1: upstream's session-reset timers load, are ignored and named in
    one warning; every command that loads the config prints it once, as its other config
    warnings (`hermes-gateway: WARNING: …`), before anything else it prints on stderr."""
    from cli_helpers import run

    home = tmp_path / "home"
    home.mkdir()
    (home / "hermes.toml").write_text('[session_reset]\nmode = "idle"\nidle_minutes = 1440\n'
                                      '[reset_by_type.dm]\nmode = "daily"\n')
    env = gateway_env(home, XDG_CACHE_HOME=str(tmp_path / "cache"))
    warning = ("hermes-gateway: WARNING: ignored legacy session-reset timer setting(s) reset_by_type.dm, "
               "session_reset.idle_minutes, session_reset.mode: no timer ends a conversation here, /new and "
               "/reset do (docs/behaviour.md §8)\n")
    assert run(["chat"], env, tmp_path, stdin="hi\n") == (0, "echo: hi\n", warning)
    for args, exit_code in ((["status"], 3), (["status", "--json"], 3), (["sessions", "list"], 0),
                            (["plugins"], 0), (["doctor", "--json"], 0)):
        code, _out, err = run(args, env, tmp_path)
        assert (args, code, err) == (args, exit_code, warning)
    code, _out, err = run(["restart"], env, tmp_path)
    assert (code, err) == (2, f"{warning}hermes-gateway: error: no gateway is running on HERMES_HOME {home}\n")


def test_a_damaged_state_db_is_named_with_what_to_do(tmp_path):
    """docs/operations.md §1: pages of state.db overwritten (its header intact, so it opens):
    the message that hits the damage gets the failure notice and the log one line saying state.db
    is damaged and what to do; the `sessions` commands say so in one line (exit 2), naming the
    file, where SQLite's own words ("database disk image is malformed") name neither."""
    code, out, _err = _run(tmp_path, ["chat"], stdin="alpha\n")
    assert code == 0 and "alpha" in out
    db = tmp_path / "home" / "state.db"
    with db.open("r+b") as file:
        for page in (2, 3, 5, 6):  # `sessions` and `messages`, each with an index
            file.seek((page - 1) * 4096)
            file.write(b"\xa5" * 4096)
    code, out, err = _run(tmp_path, ["chat"], stdin="delta\n")
    assert (code, out) == (0, "Sorry, this message could not be processed. Please try again later.\n")
    assert err == ("hermes-gateway: ERROR: job failed in agent:main:local:dm:terminal: state.db is damaged "
                   "(database disk image is malformed): `hermes-gateway doctor` names the damage; stop the gateway "
                   "and restore state.db from a backup (docs/operations.md §1)\n")
    code, out, err = _run(tmp_path, ["sessions", "list"])
    assert (code, out, err) == (2, "", f"hermes-gateway: error: state.db {db} is damaged: `hermes-gateway doctor` "
                                       "names the damage; restore it from a backup (docs/operations.md §1)\n")


def test_a_sessions_command_that_writes_logs_its_error_line_and_a_read_logs_nothing(tmp_path):
    """docs/operations.md §4: a `sessions` command that writes into the home logs to gateway.log,
    and the error line it stops with is logged there too (for the operator reading the log of a
    scheduled prune); a read writes nothing into the home, gateway.log included (§5), so its error
    line is on stderr only."""
    import asyncio
    import os

    from hermes_core import GatewayConfig
    from hermes_core.store import SessionStore
    from hermes_core.store.home_lock import HomeLock

    home = tmp_path / "home"

    async def first_state() -> None:
        config = GatewayConfig(home=home)
        async with SessionStore(config.sessions_dir, config):
            pass
    asyncio.run(first_state())
    code, out, err = _run(tmp_path, ["sessions", "show", "nope"])
    assert (code, err, (home / "gateway.log").exists()) == (
        2, "hermes-gateway: error: no session with key or id 'nope'\n", False)
    lock = HomeLock(home)
    lock.acquire()
    try:
        code, out, err = _run(tmp_path, ["sessions", "prune", "--days", "1", "--yes"])
    finally:
        lock.release()
    refused = f"a gateway is running on HERMES_HOME {home} (pid {os.getpid()}); stop it first"
    assert (code, out, err) == (2, "", f"hermes-gateway: error: {refused}\n")
    logged = [line.split(" ", 2)[2] for line in (home / "gateway.log").read_text().splitlines()]
    assert logged == [f"ERROR hermes_core.cli: hermes-gateway sessions prune: {refused}"]
