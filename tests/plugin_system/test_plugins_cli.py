"""`hermes-gateway plugins [--json] [--all]` (docs/architecture.md §3 listing) over real entry points."""

import json
import re

import pytest
from typer.testing import CliRunner

from hermes_core.cli.plugins import plugins_app

HOOKS = """
from hermes_core import hookimpl
HERMES_API = 1

@hookimpl
def hermes_platform_notes(context):
    return None

@hookimpl
def hermes_session_key(source, policy):
    return None
"""


@pytest.fixture
def installed(plugin_distributions, tmp_path, monkeypatch):
    monkeypatch.delenv("HERMES_CONFIG", raising=False)
    monkeypatch.delenv("HERMES_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HERMES_PLUGINS", "zork,broken")
    plugin_distributions.add("hermes-gateway-zork", version="2.0.1",
                             modules={"zork_pkg/__init__.py": "", "zork_pkg/hooks.py": HOOKS,
                                      "zork_pkg/adapter.py": "class ZorkAdapter:\n    pass\n"},
                             entry_points={"hermes_core.plugins": {"zork": "zork_pkg.hooks"},
                                           "hermes_core.adapters": {"zork": "zork_pkg.adapter:ZorkAdapter"}})
    plugin_distributions.add("hermes-gateway-broken",
                             modules={"broken_pkg/__init__.py": "", "broken_pkg/hooks.py": "1/0\n"},
                             entry_points={"hermes_core.plugins": {"broken": "broken_pkg.hooks"}})


def test_plugins_json_lists_name_distribution_version_hooks_adapters_status_error(installed):
    result = CliRunner().invoke(plugins_app, ["--json"])
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in json.loads(result.output)}
    assert rows["zork"] == {
        "name": "zork", "group": "hermes_core.plugins", "status": "loaded", "error": None,
        "module": "zork_pkg.hooks", "distribution": "hermes-gateway-zork", "version": "2.0.1",
        "hooks": ["hermes_platform_notes", "hermes_session_key"], "adapters": ["zork"], "warnings": [],
    }
    assert (rows["broken"]["status"], rows["broken"]["error"]) == ("failed", "ZeroDivisionError: division by zero")
    # The core's own adapter is listed (not imported) under its distribution.
    assert (rows["local"]["group"], rows["local"]["status"], rows["local"]["distribution"]) == \
        ("hermes_core.adapters", "installed", "hermes-gateway-core")


def _columns(header: str) -> list[int]:
    """Where each column of a printed table starts: at each upper-case header word."""
    return [m.start() for m in re.finditer(r"(?<!\S)[A-Z]+(?: [A-Z]+)*", header)]


def _cells(line: str, starts: list[int]) -> list[str]:
    return [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None])]


def test_plugins_text_output_and_all(installed):
    result = CliRunner().invoke(plugins_app, [])
    assert result.exit_code == 0, result.output
    header, *lines = result.output.splitlines()
    starts = _columns(header)
    assert _cells(header, starts) == ["NAME", "STATUS", "DISTRIBUTION", "HOOKS", "ADAPTERS", "PROBLEMS"]
    # Every row's cells start under their header (one hook a line: a row can take more lines).
    zork = lines.index(next(line for line in lines if line.startswith("zork ")))
    assert _cells(lines[zork], starts) == ["zork", "loaded", "hermes-gateway-zork 2.0.1", "hermes_platform_notes",
                                           "zork", ""]
    assert _cells(lines[zork + 1], starts) == ["", "", "", "hermes_session_key", "", ""]
    broken = next(line for line in lines if line.startswith("broken "))
    assert _cells(broken, starts) == ["broken", "failed", "hermes-gateway-broken 0.1.0", "", "",
                                      "error: ZeroDivisionError: division by zero"]
    assert "builtin:" not in result.output
    listed = CliRunner().invoke(plugins_app, ["--all"])
    header, *lines = listed.output.splitlines()
    starts = _columns(header)
    rows = [_cells(line, starts) for line in lines if not line.startswith(" ")]
    assert rows[0][:3] == ["builtin:access", "loaded", "hermes-gateway-core 0.1.0"]
    assert ["builtin:session_keys", "loaded", "hermes-gateway-core 0.1.0", "hermes_session_key", "", ""] in rows
    everything = CliRunner().invoke(plugins_app, ["--all", "--json"])
    rows = json.loads(everything.output)
    builtins = [row["name"] for row in rows if row["group"] == "builtin"]
    assert {"builtin:delivery", "builtin:identity", "builtin:recovery", "builtin:redaction",
            "builtin:session_keys"} <= set(builtins)
    assert [row["name"] for row in rows[:len(builtins)]] == sorted(builtins)  # listed first, sorted
    keys = next(row for row in rows if row["name"] == "builtin:session_keys")
    assert keys["hooks"] == ["hermes_session_key", "hermes_session_shared"]
    identity = next(row for row in rows if row["name"] == "builtin:identity")
    assert (identity["module"], identity["hooks"]) == ("hermes_core.builtin.identity", ["hermes_canonical_identity"])


def test_plugins_warns_of_a_name_in_hermes_plugins_that_is_not_installed(installed, monkeypatch):
    # docs/configuration.md §2: no row to show it in, so one warning line on stderr.
    from importlib.metadata import entry_points

    names = ", ".join(sorted({ep.name for ep in entry_points(group="hermes_core.plugins")}))
    monkeypatch.setenv("HERMES_PLUGINS", "zork,nosuch")
    for args in ([], ["--json"]):
        result = CliRunner().invoke(plugins_app, args)
        assert (result.exit_code, result.stderr) == (0, (
            "hermes-gateway: WARNING: HERMES_PLUGINS: no plugin named 'nosuch' is installed "
            f"(installed: {names})\n"))
    monkeypatch.setenv("HERMES_PLUGINS", "zork")
    assert CliRunner().invoke(plugins_app, []).stderr == ""


def test_plugins_reports_a_bad_config_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("HERMES_HOME", str(tmp_path))
    monkeypatch.delenv("HERMES_CONFIG", raising=False)
    (tmp_path / "hermes.toml").write_text("[plugins\n")
    result = CliRunner().invoke(plugins_app, ["--json"])
    assert result.exit_code == 2
    assert result.output.startswith("hermes-gateway: error: config file ")
    assert "is not valid TOML" in result.output


def test_plugins_exits_1_when_a_configured_override_is_broken(tmp_path, monkeypatch):
    # The listing still prints, but `run` would refuse to start: the exit code says so.
    monkeypatch.setenv("HERMES_HOME", str(tmp_path))
    monkeypatch.delenv("HERMES_CONFIG", raising=False)
    (tmp_path / "hermes.toml").write_text('[plugins]\noverrides = ["no_such_override_mod"]\n')
    result = CliRunner().invoke(plugins_app, ["--json"])
    assert result.exit_code == 1
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert rows["deployment:no_such_override_mod"]["status"] == "failed"
    assert result.stderr == ("hermes-gateway: error: `run` would not start: deployment override "
                             "'no_such_override_mod' failed: ModuleNotFoundError: No module named "
                             "'no_such_override_mod'\n")
