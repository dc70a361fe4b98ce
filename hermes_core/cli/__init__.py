"""The `hermes-gateway` command (typer). `main.py` assembles the sub-commands."""
