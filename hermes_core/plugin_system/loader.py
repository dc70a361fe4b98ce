"""Entry-point and deployment-override loading (CONVENTIONS.md §3).

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
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import inspect
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pluggy import PluginValidationError
from stevedore import ExtensionManager, NamedExtensionManager

from ..hookspecs import ASYNC_ALLOWED_HOOKS
from ..markers import HERMES_PLUGIN_API

log = logging.getLogger(__name__)

PLUGINS_GROUP = "hermes_core.plugins"
ADAPTERS_GROUP = "hermes_core.adapters"
OVERRIDES_GROUP = "overrides"
DEPLOYMENT_PREFIX = "deployment:"
LOCAL_FILE_NAME = "hermes_local.py"

# Record statuses.
LOADED = "loaded"
FAILED = "failed"
BLOCKED = "blocked"
MISSING = "missing"  # optional dependency not installed (ModuleNotFoundError)
SAFE_MODE = "safe_mode"  # imported and checked, but not registered (nothing is called)


class PluginLoadError(RuntimeError):
    """A plugin failure that must stop start-up: its platform is enabled, `[plugins] strict` is
    on, or a deployment override named in config cannot be imported. The message names the
    plugin and the cause."""


@dataclass
class PluginRecord:
    """One plugin's (or adapter's) load outcome, for `hermes-gateway plugins` and start-up checks.

    Attributes:
        name: entry-point name (`telegram`) or `deployment:<module>`.
        group: `hermes_core.plugins`, `hermes_core.adapters` or `overrides`.
        status: `loaded`, `failed`, `blocked`, `missing` or `safe_mode`.
        error: one line saying what went wrong (None when loaded).
        module: the module the entry point names.
        distribution / version: the installed distribution providing it (None for local files).
        hooks: names of the hooks it implements, sorted.
        adapters: adapter entry-point names shipped by the same distribution.
        warnings: policy warnings (e.g. tryfirst on a firstresult hook).
    """

    name: str
    group: str
    status: str
    error: str | None = None
    module: str | None = None
    distribution: str | None = None
    version: str | None = None
    hooks: list[str] = field(default_factory=list)
    adapters: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the `plugins --json` row)."""
        return {
            "name": self.name, "group": self.group, "status": self.status, "error": self.error,
            "module": self.module, "distribution": self.distribution, "version": self.version,
            "hooks": list(self.hooks), "adapters": list(self.adapters), "warnings": list(self.warnings),
        }


@dataclass
class LoadReport:
    """What the loader did: one record per plugin, adapter or override seen."""

    records: list[PluginRecord] = field(default_factory=list)

    def add(self, record: PluginRecord) -> None:
        """Append a record (a later record for the same name and group replaces the earlier one)."""
        self.records = [r for r in self.records if not (r.name == record.name and r.group == record.group)]
        self.records.append(record)

    def failed(self) -> list[PluginRecord]:
        """Records with status `failed`."""
        return [r for r in self.records if r.status == FAILED]

    def get(self, name: str, group: str | None = None) -> PluginRecord | None:
        """The record named `name` (in `group` when given), or None."""
        for record in self.records:
            if record.name == name and (group is None or record.group == group):
                return record
        return None


# ---- entry-point discovery (no imports) ------------------------------------------------------

def entry_point_names(group: str) -> list[str]:
    """Sorted, de-duplicated entry-point names of `group`, read without importing any plugin
    (a `NamedExtensionManager` asked for no names only lists them)."""
    manager = NamedExtensionManager(group, [], on_missing_entrypoints_callback=None)
    return sorted(set(manager.entry_points_names()))


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
    _forget_distributions()


def distribution_of(module_name: str | None) -> tuple[str | None, str | None]:
    """`(distribution name, version)` installing the top-level package of `module_name`, or
    `(None, None)` (a local file, or a module not installed by a distribution)."""
    if not module_name:
        return None, None
    top = module_name.split(".", 1)[0]
    dists = _packages_distributions().get(top) or []
    if not dists:
        return None, None
    dist = sorted(dists)[0]
    try:
        return dist, importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return dist, None


_PKG_DISTS: dict[str, list[str]] | None = None


def _packages_distributions() -> dict[str, list[str]]:
    # stevedore's entry points carry no `dist`, so versions come from here (CONVENTIONS.md §10).
    global _PKG_DISTS
    if _PKG_DISTS is None:
        _PKG_DISTS = dict(importlib.metadata.packages_distributions())
    return _PKG_DISTS


def _forget_distributions() -> None:
    global _PKG_DISTS
    _PKG_DISTS = None


# ---- policy ----------------------------------------------------------------------------------

def _truthy_env(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


def plugin_api_error(plugin: Any) -> str | None:
    """The API fence: None when `plugin.HERMES_API` (int or `"1.x"`) has the core's major
    (`HERMES_PLUGIN_API`) or is absent; otherwise a one-line reason."""
    declared = getattr(plugin, "HERMES_API", None)
    if declared is None:
        return None
    try:
        major = int(str(declared).split(".", 1)[0])
    except ValueError:
        return f"HERMES_API = {declared!r} is not a version number"
    if major != HERMES_PLUGIN_API:
        return f"plugin API {declared} is not supported by this core (plugin API {HERMES_PLUGIN_API})"
    return None


def check_plugin_policies(pm, name: str, *, deployment: bool = False) -> tuple[list[str], list[str]]:
    """Check the registered plugin `name` against the hook rules (CONVENTIONS.md §2, §3).

    Returns:
        `(errors, warnings)`, one line each. Errors: an async implementation of a sync-only hook
        (every firstresult or collect-all hook), a wrapper on an async-allowed (broadcast) hook.
        Warnings: `tryfirst` on a firstresult hook by a non-deployment plugin (that band is reserved
        for deployment overrides).
    """
    errors: list[str] = []
    warnings: list[str] = []
    plugin = pm.get_plugin(name)
    for caller in pm.get_hookcallers(plugin) or ():
        opts = caller.spec.opts if caller.spec else {}
        for impl in caller.get_hookimpls():
            if impl.plugin is not plugin:
                continue
            is_async = inspect.iscoroutinefunction(impl.function) or inspect.isasyncgenfunction(impl.function)
            if is_async and caller.name not in ASYNC_ALLOWED_HOOKS:
                kind = "firstresult" if opts.get("firstresult") else "sync-only"
                errors.append(f"{name}: async implementation of {kind} hook {caller.name} is not allowed"
                              f" ({caller.name} is SYNC ONLY; make it a plain def)")
            if (impl.wrapper or impl.hookwrapper) and caller.name in ASYNC_ALLOWED_HOOKS:
                errors.append(f"{name}: wrapper on broadcast hook {caller.name} is not allowed"
                              " (wrappers are for sync hooks only)")
            if impl.tryfirst and opts.get("firstresult") and not deployment:
                warnings.append(f"{name}: tryfirst on firstresult hook {caller.name} is reserved for"
                                " deployment overrides (use a plain hookimpl)")
    return errors, warnings


def _hooks_of(pm, plugin: Any) -> list[str]:
    return sorted(caller.name for caller in (pm.get_hookcallers(plugin) or ()))


def _register_checked(pm, plugin: Any, name: str, record: PluginRecord, *, strict: bool,
                      deployment: bool = False) -> bool:
    """Register `plugin` and run every per-plugin check; on failure unregister it and fill
    `record` (status `failed`). Returns True when it stays registered."""
    try:
        pm.register(plugin, name=name)
    except (PluginValidationError, ValueError) as exc:
        record.status, record.error = FAILED, f"{type(exc).__name__}: {exc}"
        return False
    try:
        pm.check_pending()  # earlier plugins passed, so a failure here is this plugin's typo
    except PluginValidationError as exc:
        pm.unregister(name=name)
        record.status, record.error = FAILED, f"unknown hook (typo?): {exc}"
        return False
    errors, warnings = check_plugin_policies(pm, name, deployment=deployment)
    record.hooks = _hooks_of(pm, plugin)
    record.warnings.extend(warnings)
    for warning in warnings:
        log.warning("%s", warning)
    if strict and warnings:
        errors = errors + [f"{w} (error under [plugins] strict)" for w in warnings]
    if errors:
        pm.unregister(name=name)
        record.status, record.error = FAILED, "; ".join(errors)
        return False
    record.status = LOADED
    return True


# ---- entry-point plugins ---------------------------------------------------------------------

def _selected_names(names: list[str], settings) -> tuple[list[str], dict[str, str]]:
    """Apply `HERMES_PLUGINS`, `[plugins] allow` and `deny` to entry-point names.

    Returns `(selected sorted names, {blocked name: reason})`."""
    # `HERMES_PLUGINS=a,b` is an allowlist; unset or empty means no restriction from the env.
    env_allow = os.environ.get("HERMES_PLUGINS", "").strip()
    allow_env = {n.strip() for n in env_allow.split(",") if n.strip()} if env_allow else None
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
        if (reason := _fatal(record, config, settings.strict)):
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
        dist, version = distribution_of(module)
        record = PluginRecord(name, PLUGINS_GROUP, FAILED, module=module, distribution=dist, version=version)
        if name in failures:
            exc = failures[name]
            if isinstance(exc, ModuleNotFoundError):
                record.status, record.error = MISSING, f"ModuleNotFoundError: {exc}"
                log.debug("plugin %s skipped, a module is not installed: %s", name, exc)
            else:
                record.error = f"{type(exc).__name__}: {exc}"
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
            elif _register_checked(pm, plugin, name, record, strict=settings.strict):
                if settings.safe_mode:
                    pm.unregister(name=name)
                    pm.set_blocked(name)
                    record.status = SAFE_MODE
            else:
                log.warning("plugin %s rejected: %s", name, record.error)
        report.add(record)
        if record.status in (FAILED, MISSING) and (reason := _fatal(record, config, settings.strict)):
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
                record.distribution, record.version = distribution_of(module_name)
            if _register_checked(pm, module, name, record, strict=settings.strict, deployment=True):
                if settings.safe_mode:
                    pm.unregister(name=name)
                    record.status = SAFE_MODE
        report.add(record)
        if record.status == FAILED:
            log.error("deployment override %s failed: %s", module_name, record.error)
            fatal.append(f"deployment override {module_name!r} failed: {record.error}")
    if fatal and raise_on_fatal:
        raise PluginLoadError("; ".join(fatal))
