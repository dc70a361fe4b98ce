"""The `local` platform: a chat in the terminal.

Every line read from the input stream is one message; replies are written to the output stream,
one reply per block. `/quit` and `/exit` end the input (like end-of-file). The source is always
`SessionSource("local", "terminal", chat_type="dm", user_id=<OS user>)`, so every run of
`hermes-gateway chat` by the same home continues the same session key
(`agent:main:local:dm:terminal`).

Streams are injectable so tests drive the adapter with `io.StringIO`. Lines are read on a daemon
thread (a blocked `readline` on a terminal must never keep the process from exiting) and handed
to the event loop in order.

With `line_editor=True` (the CLI sets it when stdin and stdout are a terminal) lines are read
through GNU readline (`input()`): history with ↑/↓, ←/→ and the usual editing keys, Ctrl-L
clears the screen, and no escape sequence of an arrow key ever reaches the model. The history
lives in memory only (a history file would be one more copy of users' messages). A reply that
arrives while a line is being typed is printed above it and the prompt and typed text are drawn
again. Piped input stays plain (`readline()` on the stream).
"""

from __future__ import annotations

import asyncio
import getpass
import logging
import os
import re
import sys
import threading
from typing import Any, TextIO

from ..model.events import MessageEvent
from ..model.source import SessionSource
from ..sdk.adapter import BaseAdapter, SendResult
from ..sdk.errors import SendError, describe_failure
from ..store.db import is_disk_full
from ..types import AdapterSpec

log = logging.getLogger(__name__)

QUIT_WORDS = frozenset({"/quit", "/exit"})
_EOF = object()
# C0/C1 control characters other than newline and tab: a reply that echoes a user's ESC
# sequences must not drive the terminal (clear the screen, retitle the window, …).
_TERMINAL_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _visible_controls(text: str) -> str:
    """Replace terminal control characters with their `\\xNN` escape."""
    return _TERMINAL_CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _load_readline() -> Any:
    """GNU readline (or libedit) set up for the chat, or None where Python has none."""
    try:
        import readline
    except ImportError:
        return None
    # Bracketed paste would wrap every prompt in escape codes a pasted message does not need.
    readline.parse_and_bind("set enable-bracketed-paste off")
    return readline


def _terminal_modes(stream: Any) -> Any:
    """The termios attributes of `stream`'s terminal (to restore them), or None."""
    try:
        import termios

        return termios.tcgetattr(stream.fileno())
    except (ImportError, OSError, ValueError, AttributeError):
        return None


def _os_user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry in some containers
        return "user"


_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")


def _line_reader(stdin: TextIO):
    """`readline` for `stdin` that never fails on undecodable bytes: a strict text stream is
    switched to `surrogateescape` (decoding a buffered chunk strictly would raise for the whole
    chunk, losing the lines before the bad byte too), and a line holding escaped bytes is logged
    with its number; the message layer turns them into U+FFFD (`model.text`)."""
    if getattr(stdin, "errors", None) == "strict" and hasattr(stdin, "reconfigure"):
        stdin.reconfigure(errors="surrogateescape")
    encoding = getattr(stdin, "encoding", None) or "utf-8"
    count = 0

    def read_line() -> str:
        nonlocal count
        line = stdin.readline()
        count += 1
        bad = _ESCAPED_BYTE.search(line)
        if bad is not None:
            offset = len(line[:bad.start()].encode(encoding, "surrogateescape")) + 1
            log.warning("input line %d is not valid %s (byte %d); undecodable bytes replaced by U+FFFD",
                        count, encoding, offset)
        return line
    return read_line


class LocalAdapter(BaseAdapter):
    """Terminal adapter.

    Args:
        settings: unused (the local platform has no settings table besides `enabled`).
        on_message: the gateway's inbound handler.
        stdin: text stream with `readline()` (default `sys.stdin`).
        stdout: text stream with `write()`/`flush()` (default `sys.stdout`).
        user: the user id and name (default: the OS user).
        prompt: written at start and after each reply when not None (the CLI passes `"> "` on a
            terminal; piped output gets no prompts).
    """

    spec = AdapterSpec(name="local", label="Local terminal", pii_safe=False,
                       max_message_length=100_000, length_unit="chars", capabilities=frozenset(),
                       # One line true in `chat` (which exits) and in `run` (whose other
                       # platforms, scheduler and status go on): /help cannot tell them apart.
                       help_lines=("/quit — ends the input of this terminal (also /exit, or Ctrl-D): chat exits, run goes on running",))

    def __init__(self, settings: Any = None, *, on_message=None, stdin: TextIO | None = None,
                 stdout: TextIO | None = None, user: str | None = None, prompt: str | None = None,
                 line_editor: bool = False):
        super().__init__(settings, on_message=on_message)
        self._stdin = stdin
        self._stdout = stdout
        self.user = user or _os_user()
        self.prompt = prompt
        self._readline = _load_readline() if line_editor else None
        # Line-editor mode: the reader waits for the first `write_prompt()` (after the banner).
        self._may_read = threading.Event()
        self._editing = False
        self._terminal_modes = _terminal_modes(self.stdin) if self._readline is not None else None
        self._reader: asyncio.Task | None = None
        self._closed = asyncio.Event()
        # The input ended for good (end of file, /quit, output closed): what `chat` waits for.
        # A stop without it (a replica losing the terminal's ingress lease, docs/adapters.md §6)
        # only pauses reading: `start` goes on with the same lines, none skipped.
        self._input_ended = asyncio.Event()
        self._lines: asyncio.Queue | None = None  # filled by the stdin thread, started once
        self._output_gone = False

    @property
    def source(self) -> SessionSource:
        """The one source of this platform."""
        return SessionSource("local", "terminal", chat_type="dm", user_id=self.user, user_name=self.user)

    @property
    def busy_input_mode(self) -> str | None:
        """The runner's busy-input override (`pipeline.runner`): "sequential" when the input is
        not a terminal — piped lines are a script, each waits for the previous answer, commands
        included —; None on a terminal (the gateway's `[core] busy_input_mode` applies)."""
        try:
            return None if self.stdin.isatty() else "sequential"
        except (AttributeError, ValueError, OSError):  # closed or unusual stream: treat as a script
            return "sequential"

    @property
    def stdin(self) -> TextIO:
        return self._stdin if self._stdin is not None else sys.stdin

    @property
    def stdout(self) -> TextIO:
        return self._stdout if self._stdout is not None else sys.stdout

    async def start(self) -> None:
        """Start reading lines, or go on reading after a `stop` (lines typed meanwhile are read
        then). Idempotent; nothing once the input has ended."""
        if self._input_ended.is_set() or (self._reader is not None and not self._reader.done()):
            return
        self._closed.clear()
        self._reader = asyncio.create_task(self._read_loop(), name="local-adapter-reader")
        # However reading ends (even cancelled before it began), the input is closed.
        self._reader.add_done_callback(lambda _task: self._closed.set())

    async def stop(self) -> None:
        """Stop reading (lines not yet read stay unread). Idempotent. A line editor stopped in
        the middle of a line (Ctrl-C) gives the terminal its modes back (echo, line mode)."""
        if self._reader is not None and not self._reader.done():
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
        self._closed.set()
        if self._terminal_modes is not None and self._editing:
            import termios

            try:
                termios.tcsetattr(self.stdin.fileno(), termios.TCSADRAIN, self._terminal_modes)
                self.stdout.write("\n")
                self.stdout.flush()
            except (OSError, ValueError, termios.error):
                pass

    async def wait_closed(self) -> None:
        """Wait until reading stopped: the input ended (end of file, `/quit`) and every line read
        was accepted, or `stop` was called."""
        await self._closed.wait()

    async def wait_input_ended(self) -> None:
        """Wait until the input ended for good (end of file, `/quit`, the output closed) and
        every line read was accepted; a `stop` that only pauses reading does not count."""
        await self._input_ended.wait()

    async def send(self, target: SessionSource, text: str, *, reply_to: str | None = None,
                   metadata: dict[str, Any] | None = None) -> SendResult:
        """Write `text` and a newline to the output stream (control characters shown escaped).

        Raises:
            OSError / ValueError: the output stream is closed (its reader went away, as in
                `hermes-gateway chat | head`); the chat then ends (`_end_on_closed_output`), and later
                sends raise SendError without writing."""
        if self._output_gone:
            raise SendError("the terminal's output is closed")
        out = self.stdout
        text = _visible_controls(text)
        text = text if text.endswith("\n") else text + "\n"
        try:
            if self._readline is not None and self._editing:
                # Above the line being typed: clear it, print, then draw the prompt and the text again.
                out.write("\r\x1b[2K" + text + (self.prompt or "") + self._readline.get_line_buffer())
                out.flush()
                return SendResult(message_id=None)
            out.write(text)
            out.flush()
            self.write_prompt()
        except (OSError, ValueError) as exc:  # ValueError: a closed file object
            self._end_on_closed_output(exc)
            raise
        return SendResult(message_id=None)

    @property
    def output_closed(self) -> bool:
        """True once a write to the output stream failed because nobody reads it any more."""
        return self._output_gone

    def _end_on_closed_output(self, exc: BaseException) -> None:
        """Nobody reads the chat any more: stop reading input, as at end of file. The lines
        already accepted are durable and stay queued for the next start (docs/behaviour.md §5)."""
        if self._output_gone:
            return
        self._output_gone = True
        log.warning("the chat's output is closed (%s); the chat ends, and the lines it accepted are answered "
                    "at the next start", describe_failure(exc))
        if self.stdout is sys.stdout:
            # Keep the interpreter's final flush of stdout from failing again at exit.
            try:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())
                os.close(devnull)
            except (OSError, ValueError):
                pass
        self._input_ended.set()
        if self._reader is not None and not self._reader.done():
            self._reader.cancel()

    def write_prompt(self) -> None:
        """Write the prompt (terminal mode) unless the input has ended. In line-editor mode
        readline draws the prompt itself; the first call lets it start reading."""
        if self._readline is not None:
            if self.prompt is not None:  # not before the CLI has printed its banner
                self._may_read.set()
            return
        if self.prompt is not None and not self._closed.is_set():
            self.stdout.write(self.prompt)
            self.stdout.flush()

    def read_ahead(self) -> None:
        """Start reading the input now, also before `start` (idempotent; needs the running
        loop). A `chat` waiting for the terminal's ingress lease (docs/adapters.md §6) calls it
        so that an end of input is noticed while it waits: lines read before it wait here, in
        order, for `start`; an end of input with no line waiting while the adapter is not
        reading ends the input at once (`wait_input_ended`)."""
        if self._lines is None:
            self._lines = self._start_stdin_thread()

    def _input_exhausted(self) -> None:
        """On the loop, once the stdin thread queued `_EOF` and finished: when nothing reads the
        queue (before the first `start`, or after a `stop`) and no message waits in it (only
        blank lines or a quit word), the input has ended. Messages waiting are read by the
        next `start` (the ingress lease, docs/adapters.md §6), which then ends the input."""
        if self._reader is not None and not self._reader.done():
            return  # the reader reads the waiting lines and the end itself
        # The thread is done: the queue holds all there will be; look at it, in order, and put it back.
        waiting = [self._lines.get_nowait() for _ in range(self._lines.qsize())]
        for line in waiting:
            self._lines.put_nowait(line)
        if any(line is not _EOF and line.strip() and line.strip() not in QUIT_WORDS for line in waiting):
            return
        self._end_prompt_line()
        self._input_ended.set()
        self._closed.set()

    def _end_prompt_line(self) -> None:
        """End the prompt line on Ctrl-D / `/quit`, so the shell's prompt starts on its own."""
        if self.prompt is not None and not self._closed.is_set() and not self._output_gone:
            self.stdout.write("\n")
            self.stdout.flush()

    async def _read_loop(self) -> None:
        self.write_prompt()
        self.read_ahead()
        lines = self._lines
        try:
            while True:
                line = await lines.get()
                if line is _EOF:
                    break
                text = line.rstrip("\r\n")
                if text.strip() in QUIT_WORDS:
                    break
                if not text.strip():  # ignored by the gateway: just ask again
                    self.write_prompt()
                    continue
                try:
                    await self.emit(MessageEvent(source=self.source, text=text))
                except Exception as exc:  # keep reading: one bad line must not end the chat
                    # Nothing redelivers a terminal line: the user is told, in the configured
                    # words, and the operator finds the error in the log (docs/behaviour.md §0).
                    # A full disk is expected (docs/behaviour.md §12): one line naming what
                    # failed, no traceback and no class name (docs/operations.md §4).
                    if is_disk_full(exc):
                        log.error("line not accepted by the gateway: disk full (%s)", describe_failure(exc))
                    else:
                        log.exception("line not accepted by the gateway")
                    await self.send(self.source, self.failure_notice(self.source, exc))
            self._input_ended.set()  # not when cancelled: a stop only pauses reading
        finally:
            self._end_prompt_line()
            self._closed.set()

    def _start_stdin_thread(self) -> asyncio.Queue:
        """The queue of lines a daemon thread reads from stdin (`_EOF` last), for the adapter's
        life: a stopped and started adapter reads on from the same queue."""
        loop = asyncio.get_running_loop()
        lines: asyncio.Queue = asyncio.Queue()
        stdin = self.stdin

        plain_line = _line_reader(stdin)

        def read_line() -> str:
            if self._readline is None:
                return plain_line()
            self._may_read.wait()
            self._editing = True
            try:
                return input(self.prompt or "") + "\n"
            except EOFError:  # Ctrl-D
                return ""
            finally:
                self._editing = False

        def reader() -> None:
            try:
                while True:
                    line = read_line()
                    if not line:
                        break
                    loop.call_soon_threadsafe(lines.put_nowait, line)
                    if line.strip() in QUIT_WORDS:
                        break
            except (OSError, ValueError) as exc:  # closed or broken stream: treat as end of input
                log.warning("local input stream failed: %s", exc)
            finally:
                try:
                    loop.call_soon_threadsafe(lines.put_nowait, _EOF)
                    loop.call_soon_threadsafe(self._input_exhausted)
                except RuntimeError:  # the loop is already closed: nothing to hand over
                    pass

        threading.Thread(target=reader, name="local-stdin", daemon=True).start()
        return lines
