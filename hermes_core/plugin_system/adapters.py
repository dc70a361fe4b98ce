"""Adapter classes from the `hermes_core.adapters` entry points (docs/architecture.md §1).

Only the enabled platforms' entry points are imported, so heavy SDKs load only when used.
`[platforms.<id>] adapter = "pkg.mod:Class"` swaps the class of one platform without touching
the plugin that provides it (OTel's distro selection; docs/architecture.md §3).
"""

from __future__ import annotations

import importlib.metadata
import logging
from collections.abc import Mapping
from typing import Any

from stevedore import NamedExtensionManager

from .loader import ADAPTERS_GROUP, installed_platforms_note
from .report import LoadReport, PluginRecord

log = logging.getLogger(__name__)


class AdapterLoadError(RuntimeError):
    """An enabled platform's adapter is missing or failed to import (fatal at start-up)."""


def _adapter_overrides(config: Any) -> dict[str, str]:
    platforms: Mapping[str, Any] = getattr(config, "platforms", None) or {}
    return {name: table["adapter"] for name, table in platforms.items()
            if isinstance(table, Mapping) and table.get("adapter")}


def _load_class(platform: str, target: str):
    """Import `pkg.mod:Class` (entry-point syntax) and check it looks like an adapter."""
    if ":" not in target:
        raise AdapterLoadError(f"[platforms.{platform}] adapter = {target!r} must look like 'pkg.module:Class'")
    try:
        cls = importlib.metadata.EntryPoint(platform, target, ADAPTERS_GROUP).load()
    except Exception as exc:
        raise AdapterLoadError(f"[platforms.{platform}] adapter = {target!r} cannot be imported:"
                               f" {type(exc).__name__}: {exc}") from exc
    if not isinstance(cls, type) or not callable(getattr(cls, "send", None)) or not hasattr(cls, "spec"):
        raise AdapterLoadError(f"[platforms.{platform}] adapter = {target!r} is not an adapter class"
                               " (needs a `spec` and an async `send`)")
    return cls


def resolve_adapter_classes(platforms: list[str], report: LoadReport | None = None, *,
                            config: Any = None) -> dict:
    """Import the adapter classes of `platforms` (names of enabled platforms).

    Args:
        platforms: platform ids to resolve.
        report: a LoadReport to record each adapter's outcome in, or None.
        config: the `GatewayConfig`; a `[platforms.<id>] adapter = "pkg.mod:Class"` key replaces
            that platform's entry point (the swapped platform's entry point is not imported).

    Returns:
        `{platform name: adapter class}`.

    Raises:
        AdapterLoadError: an enabled platform has no adapter entry point (the message names the
            installed platform ids and the close one, `installed_platforms_note`), it failed to
            load, or its `adapter` override cannot be imported.
    """
    swaps = {name: target for name, target in _adapter_overrides(config).items() if name in platforms}
    failures: dict[str, str] = {}

    def on_failure(_manager, entrypoint, exc):
        failures[entrypoint.name] = f"{type(exc).__name__}: {exc}"

    from_entry_points = sorted(set(platforms) - set(swaps))
    classes: dict[str, Any] = {}
    if from_entry_points:
        manager = NamedExtensionManager(ADAPTERS_GROUP, from_entry_points, name_order=True,
                                        on_load_failure_callback=on_failure,
                                        on_missing_entrypoints_callback=None)
        classes = {ext.name: ext.plugin for ext in manager}
    for name in sorted(platforms):
        if name in swaps:
            try:
                classes[name] = _load_class(name, swaps[name])
            except AdapterLoadError as exc:
                if report is not None:
                    report.add(PluginRecord(name, ADAPTERS_GROUP, "failed", str(exc), module=swaps[name]))
                raise
            if report is not None:
                report.add(PluginRecord(name, ADAPTERS_GROUP, "loaded", module=swaps[name],
                                        warnings=[f"adapter swapped by config: {swaps[name]}"]))
            log.info("platform %s uses adapter %s (config override)", name, swaps[name])
            continue
        if name in classes:
            if report is not None:
                report.add(PluginRecord(name, ADAPTERS_GROUP, "loaded"))
            continue
        # A name no entry point has is most often a misspelt table: the installed ids say so.
        reason = failures.get(name) or f"no adapter entry point is installed ({installed_platforms_note(name)})"
        if report is not None:
            report.add(PluginRecord(name, ADAPTERS_GROUP, "failed", reason))
        raise AdapterLoadError(f"platform {name!r} is enabled but its adapter cannot be loaded: {reason}")
    return classes


_SPEC_CACHE: dict[str, Any] = {}


def adapter_spec_for(platform: str, config: Any = None) -> Any:
    """The `AdapterSpec` the installed adapter of `platform` declares (its label, `pii_safe`…),
    or None when no adapter for it is installed or it cannot be imported (logged at debug).

    Resolved through the `hermes_core.adapters` entry point (or the `[platforms.<id>] adapter`
    override of `config`), once per platform and process: callers that hold a running adapter
    pass its `spec` instead. Importing the class imports the platform's SDK.
    """
    swap = _adapter_overrides(config).get(platform)
    cache_key = f"{platform}\0{swap or ''}"
    if cache_key not in _SPEC_CACHE:
        spec = None
        try:
            cls = resolve_adapter_classes([platform], config=config)[platform]
            spec = getattr(cls, "spec", None)
        except Exception as exc:  # an unknown platform is normal (platforms are open)
            log.debug("no adapter spec for platform %r: %s", platform, exc)
        _SPEC_CACHE[cache_key] = spec
    return _SPEC_CACHE[cache_key]
