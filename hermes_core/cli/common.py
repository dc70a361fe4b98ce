"""What every `hermes-gateway` command shares: one config loader, one error printer, one logging
set-up: one clear line, never a traceback.

Every command (chat, run, sessions *, plugins, new-plugin) reports a failure the same way:
`hermes-gateway: error: <one line>` on stderr and exit code 2 (`HERMES_DEBUG=1` re-raises to
show the traceback). Kept apart from `cli/main.py` so the sub-command modules can import it
without importing the root app (which imports them).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import stat
import sys
import traceback
from datetime import datetime, timezone
from enum import Enum
from logging.handlers import RotatingFileHandler
from pathlib import Path
from contextlib import contextmanager
from typing import Any, Awaitable, Callable, Iterator, TypeVar

import typer

from ..sdk.errors import describe_failure
from ..dirs import ensure_private_dir, why_dir_unwritable
from ..settings import ConfigError, legacy_setting_warnings, unknown_env_section_warnings, unused_setting_warnings

EXIT_ERROR = 2
ERROR_PREFIX = "hermes-gateway: error: "
# Every Typer of the CLI renders its help as Markdown: the formatter joins a paragraph's source
# lines and wraps it to the terminal (typer's "rich" mode would keep each line break of a
# docstring); backquoted names are shown as code.
HELP_MARKUP = "markdown"
log = logging.getLogger("hermes_core.cli")

# The stderr handler this process installed on the root logger (None: not set up yet). Checking
# it against the root logger's handlers makes the set-up idempotent without tagging the logger.
_stderr_handler: logging.Handler | None = None


E = TypeVar("E", bound=Enum)


def choice_parser(choices: type[E]) -> Callable[[Any], E]:
    """A typer `parser=` for an option taking one of the values of the Enum `choices`.

    Typer validates an Enum option through pydantic, whose message for a value that is not one
    of them reads "Value error, 'xml' is not one of 'jsonl', 'md'.": the prefix is the library's.
    This parser raises the usage error itself, so the box says "Invalid value for '--format':
    'xml' is not one of 'jsonl', 'md'." like click's own choice check."""
    def parse(value: Any) -> E:
        if isinstance(value, choices):
            return value
        for choice in choices:
            if choice.value == value:
                return choice
        allowed = ", ".join(repr(choice.value) for choice in choices)
        raise typer.BadParameter(f"{value!r} is not one of {allowed}.")
    return parse


class CliError(Exception):
    """An error to print as one line, exit code 2."""


class PersonalCliError(CliError):
    """A CliError whose line names a person (`sessions erase-user`'s unconfirmed question): printed
    on stderr, never written to gateway.log, since the log must not name whom erased data was
    about (docs/operations.md §5)."""


def one_line(exc: BaseException | str) -> str:
    """`exc`'s message (or the string) on one line; what failed in words when it is empty."""
    text = " ".join(str(exc).split())
    if text or isinstance(exc, str):
        return text
    return describe_failure(exc)


def root_cause(exc: BaseException) -> BaseException:
    """The innermost exception `exc` was raised from (following `__cause__`, then a context
    hidden by `raise … from None`); `exc` itself when there is none."""
    seen = {id(exc)}
    while True:
        inner = exc.__cause__ or exc.__context__
        if inner is None or id(inner) in seen:
            return exc
        seen.add(id(inner))
        exc = inner


def fail(message: BaseException | str, *, logged: bool = False) -> typer.Exit:
    """Print `hermes-gateway: error: <message>` (one line) on stderr; return the Exit(2) to raise.

    A command that logs to gateway.log (`setup_logging` ran: `run`, `chat`, the `sessions`
    commands that write) logs the line there too, as ERROR `<command>: <message>`
    (`_command_words`), never a second time on the terminal (docs/operations.md §4): an
    operator reading the log of a scheduled `sessions prune` finds why it stopped beside what it
    said before. `logged`: the caller has logged the failure already (`run_async`). A command
    that has not set up logging (one failing before it, a read that writes nothing into the
    home) logs nothing, nor does a `PersonalCliError`."""
    line = one_line(message)
    typer.echo(ERROR_PREFIX + line, err=True)
    if isinstance(message, PersonalCliError):
        logged = True
    if not logged and _file_handler is not None and _file_handler in logging.getLogger().handlers:
        log.error("%s: %s", _command_words(), line, extra={"file_only": True})
    return typer.Exit(EXIT_ERROR)


def _command_words() -> str:
    """`hermes-gateway` and the command's name as typed (`sessions prune`, `run`): at most the
    first two words of the command line before an option. Never its arguments past those (a
    session key, the user id `erase-user` erases must not stay behind in the log)."""
    words = []
    for word in sys.argv[1:3]:
        if word.startswith("-"):
            break
        words.append(word)
    return " ".join(["hermes-gateway", *words])


class PrivateRotatingFileHandler(RotatingFileHandler):
    """`gateway.log` and its rotations are created 0600: log lines quote session keys, user ids
    and errors about users' messages.

    A record costs one `write` (and no other system call): the file's size is taken once when
    it is opened and then counted here, where the standard handler's rollover check ran two
    `stat`s and a `seek` for every record and formatted it twice. On the event loop every system
    call hands the interpreter lock to the SQLite thread and back: with the standard handler
    the turn's log line cost about 15 % of the throughput at 10,000 sessions, with this one
    about 10 % (docs/behaviour.md §12). The size is counted in characters, as the standard check
    counts the new line; as there, only a regular file is ever rotated (never /dev/null)."""

    _size = 0
    _regular = True
    # A write failed (a full disk, a file-size limit): said once on stderr, then silent until a
    # line is written again. Logging's own handler of errors printed a traceback of several
    # dozen lines per record, where every stderr record is one line (docs/operations.md §4).
    _failing = False

    def _open(self):  # noqa: D401 - logging's hook for (re)opening the file
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.fchmod(fd, 0o600)  # an older, world-readable log is tightened too
        except OSError:
            pass
        status = os.fstat(fd)
        self._size, self._regular = status.st_size, stat.S_ISREG(status.st_mode)
        return os.fdopen(fd, "a", encoding=self.encoding, errors=self.errors)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record) + self.terminator
            if self.maxBytes > 0 and self._regular and self._size and self._size + len(line) >= self.maxBytes:
                self.doRollover()
            if self.stream is None:
                self.stream = self._open()
            self.stream.write(line)
            self.stream.flush()
            self._size += len(line)
            self._failing = False
        except RecursionError:
            raise
        except OSError as exc:
            self._write_failed(exc)
        except Exception:
            self.handleError(record)

    def _write_failed(self, exc: OSError) -> None:
        """Drop the stream (and the line it could not write); the next record reopens the file.
        The first failure of a run of them is one stderr line naming the file and the reason."""
        stream, self.stream = self.stream, None
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass
        if not self._failing:
            self._failing = True
            try:
                sys.stderr.write(f"hermes-gateway: WARNING: {self.baseFilename} cannot be written "
                                 f"({exc.strerror or exc}): log lines are lost until it can be\n")
                sys.stderr.flush()
            except (OSError, ValueError):
                pass


class _OneLineFormatter(logging.Formatter):
    """Terminal log lines: the message and, for a record with an exception, what was raised —
    the last lines of its traceback (`sqlite3.DatabaseError: database disk image is malformed`),
    as redacted for the log — on one line; never the traceback itself (the log file keeps it)."""

    def format(self, record: logging.LogRecord) -> str:
        bare = logging.makeLogRecord({**record.__dict__, "exc_info": None, "exc_text": None,
                                      "stack_info": None})
        line = " ".join(super().format(bare).split())
        raised = self._raised(record)
        return f"{line}: {raised}" if raised else line

    def _raised(self, record: logging.LogRecord) -> str:
        """The exception-only part of `record`'s traceback on one line ("" without one). Taken
        from `exc_text` when set: the redaction filter rewrote it (plugin_system.redaction)."""
        if not record.exc_info or record.exc_info[1] is None:
            return ""
        kind, exc = record.exc_info[0], record.exc_info[1]
        size = len("".join(traceback.format_exception_only(kind, exc)).splitlines())
        text = record.exc_text or self.formatException(record.exc_info)
        return " ".join(" ".join(text.splitlines()[-size:]).split())


class _StartupHold(logging.Filter):
    """Filter on the terminal handler: while `held` is a list, records are kept there instead of
    printed (see `held_terminal_log`)."""

    def __init__(self) -> None:
        super().__init__()
        self.held: list[logging.LogRecord] | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        if self.held is None:
            return True
        self.held.append(record)
        return False


_hold = _StartupHold()


@contextmanager
def held_terminal_log() -> Iterator[None]:
    """Hold the terminal's log lines while a gateway starts (README: a failed start prints ONE
    line on stderr and exits 2).

    If the body raises, the held lines are dropped from the terminal (they are in gateway.log):
    the error line says what stopped start-up, and e.g. "plugin X failed to load and is
    skipped" must not precede "plugin X … is listed in [plugins] enabled". If it succeeds,
    the held lines are printed once each, in order (a warning repeated during start-up by
    several loaders is shown once)."""
    if _hold.held is not None:  # nested: the outer hold decides
        yield
        return
    _hold.held = []
    try:
        yield
    except BaseException:
        _hold.held = None
        raise
    records, _hold.held = _hold.held, None
    handler = _stderr_handler
    if handler is None or handler not in logging.getLogger().handlers:
        return
    seen: set[tuple[int, str]] = set()
    for record in records:
        key = (record.levelno, record.getMessage())
        if key in seen:
            continue
        seen.add(key)
        if record.levelno >= handler.level:
            handler.handle(record)


class JsonLineFormatter(logging.Formatter):
    """`[logging] format = "json"`: one JSON object a line (docs/operations.md §4): `ts` (ISO-8601
    UTC), `level`, `logger`, `message`, the structured fields a record carries in its `hermes`
    extra (e.g. the per-turn line's `session`, `outcome`, `duration_s`, tokens), and `exc` with
    the traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        fields = getattr(record, "hermes", None)
        if isinstance(fields, dict):
            data.update({k: v for k, v in fields.items() if k not in data})
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        return json.dumps(data, ensure_ascii=False, default=str)


# Client libraries that log one INFO line per HTTP request or long poll (a Telegram bot polls
# every 30 s): kept at WARNING unless debugging, so gateway.log shows the gateway's own lines.
# `httpx2` is the HTTP client the openai package uses since its 3.x releases.
CHATTY_LOGGERS = ("httpx", "httpx2", "httpcore", "aiohttp.access", "aiohttp.client", "urllib3", "openai",
                  "telegram", "discord", "slack_sdk", "slack_bolt", "websockets", "hermes_slack.web",
                  "hermes_slack.socket_mode", "hermes_slack.bolt")


def _debugging() -> bool:
    return bool(os.environ.get("HERMES_DEBUG")) or os.environ.get("HERMES_LOG_LEVEL", "").upper() == "DEBUG"


class ClientNoiseFilter(logging.Filter):
    """On the gateway's own handlers (terminal and gateway.log): drops the records below WARNING
    of `CHATTY_LOGGERS`, unless `HERMES_DEBUG` is set or `HERMES_LOG_LEVEL=DEBUG` (read when the
    filter is made). The libraries' logger levels are left alone, so other handlers still see
    everything."""

    def __init__(self) -> None:
        super().__init__()
        self.debugging = _debugging()

    def filter(self, record: logging.LogRecord) -> bool:
        if self.debugging or record.levelno >= logging.WARNING:
            return True
        name = record.name
        return not any(name == chatty or name.startswith(chatty + ".") for chatty in CHATTY_LOGGERS)


def quiet_terminal_logging() -> None:
    """For commands that print their own report (the `sessions` admin commands): without any
    handler, Python's last-resort handler would print bare WARNING lines on stderr, repeating
    what the report already says. (Idempotent.)"""
    root_logger = logging.getLogger()
    if not root_logger.handlers:
        root_logger.addHandler(logging.NullHandler())


def setup_logging(home: Path, *, terminal: bool = True, fmt: str = "text") -> None:
    """Log INFO and up to `<home>/gateway.log` (`fmt`: `"text"` or `"json"`, `[logging] format`);
    WARNING and up (or `HERMES_LOG_LEVEL`) to stderr as single lines (only the log file when
    `terminal` is False: the command reports itself). Client libraries' per-request lines stay
    out unless debugging (`ClientNoiseFilter`). Idempotent within a process."""
    global _stderr_handler
    root_logger = logging.getLogger()
    if _stderr_handler is not None and _stderr_handler in root_logger.handlers:
        return
    root_logger.setLevel(logging.INFO)
    if not terminal:
        quiet_terminal_logging()
        _add_file_handler(root_logger, home, fmt)
        return
    level = os.environ.get("HERMES_LOG_LEVEL", "WARNING").upper()
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setLevel(getattr(logging, level, logging.WARNING))
    stderr.setFormatter(_OneLineFormatter("hermes-gateway: %(levelname)s: %(message)s"))
    stderr.addFilter(lambda record: not getattr(record, "file_only", False))
    stderr.addFilter(_hold)
    stderr.addFilter(ClientNoiseFilter())
    root_logger.addHandler(stderr)
    _stderr_handler = stderr
    _add_file_handler(root_logger, home, fmt)
    logging.getLogger("apscheduler").setLevel(logging.WARNING)  # one line per tick is noise


_file_handler: logging.Handler | None = None


def _add_file_handler(root_logger: logging.Logger, home: Path, fmt: str = "text") -> None:
    global _file_handler
    if _file_handler is not None and _file_handler in root_logger.handlers:
        return
    try:
        ensure_private_dir(home)  # first run on a fresh machine: an owner-only home
    except OSError:
        return  # an unusable home is reported by the start-up check
    # backslashreplace: a path that is not UTF-8 (a HERMES_HOME named in Latin-1) reaches log
    # lines as lone surrogates; written strictly, every such line failed with a traceback on
    # stderr (docs/operations.md §4: one line per record) and never reached the file.
    options = {"maxBytes": 5_000_000, "backupCount": 3, "encoding": "utf-8", "errors": "backslashreplace"}
    try:
        handler = PrivateRotatingFileHandler(home / "gateway.log", **options)
    except OSError:
        if why_dir_unwritable(home) is not None:
            return  # the home refuses files: the start-up check says so; read-only commands stay quiet
        # gateway.log alone cannot be opened (another user's file, a directory in its place):
        # opened at each record instead, the handler says so once on stderr and writes again
        # when it can (`_write_failed`, docs/operations.md §4), where the gateway ran without its
        # log and said nothing.
        handler = PrivateRotatingFileHandler(home / "gateway.log", delay=True, **options)
    handler.setFormatter(JsonLineFormatter() if fmt == "json" else
                         logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(ClientNoiseFilter())
    root_logger.addHandler(handler)
    _file_handler = handler


def load_cli_config() -> Any:
    """Load the GatewayConfig through `app.load_gateway_config` (the one loader of every start-up).

    Raises:
        CliError: the config cannot be loaded (one line naming the file or key and its source).
    """
    from ..app import StartupError, load_gateway_config

    try:
        config = load_gateway_config()
    except (StartupError, ConfigError) as exc:
        # HERMES_DEBUG=1 shows the traceback of what really failed (e.g. the TOML parser's
        # error), not only of the one-line wrapper.
        raise CliError(one_line(exc)) from (root_cause(exc) if os.environ.get("HERMES_DEBUG") else None)
    # Before any logging: to stderr, once per command.
    for line in legacy_setting_warnings(config) + unknown_env_section_warnings() + unused_setting_warnings(config):
        warn(line)
    return config


def home_not_a_directory(home: Path) -> str:
    """Why no gateway state can be at `home`, as the CLI says it after the home's path:
    `": it is a file, not a directory (HERMES_HOME)"` when `home` exists and is not a directory,
    else `""`. Used by `status` and the sessions commands alike (docs/operations.md §2, §5), so
    both name the file instead of a `state.db` looked for inside it."""
    return ": it is a file, not a directory (HERMES_HOME)" if home.exists() and not home.is_dir() else ""


def warn(line: str) -> None:
    """Print `line` on stderr as the CLI's warnings read (`hermes-gateway: WARNING: …`)."""
    typer.echo(f"hermes-gateway: WARNING: {line}", err=True)


def load_cli_config_or_exit(*, logging_on: bool = True) -> Any:
    """`load_cli_config`, printing the one-line error and raising Exit(2) on failure; then sets
    up logging under the config's home (unless `logging_on` is False)."""
    try:
        config = load_cli_config()
    except CliError as exc:
        if os.environ.get("HERMES_DEBUG"):
            raise
        raise fail(exc) from None
    if logging_on:
        setup_logging(config.home, fmt=config.logging.format)
    return config


def run_async(main: Callable[[], Awaitable[Any]], *, expected: tuple[type[BaseException], ...] = ()) -> Any:
    """Run `main()` (a coroutine function) and return its result, turning failures into the one
    error line and Exit(2): CliError, StartupError, ConfigError and `expected` print their message;
    anything else prints `unexpected failure: <what failed, in words>` (the traceback goes to the
    log file).
    Ctrl-C exits 130."""
    from ..app import StartupError

    try:
        return asyncio.run(main())
    except (CliError, StartupError, ConfigError, *expected) as exc:
        if isinstance(exc, StartupError):  # the operator reading gateway.log learns why it stopped
            log.error("gateway did not start: %s", one_line(exc), extra={"file_only": True})
        if os.environ.get("HERMES_DEBUG"):
            raise
        raise fail(exc, logged=isinstance(exc, StartupError)) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except Exception as exc:  # never a traceback to the user; the log has it
        log.error("unexpected failure", exc_info=exc, extra={"file_only": True})
        if os.environ.get("HERMES_DEBUG"):
            raise
        raise fail(f"unexpected failure: {describe_failure(exc)} (HERMES_DEBUG=1 shows the traceback)",
                   logged=True) from None
