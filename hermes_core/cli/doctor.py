"""`hermes-gateway doctor [--json] [--fix] [--online]`: check what `run` needs (docs/operations.md §1).

Exit code 0 when nothing failed (warnings allowed), 1 when a check failed: a broken config, a
plugin or override that does not load, an enabled platform without its adapter or credentials,
a damaged `state.db` or index, a full disk.
"""

from __future__ import annotations

import os

import typer

from ..ops.doctor import FAIL, Check, run_doctor
from .common import CliError, load_cli_config, quiet_terminal_logging, run_async
from .output import print_json, print_table

EXIT_FAILED = 1


def doctor_command(
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list instead of a table."),
    fix: bool = typer.Option(False, "--fix", help="Apply safe repairs: permissions, full-text index, sessions.json."),
    online: bool = typer.Option(False, "--online", help="Also reach each enabled platform with its credentials."),
) -> None:
    """Check the config, plugins, home, lock, state.db, leftovers, disk and credentials."""
    quiet_terminal_logging()  # the loaders' warnings are findings of the report, not stderr noise
    try:
        config = load_cli_config()
    except CliError as exc:
        if os.environ.get("HERMES_DEBUG"):
            raise
        checks = [Check("config", FAIL, str(exc))]
    else:
        checks = [Check("config", "ok", "valid")] + run_async(lambda: run_doctor(config, fix=fix, online=online))
    if as_json:
        print_json([c.as_dict() for c in checks])
    else:
        print_table([c.as_dict() for c in checks], ["check", "status", "detail"])
    if any(c.status == FAIL for c in checks):
        raise typer.Exit(EXIT_FAILED)
