"""Loader (docs/architecture.md §3) through real entry points: tiny distributions on sys.path are found
by importlib.metadata and stevedore exactly like pip-installed ones."""

import logging
import sys

import pytest

from hermes_core.model.source import SessionSource
from hermes_core.plugin_system import (
    AdapterLoadError,
    PluginLoadError,
    create_plugin_manager,
    key_policy,
    resolve_adapter_classes,
    session_key_for,
)
from hermes_core.settings import GatewayConfig
from hermes_core.types import AdapterSpec, DeliveryPlan, OutboundDelivery

ACME_HOOKS = """
from hermes_core import hookimpl
HERMES_API = 1

@hookimpl
def hermes_session_key(source, policy):
    if source.platform == "acme":
        return "acme-key:" + source.chat_id
"""

OVERRIDE = """
from hermes_core import override

@override
def hermes_session_key(source, policy):
    if source.platform == "acme":
        return "deployment-key:" + source.chat_id
"""

SOURCE = SessionSource(platform="acme", chat_id="42", chat_type="dm", user_id="7")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    monkeypatch.delenv("HERMES_CONFIG", raising=False)
    monkeypatch.delenv("HERMES_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    monkeypatch.delenv("HERMES_PLUGINS", raising=False)


def _config(tmp_path, plugins=None, platforms=None):
    return GatewayConfig(home=tmp_path / "home", plugins=plugins or {}, platforms=platforms or {})


def _dist(sandbox, name, hooks_source, *, adapter=None):
    eps = {"hermes_core.plugins": {name: f"{name}_pkg.hooks"}}
    if adapter:
        eps["hermes_core.adapters"] = {name: adapter}
    sandbox.add(f"hermes-gateway-{name}", modules={f"{name}_pkg/__init__.py": "",
                                                   f"{name}_pkg/hooks.py": hooks_source},
                entry_points=eps, version="1.2.3")


def _key(pm, config):
    return session_key_for(pm, key_policy(pm, config), SOURCE)


def test_hook_hermes_session_key(tmp_path, plugin_distributions, monkeypatch):
    _dist(plugin_distributions, "acme", ACME_HOOKS)
    overrides = tmp_path / "overrides"
    overrides.mkdir()
    (overrides / "acme_deploy.py").write_text(OVERRIDE)
    plugin_distributions.add_path(overrides)
    monkeypatch.setenv("HERMES_PLUGINS", "acme")

    config = _config(tmp_path)
    monkeypatch.setenv("HERMES_DISABLE_PLUGIN_AUTOLOAD", "1")
    builtin_pm, _ = create_plugin_manager(config)
    assert _key(builtin_pm, config) == "agent:main:acme:dm:42"

    monkeypatch.delenv("HERMES_DISABLE_PLUGIN_AUTOLOAD")
    plugin_pm, report = create_plugin_manager(config)
    record = report.get("acme")
    assert (record.status, record.distribution, record.version) == ("loaded", "hermes-gateway-acme", "1.2.3")
    assert record.hooks == ["hermes_session_key"]
    assert _key(plugin_pm, config) == "acme-key:42"

    deployed = _config(tmp_path, plugins={"overrides": ["acme_deploy"]})
    deploy_pm, report = create_plugin_manager(deployed)
    assert report.get("deployment:acme_deploy").status == "loaded"
    assert _key(deploy_pm, deployed) == "deployment-key:42"
    # Other platforms still fall through to the builtin.
    other = SessionSource(platform="telegram", chat_id="5", chat_type="dm")
    assert session_key_for(deploy_pm, key_policy(deploy_pm, deployed), other) == "agent:main:telegram:dm:5"
    # pluggy consults the last registered first: deployment, then plugin, then builtin.
    order = [i.plugin_name for i in reversed(deploy_pm.hook.hermes_session_key.get_hookimpls())]
    assert order == ["deployment:acme_deploy", "acme", "builtin:session_keys"]


def test_hook_hermes_plan_delivery(tmp_path, plugin_distributions, monkeypatch):
    monkeypatch.setenv("HERMES_DISABLE_PLUGIN_AUTOLOAD", "1")
    overrides = tmp_path / "ov"
    overrides.mkdir()
    (overrides / "numbering.py").write_text(
        "from hermes_core import override\n"
        "@override(wrapper=True)\n"
        "def hermes_plan_delivery(delivery):\n"
        "    plan = yield\n"
        "    n = len(plan.chunks)\n"
        "    plan.chunks = [f'({i}/{n}) {c}' for i, c in enumerate(plan.chunks, 1)]\n"
        "    return plan\n")
    plugin_distributions.add_path(overrides)
    config = _config(tmp_path, plugins={"overrides": ["numbering"]})
    pm, _ = create_plugin_manager(config)
    spec = AdapterSpec(name="acme", label="Acme", max_message_length=10)
    delivery = OutboundDelivery(session_key="k", session_id="s", target=SOURCE, text="aaaa bbbb cccc",
                                spec=spec, reply_to_message_id="9")
    plan = pm.hook.hermes_plan_delivery(delivery=delivery)
    assert isinstance(plan, DeliveryPlan)
    assert plan.chunks == ["(1/2) aaaa bbbb ", "(2/2) cccc"]
    assert plan.reply_to_message_id == "9"


def test_broken_plugin_is_reported_and_skipped(tmp_path, plugin_distributions, monkeypatch, caplog):
    _dist(plugin_distributions, "acme", ACME_HOOKS)
    _dist(plugin_distributions, "broken", "raise RuntimeError('boom at import')\n")
    monkeypatch.setenv("HERMES_PLUGINS", "acme,broken")
    config = _config(tmp_path)
    with caplog.at_level(logging.WARNING):
        pm, report = create_plugin_manager(config)
    broken = report.get("broken")
    assert (broken.status, broken.error) == ("failed", "RuntimeError: boom at import")
    assert "plugin broken failed to load and is skipped: RuntimeError: boom at import" in caplog.text
    assert report.get("acme").status == "loaded"
    assert _key(pm, config) == "acme-key:42"

    # Fatal when its platform is enabled, or under strict.
    enabled = _config(tmp_path, platforms={"broken": {"enabled": True}})
    with pytest.raises(PluginLoadError, match="plugin 'broken' failed to load and platform 'broken' is enabled"):
        create_plugin_manager(enabled)
    with pytest.raises(PluginLoadError, match=r"plugin 'broken' failed to load \(\[plugins\] strict\)"):
        create_plugin_manager(_config(tmp_path, plugins={"strict": True}))
    # The listing path reports instead of raising.
    _pm, listed = create_plugin_manager(enabled, raise_on_fatal=False)
    assert listed.get("broken").status == "failed"


def test_missing_optional_dependency_is_skipped_quietly(tmp_path, plugin_distributions, monkeypatch, caplog):
    _dist(plugin_distributions, "needsdep", "import hermes_no_such_sdk\n")
    monkeypatch.setenv("HERMES_PLUGINS", "needsdep")
    with caplog.at_level(logging.DEBUG, logger="hermes_core.plugin_system.loader"):
        _pm, report = create_plugin_manager(_config(tmp_path))
    record = report.get("needsdep")
    assert record.status == "missing"
    assert record.error == "ModuleNotFoundError: No module named 'hermes_no_such_sdk'"
    assert [r.levelname for r in caplog.records if "needsdep" in r.getMessage()] == ["DEBUG"]


def test_denied_plugin_is_blocked_before_import(tmp_path, plugin_distributions, monkeypatch):
    _dist(plugin_distributions, "denied", "raise SystemExit('must never be imported')\n")
    _dist(plugin_distributions, "acme", ACME_HOOKS)
    monkeypatch.setenv("HERMES_PLUGINS", "acme,denied")
    pm, report = create_plugin_manager(_config(tmp_path, plugins={"deny": ["denied"]}))
    assert (report.get("denied").status, report.get("denied").error) == ("blocked", "denied by [plugins] deny")
    assert pm.is_blocked("denied")
    assert "denied_pkg.hooks" not in sys.modules
    assert report.get("acme").status == "loaded"


def test_allow_lists_and_autoload_switch(tmp_path, plugin_distributions, monkeypatch):
    _dist(plugin_distributions, "acme", ACME_HOOKS)
    _dist(plugin_distributions, "other", ACME_HOOKS.replace('"acme"', '"other"'))
    monkeypatch.setenv("HERMES_PLUGINS", "other")
    _pm, report = create_plugin_manager(_config(tmp_path))
    assert report.get("acme").error == "not in HERMES_PLUGINS"
    assert report.get("other").status == "loaded"

    monkeypatch.delenv("HERMES_PLUGINS")
    _pm, report = create_plugin_manager(_config(tmp_path, plugins={"allow": ["acme"]}))
    assert report.get("acme").status == "loaded"
    assert report.get("other").error == "not in [plugins] allow"

    monkeypatch.setenv("HERMES_DISABLE_PLUGIN_AUTOLOAD", "1")
    pm, report = create_plugin_manager(_config(tmp_path))
    assert report.records == []
    assert pm.get_plugin("acme") is None


def test_a_json_object_in_hermes_plugins_sets_the_table_and_is_no_allowlist(tmp_path, plugin_distributions,
                                                                            monkeypatch):
    # docs/configuration.md §2: `HERMES_PLUGINS=a,b` is an allowlist; a JSON object instead sets
    # the [plugins] table, so it must not block every plugin as "not in HERMES_PLUGINS".
    _dist(plugin_distributions, "acme", ACME_HOOKS)
    _dist(plugin_distributions, "other", ACME_HOOKS.replace('"acme"', '"other"'))
    monkeypatch.setenv("HERMES_PLUGINS", '{"deny": ["other"]}')
    _pm, report = create_plugin_manager(GatewayConfig(home=tmp_path / "home", platforms={}))
    assert (report.get("acme").status, report.get("acme").error) == ("loaded", None)
    assert (report.get("other").status, report.get("other").error) == ("blocked", "denied by [plugins] deny")


def test_a_name_in_hermes_plugins_that_is_not_installed_is_one_warning(tmp_path, plugin_distributions,
                                                                        monkeypatch, caplog):
    # docs/configuration.md §2: the warning names the unknown name(s) and the installed plugins.
    from importlib.metadata import entry_points

    _dist(plugin_distributions, "acme", ACME_HOOKS)
    installed = ", ".join(sorted({ep.name for ep in entry_points(group="hermes_core.plugins")}))
    assert "acme" in installed
    monkeypatch.setenv("HERMES_PLUGINS", "acme,nosuch")
    with caplog.at_level(logging.WARNING):
        _pm, report = create_plugin_manager(_config(tmp_path))
    line = f"HERMES_PLUGINS: no plugin named 'nosuch' is installed (installed: {installed})"
    assert report.warnings == [line]
    assert [r.getMessage() for r in caplog.records if "HERMES_PLUGINS" in r.getMessage()] == [line]
    assert report.get("acme").status == "loaded"

    monkeypatch.setenv("HERMES_PLUGINS", "zz, acme ,nosuch")
    _pm, report = create_plugin_manager(_config(tmp_path))
    assert report.warnings == [f"HERMES_PLUGINS: no plugin named 'nosuch' or 'zz' is installed (installed: {installed})"]
    monkeypatch.setenv("HERMES_PLUGINS", "acme")
    _pm, report = create_plugin_manager(_config(tmp_path))
    assert report.warnings == []


def test_plugins_register_sorted_by_name(tmp_path, plugin_distributions, monkeypatch):
    for name in ("zeta", "alpha", "mid"):
        _dist(plugin_distributions, name,
              f"from hermes_core import hookimpl\nHERMES_API = 1\n"
              f"@hookimpl\ndef hermes_platform_notes(context):\n    return ['{name}']\n")
    monkeypatch.setenv("HERMES_PLUGINS", "zeta,alpha,mid")
    pm, _ = create_plugin_manager(_config(tmp_path))
    registered = [i.plugin_name for i in pm.hook.hermes_platform_notes.get_hookimpls()]
    assert registered == ["alpha", "mid", "zeta"]


@pytest.mark.parametrize("source, error", [
    ("HERMES_API = 2\nfrom hermes_core import hookimpl\n@hookimpl\ndef hermes_platform_notes(context):\n    return []\n",
     "plugin API 2 is not supported by this core (plugin API 1)"),
    ("from hermes_core import hookimpl\n@hookimpl\ndef hermes_sesion_key(source, policy):\n    return 'x'\n",
     "unknown hook (typo?): unknown hook 'hermes_sesion_key' in plugin"),
    ("from hermes_core import hookimpl\n@hookimpl\nasync def hermes_session_key(source, policy):\n    return 'x'\n",
     "bad: async implementation of firstresult hook hermes_session_key is not allowed"),
    ("from hermes_core import hookimpl\n@hookimpl(wrapper=True)\ndef hermes_housekeeping(ctx):\n    yield\n",
     "bad: wrapper on broadcast hook hermes_housekeeping is not allowed"),
])
def test_invalid_plugins_are_rejected_at_load(tmp_path, plugin_distributions, monkeypatch, source, error):
    _dist(plugin_distributions, "bad", source)
    monkeypatch.setenv("HERMES_PLUGINS", "bad")
    pm, report = create_plugin_manager(_config(tmp_path))
    record = report.get("bad")
    assert record.status == "failed"
    assert record.error.startswith(error)
    assert pm.get_plugin("bad") is None


def test_tryfirst_on_firstresult_is_warned_and_an_error_under_strict(tmp_path, plugin_distributions, monkeypatch):
    _dist(plugin_distributions, "greedy",
          "from hermes_core import hookimpl\nHERMES_API = 1\n"
          "@hookimpl(tryfirst=True)\ndef hermes_session_key(source, policy):\n    return None\n")
    monkeypatch.setenv("HERMES_PLUGINS", "greedy")
    _pm, report = create_plugin_manager(_config(tmp_path))
    record = report.get("greedy")
    assert record.status == "loaded"
    assert record.warnings == ["greedy: tryfirst on firstresult hook hermes_session_key is reserved for"
                               " deployment overrides (use a plain hookimpl)"]
    with pytest.raises(PluginLoadError, match="error under \\[plugins\\] strict"):
        create_plugin_manager(_config(tmp_path, plugins={"strict": True}))


def test_safe_mode_loads_and_reports_but_calls_nothing(tmp_path, plugin_distributions, monkeypatch):
    _dist(plugin_distributions, "acme", ACME_HOOKS)
    monkeypatch.setenv("HERMES_PLUGINS", "acme")
    config = _config(tmp_path, plugins={"safe_mode": True})
    pm, report = create_plugin_manager(config)
    record = report.get("acme")
    assert (record.status, record.hooks) == ("safe_mode", ["hermes_session_key"])
    assert _key(pm, config) == "agent:main:acme:dm:42"


def test_local_file_override_needs_allow_local_file(tmp_path, monkeypatch):
    monkeypatch.setenv("HERMES_DISABLE_PLUGIN_AUTOLOAD", "1")
    home = tmp_path / "home"
    home.mkdir()
    (home / "hermes_local.py").write_text(OVERRIDE)
    off = _config(tmp_path)
    pm, report = create_plugin_manager(off)
    assert report.get("deployment:hermes_local") is None
    on = _config(tmp_path, plugins={"allow_local_file": True})
    pm, report = create_plugin_manager(on)
    assert report.get("deployment:hermes_local").status == "loaded"
    assert _key(pm, on) == "deployment-key:42"
    sys.modules.pop("hermes_local", None)


def test_missing_override_module_is_fatal(tmp_path, monkeypatch):
    monkeypatch.setenv("HERMES_DISABLE_PLUGIN_AUTOLOAD", "1")
    with pytest.raises(PluginLoadError, match="deployment override 'acme_not_there' failed: ModuleNotFoundError"):
        create_plugin_manager(_config(tmp_path, plugins={"overrides": ["acme_not_there"]}))


def test_duplicate_entry_point_names_are_refused(tmp_path, plugin_distributions, monkeypatch):
    _dist(plugin_distributions, "acme", ACME_HOOKS)
    plugin_distributions.add("hermes-gateway-acme-fork", modules={"acmefork/__init__.py": ACME_HOOKS},
                             entry_points={"hermes_core.plugins": {"acme": "acmefork"}})
    monkeypatch.setenv("HERMES_PLUGINS", "acme")
    pm, report = create_plugin_manager(_config(tmp_path))
    assert report.get("acme").status == "failed"
    assert report.get("acme").error == "duplicate entry point name: acme_pkg.hooks, acmefork"
    assert pm.get_plugin("acme") is None


def test_adapter_swap_from_config(tmp_path, plugin_distributions):
    from hermes_core.testing.fakes import CapturingAdapter

    config = _config(tmp_path, platforms={"fake": {"enabled": True,
                                                   "adapter": "hermes_core.testing.fakes:CapturingAdapter"}})
    assert resolve_adapter_classes(["fake"], config=config) == {"fake": CapturingAdapter}
    bad = _config(tmp_path, platforms={"fake": {"enabled": True, "adapter": "hermes_core.testing.fakes"}})
    with pytest.raises(AdapterLoadError, match="must look like 'pkg.module:Class'"):
        resolve_adapter_classes(["fake"], config=bad)
    with pytest.raises(AdapterLoadError, match="platform 'nope' is enabled but its adapter cannot be loaded"):
        resolve_adapter_classes(["nope"], config=config)


def test_plugins_listed_in_enabled_are_required(tmp_path, plugin_distributions, monkeypatch):
    _dist(plugin_distributions, "broken", "raise RuntimeError('boom at import')\n")
    monkeypatch.setenv("HERMES_PLUGINS", "broken")
    with pytest.raises(PluginLoadError, match="plugin 'broken' failed to load and is listed in \\[plugins\\] enabled"):
        create_plugin_manager(_config(tmp_path, plugins={"enabled": ["broken"]}))
    with pytest.raises(PluginLoadError, match="plugin 'ghost' is listed in \\[plugins\\] enabled but is not installed"):
        create_plugin_manager(_config(tmp_path, plugins={"enabled": ["ghost"]}))
