"""Project templates shipped with the core. `render_plugin` backs `hermes-gateway new-plugin`.

The plugin template lives in `templates/plugin/`, outside the repository's `plugins/` folder so
`plugins/*` globs (testpaths, CI) never pick it up. Files end in `.tmpl` (so nothing in it is
imported, collected or linted as part of the core); `__package__` in a path becomes the import
package, and `{{placeholder}}`s in the text are filled in (no cookiecutter dependency).
"""

from __future__ import annotations

import re
from pathlib import Path

TEMPLATE_ROOT = Path(__file__).resolve().parent / "plugin"
_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


class PluginTemplateError(ValueError):
    """The plugin cannot be generated: bad name or target folder in the way (message says which)."""


def plugin_variables(name: str, label: str | None = None) -> dict[str, str]:
    """Template variables for platform id `name`.

    Raises:
        PluginTemplateError: `name` is not lower_snake (letters, digits, `_`; starts with a letter).
    """
    if not _NAME.fullmatch(name or ""):
        raise PluginTemplateError(
            f"plugin name {name!r} must be lower_snake: a letter, then letters, digits or '_' (max 40)")
    from .. import __version__

    major, minor = (int(x) for x in __version__.split(".")[:2])
    prefix = "".join(part.capitalize() for part in name.split("_") if part)
    return {
        "name": name,
        "label": label or prefix,
        "package": f"hermes_{name}",
        "dist": f"hermes-gateway-{name.replace('_', '-')}",
        "class_prefix": prefix,
        "class_name": f"{prefix}Adapter",
        "core_requirement": f"hermes-gateway-core>={major}.{minor},<{major}.{minor + 1}",
    }


def _fill(text: str, variables: dict[str, str], where: Path) -> str:
    def replace(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in variables:
            raise PluginTemplateError(f"template {where} uses unknown placeholder {{{{{key}}}}}")
        return variables[key]

    return _PLACEHOLDER.sub(replace, text)


def _taken_by_installed(variables: dict[str, str], target: Path) -> list[str]:
    """What installed already uses the new package's distribution name, platform id or import
    package (docs/plugins.md §1): `new-plugin core` would write a second `hermes-gateway-core` with a
    package `hermes_core` (its install replaces the core), `telegram` a second
    `hermes-gateway-telegram`, `local` a duplicate of the core's terminal platform. A package
    installed from `target` itself (the plugin generated there before, regenerated with --force) is
    no clash."""
    import importlib.util
    import json
    from importlib import metadata

    def from_target(dist: metadata.Distribution) -> bool:
        try:
            url = json.loads(dist.read_text("direct_url.json") or "{}").get("url", "")
        except ValueError:
            return False
        return url.startswith("file://") and Path(url[len("file://"):]).resolve() == target

    name, reasons, seen = variables["name"], [], set()
    for dist in metadata.distributions():
        dist_name = re.sub(r"[-_.]+", "-", dist.metadata["Name"] or "").lower()
        if dist_name in seen or from_target(dist):
            continue
        seen.add(dist_name)
        if dist_name == variables["dist"]:
            reasons.append(f"{dist_name} is installed (the new package has its distribution name)")
        elif any(ep.name == name and ep.group.startswith("hermes_core.") for ep in dist.entry_points):
            reasons.append(f"{dist_name} provides platform {name!r}")
    try:
        spec = importlib.util.find_spec(variables["package"])
    except (ImportError, ValueError):
        spec = None
    origin = spec and (spec.origin or next(iter(spec.submodule_search_locations or []), None))
    if origin and target not in Path(origin).resolve().parents:
        reasons.append(f"the import package {variables['package']} exists ({Path(origin).parent})")
    return reasons


def render_plugin(name: str, parent: Path | str, *, label: str | None = None, force: bool = False) -> Path:
    """Write a new plugin package `hermes-gateway-<name>` into `parent/hermes-gateway-<name>`.

    Args:
        name: the platform id (entry-point name), lower_snake.
        parent: folder to create the package folder in.
        label: human platform name (default: the capitalised name).
        force: write even if the target folder exists and is not empty.

    Returns:
        The created package folder.

    Raises:
        PluginTemplateError: bad name; a name something installed already has (its
            distribution name, a platform id an installed plugin provides, or its import
            package: `_taken_by_installed`, docs/plugins.md §1), nothing written; or the target
            exists and is not empty (without `force`).
    """
    variables = plugin_variables(name, label)
    target = Path(parent).expanduser().resolve() / variables["dist"]
    taken = _taken_by_installed(variables, target)
    if taken:
        raise PluginTemplateError(
            f"plugin name {name!r} is taken: {'; '.join(taken)}; installing the new package would "
            f"replace or clash with it: choose another name")
    if target.exists() and any(target.iterdir()) and not force:
        raise PluginTemplateError(f"{target} already exists and is not empty (use --force to overwrite)")
    for source in sorted(TEMPLATE_ROOT.rglob("*.tmpl")):
        relative = source.relative_to(TEMPLATE_ROOT)
        parts = [variables["package"] if p == "__package__" else p for p in relative.parts]
        parts[-1] = _fill(parts[-1].removesuffix(".tmpl"), variables, relative)
        destination = target.joinpath(*parts)
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_text(_fill(source.read_text(encoding="utf-8"), variables, relative), encoding="utf-8")
    return target
