"""Per-plugin policy checks run at load and by the contract kit (docs/architecture.md §2, §3).

* API fence: a plugin's `HERMES_API` major must equal the core's `HERMES_PLUGIN_API`
  (Prefect's version fence, without a runtime `packaging` dependency).
* Sync-only hooks: an async implementation of a firstresult or collect-all hook would hand
  pluggy a coroutine as a "result" and silently short-circuit the chain, so it is an error.
* Wrappers only on sync hooks: broadcast hooks run through `dispatch.call_broadcast`, which
  does not drive wrappers, so a wrapper there would never run.
* `tryfirst` on a firstresult hook is reserved for deployment overrides (a warning for
  entry-point plugins, an error under `[plugins] strict`), so deployment > plugins > builtins
  holds.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

from pluggy import PluginValidationError

from ..hookspecs import ASYNC_ALLOWED_HOOKS
from ..markers import HERMES_PLUGIN_API
from .report import FAILED, LOADED, PluginRecord

log = logging.getLogger(__name__)


def plugin_api_error(plugin: Any) -> str | None:
    """The API fence: None when `plugin.HERMES_API` (int or `"1.x"`) has the core's major
    (`HERMES_PLUGIN_API`) or is absent; otherwise a one-line reason naming the declared value."""
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
    """Check the registered plugin `name` against the hook rules.

    Args:
        pm: the plugin manager the plugin is registered in.
        name: its registered name.
        deployment: True for a deployment override (allowed to use `tryfirst`).

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


def register_checked(pm, plugin: Any, name: str, record: PluginRecord, *, strict: bool,
                     deployment: bool = False) -> bool:
    """Register `plugin` as `name` and run every per-plugin check (unknown hooks via
    `check_pending`, then `check_plugin_policies`).

    On failure the plugin is unregistered again and `record` gets status `failed` and a one-line
    `error`; warnings land in `record.warnings` (errors under `strict`). `record.hooks` lists
    the hooks it implements.

    Returns:
        True when the plugin stays registered (`record.status` is `loaded`).
    """
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
