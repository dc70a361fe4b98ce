"""`hermes-gateway`: the command line (typer).

Commands: `chat` (terminal chat on the local platform; piped stdin works, one message a line),
`run` (every enabled platform plus the watcher until Ctrl-C / SIGTERM; SIGUSR1 is a planned
restart, exit code 75), `restart` (sends that SIGUSR1), `sessions …`,
`plugins …`, and `--version`.

Every command loads its config and reports errors through `cli/common.py`: one line on stderr
(`hermes-gateway: error: …`) with exit code 2, never
a traceback (set `HERMES_DEBUG=1` to get the traceback). Logs go to `$HERMES_HOME/gateway.log`
and warnings also to stderr.
"""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import sys
from typing import Optional

import typer

from .. import __version__
from ..settings import config_file_path
from .common import (
    EXIT_ERROR,
    HELP_MARKUP,
    CliError,
    fail,
    held_terminal_log,
    load_cli_config_or_exit,
    log,
    run_async,
)

app = typer.Typer(name="hermes-gateway", help="Session lifecycle core of an AI-agent messaging gateway.",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  rich_markup_mode=HELP_MARKUP)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"hermes-gateway {__version__}")
        raise typer.Exit(0)


@app.callback()
def root(version: Optional[bool] = typer.Option(None, "--version", callback=_version_callback,
                                                 is_eager=True, help="Print the version and exit.")) -> None:
    """Session lifecycle core of an AI-agent messaging gateway."""


# `run` exits with this code after a planned restart (SIGUSR1, `hermes-gateway restart`), so a
# supervisor starts it again: systemd's `Restart=on-failure` (or `RestartForceExitStatus=75`).
# 75 is sysexits' EX_TEMPFAIL: "try again".
EXIT_RESTART = 75


class StopRequests:
    """What `run` was asked to do: stop (exit 0) or a planned restart (exit 75, its supervisor
    starts it again; docs/behaviour.md §6). Each request is logged with its origin
    (docs/operations.md §4). A stop asked during a restart's drain turns it into a stop, and a
    restart asked while a stop drains is ignored: a supervisor must never start again a gateway
    its operator stopped."""

    def __init__(self) -> None:
        self.stop = asyncio.Event()
        self.restart = False

    def request_stop(self, why: str) -> None:
        """A stop (`why`: the signal's name)."""
        log.info("stop requested (%s)", why)
        if self.restart:
            log.info("the planned restart under way becomes a stop")
            self.restart = False
        self.stop.set()

    def request_restart(self, why: str) -> None:
        """A planned restart (`why`: `SIGUSR1` or `/restart`)."""
        if self.stop.is_set() and not self.restart:
            log.warning("planned restart requested (%s) while the gateway stops; ignored: it stops as asked", why)
            return
        log.info("planned restart requested (%s)", why)
        self.restart = True
        self.stop.set()

    def install_signals(self) -> None:
        """SIGINT / SIGTERM request a stop, SIGUSR1 a restart (on the running loop)."""
        loop = asyncio.get_running_loop()
        for signum, handler in ((signal.SIGINT, self.request_stop), (signal.SIGTERM, self.request_stop),
                                (signal.SIGUSR1, self.request_restart)):
            try:
                loop.add_signal_handler(signum, handler, signal.Signals(signum).name)
            except (NotImplementedError, RuntimeError):  # not the main thread / platform without it
                pass


@app.command()
def chat() -> None:
    """Chat with the gateway in this terminal (the local platform).

    Piped input works too: one message per line. Type /help for commands, /quit or Ctrl-D to
    leave."""
    from .chat import run_chat

    config = load_cli_config_or_exit()
    run_async(lambda: run_chat(config))  # its own Ctrl-C handling: a line at once, twice quits


def _with_terminal_platform(config):
    """`run` on a terminal keeps the local platform beside the configured ones unless a
    `[platforms.local]` table decides (docs/operations.md §6); without a terminal (a service,
    a container) there is nobody to chat with, so only the configured platforms run."""
    if "local" in config.platforms or not sys.stdin.isatty():
        return config
    return config.model_copy(update={"platforms": {**config.platforms, "local": {"enabled": True}}})


TERMINAL_INPUT_ENDED = ("the terminal's input ended (/quit, Ctrl-D or end of input): the local platform takes no "
                        "more messages; the gateway goes on running (Ctrl-C or SIGTERM to stop it)")


async def _tell_when_terminal_input_ends(gateway) -> None:
    """In `run`, once the local platform's input has ended for good (`/quit`, Ctrl-D, end of
    input: `LocalAdapter.wait_input_ended`), say on stderr (and in gateway.log) that the
    gateway goes on: `/help` offers `/quit` as leaving the chat, and `run` stops only on a
    signal (docs/operations.md §6), so without the line a terminal's `/quit` left a silent
    process. Returns at once when no local platform runs."""
    from ..platforms.local import LocalAdapter

    adapter = gateway.adapters.get("local")
    if not isinstance(adapter, LocalAdapter):
        return
    await adapter.wait_input_ended()
    log.info(TERMINAL_INPUT_ENDED)
    typer.echo(f"hermes-gateway: {TERMINAL_INPUT_ENDED}", err=True)


@app.command()
def run() -> None:
    """Run every enabled platform and the housekeeping watcher until Ctrl-C or SIGTERM.

    A stop exits 0. SIGUSR1 (or `hermes-gateway restart`) is a planned restart: the same drain,
    then exit code 75 so a supervisor starts the gateway again (docs/behaviour.md §6)."""
    config = load_cli_config_or_exit()

    async def main() -> bool:
        from ..app import GatewayApp

        if not config.enabled_platforms():
            from ..plugin_system.settings import unprovided_platform_notes

            # A misspelt table may be why nothing is enabled: name it, or enabling it is the
            # next thing the operator tries (docs/configuration.md §2 `[platforms.<id>]`).
            notes = "".join(f"; {note}" for note in unprovided_platform_notes(config))
            raise CliError("no platform is enabled: set `enabled = true` in a [platforms.<name>] "
                           f"table of {config_file_path(config.home)}{notes}")
        requests = StopRequests()
        # `/restart` from an admin does what SIGUSR1 does.
        gateway = GatewayApp(_with_terminal_platform(config), on_restart=lambda: requests.request_restart("/restart"))
        requests.install_signals()
        with held_terminal_log():  # a failed start prints one line, not the warnings leading to it
            await gateway.start()
        note = ("" if "platforms" in config.model_fields_set else
                f" (no [platforms.<name>] table in {config_file_path(config.home)}: the terminal platform only)")
        typer.echo(f"hermes-gateway: running {', '.join(gateway.adapters) or 'no platforms'}{note} "
                   "(Ctrl-C or SIGTERM to stop)", err=True)
        ended = asyncio.ensure_future(_tell_when_terminal_input_ends(gateway))
        try:
            await requests.stop.wait()
        finally:
            ended.cancel()
            await gateway.stop(restart=requests.restart)
        return requests.restart

    if run_async(main):
        typer.echo(f"hermes-gateway: restarting (exit code {EXIT_RESTART})", err=True)
        raise typer.Exit(EXIT_RESTART)


@app.command()
def restart() -> None:
    """Ask the gateway running on this HERMES_HOME for a planned restart (SIGUSR1).

    It drains, marks cut-off turns `restart_timeout` and exits 75 for its supervisor to start it
    again."""
    from ..ops.status import read_status
    from ..store.home_lock import home_is_locked

    config = load_cli_config_or_exit()
    pid = home_is_locked(config.home)
    if not pid:
        raise fail(f"no gateway is running on HERMES_HOME {config.home}")
    if read_status(config.home).get("restartable") is False:
        # A terminal chat: nothing would start it again (what `/restart` answers there).
        raise fail(f"the gateway on HERMES_HOME {config.home} (pid {pid}) is a terminal chat, which "
                   "cannot restart: nothing would start it again; end the chat instead")
    try:
        os.kill(pid, signal.SIGUSR1)
    except OSError as exc:
        raise fail(f"the gateway (pid {pid}) cannot be signalled: {exc.strerror or exc}") from None
    typer.echo(f"hermes-gateway: restart requested from the gateway (pid {pid})", err=True)


def _add_subapps() -> None:
    from .doctor import doctor_command
    from .plugins import new_plugin_command, plugins_app
    from .sessions import sessions_app
    from .status import status_command

    app.add_typer(sessions_app, name="sessions")
    app.add_typer(plugins_app, name="plugins")
    app.command("new-plugin")(new_plugin_command)
    app.command("doctor")(doctor_command)
    app.command("status")(status_command)


_add_subapps()


# Failures writing our own output (stdout on a full disk, a dead terminal): click handles a
# closed pipe itself; these would otherwise end in a traceback.
_OUTPUT_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG)


def main() -> None:
    """Console-script entry point (`hermes-gateway`).

    Every command's own failures are its one error line already (`run_async`); what is left is
    writing the output itself, reported as one line too, exit code 2."""
    try:
        try:
            app()
        finally:
            sys.stdout.flush()  # buffered output fails here, not unreported at interpreter exit
    except OSError as exc:
        if exc.filename is not None or exc.errno not in _OUTPUT_ERRNOS:
            raise
        sys.stderr.write(f"hermes-gateway: error: cannot write output: {exc.strerror or exc}\n")
        # What is still buffered would fail again at exit; it goes nowhere instead.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(EXIT_ERROR) from None


if __name__ == "__main__":  # pragma: no cover
    main()
