"""`hermes-gateway plugins [--json] [--all]` and `hermes-gateway new-plugin NAME`.

`plugins` loads the plugins the way `run` would (same config, allow/deny lists, overrides) but
never stops at a broken one: it reports every plugin's name, distribution, version, hooks,
adapters, status and error as a table, or as JSON (datasette / llm `plugins` commands;
docs/architecture.md §3).
It exits 1 (after the listing, with one line on stderr) when something `run` needs is broken.

Wiring (in `cli/main.py`): `app.add_typer(plugins_app, name="plugins")` and
`app.command("new-plugin")(new_plugin_command)`.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any, Optional

import typer

from .common import HELP_MARKUP, fail, load_cli_config_or_exit, quiet_terminal_logging, warn
from .output import print_table

# One command with options, no subcommands: its usage line must not offer `COMMAND [ARGS]...`.
plugins_app = typer.Typer(help="List installed plugins.", invoke_without_command=True, subcommand_metavar="",
                          rich_markup_mode=HELP_MARKUP)


def collect_plugin_rows(config: Any, *, include_builtins: bool = False,
                        warnings: list[str] | None = None) -> list[dict[str, Any]]:
    """Load plugins as start-up would (reporting, never raising) and describe them.

    Args:
        config: the GatewayConfig.
        include_builtins: also list the core's builtin hook modules (`--all`).
        warnings: when given, the load's warnings that belong to no plugin (a name in
            `HERMES_PLUGINS` that is not installed) are appended to it.

    Returns:
        One dict per plugin / override / adapter: `name`, `group`, `status`, `error`, `module`,
        `distribution`, `version`, `hooks`, `adapters`, `warnings`. Adapters shipped by the
        distribution of a listed plugin are folded into that plugin's `adapters`; the others get
        their own row (status `installed`: listed without importing them).
    """
    from ..plugin_system.loader import (
        ADAPTERS_GROUP,
        PluginRecord,
        distribution_of,
        clear_entry_point_cache,
        list_entry_points,
    )
    from ..plugin_system.manager import create_plugin_manager

    clear_entry_point_cache()
    pm, report = create_plugin_manager(config, raise_on_fatal=False)
    if warnings is not None:
        warnings.extend(report.warnings)
    records = list(report.records)
    by_dist = {r.distribution: r for r in records if r.distribution}
    for ep in sorted(list_entry_points(ADAPTERS_GROUP), key=lambda e: e.name):
        dist, version = distribution_of(ep.module)
        owner = by_dist.get(dist) if dist else None
        if owner is not None:
            owner.adapters.append(ep.name)
            continue
        records.append(PluginRecord(ep.name, ADAPTERS_GROUP, "installed", module=ep.value,
                                    distribution=dist, version=version, adapters=[ep.name]))
    if include_builtins:
        dist, version = distribution_of("hermes_core")
        builtins = [PluginRecord(name, "builtin", "loaded", module=getattr(plugin, "__name__", None) or type(plugin).__module__,
                                 distribution=dist,
                                 version=version, hooks=sorted(c.name for c in pm.get_hookcallers(plugin) or ()))
                    for name, plugin in sorted(pm.list_name_plugin(), key=lambda item: item[0])
                    if name.startswith("builtin:")]
        records = builtins + records
    return [r.as_dict() for r in records]


def _table_row(row: dict[str, Any]) -> dict[str, Any]:
    """A listing row: the distribution with its version, one hook a line (long names: the
    table stays narrow), what went wrong (warnings, then the error) in one `problems` cell."""
    dist = f"{row['distribution']} {row['version'] or ''}".strip() if row["distribution"] else "-"
    problems = [*row["warnings"], *([f"error: {row['error']}"] if row["error"] else [])]
    return {**row, "distribution": dist, "hooks": "\n".join(row["hooks"]), "problems": "; ".join(problems)}


@plugins_app.callback()
def plugins_command(
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list instead of text."),
    include_builtins: bool = typer.Option(False, "--all", help="Also list the core's builtin hook modules."),
) -> None:
    """List plugins: name, distribution, version, hooks, adapters, status and error."""
    config = load_cli_config_or_exit(logging_on=False)  # the CLI's one loader and error line
    # The listing reports every plugin's warnings and error itself: the loaders' log lines
    # would print each a second time (through Python's last-resort handler).
    quiet_terminal_logging()
    warnings: list[str] = []
    rows = collect_plugin_rows(config, include_builtins=include_builtins, warnings=warnings)
    for line in warnings:  # no row to show it in: the same line `run` and `chat` print
        warn(line)
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
    else:
        columns = ["name", "status", "distribution", "hooks", "adapters"]
        if any(row["warnings"] or row["error"] for row in rows):
            columns.append("problems")
        print_table([_table_row(row) for row in rows], columns, empty="no plugins installed")
    _exit_if_run_would_fail(config)


def _exit_if_run_would_fail(config: Any) -> None:
    """Exit 1 with one line on stderr when what `run` loads (plugins of enabled platforms,
    deployment overrides, adapters, platform settings) is broken: the listing alone would
    look healthy while `run` refuses to start."""
    from ..ops.doctor import load_for_run

    try:
        load_for_run(config)
    except Exception as exc:  # every loader error is one line naming the plugin or key
        typer.echo(f"hermes-gateway: error: `run` would not start: {' '.join(str(exc).split())}", err=True)
        raise typer.Exit(1) from None


def new_plugin_command(
    name: str = typer.Argument(..., help="Platform id of the new plugin, e.g. 'acme' (lower_snake)."),
    directory: Optional[Path] = typer.Option(None, "--dir", "-d",
                                             help="Parent folder (default: the current folder)."),
    label: Optional[str] = typer.Option(None, "--label", help="Human name (default: NAME capitalised)."),
    force: bool = typer.Option(False, "--force", help="Write into an existing, non-empty folder."),
) -> None:
    """Create a working plugin package `hermes-gateway-NAME` from the core's template."""
    from ..templates import PluginTemplateError, render_plugin

    try:
        target = render_plugin(name, (directory or Path.cwd()), label=label, force=force)
    except PluginTemplateError as exc:
        raise fail(exc) from None
    except OSError as exc:  # --dir is a file, or a folder that cannot be written
        where = exc.filename or directory or Path.cwd()
        raise fail(f"cannot create the plugin package at {where}: {exc.strerror or exc}") from None
    typer.echo(f"created {target}")
    # The hint names this interpreter: it is the one that has the core installed (its
    # `hermes-gateway` is running), so the plugin's `hermes-gateway-core` requirement is met from
    # here and never looked up on a package index; `[test]` brings pytest into the same place.
    python = shlex.quote(sys.executable)
    typer.echo(f"next: {python} -m pip install -e {shlex.quote(f'{target}[test]')}"
               f" && {python} -m pytest {shlex.quote(str(target / 'tests'))}")
