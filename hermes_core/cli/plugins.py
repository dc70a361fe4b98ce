"""`hermes-gateway plugins` and `new-plugin` (owned by the plugin-system issue)."""

import typer

plugins_app = typer.Typer(help="List installed plugins.")
