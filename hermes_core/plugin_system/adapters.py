"""Adapter classes from the `hermes_core.adapters` entry points (CONVENTIONS.md §1).

Only the enabled platforms' entry points are imported, so heavy SDKs load only when used.
Minimal first version; the plugin-system issue adds the `adapter = "pkg.mod:Class"` swap and
per-platform settings validation.
"""

from __future__ import annotations

import logging

from stevedore import NamedExtensionManager

from .loader import ADAPTERS_GROUP, LoadReport, PluginRecord

log = logging.getLogger(__name__)


class AdapterLoadError(RuntimeError):
    """An enabled platform's adapter is missing or failed to import (fatal at start-up)."""


def resolve_adapter_classes(platforms: list[str], report: LoadReport | None = None) -> dict:
    """Import the adapter classes of `platforms` (names of enabled platforms).

    Returns:
        `{platform name: adapter class}`.

    Raises:
        AdapterLoadError: an enabled platform has no adapter entry point or it failed to load.
    """
    failures: dict[str, str] = {}

    def on_failure(_manager, entrypoint, exc):
        failures[entrypoint.name] = f"{type(exc).__name__}: {exc}"

    manager = NamedExtensionManager(ADAPTERS_GROUP, sorted(platforms), name_order=True,
                                    on_load_failure_callback=on_failure)
    classes = {ext.name: ext.plugin for ext in manager}
    for name in platforms:
        if name in classes:
            if report is not None:
                report.add(PluginRecord(name, ADAPTERS_GROUP, "loaded"))
            continue
        reason = failures.get(name, "no adapter entry point is installed")
        if report is not None:
            report.add(PluginRecord(name, ADAPTERS_GROUP, "failed", reason))
        raise AdapterLoadError(f"platform {name!r} is enabled but its adapter cannot be loaded: {reason}")
    return classes
