"""`hermes-gateway new-plugin`: generate a plugin from the template, install it into a temporary
virtual environment chained to the current one (offline: `pip install --no-deps
--no-build-isolation -e`), and check what the issue's "done means" asks, with no edit to the core:
its contract suite passes, `hermes-gateway plugins --json` lists it as loaded, its platform
receives messages, and a deployment override module changes its session key."""

import json
import os
import shlex
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from hermes_core.cli.plugins import new_plugin_command
from hermes_core.templates import PluginTemplateError, render_plugin


def _cli() -> typer.Typer:
    app = typer.Typer()
    app.command("new-plugin")(new_plugin_command)

    @app.callback()
    def root() -> None:
        """test wrapper"""

    return app


def test_new_plugin_refuses_a_name_an_installed_package_has(tmp_path):
    """docs/plugins.md §1: a name whose distribution, platform id or import package is installed
    already is refused and nothing is written. `new-plugin core` used to write a second
    `hermes-gateway-core` with a package `hermes_core`, and its printed install command replaced
    the core (the `hermes-gateway` command was gone); `local` duplicated the terminal platform."""
    result = CliRunner().invoke(_cli(), ["new-plugin", "local", "--dir", str(tmp_path)])
    assert result.exit_code == 2
    assert " ".join(result.output.split()) == (
        "hermes-gateway: error: plugin name 'local' is taken: hermes-gateway-core provides platform "
        "'local'; installing the new package would replace or clash with it: choose another name")
    with pytest.raises(PluginTemplateError) as caught:
        render_plugin("core", tmp_path)
    assert str(caught.value).startswith(
        "plugin name 'core' is taken: hermes-gateway-core is installed (the new package has its "
        "distribution name); the import package hermes_core exists (")
    assert list(tmp_path.iterdir()) == []


def test_new_plugin_command_writes_the_package(tmp_path):
    result = CliRunner().invoke(_cli(), ["new-plugin", "acme_chat", "--dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    root = tmp_path / "hermes-gateway-acme-chat"
    assert result.output.splitlines()[0] == f"created {root}"
    # The hint works in a fresh virtual environment: it names the interpreter that has the core
    # (so pip never looks for hermes-gateway-core on an index) and installs pytest with `[test]`.
    python = shlex.quote(sys.executable)
    assert result.output.splitlines()[1] == (
        f"next: {python} -m pip install -e '{root}[test]' && {python} -m pytest {root}/tests")
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) == [
        "README.md", "hermes_acme_chat/__init__.py", "hermes_acme_chat/adapter.py",
        "hermes_acme_chat/hooks.py", "hermes_acme_chat/settings.py", "pyproject.toml",
        "tests/test_adapter_acme_chat.py", "tests/test_contract_acme_chat.py",
    ]
    pyproject = (root / "pyproject.toml").read_text()
    assert '[project.entry-points."hermes_core.plugins"]\nacme_chat = "hermes_acme_chat.hooks"' in pyproject
    assert ('[project.entry-points."hermes_core.adapters"]\n'
            'acme_chat = "hermes_acme_chat.adapter:AcmeChatAdapter"') in pyproject
    assert 'dependencies = ["hermes-gateway-core>=0.1,<0.2"]' in pyproject
    # A second run refuses to overwrite.
    again = CliRunner().invoke(_cli(), ["new-plugin", "acme_chat", "--dir", str(tmp_path)])
    assert again.exit_code == 2
    assert "already exists and is not empty (use --force to overwrite)" in again.output


def test_new_plugin_rejects_bad_names(tmp_path):
    with pytest.raises(PluginTemplateError, match="plugin name 'Bad-Name' must be lower_snake"):
        render_plugin("Bad-Name", tmp_path)


def _make_venv(tmp_path: Path) -> Path:
    """A new virtual environment that sees exactly the current one (the editable core and its
    dependencies) and nothing else: `--system-site-packages` would expose the base interpreter's
    packages instead, ahead of the current environment's versions."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site_dir = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              check=True, capture_output=True, text=True).stdout.strip()
    # `addsitedir` also runs the current environment's .pth files (the editable install's finder).
    current = sysconfig.get_paths()["purelib"]
    Path(site_dir, "hermes_parent_env.pth").write_text(f"import site; site.addsitedir({current!r})\n")
    return python


def _run(python: Path, args: list[str], env: dict, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


E2E_SCRIPT = textwrap.dedent("""
    import asyncio, json, logging, sys
    from hermes_core.app import GatewayApp
    from hermes_core.plugin_system import key_policy, session_key_for
    from hermes_core.settings import load_config

    # A new platform message id per run: the gateway drops a re-delivered id (dedupe).
    PAYLOAD = {"id": int(sys.argv[1]), "chat": {"id": 42, "type": "private"}, "from": {"id": 7, "name": "Ann"},
               "text": "hello plugin"}

    async def main():
        config = load_config()
        app = GatewayApp(config, watcher=False)
        await app.start()
        try:
            adapter = app.adapters["acme"]
            await adapter.handle_payload(PAYLOAD)
            for _ in range(500):
                if adapter.transport.sent:
                    break
                await asyncio.sleep(0.01)
            source = adapter.to_source(PAYLOAD)
            key = session_key_for(app.pm, key_policy(app.pm, config), source)
            report = {r.name: r.status for r in app.report.records}
            sent = [p["text"] for p in adapter.transport.sent]
        finally:
            await app.stop()
        print(json.dumps({"key": key, "sent": sent, "adapter": type(adapter).__name__,
                          "report": report}))

    logging.basicConfig(level=logging.INFO)
    asyncio.run(main())
""")


@pytest.mark.slow
def test_generated_plugin_installs_loads_receives_and_is_overridden(tmp_path):
    plugin_dir = render_plugin("acme", tmp_path / "src")
    python = _make_venv(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_") and k != "PYTHONPATH"}
    env.update({"XDG_CACHE_HOME": str(tmp_path / "cache"), "PIP_NO_INDEX": "1",
                "PIP_DISABLE_PIP_VERSION_CHECK": "1", "HOME": str(tmp_path)})

    install = _run(python, ["-m", "pip", "install", "--no-deps", "--no-build-isolation", "-e", str(plugin_dir)], env)
    assert install.returncode == 0, install.stdout + install.stderr

    # 1. Its own contract suite passes, run by pytest inside the new environment.
    tests = _run(python, ["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], env, cwd=plugin_dir)
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert " passed" in tests.stdout and " failed" not in tests.stdout

    # 2. `hermes-gateway plugins --json` lists it as loaded, with its adapter and distribution.
    home = tmp_path / "home"
    home.mkdir()
    env_home = dict(env, HERMES_HOME=str(home))
    listing = _run(python, ["-m", "hermes_core.cli.main", "plugins", "--json"], env_home)
    assert listing.returncode == 0, listing.stdout + listing.stderr
    rows = {row["name"]: row for row in json.loads(listing.stdout)}
    acme = rows["acme"]
    assert (acme["status"], acme["distribution"], acme["version"]) == ("loaded", "hermes-gateway-acme", "0.1.0")
    assert acme["adapters"] == ["acme"]
    assert acme["hooks"] == ["hermes_platform_notes", "hermes_settings_schema"]

    # 3. Its platform receives a message through the real gateway (echo agent) and answers, and
    # 4. a deployment override module changes the platform's session key.
    (home / "hermes.toml").write_text(textwrap.dedent("""
        [platforms.local]
        enabled = false

        [platforms.acme]
        enabled = true
        allow_all = true
        base_url = "http://127.0.0.1:9"
    """))
    before = _run(python, ["-c", E2E_SCRIPT, "501"], env_home)
    assert before.returncode == 0, before.stdout + before.stderr
    result = json.loads(before.stdout.strip().splitlines()[-1])
    assert result["adapter"] == "AcmeAdapter"
    assert result["key"] == "agent:main:acme:dm:42"
    assert len(result["sent"]) == 1 and "hello plugin" in result["sent"][0]
    assert result["report"]["acme"] == "loaded"

    overrides = tmp_path / "deploy"
    overrides.mkdir()
    (overrides / "acme_keys.py").write_text(textwrap.dedent("""
        from hermes_core import override

        @override
        def hermes_session_key(source, policy):
            if source.platform == "acme":
                return f"agent:main:acme:tenant-7:{source.chat_id}"
    """))
    with (home / "hermes.toml").open("a") as handle:
        handle.write('\n[plugins]\noverrides = ["acme_keys"]\n')
    after = _run(python, ["-c", E2E_SCRIPT, "502"], dict(env_home, PYTHONPATH=str(overrides)))
    assert after.returncode == 0, after.stdout + after.stderr
    result = json.loads(after.stdout.strip().splitlines()[-1])
    assert result["key"] == "agent:main:acme:tenant-7:42"
    assert result["report"]["deployment:acme_keys"] == "loaded"
    assert len(result["sent"]) == 1, after.stderr
