"""What the loader did, for `hermes-gateway plugins` and the start-up checks (docs/architecture.md §3).

`LoadReport` holds one `PluginRecord` per plugin, adapter or override seen, and the
`DistributionIndex` the loader used to name their distributions, so one load (one report) sees
one consistent, fresh snapshot of what is installed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .metadata import DistributionIndex

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
    """What the loader did: one record per plugin, adapter or override seen.

    Attributes:
        records: the `PluginRecord`s, in the order they were added.
        distributions: the installed-distribution snapshot of this load (taken on first use);
            pass it to `metadata.distribution_of(module, report.distributions)` to name more
            modules consistently with the records.
        warnings: one line per problem of the load that belongs to no plugin (a name in
            `HERMES_PLUGINS` that is not installed), also logged as a warning.
    """

    records: list[PluginRecord] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    distributions: DistributionIndex = field(default_factory=DistributionIndex, repr=False, compare=False)

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
