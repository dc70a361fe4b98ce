"""gateway.log (docs/operations.md §4): one structured line per turn, `[logging] format = "json"`,
hashed session keys under redaction, and client libraries' per-request lines kept out."""

from __future__ import annotations

import hashlib
import json
import logging

from cli_helpers import gateway_env, run

from hermes_core.cli.common import CHATTY_LOGGERS, ClientNoiseFilter

KEY = "agent:main:local:dm:terminal"


def _turn_lines(home):
    lines = [json.loads(line) for line in (home / "gateway.log").read_text().splitlines()]
    return lines, [line for line in lines if line.get("event") == "turn"]


def test_json_log_has_one_turn_line_per_turn(tmp_path):
    home = tmp_path / "home"
    code, out, _ = run(["chat"], gateway_env(home, HERMES_LOGGING__FORMAT="json"), tmp_path, stdin="hello\nagain\n")
    assert (code, out) == (0, "echo: hello\necho: again\n")
    lines, turns = _turn_lines(home)
    assert all({"ts", "level", "logger", "message"} <= set(line) for line in lines)
    assert len(turns) == 2
    first = turns[0]
    assert {k: first[k] for k in ("level", "logger", "session", "platform", "outcome", "resumed")} == {
        "level": "INFO", "logger": "hermes_core.pipeline.turn", "session": KEY, "platform": "local",
        "outcome": "completed", "resumed": False}
    assert first["duration_s"] >= 0 and first["input_tokens"] >= 0 and first["output_tokens"] > 0
    assert first["message"].startswith(f"turn completed in {KEY} (local): ")


def test_redaction_hashes_the_session_key_in_the_turn_line(tmp_path):
    home = tmp_path / "home"
    env = gateway_env(home, HERMES_LOGGING__FORMAT="json", HERMES_REDACTION__ENABLED="true")
    code, out, _ = run(["chat"], env, tmp_path, stdin="hello\n")
    assert code == 0
    _lines, turns = _turn_lines(home)
    assert [t["session"] for t in turns] == ["key_" + hashlib.sha256(KEY.encode()).hexdigest()[:12]]
    assert KEY not in turns[0]["message"]


def test_text_log_is_the_default(tmp_path):
    home = tmp_path / "home"
    code, _out, _ = run(["chat"], gateway_env(home), tmp_path, stdin="hello\n")
    assert code == 0
    text = (home / "gateway.log").read_text()
    assert f"INFO hermes_core.pipeline.turn: turn completed in {KEY} (local): " in text


def _record(name: str, level: int) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, "HTTP Request: POST …", (), None)


def test_client_libraries_per_request_lines_stay_out_unless_debugging(monkeypatch):
    monkeypatch.delenv("HERMES_DEBUG", raising=False)
    monkeypatch.delenv("HERMES_LOG_LEVEL", raising=False)
    quiet = ClientNoiseFilter()
    # httpx2: the openai package's client ("HTTP Request: POST … 200 OK" per agent call).
    assert [quiet.filter(_record(name, logging.INFO)) for name in ("httpx", "httpx2", "telegram.ext.Updater",
                                                                    "discord.gateway", "aiohttp.access")] == [False] * 5
    assert quiet.filter(_record("httpx", logging.WARNING)) is True  # problems still show
    assert quiet.filter(_record("hermes_core.pipeline.turn", logging.INFO)) is True
    assert quiet.filter(_record("httpxtra", logging.INFO)) is True  # a prefix of a name is not the logger
    assert "httpx" in CHATTY_LOGGERS and logging.getLogger("httpx").level == logging.NOTSET  # levels untouched
    monkeypatch.setenv("HERMES_LOG_LEVEL", "DEBUG")
    assert ClientNoiseFilter().filter(_record("httpx", logging.INFO)) is True  # debugging: everything



def test_gateway_log_rotates_at_its_size_with_owner_only_files(tmp_path):
    """docs/operations.md §4: gateway.log is 0600 and rotated at its size limit (5 MB in the
    gateway, 300 bytes here), keeping `backupCount` old files, also 0600; the size is counted
    from the file opened, not asked of the file system per line."""
    import os
    import stat

    from hermes_core.cli.common import PrivateRotatingFileHandler

    path = tmp_path / "gateway.log"
    path.write_text("x" * 100 + "\n")  # an older log: its size counts from the start
    handler = PrivateRotatingFileHandler(path, maxBytes=300, backupCount=2, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(message)s"))
    record = logging.makeLogRecord({"msg": "y" * 99, "levelno": logging.INFO, "levelname": "INFO"})
    try:
        handler.emit(record)  # 101 + 100 = 201 characters
        assert not (tmp_path / "gateway.log.1").exists()
        handler.emit(record)  # 301 >= 300: the file is rotated first
        assert (tmp_path / "gateway.log.1").read_text() == "x" * 100 + "\n" + "y" * 99 + "\n"
        assert path.read_text() == "y" * 99 + "\n"
        for _ in range(5):  # two lines per file from here: rotated at every other line
            handler.emit(record)
    finally:
        handler.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gateway.log", "gateway.log.1", "gateway.log.2"]
    assert {stat.S_IMODE(os.stat(p).st_mode) for p in tmp_path.iterdir()} == {0o600}
    assert path.read_text() == ("y" * 99 + "\n") * 2


def test_a_home_whose_path_is_not_utf8_is_logged_escaped_without_tracebacks(tmp_path):
    """A HERMES_HOME named in Latin-1 (`café` as the bytes c a f 0xE9): the chat answers, stderr
    stays empty and gateway.log names the path with the byte escaped (docs/operations.md §4)."""
    home = tmp_path / b"caf\xe9".decode("utf-8", "surrogateescape")
    code, out, err = run(["chat"], gateway_env(home), tmp_path, stdin="hello\n")
    assert (code, out, err) == (0, "echo: hello\n", "")
    log = (home / "gateway.log").read_text(encoding="utf-8")
    assert f"state.db {tmp_path}/caf\\udce9/state.db: applying migration 0001_initial.sql" in log


class _FullDisk:
    """A log stream on a full disk: the line is buffered, its flush fails with ENOSPC."""

    def write(self, text):
        return len(text)

    def flush(self):
        import errno

        raise OSError(errno.ENOSPC, "No space left on device")

    def close(self):
        self.flush()


def test_a_full_disk_under_gateway_log_is_one_stderr_line_not_a_traceback_per_record(tmp_path, capsys):
    """docs/operations.md §4: every stderr record is one line. A gateway.log that cannot be
    written is said once (naming the file and the reason), then again only after it could be
    written meanwhile."""
    from hermes_core.cli.common import PrivateRotatingFileHandler

    path = tmp_path / "gateway.log"
    handler = PrivateRotatingFileHandler(path, maxBytes=5_000_000, backupCount=3, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(message)s"))

    def record(text):
        return logging.makeLogRecord({"msg": text, "levelno": logging.INFO, "levelname": "INFO"})

    try:
        handler.emit(record("before"))
        handler.stream.close()
        handler.stream = _FullDisk()
        handler.emit(record("lost 1"))
        handler.stream = _FullDisk()  # still full when the file is reopened
        handler.emit(record("lost 2"))
        warned = (f"hermes-gateway: WARNING: {path} cannot be written (No space left on device): "
                  "log lines are lost until it can be\n")
        assert capsys.readouterr().err == warned
        handler.emit(record("after"))  # room again: written, and a new failure is said again
        handler.stream.flush()
        handler.stream = _FullDisk()
        handler.emit(record("lost 3"))
        assert capsys.readouterr().err == warned
    finally:
        handler.close()
    assert path.read_text() == "before\nafter\n"


def _failed(message: str, exc: BaseException) -> logging.LogRecord:
    try:
        raise exc
    except BaseException:
        import sys

        return logging.LogRecord("hermes_core.pipeline.runner", logging.ERROR, __file__, 1, message,
                                 ("agent:main:local:dm:terminal",), sys.exc_info())


def test_a_gateway_log_that_cannot_be_opened_is_said_once_rather_than_the_gateway_logging_nowhere(tmp_path):
    # docs/operations.md §4: gateway.log that cannot be written is said on stderr, naming the file
    # and the reason; a file another user owns, or a directory in its place, opened at start,
    # must not leave the gateway without its log and silent about it. The chat goes on.
    home = tmp_path / "home"
    code, out, _ = run(["chat"], gateway_env(home), tmp_path, stdin="one\n")
    assert (code, out) == (0, "echo: one\n")
    (home / "gateway.log").unlink()
    (home / "gateway.log").mkdir()
    code, out, err = run(["chat"], gateway_env(home), tmp_path, stdin="two\nthree\n")
    assert (code, out, err) == (0, "echo: two\necho: three\n",
                                f"hermes-gateway: WARNING: {home / 'gateway.log'} cannot be written (Is a directory): "
                                "log lines are lost until it can be\n")


def test_a_terminal_error_line_names_what_was_raised_without_the_traceback():
    """`log.exception("job failed in %s", key)` on stderr: one line ending with the exception
    the traceback in gateway.log ends with."""
    import sqlite3

    from hermes_core.cli.common import _OneLineFormatter

    formatter = _OneLineFormatter("hermes-gateway: %(levelname)s: %(message)s")
    record = _failed("job failed in %s", sqlite3.DatabaseError("database disk image is malformed"))
    assert formatter.format(record) == ("hermes-gateway: ERROR: job failed in agent:main:local:dm:terminal: "
                                        "sqlite3.DatabaseError: database disk image is malformed")
    two_lines = _failed("job failed in %s", ValueError("first\nsecond"))
    assert formatter.format(two_lines) == ("hermes-gateway: ERROR: job failed in agent:main:local:dm:terminal: "
                                           "ValueError: first second")
    plain = logging.LogRecord("x", logging.WARNING, __file__, 1, "no exception here", (), None)
    assert formatter.format(plain) == "hermes-gateway: WARNING: no exception here"


def test_the_terminal_line_shows_the_exception_as_redacted_for_the_log():
    from hermes_core.cli.common import _OneLineFormatter

    record = _failed("job failed in %s", RuntimeError("token sk-123 refused"))
    record.exc_text = "Traceback (most recent call last):\n  File \"x\", line 1\nRuntimeError: token [redacted] refused"
    formatter = _OneLineFormatter("%(levelname)s: %(message)s")
    assert formatter.format(record) == ("ERROR: job failed in agent:main:local:dm:terminal: "
                                        "RuntimeError: token [redacted] refused")
