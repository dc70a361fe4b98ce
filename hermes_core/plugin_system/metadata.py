"""Which installed distribution provides a plugin module, and its version (docs/architecture.md §3, §10).

stevedore's entry points carry no `dist`, so the loader maps a module's top-level package to
its distribution with `importlib.metadata.packages_distributions()`. That scan costs ~0.1 s, so
it is taken once per `DistributionIndex`, and each load (each `LoadReport`) owns one index.
There is deliberately no process-wide cache: a `pip install` in a running process (the CLI, a
test, a notebook) must show up in the next load without anyone remembering to clear a cache.
"""

from __future__ import annotations

import importlib.metadata


class DistributionIndex:
    """A lazily taken snapshot of `importlib.metadata.packages_distributions()`.

    The snapshot is taken on the first `lookup` and kept for the life of the index (one load);
    build a new index to see distributions installed since.
    """

    __slots__ = ("_packages",)

    def __init__(self) -> None:
        self._packages: dict[str, list[str]] | None = None

    def _snapshot(self) -> dict[str, list[str]]:
        if self._packages is None:
            self._packages = dict(importlib.metadata.packages_distributions())
        return self._packages

    def lookup(self, module_name: str | None) -> tuple[str | None, str | None]:
        """`(distribution name, version)` installing the top-level package of `module_name`
        (e.g. `"hermes_telegram.hooks"` → `("hermes-gateway-telegram", "0.1.0")`), or
        `(None, None)` for a local file or a module no distribution installed. When several
        distributions provide the package, the alphabetically first is named. Never raises for
        an unknown module."""
        if not module_name:
            return None, None
        top = module_name.split(".", 1)[0]
        dists = self._snapshot().get(top) or []
        if not dists:
            return None, None
        dist = sorted(dists)[0]
        try:
            return dist, importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return dist, None


def distribution_of(module_name: str | None, index: DistributionIndex | None = None) -> tuple[str | None, str | None]:
    """`(distribution name, version)` providing `module_name`, or `(None, None)`.

    Args:
        module_name: a dotted module name (only its top-level package matters), or None.
        index: the snapshot to use, normally `LoadReport.distributions` of the current load;
            None takes a fresh snapshot for this one call (always current, ~0.1 s).
    """
    return (index if index is not None else DistributionIndex()).lookup(module_name)
