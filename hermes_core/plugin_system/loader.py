"""Entry-point and deployment-override loading (CONVENTIONS.md §3). Minimal first version:
the plugin-system issue extends it (allow/deny lists, API fence, policies, adapters)."""

from __future__ import annotations

import importlib
import logging
import os
from dataclasses import dataclass, field

from stevedore import NamedExtensionManager

log = logging.getLogger(__name__)

PLUGINS_GROUP = "hermes_core.plugins"
ADAPTERS_GROUP = "hermes_core.adapters"


@dataclass
class PluginRecord:
    """One plugin's load outcome: `status` is `loaded`, `failed`, `blocked` or `missing`."""

    name: str
    group: str
    status: str
    error: str | None = None


@dataclass
class LoadReport:
    """What the loader did, for `hermes-gateway plugins` and start-up checks."""

    records: list[PluginRecord] = field(default_factory=list)

    def add(self, record: PluginRecord) -> None:
        self.records.append(record)

    def failed(self) -> list[PluginRecord]:
        return [r for r in self.records if r.status == "failed"]


def load_entry_point_plugins(pm, config, report: LoadReport) -> None:
    """Register `hermes_core.plugins` entry points, sorted by name; a broken one is reported and
    skipped, never fatal here."""
    if os.environ.get("HERMES_DISABLE_PLUGIN_AUTOLOAD", "").strip() not in ("", "0", "false"):
        return
    names = _entry_point_names(PLUGINS_GROUP)
    if not names:
        return

    def on_failure(_manager, entrypoint, exc):
        log.warning("plugin %s failed to load: %s", entrypoint.name, exc)
        report.add(PluginRecord(entrypoint.name, PLUGINS_GROUP, "failed", f"{type(exc).__name__}: {exc}"))

    manager = NamedExtensionManager(PLUGINS_GROUP, names, name_order=True,
                                    on_load_failure_callback=on_failure, invoke_on_load=False)
    for ext in manager:
        pm.register(ext.plugin, name=ext.name)
        report.add(PluginRecord(ext.name, PLUGINS_GROUP, "loaded"))


def _entry_point_names(group: str) -> list[str]:
    from importlib.metadata import entry_points

    return sorted({ep.name for ep in entry_points(group=group)})


def load_overrides(pm, config, report: LoadReport) -> None:
    """Import each module in `[plugins] overrides` and register it last as `deployment:<module>`.

    Raises:
        ImportError: an override module named in config cannot be imported (fatal: the
            deployment asked for it explicitly).
    """
    for module_name in config.plugins.overrides:
        module = importlib.import_module(module_name)
        pm.register(module, name=f"deployment:{module_name}")
        report.add(PluginRecord(f"deployment:{module_name}", "overrides", "loaded"))
