"""Build tiny installed-looking distributions for loader tests, without pip.

A folder on `sys.path` holding `<pkg>/…` and `<dist>-<version>.dist-info/{METADATA,
entry_points.txt,top_level.txt}` is found by `importlib.metadata` exactly like a pip install, so
the loader runs its real stevedore path (names read before import, real `EntryPoint.load`).
"""

from __future__ import annotations

import re
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path

from ..plugin_system.loader import clear_entry_point_cache


def write_distribution(root: Path, dist_name: str, *, modules: Mapping[str, str],
                       entry_points: Mapping[str, Mapping[str, str]], version: str = "0.1.0") -> Path:
    """Write a distribution into the folder `root` (which the caller puts on `sys.path`).

    Args:
        root: target folder (created).
        dist_name: distribution name, e.g. `"hermes-gateway-acme"`.
        modules: `{"acme_pkg/__init__.py": source, "acme_pkg/hooks.py": source}`; sources are
            dedented.
        entry_points: `{group: {name: "module:attr" or "module"}}`.
        version: the distribution version.

    Returns:
        `root`.
    """
    root.mkdir(parents=True, exist_ok=True)
    tops = set()
    for rel, source in modules.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source), encoding="utf-8")
        tops.add(Path(rel).parts[0].removesuffix(".py"))
    normal = re.sub(r"[-_.]+", "_", dist_name)
    info = root / f"{normal}-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {dist_name}\nVersion: {version}\n", encoding="utf-8")
    lines = []
    for group, items in entry_points.items():
        lines.append(f"[{group}]")
        lines.extend(f"{name} = {value}" for name, value in items.items())
        lines.append("")
    (info / "entry_points.txt").write_text("\n".join(lines), encoding="utf-8")
    (info / "top_level.txt").write_text("\n".join(sorted(tops)) + "\n", encoding="utf-8")
    (info / "RECORD").write_text("", encoding="utf-8")
    return root


class DistributionSandbox:
    """Adds folders of test distributions to `sys.path` and undoes it (fixture helper).

    `add(...)` writes a distribution in its own folder and refreshes the entry-point caches;
    `close()` removes the folders from `sys.path`, forgets the modules imported from them and
    clears the caches again, so one test's plugins never leak into the next.
    """

    def __init__(self, base: Path):
        self.base = base
        self.paths: list[str] = []

    def add(self, dist_name: str, *, modules: Mapping[str, str],
            entry_points: Mapping[str, Mapping[str, str]], version: str = "0.1.0") -> Path:
        """Write and activate one distribution; returns its folder."""
        root = self.base / re.sub(r"\W+", "_", dist_name)
        write_distribution(root, dist_name, modules=modules, entry_points=entry_points, version=version)
        self.add_path(root)
        return root

    def add_path(self, root: Path) -> None:
        """Put an existing folder (e.g. holding override modules) on `sys.path`."""
        sys.path.insert(0, str(root))
        self.paths.append(str(root))
        clear_entry_point_cache()

    def close(self) -> None:
        """Undo every `add`."""
        for path in self.paths:
            while path in sys.path:
                sys.path.remove(path)
            for name, module in list(sys.modules.items()):
                file = getattr(module, "__file__", None) or ""
                if file.startswith(path):
                    del sys.modules[name]
        self.paths.clear()
        clear_entry_point_cache()
