"""`hermes-gateway sessions …` (owned by the store issue)."""

import typer

sessions_app = typer.Typer(help="Inspect and manage stored sessions.", no_args_is_help=True)
