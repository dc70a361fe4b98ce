"""Every `hermes-gateway` command loads its config through one loader and reports a failure as
one line `hermes-gateway: error: …` with exit code 2 , run as real
subprocesses of the installed console script."""

from __future__ import annotations

import json
import logging

import pytest
from cli_helpers import gateway_env, run

from hermes_core.cli import common

COMMANDS = [["chat"], ["run"], ["sessions", "list"], ["sessions", "show", "x"],
            ["sessions", "search", "x"], ["sessions", "export", "x"], ["sessions", "prune", "--days", "1"],
            ["sessions", "import", "/nonexistent/sessions.json"], ["plugins"]]


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_bad_env_value_same_line_for_every_command(tmp_path, args):
    home = tmp_path / "home"  # no config file anywhere: the line must not blame one
    code, out, err = run(args, gateway_env(home, HERMES_AGENT__GATEWAY_TIMEOUT="abc"), tmp_path)
    assert (code, out, err) == (2, "", (
        "hermes-gateway: error: invalid config value for 'agent.gateway_timeout': Input should be a "
        "valid integer, unable to parse string as an integer, got 'abc' "
        "(environment variable HERMES_AGENT__GATEWAY_TIMEOUT)\n"))


def test_doctor_names_the_variable_holding_a_plain_value_for_a_table(tmp_path):
    home = tmp_path / "home"  # no config file: the finding must not name one
    code, out, err = run(["doctor", "--json"], gateway_env(home, HERMES_AGENT__OPENAI="abc"), tmp_path)
    assert (code, err) == (1, "")
    assert json.loads(out) == [{"check": "config", "status": "fail", "detail": (
        "invalid config value for 'agent.openai': expected a table: a JSON object "
        '({"<key>": <value>, …}) or one variable per key (HERMES_AGENT__OPENAI__<KEY>); the value is not '
        "valid JSON (environment variable HERMES_AGENT__OPENAI)")}]


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_directory_named_hermes_toml_is_refused_by_every_command(tmp_path, args):
    home = tmp_path / "home"
    (home / "hermes.toml").mkdir(parents=True)
    code, out, err = run(args, gateway_env(home), tmp_path)
    assert (code, out, err) == (2, "", (
        f"hermes-gateway: error: config file {home / 'hermes.toml'} cannot be read: it is not a regular file\n"))


def test_bad_value_in_file_names_the_file(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "hermes.toml").write_text("session_store_max_age_days = \"week\"\n")
    code, out, err = run(["sessions", "list"], gateway_env(home), tmp_path)
    assert (code, err) == (2, (
        "hermes-gateway: error: invalid config value for 'session_store_max_age_days': Input should be a "
        f"valid integer, unable to parse string as an integer, got 'week' (config file {home / 'hermes.toml'})\n"))


@pytest.mark.parametrize(("toml", "key"), [("agent = 5\n", "agent"), ("core = \"fast\"\n", "core"),
                                         ("[agent]\nopenai = [1]\n", "agent.openai"),
                                         ("[platforms]\ntelegram = 5\n", "platforms.telegram")])
def test_a_value_where_a_table_belongs_names_the_key_not_a_class(tmp_path, toml, key):
    # docs/configuration.md §1: the key and "expected a table", never pydantic's model class name.
    home = tmp_path / "home"
    home.mkdir()
    (home / "hermes.toml").write_text(toml)
    code, out, err = run(["chat"], gateway_env(home), tmp_path)
    assert (code, out, err) == (2, "", (
        f"hermes-gateway: error: invalid config value for {key!r}: expected a table "
        f"(config file {home / 'hermes.toml'})\n"))


def test_sessions_errors_use_the_same_prefix_and_code(tmp_path):
    home = tmp_path / "home"
    assert run(["chat"], gateway_env(home), tmp_path)[0] == 0  # a home with state, no sessions
    code, out, err = run(["sessions", "show", "nothing-here"], gateway_env(home), tmp_path)
    assert (code, out, err) == (2, "", "hermes-gateway: error: no session with key or id 'nothing-here'\n")


def test_new_plugin_error_uses_the_same_prefix_and_code(tmp_path):
    code, out, err = run(["new-plugin", "Bad Name!", "--dir", str(tmp_path)], gateway_env(tmp_path / "home"), tmp_path)
    assert code == 2 and out == ""
    assert err.startswith("hermes-gateway: error: ") and err.count("\n") == 1


def test_new_plugin_into_a_file_is_one_line_not_a_traceback(tmp_path):
    """README: errors are one line on stderr, exit code 2. `--dir` naming a file (or a package
    folder name taken by a file) used to end in a NotADirectoryError traceback, exit code 1."""
    (tmp_path / "notes.txt").write_text("not a folder")
    env = gateway_env(tmp_path / "home")
    code, out, err = run(["new-plugin", "acme", "--dir", str(tmp_path / "notes.txt")], env, tmp_path)
    assert (code, out) == (2, "")
    assert err == (f"hermes-gateway: error: cannot create the plugin package at "
                   f"{tmp_path / 'notes.txt' / 'hermes-gateway-acme'}: Not a directory\n")
    (tmp_path / "hermes-gateway-beta").write_text("a file where the package folder goes")
    code, out, err = run(["new-plugin", "beta", "--dir", str(tmp_path)], env, tmp_path)
    assert (code, out) == (2, "")
    assert err == (f"hermes-gateway: error: cannot create the plugin package at "
                   f"{tmp_path / 'hermes-gateway-beta'}: Not a directory\n")


def test_setup_logging_is_idempotent_without_tagging_the_root_logger(tmp_path, monkeypatch):
    root = logging.getLogger()
    before = list(root.handlers)
    level = root.level
    monkeypatch.setattr(common, "_stderr_handler", None)
    monkeypatch.setattr(common, "_file_handler", None)
    try:
        common.setup_logging(tmp_path / "home")
        common.setup_logging(tmp_path / "home")
        added = [h for h in root.handlers if h not in before]
        assert [type(h).__name__ for h in added] == ["StreamHandler", "PrivateRotatingFileHandler"]
        assert not hasattr(root, "_hermes_configured")
        assert (tmp_path / "home" / "gateway.log").exists()
    finally:
        for handler in [h for h in root.handlers if h not in before]:
            root.removeHandler(handler)
            handler.close()
        root.setLevel(level)
