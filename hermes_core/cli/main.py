"""`hermes-gateway`: the command line (typer; issue 2 item 9).

Commands: `chat` (terminal chat on the local platform; piped stdin works, one message a line),
`run` (every enabled platform plus the watcher until Ctrl-C / SIGTERM), `sessions …`,
`plugins …`, and `--version`.

Errors reach the user as one line on stderr (`hermes-gateway: error: …`) with exit code 2, never
a traceback (set `HERMES_DEBUG=1` to get the traceback). Logs go to `$HERMES_HOME/gateway.log`
and warnings also to stderr.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from logging.handlers import RotatingFileHandler
from typing import Any, Optional

import typer

from .. import __version__
from ..settings import ConfigError, config_file_path

EXIT_ERROR = 2
log = logging.getLogger("hermes_core.cli")

app = typer.Typer(name="hermes-gateway", help="Session lifecycle core of an AI-agent messaging gateway.",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)


class CliError(Exception):
    """An error to print as one line, exit code 2."""


def fail(message: str) -> "typer.Exit":
    """Print `hermes-gateway: error: <message>` on stderr and return the Exit(2) to raise."""
    typer.echo(f"hermes-gateway: error: {' '.join(str(message).split())}", err=True)
    return typer.Exit(EXIT_ERROR)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"hermes-gateway {__version__}")
        raise typer.Exit(0)


@app.callback()
def root(version: Optional[bool] = typer.Option(None, "--version", callback=_version_callback,
                                                 is_eager=True, help="Print the version and exit.")) -> None:
    """Session lifecycle core of an AI-agent messaging gateway."""


class _OneLineFormatter(logging.Formatter):
    """Terminal log lines: the message only, never a traceback (the log file keeps those)."""

    def format(self, record: logging.LogRecord) -> str:
        bare = logging.makeLogRecord({**record.__dict__, "exc_info": None, "exc_text": None,
                                      "stack_info": None})
        return " ".join(super().format(bare).split())


def _setup_logging(home) -> None:
    """Log INFO and up to `<home>/gateway.log`; WARNING and up (or `HERMES_LOG_LEVEL`) to stderr
    as single lines."""
    root_logger = logging.getLogger()
    if getattr(root_logger, "_hermes_configured", False):
        return
    root_logger.setLevel(logging.INFO)
    level = os.environ.get("HERMES_LOG_LEVEL", "WARNING").upper()
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setLevel(getattr(logging, level, logging.WARNING))
    stderr.setFormatter(_OneLineFormatter("hermes-gateway: %(levelname)s: %(message)s"))
    stderr.addFilter(lambda record: not getattr(record, "file_only", False))
    root_logger.addHandler(stderr)
    try:
        home.mkdir(parents=True, exist_ok=True)  # first run on a fresh machine
        handler = RotatingFileHandler(home / "gateway.log", maxBytes=5_000_000, backupCount=3,
                                      encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root_logger.addHandler(handler)
    except OSError:
        pass  # an unwritable home is reported by the start-up check
    logging.getLogger("apscheduler").setLevel(logging.WARNING)  # one line per tick is noise
    root_logger._hermes_configured = True  # type: ignore[attr-defined]


def load_cli_config() -> Any:
    """Load the config (`app.load_gateway_config`); a failure becomes a one-line CliError."""
    from ..app import StartupError, load_gateway_config

    try:
        return load_gateway_config()
    except StartupError as exc:
        raise CliError(str(exc)) from None


def run_async(main: Any) -> None:
    """Run `main()` (a coroutine function) turning known failures into one-line errors."""
    from ..app import StartupError, one_line

    try:
        asyncio.run(main())
    except (CliError, StartupError, ConfigError) as exc:
        if os.environ.get("HERMES_DEBUG"):
            raise
        raise fail(one_line(exc)) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except Exception as exc:  # never a traceback to the user; the log has it
        log.error("unexpected failure", exc_info=exc, extra={"file_only": True})
        if os.environ.get("HERMES_DEBUG"):
            raise
        raise fail(f"unexpected {type(exc).__name__}: {one_line(exc)}") from None


def _install_stop_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(signum, stop.set)
        except (NotImplementedError, RuntimeError):  # not the main thread / platform without it
            pass


@app.command()
def chat() -> None:
    """Chat with the gateway in this terminal (the local platform). Piped input works too: one
    message per line. Type /help for commands, /quit or Ctrl-D to leave."""
    from .chat import run_chat

    config = load_cli_config_or_exit()
    run_async(lambda: run_chat(config, install_signals=_install_stop_signals))


@app.command()
def run() -> None:
    """Run every enabled platform and the housekeeping watcher until Ctrl-C or SIGTERM."""
    config = load_cli_config_or_exit()

    async def main() -> None:
        from ..app import GatewayApp

        if not config.enabled_platforms():
            raise CliError("no platform is enabled: set `enabled = true` in a [platforms.<name>] "
                           f"table of {config_file_path(config.home)}")
        gateway = GatewayApp(config)
        stop = asyncio.Event()
        _install_stop_signals(stop)
        await gateway.start()
        typer.echo(f"hermes-gateway: running {', '.join(gateway.adapters) or 'no platforms'} "
                   "(Ctrl-C or SIGTERM to stop)", err=True)
        try:
            await stop.wait()
        finally:
            await gateway.stop()

    run_async(main)


def load_cli_config_or_exit() -> Any:
    """`load_cli_config`, printing the one-line error and exiting 2 on failure."""
    try:
        config = load_cli_config()
    except CliError as exc:
        raise fail(str(exc)) from None
    _setup_logging(config.home)
    return config


def _add_subapps() -> None:
    from .plugins import new_plugin_command, plugins_app
    from .sessions import sessions_app

    app.add_typer(sessions_app, name="sessions")
    app.add_typer(plugins_app, name="plugins")
    app.command("new-plugin")(new_plugin_command)


_add_subapps()


def main() -> None:
    """Console-script entry point (`hermes-gateway`)."""
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
