"""Entry-point and deployment-override loading (docs/architecture.md §3).

Order, and why:
1. builtins (registered by `manager.create_plugin_manager`, their defaults `trylast`);
2. entry-point plugins of `hermes_core.plugins`: names are read from the entry points *without
   importing* (stevedore), filtered by `HERMES_DISABLE_PLUGIN_AUTOLOAD`, `HERMES_PLUGINS` and
   `[plugins] allow / deny` (denied names are `pm.set_blocked` so nothing can register them),
   then imported by `NamedExtensionManager(name_order=True)` and registered sorted by name, so
   the order is the same on every machine; each passes the API fence and the policy checks;
3. deployment overrides (`[plugins] overrides`, then `hermes_local.py` beside the config file when
   `[plugins] allow_local_file`), registered last as `deployment:<module>`.

pluggy calls the last registered first within a band, and overrides are `tryfirst`, so
deployment > plugins > builtins for every firstresult hook.

Failure policy: `ModuleNotFoundError` while importing a plugin means an optional dependency is
missing (DEBUG log, skipped); any other error is logged and skipped. Either is fatal when the
plugin's platform is enabled in config (`[platforms.<name>] enabled = true`) or under
`[plugins] strict = true`: a gateway with a silently missing platform is worse than one that
refuses to start.

This module does discovery, selection and registration order only. The per-plugin checks (API
fence, sync-only hooks, reserved `tryfirst`) live in `policy.py`, distribution names and versions
in `metadata.py`, and the report records in `report.py`; their public names are re-exported here.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import importlib.util
import logging
import os
import sys
from pathlib import Path
from typing import Any, Iterable

from stevedore import ExtensionManager, NamedExtensionManager

# Re-exported: tests, `testing/contract.py`, the CLI and third parties import these from here.
from .metadata import DistributionIndex, distribution_of
from .policy import check_plugin_policies, plugin_api_error, register_checked
from .report import (
    BLOCKED,
    FAILED,
    LOADED,
    MISSING,
    SAFE_MODE,
    LoadReport,
    PluginLoadError,
    PluginRecord,
)

log = logging.getLogger(__name__)

PLUGINS_GROUP = "hermes_core.plugins"
ADAPTERS_GROUP = "hermes_core.adapters"
OVERRIDES_GROUP = "overrides"
DEPLOYMENT_PREFIX = "deployment:"
LOCAL_FILE_NAME = "hermes_local.py"

__all__ = [
    "ADAPTERS_GROUP", "BLOCKED", "DEPLOYMENT_PREFIX", "DistributionIndex", "FAILED", "LOADED",
    "LOCAL_FILE_NAME", "LoadReport", "MISSING", "OVERRIDES_GROUP", "PLUGINS_GROUP", "PluginLoadError",
    "PluginRecord", "SAFE_MODE", "check_plugin_policies", "clear_entry_point_cache", "close_platform",
    "distribution_of", "entry_point_names", "env_allowlist", "installed_platforms_note", "list_entry_points",
    "load_entry_point_plugins", "load_overrides", "local_file_path", "plugin_api_error",
]


# ---- entry-point discovery (no imports) ------------------------------------------------------

def entry_point_names(group: str) -> list[str]:
    """Sorted, de-duplicated entry-point names of `group`, read without importing any plugin
    (a `NamedExtensionManager` asked for no names only lists them)."""
    manager = NamedExtensionManager(group, [], on_missing_entrypoints_callback=None)
    return sorted(set(manager.entry_points_names()))


def _installed_platforms(installed: Iterable[str] | None) -> list[str]:
    """`installed` sorted, or the `hermes_core.adapters` entry points' names when None (read
    without importing them): the platform ids `close_platform` and `installed_platforms_note` offer."""
    return sorted(set(entry_point_names(ADAPTERS_GROUP) if installed is None else installed))


def close_platform(platform: str, installed: Iterable[str] | None = None) -> str | None:
    """The installed platform id closest to `platform` (a misspelt `[platforms.telegrm]` table:
    `telegram`), by `difflib.get_close_matches`' default cutoff; None when none is close.

    Args:
        platform: a `[platforms.<id>]` table name that no installed adapter entry point has.
        installed: the installed platform ids (default: the `hermes_core.adapters` entry
            points' names, read without importing them).
    """
    close = difflib.get_close_matches(platform, _installed_platforms(installed), n=1)
    return close[0] if close else None


def installed_platforms_note(platform: str, installed: Iterable[str] | None = None) -> str:
    """What every report of a `[platforms.<platform>]` table that no installed adapter provides
    adds (`run`, `doctor`, `chat`; docs/configuration.md §2 `[platforms.<id>]`): the installed platform
    ids, and the one close to `platform` when there is one. A typo would otherwise read like a
    platform whose package is missing.

    Args:
        platform: the table's name as configured.
        installed: the installed platform ids (default: the `hermes_core.adapters` entry
            points' names, read without importing them).

    Returns:
        One clause, e.g. `installed platforms: discord, local, telegram; did you mean telegram?`
        (`installed platforms: none` when no adapter is installed).
    """
    names = _installed_platforms(installed)
    close = close_platform(platform, names)
    return f"installed platforms: {', '.join(names) or 'none'}" + (f"; did you mean {close}?" if close else "")


def list_entry_points(group: str) -> list[importlib.metadata.EntryPoint]:
    """The entry points of `group` (stevedore's cached list), not loaded."""
    return list(NamedExtensionManager(group, [], on_missing_entrypoints_callback=None).list_entry_points())


def clear_entry_point_cache() -> None:
    """Forget stevedore's cached entry points (class-level and per-`sys.path` caches), so
    distributions installed or added to `sys.path` since are seen. For tests and the CLI."""
    ExtensionManager.ENTRY_POINT_CACHE.clear()
    try:
        from stevedore import _cache

        _cache._c._internal.clear()
    except (ImportError, AttributeError):  # private layout changed: the class cache is enough
        pass
    importlib.invalidate_caches()


def _truthy_env(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


# ---- entry-point plugins ---------------------------------------------------------------------

def env_allowlist() -> set[str] | None:
    """The names of `HERMES_PLUGINS=a,b`, the entry-point allowlist; None (no restriction from
    the environment) when it is unset or empty, or holds a JSON object: that one sets the
    `[plugins]` table instead (docs/configuration.md §2, the settings' `_is_plugin_allowlist`),
    and read as names it would block every plugin as "not in HERMES_PLUGINS"."""
    value = os.environ.get("HERMES_PLUGINS", "").strip()
    if not value or value.startswith("{"):
        return None
    return {n.strip() for n in value.split(",") if n.strip()}


def _selected_names(names: list[str], settings) -> tuple[list[str], dict[str, str]]:
    """Apply `HERMES_PLUGINS`, `[plugins] allow` and `deny` to entry-point names.

    Returns `(selected sorted names, {blocked name: reason})`."""
    allow_env = env_allowlist()
    allow_cfg = set(settings.allow) if settings.allow is not None else None
    deny = set(settings.deny)
    selected, blocked = [], {}
    for name in names:
        if name in deny:
            blocked[name] = "denied by [plugins] deny"
        elif allow_env is not None and name not in allow_env:
            blocked[name] = "not in HERMES_PLUGINS"
        elif allow_cfg is not None and name not in allow_cfg:
            blocked[name] = "not in [plugins] allow"
        else:
            selected.append(name)
    return sorted(selected), blocked


def _fatal(record: PluginRecord, config, strict: bool) -> str | None:
    enabled = set(config.enabled_platforms()) if config is not None else set()
    if record.name in enabled:
        return f"plugin {record.name!r} failed to load and platform {record.name!r} is enabled: {record.error}"
    if config is not None and record.name in config.plugins.enabled:
        return f"plugin {record.name!r} failed to load and is listed in [plugins] enabled: {record.error}"
    if strict and record.status == FAILED:
        return f"plugin {record.name!r} failed to load ([plugins] strict): {record.error}"
    return None


def load_entry_point_plugins(pm, config, report: LoadReport, *, raise_on_fatal: bool = True) -> None:
    """Discover, filter, import, check and register `hermes_core.plugins` entry points.

    Args:
        pm: the plugin manager (builtins already registered).
        config: `GatewayConfig` (`[plugins]` allow / deny / strict / safe_mode, enabled platforms).
        report: filled with one record per entry-point name.
        raise_on_fatal: raise on a fatal failure (start-up); False to only report (listing).

    Raises:
        PluginLoadError: (with `raise_on_fatal`) a plugin failed (or its module is missing) while
            its platform is enabled or it is listed in `[plugins] enabled`; a name in
            `[plugins] enabled` is not installed; any plugin failed under `[plugins] strict`.
            Blocked (denied / not allowed) plugins are never fatal: an adapter override may stand in.
    """
    settings = config.plugins
    if _truthy_env("HERMES_DISABLE_PLUGIN_AUTOLOAD"):
        log.info("entry-point plugins not loaded: HERMES_DISABLE_PLUGIN_AUTOLOAD is set")
        return
    eps = list_entry_points(PLUGINS_GROUP)
    by_name: dict[str, list] = {}
    for ep in eps:
        by_name.setdefault(ep.name, []).append(ep)
    names = sorted(by_name)
    unknown = sorted((env_allowlist() or set()) - set(names))
    if unknown:
        # A typo in the allowlist would otherwise only show as a plugin silently not loaded.
        text = (f"HERMES_PLUGINS: no plugin named {' or '.join(map(repr, unknown))} is installed "
                f"(installed: {', '.join(names) or 'none'})")
        log.warning("%s", text)
        report.warnings.append(text)
    selected, blocked = _selected_names(names, settings)
    fatal: list[str] = []
    for name, reason in blocked.items():
        pm.set_blocked(name)  # before any import: a denied plugin is never imported
        record = PluginRecord(name, PLUGINS_GROUP, BLOCKED, reason, module=by_name[name][0].module)
        report.add(record)
        if name in set(config.enabled_platforms()) and name in settings.deny:
            log.info("platform %s is enabled but its plugin is denied; an adapter override must provide it", name)
    duplicates = [n for n in selected if len({ep.value for ep in by_name[n]}) > 1]
    for name in duplicates:
        values = ", ".join(sorted({ep.value for ep in by_name[name]}))
        record = PluginRecord(name, PLUGINS_GROUP, FAILED, f"duplicate entry point name: {values}")
        report.add(record)
        if (reason:= _fatal(record, config, settings.strict)):
            fatal.append(reason)
    selected = [n for n in selected if n not in duplicates]
    for name in sorted(set(settings.enabled) - set(names)):
        report.add(PluginRecord(name, PLUGINS_GROUP, FAILED, "not installed (listed in [plugins] enabled)"))
        fatal.append(f"plugin {name!r} is listed in [plugins] enabled but is not installed")

    failures: dict[str, BaseException] = {}

    def on_failure(_manager, entrypoint, exc):
        failures[entrypoint.name] = exc

    manager = NamedExtensionManager(PLUGINS_GROUP, selected, name_order=True,
                                    on_load_failure_callback=on_failure,
                                    on_missing_entrypoints_callback=None)
    loaded = {ext.name: ext for ext in manager}
    for name in selected:  # sorted: deterministic registration order
        module = by_name[name][0].module
        dist, version = report.distributions.lookup(module)
        record = PluginRecord(name, PLUGINS_GROUP, FAILED, module=module, distribution=dist, version=version)
        if name in failures:
            exc = failures[name]
            if isinstance(exc, ModuleNotFoundError):
                record.status, record.error = MISSING, f"ModuleNotFoundError: {exc}"
                log.debug("plugin %s skipped, a module is not installed: %s", name, exc)
            else:
                record.error = f"{type(exc).__name__}: {exc}"
                if _fatal(record, config, settings.strict):  # the start-up error says the rest
                    log.error("plugin %s failed to load: %s", name, record.error)
                else:
                    log.warning("plugin %s failed to load and is skipped: %s", name, record.error)
                log.debug("traceback of plugin %s", name, exc_info=exc)
        elif name not in loaded:
            record.error = "entry point disappeared while loading"
        else:
            plugin = loaded[name].plugin
            fence = plugin_api_error(plugin)
            if fence:
                record.error = fence
                log.warning("plugin %s refused: %s", name, fence)
            elif register_checked(pm, plugin, name, record, strict=settings.strict):
                if settings.safe_mode:
                    pm.unregister(name=name)
                    pm.set_blocked(name)
                    record.status = SAFE_MODE
            else:
                log.warning("plugin %s rejected: %s", name, record.error)
        report.add(record)
        if record.status in (FAILED, MISSING) and (reason:= _fatal(record, config, settings.strict)):
            fatal.append(reason)
    if fatal and raise_on_fatal:
        raise PluginLoadError("; ".join(fatal))


# ---- deployment overrides --------------------------------------------------------------------

def local_file_path(config) -> Path:
    """Where `hermes_local.py` is looked for: beside the config file."""
    from ..settings import config_file_path

    return config_file_path(config.home).parent / LOCAL_FILE_NAME


def _import_local_file(path: Path):
    spec = importlib.util.spec_from_file_location("hermes_local", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["hermes_local"] = module
    spec.loader.exec_module(module)
    return module


def load_overrides(pm, config, report: LoadReport, *, raise_on_fatal: bool = True) -> None:
    """Import each module in `[plugins] overrides` (then `hermes_local.py` when
    `[plugins] allow_local_file`) and register it last as `deployment:<module>`.

    Raises:
        PluginLoadError: (with `raise_on_fatal`) an override cannot be imported or breaks a hook
            rule (fatal: the deployment asked for it explicitly).
    """
    settings = config.plugins
    targets: list[tuple[str, Any]] = [(m, None) for m in settings.overrides]
    if settings.allow_local_file:
        path = local_file_path(config)
        if path.is_file():
            targets.append(("hermes_local", path))
        else:
            log.debug("allow_local_file is on but %s does not exist", path)
    fatal: list[str] = []
    for module_name, path in targets:
        name = DEPLOYMENT_PREFIX + module_name
        record = PluginRecord(name, OVERRIDES_GROUP, FAILED, module=module_name)
        try:
            module = _import_local_file(path) if path else importlib.import_module(module_name)
        except Exception as exc:  # reported below; fatal because config named it
            record.error = f"{type(exc).__name__}: {exc}"
        else:
            if path is None:
                record.distribution, record.version = report.distributions.lookup(module_name)
            if register_checked(pm, module, name, record, strict=settings.strict, deployment=True):
                if settings.safe_mode:
                    pm.unregister(name=name)
                    record.status = SAFE_MODE
        report.add(record)
        if record.status == FAILED:
            log.error("deployment override %s failed: %s", module_name, record.error)
            fatal.append(f"deployment override {module_name!r} failed: {record.error}")
    if fatal and raise_on_fatal:
        raise PluginLoadError("; ".join(fatal))
