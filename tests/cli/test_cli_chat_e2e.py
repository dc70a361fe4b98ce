"""`hermes-gateway` end to end in subprocesses with HERMES_HOME=tmp_path, bad input
included. The console script itself is run, as a user would."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from cli_helpers import SCRIPT, gateway_env

from hermes_core import __version__

pytestmark = pytest.mark.slow

ID = r"\d{8}_\d{6}_[0-9a-f]{8}"


def run_cli(home: Path, *args: str, stdin: str = "", **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([SCRIPT, *args], input=stdin, capture_output=True, text=True, timeout=60,
                          env=gateway_env(home, **extra))


def session_id_of(stdout: str) -> str:
    match = re.search(rf"^Session id: ({ID})$", stdout, re.M)
    assert match, stdout
    return match.group(1)


def assert_one_error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("hermes-gateway: error: ")
    return lines[0]


def test_version(tmp_path):
    result = run_cli(tmp_path, "--version")
    assert (result.returncode, result.stdout) == (0, f"hermes-gateway {__version__}\n")


def test_piped_chat_restart_continues_and_new_starts_a_new_session(tmp_path):
    first = run_cli(tmp_path, "chat", stdin="hello\n/status\n")
    assert first.returncode == 0, first.stderr
    assert first.stderr == ""
    sid = session_id_of(first.stdout)
    assert first.stdout == (
        "echo: hello\n"
        "Session key: agent:main:local:dm:terminal\n"
        f"Session id: {sid}\n"
        "Turns: 1\n"
        "Tokens: 3 (input 1, output 2)\n")
    assert (tmp_path / ".clean_shutdown").is_file()
    assert (tmp_path / "state.db").is_file()

    second = run_cli(tmp_path, "chat", stdin="again\n/status\n")
    assert second.returncode == 0, second.stderr
    # Same session id, the transcript grew: 2 turns; echo's input counts the history
    # ("hello", "echo: hello", "again" = 4) on top of the first turn's 1.
    assert second.stdout == (
        "echo: again\n"
        "Session key: agent:main:local:dm:terminal\n"
        f"Session id: {sid}\n"
        "Turns: 2\n"
        "Tokens: 9 (input 5, output 4)\n")

    third = run_cli(tmp_path, "chat", stdin="/new\n/status\n")
    new_sid = re.search(rf"^Started a new session. Session id: ({ID})$", third.stdout, re.M).group(1)
    assert new_sid != sid
    assert third.stdout.endswith(f"Session id: {new_sid}\nTurns: 0\nTokens: 0 (input 0, output 0)\n")

    fourth = run_cli(tmp_path, "chat", stdin="/status\n")
    assert session_id_of(fourth.stdout) == new_sid


def test_unknown_command_and_empty_lines(tmp_path):
    result = run_cli(tmp_path, "chat", stdin="\n   \n/bogus arg\n\n")
    assert result.returncode == 0, result.stderr
    # docs/behaviour.md §11: the commands that work here; /restart does not in the terminal chat
    assert result.stdout == ("Unknown command /bogus. Commands: /new, /reset, /stop, /queue, /resume, /title, /undo, "
                             "/retry, /compress, /status, /help.\n")


def test_help_lists_what_works_in_the_terminal(tmp_path):
    """docs/behaviour.md §11: in `chat` `/help` leaves out `/restart` (nothing would start the
    gateway again; it only answers so) and lists `/quit`, which the banner names."""
    result = run_cli(tmp_path, "chat", stdin="/help\n")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == (
        "Commands:\n"
        "/new [title] — starts a new session (the old transcript is kept), optionally titled\n"
        "/reset — the same as /new\n"
        "/stop — stops the current reply and background work (your next message starts a new session)\n"
        "/queue <message> — runs a message as its own turn after the current one\n"
        "/resume [number | id | title | label] — lists your recent sessions, or switches to one\n"
        "/title <text> — names the current session\n"
        "/undo [n] — removes your last n turns and their replies (default 1)\n"
        "/retry — removes your last turn and sends that message again\n"
        "/compress — replaces the older part of the conversation by a summary\n"
        "/status — shows the session key, session id, turns, tokens and queued messages\n"
        "/help — shows this help\n"
        "/quit — ends the input of this terminal (also /exit, or Ctrl-D): chat exits, run goes on running\n")


def test_quit_stops_reading(tmp_path):
    result = run_cli(tmp_path, "chat", stdin="one\n/quit\ntwo\n")
    assert result.stdout == "echo: one\n"


def test_over_long_message_is_refused_naming_the_limit(tmp_path):
    (tmp_path / "hermes.toml").write_text("[core]\nmax_input_chars = 5\n")
    result = run_cli(tmp_path, "chat", stdin="123456\n12345\n/status\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[:2] == [
        "Message refused: it is 6 characters long and the limit is 5 characters "
        "(core.max_input_chars). Please shorten it.",
        "echo: 12345"]
    assert "Turns: 1" in result.stdout.splitlines()


def test_a_line_the_store_refuses_gets_the_configured_error_notice(tmp_path):
    """docs/behaviour.md §0: the chat sees `[core] error_notice`, never the exception; the
    traceback is in gateway.log."""
    import sqlite3

    assert run_cli(tmp_path, "chat", stdin="hi\n").returncode == 0
    with sqlite3.connect(tmp_path / "state.db") as db:
        db.execute("CREATE TRIGGER t BEFORE INSERT ON inbound BEGIN SELECT RAISE(ABORT, 'x'); END")
    (tmp_path / "hermes.toml").write_text('[core]\nerror_notice = "Could not take that one."\n')
    result = run_cli(tmp_path, "chat", stdin="hello\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Could not take that one.\n"
    # The operator's terminal names what was raised, in one line; the user's chat does not.
    assert result.stderr == "hermes-gateway: ERROR: line not accepted by the gateway: sqlite3.IntegrityError: x\n"
    log = (tmp_path / "gateway.log").read_text()
    assert "line not accepted by the gateway\nTraceback (most recent call last):" in log
    assert "sqlite3.IntegrityError: x" in log


def test_a_misspelt_platform_table_is_named_with_the_installed_platforms(tmp_path):
    """`chat` runs the terminal only, but says what `run` and `doctor` say of a table no
    installed plugin provides (docs/configuration.md §2 `[platforms.<id>]`)."""
    (tmp_path / "hermes.toml").write_text("[platforms.telegrm]\nenabled = true\n")
    result = run_cli(tmp_path, "chat", stdin="hello\n")
    assert (result.returncode, result.stdout) == (0, "echo: hello\n")
    assert result.stderr == (
        "hermes-gateway: WARNING: [platforms.telegrm] is configured but no installed plugin provides it; ignored"
        " (installed platforms: discord, local, signal, slack, telegram, whatsapp, whatsapp_cloud;"
        " did you mean telegram?)\n")


def test_corrupt_config_file_is_one_line_naming_the_file(tmp_path):
    config = tmp_path / "hermes.toml"
    config.write_text("[core\nmax_input_chars = = 5\n")
    line = assert_one_error_line(run_cli(tmp_path, "chat", stdin="hello\n"))
    assert f"config file {config} is not valid TOML" in line
    assert config.read_text() == "[core\nmax_input_chars = = 5\n"  # nothing rewritten


def test_bad_config_value_names_the_key(tmp_path):
    (tmp_path / "hermes.toml").write_text('group_sessions_per_user = "maybe"\n')
    line = assert_one_error_line(run_cli(tmp_path, "chat", stdin="hello\n"))
    assert "'group_sessions_per_user'" in line


def test_unreadable_config_file(tmp_path):
    (tmp_path / "hermes.toml").mkdir()  # a directory where the file should be: cannot be read
    line = assert_one_error_line(run_cli(tmp_path, "chat", stdin="hello\n"))
    assert line == (f"hermes-gateway: error: config file {tmp_path / 'hermes.toml'} cannot be read: "
                    "it is not a regular file")


def test_non_writable_home(tmp_path):
    if os.geteuid() == 0:
        home = Path("/sys")  # root bypasses mode bits; sysfs refuses new files even to root
    else:
        home = tmp_path / "ro"
        home.mkdir()
        home.chmod(0o500)
    line = assert_one_error_line(run_cli(home, "chat", stdin="hello\n"))
    assert line == f"hermes-gateway: error: HERMES_HOME {home} is not writable: Permission denied"


def test_home_that_is_a_file(tmp_path):
    home = tmp_path / "file"
    home.write_text("x")
    line = assert_one_error_line(run_cli(home, "chat", stdin="hello\n"))
    assert line == f"hermes-gateway: error: HERMES_HOME {home} exists and is not a directory"


@pytest.mark.parametrize("below", ["sub", "sub/deeper"])
def test_home_under_a_file_names_the_file_as_the_obstacle(tmp_path, below):
    (tmp_path / "afile").write_text("x")
    home = tmp_path / "afile" / below
    line = assert_one_error_line(run_cli(home, "chat", stdin="hello\n"))
    assert line == f"hermes-gateway: error: HERMES_HOME {home} cannot be created: {tmp_path / 'afile'} is not a directory"


def test_home_whose_existing_ancestor_refuses_it_names_that_ancestor():
    line = assert_one_error_line(run_cli(Path("/proc/nonexist/x"), "chat", stdin="hello\n"))
    assert line == ("hermes-gateway: error: HERMES_HOME /proc/nonexist/x cannot be created in /proc: "
                    "No such file or directory")


def test_state_db_that_is_a_directory_runs_degraded_and_keeps_it(tmp_path):
    (tmp_path / "state.db").mkdir()
    (tmp_path / "state.db" / "keep.txt").write_text("data")
    result = run_cli(tmp_path, "chat", stdin="hello\n/status\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("echo: hello\nSession key: agent:main:local:dm:terminal\n")
    assert "Turns: 1" in result.stdout.splitlines()
    [line] = result.stderr.splitlines()  # degraded mode is announced once, naming what is in the way
    assert line == (f"hermes-gateway: ERROR: state.db {tmp_path / 'state.db'} is a directory, not a file: move it "
                    f"away; running DEGRADED on an in-memory copy journaled to {tmp_path / 'sessions' / 'journal.jsonl'}"
                    " + {session_id}.jsonl transcripts")
    assert (tmp_path / "state.db" / "keep.txt").read_text() == "data"
    again = run_cli(tmp_path, "chat", stdin="/status\n")
    assert "Turns: 1" in again.stdout.splitlines()  # the degraded transcript persisted


def _chat_while_home_is_held(home):
    """The one error line of `chat` started on `home` while this process holds its lock (as a
    first gateway would)."""
    from hermes_core.store.home_lock import HomeLock

    lock = HomeLock(home)
    lock.acquire()
    try:
        return assert_one_error_line(run_cli(home, "chat", stdin="hello\n"))
    finally:
        lock.release()


def test_second_gateway_on_the_same_home_is_refused(tmp_path):
    line = _chat_while_home_is_held(tmp_path)
    assert f"HERMES_HOME {tmp_path} is in use by another gateway (pid {os.getpid()})" in line


def test_second_gateway_with_metrics_names_the_home_not_the_port(tmp_path):
    """docs/behaviour.md §3: a second gateway on the same home exits with one line naming the
    home. With `[metrics] enabled` its endpoints come up before the home lock is taken and find
    the first gateway's port taken; that used to be the only line ('[metrics] endpoints cannot
    listen on 127.0.0.1:N: Address already in use'), sending the operator after the port."""
    import socket

    pytest.importorskip("prometheus_client")

    with socket.socket() as taken:  # the first gateway's endpoints
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        (tmp_path / "hermes.toml").write_text(f"[metrics]\nenabled = true\nport = {port}\n")
        line = _chat_while_home_is_held(tmp_path)
        assert line == (f"hermes-gateway: error: HERMES_HOME {tmp_path} is in use by another gateway "
                        f"(pid {os.getpid()}); stop it or use a different HERMES_HOME")
        # without a gateway on the home, the port is what is wrong, and the line says so
        line = assert_one_error_line(run_cli(tmp_path, "chat", stdin="hello\n"))
        assert line == (f"hermes-gateway: error: [metrics] endpoints cannot listen on 127.0.0.1:{port}: "
                        "Address already in use")


def test_config_file_not_utf8(tmp_path):
    (tmp_path / "hermes.toml").write_bytes(b'a = "\xff\xfe"\n')
    line = assert_one_error_line(run_cli(tmp_path, "chat", stdin="hello\n"))
    assert f"config file {tmp_path / 'hermes.toml'} is not valid UTF-8 TOML" in line


def test_dotenv_not_utf8_is_named_not_the_config_file(tmp_path):
    # `.env` is read from the working directory; the home has no hermes.toml at all.
    work = tmp_path / "work"
    work.mkdir()
    (work / ".env").write_bytes(b"FOO=\xff\n")
    home = tmp_path / "home"
    result = subprocess.run([SCRIPT, "sessions", "list"], capture_output=True, text=True, timeout=60, cwd=work,
                            env=gateway_env(home))
    line = assert_one_error_line(result)
    assert line == (f"hermes-gateway: error: .env file {work / '.env'} is not valid UTF-8: "
                    "invalid start byte at byte 4")


def test_a_directory_in_place_of_clean_shutdown_is_one_line_per_start(tmp_path):
    # docs/behaviour.md §6 ".clean_shutdown": it can be neither read, removed nor written
    assert run_cli(tmp_path, "chat", stdin="hello\n").returncode == 0
    (tmp_path / ".clean_shutdown").unlink()
    (tmp_path / ".clean_shutdown").mkdir()
    for _ in range(2):  # the stop writes nothing over it, and the next start says the same
        result = run_cli(tmp_path, "chat", stdin="hello\n")
        assert (result.returncode, result.stdout) == (0, "echo: hello\n")
        assert result.stderr == (f"hermes-gateway: ERROR: {tmp_path / '.clean_shutdown'} is a directory, not a file: "
                                 "move it away; until then no clean stop can be recorded and every start runs "
                                 "crash recovery\n")
    assert (tmp_path / ".clean_shutdown").is_dir()


def test_a_directory_in_place_of_gateway_lock_stops_start_up_in_words(tmp_path):
    # docs/behaviour.md §3 "One gateway per home"
    (tmp_path / "gateway.lock").mkdir()
    line = assert_one_error_line(run_cli(tmp_path, "chat", stdin="hello\n"))
    assert line == (f"hermes-gateway: error: cannot take the home lock: {tmp_path / 'gateway.lock'} is a "
                    "directory, not a file: move it away")
    assert (tmp_path / "gateway.lock").is_dir()  # left for the operator to move


def test_unusable_state_db_and_sessions_dir_stop_start_up_with_one_line(tmp_path):
    (tmp_path / "state.db").mkdir()
    (tmp_path / "sessions").write_text("not a directory")
    line = assert_one_error_line(run_cli(tmp_path, "chat", stdin="hello\n"))
    assert line == (f"hermes-gateway: error: {tmp_path / 'sessions'} exists and is not a directory (the folder of "
                    "sessions.json): move it away")
    assert (tmp_path / "sessions").read_text() == "not a directory"  # nothing overwritten


def _typed_session(home: Path, keystrokes: list[str]) -> str:
    """Run `chat` on a pseudo-terminal; type each entry of `keystrokes` (raw keys, Enter
    included) once the prompt is back and every line typed so far has its echo."""
    import pty
    import select
    import time

    pid, fd = pty.fork()
    if pid == 0:
        os.execve(SCRIPT, [SCRIPT, "chat"], gateway_env(home))
    output, pending, sent, end = b"", list(keystrokes), 0, time.monotonic() + 60
    try:
        while time.monotonic() < end:
            if select.select([fd], [], [], 0.2)[0]:
                try:
                    chunk = os.read(fd, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                output += chunk
            if pending and output.endswith(b"> ") and output.count(b"echo: ") >= sent:
                os.write(fd, pending.pop(0).encode())
                sent += 1
    finally:
        os.waitpid(pid, 0)
        os.close(fd)
    return output.decode(errors="replace").replace("\r\n", "\n")


def _terminal_session(home: Path, lines: list[str]) -> str:
    """Run `chat` on a pseudo-terminal, typing each line (and Enter) once the prompt is back and
    every line typed so far has been answered; return the screen."""
    return _typed_session(home, [line + "\r" for line in lines])


def test_interactive_terminal_shows_banner_prompt_and_continues(tmp_path):
    first = _terminal_session(tmp_path, ["hello", "/quit"])
    assert first.startswith("hermes-gateway chat: new conversation. /help for commands, /quit to leave.\n> ")
    assert "echo: hello\n> " in first
    second = _terminal_session(tmp_path, ["/quit"])
    assert re.match(rf"hermes-gateway chat: continuing session {ID} \(1 turn\)\. "
                    r"/help for commands, /quit to leave\.\n> ", second), second


def test_terminal_chat_has_a_line_editor_history_and_arrows(tmp_path):
    # ↑ recalls the last line (readline history) instead of sending ESC [ A to the model;
    # ← moves the cursor so the inserted letter lands inside the word.
    screen = _typed_session(tmp_path, ["pelican\r", "\x1b[A\r", "hern\x1b[Do\r", "/quit\r"])
    assert screen.count("echo: pelican\n") == 2, screen
    assert "echo: heron\n" in screen
    result = run_cli(tmp_path, "sessions", "show", "agent:main:local:dm:terminal", "--json")
    import json

    contents = [m["content"] for m in json.loads(result.stdout)["messages"] if m["role"] == "user"]
    assert contents == ["pelican", "pelican", "heron"]


@pytest.mark.parametrize("io_encoding", [None, "utf-8:strict"])
def test_piped_input_with_one_invalid_utf8_byte_answers_every_line(tmp_path, io_encoding):
    """Bad input loses nothing already accepted (docs/behaviour.md §0): the byte 0xff in the
    second line becomes U+FFFD, is logged naming the line, and every line — the one before it
    included — is answered; exit code 0. `PYTHONIOENCODING=utf-8:strict` is what a normal UTF-8
    locale gives Python's stdin (the C locale is lenient on its own)."""
    extra = {"PYTHONIOENCODING": io_encoding} if io_encoding else {}
    result = subprocess.run([SCRIPT, "chat"], input=b"first\nsecond \xff bad\nthird\n", capture_output=True,
                            timeout=60, env=gateway_env(tmp_path, **extra))
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode() == "echo: first\necho: second \ufffd bad\necho: third\n"
    assert result.stderr.decode() == (
        "hermes-gateway: WARNING: input line 2 is not valid utf-8 (byte 8); undecodable bytes replaced by U+FFFD\n")


def test_chat_whose_output_is_closed_ends_and_the_next_start_answers_what_was_read(tmp_path):
    """`hermes-gateway chat | head -2`: once a reply cannot be written, the chat stops reading and
    ends (exit 0, one warning saying so) instead of running every line into a closed pipe; the
    lines it had accepted are answered at the next start, each once (docs/behaviour.md §5)."""
    home = tmp_path / "home"
    proc = subprocess.Popen([SCRIPT, "chat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=gateway_env(home), cwd=tmp_path)
    proc.stdin.write(b"".join(b"line %d\n" % n for n in range(1, 31)))
    proc.stdin.close()
    assert [proc.stdout.readline() for _ in range(2)] == [b"echo: line 1\n", b"echo: line 2\n"]
    proc.stdout.close()  # like `head -2` exiting
    assert proc.wait(60) == 0
    err = proc.stderr.read().decode()
    assert ("hermes-gateway: WARNING: the chat's output is closed (broken pipe); the chat ends, and the lines "
            "it accepted are answered at the next start\n") in err
    result = run_cli(home, "chat", stdin="next\n")
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert lines[-1] == "echo: next"
    numbers = [int(line.removeprefix("echo: line ")) for line in lines[:-1]]
    # A consecutive run after those the first chat wrote, each once.
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers))) and numbers[0] >= 3
    # The first chat stopped: only the turns begun before the stop closed the intake met the
    # closed pipe (a few, by timing); before, all 28 remaining lines ran and failed to be written.
    assert err.count("WARNING: delivery to agent:main:local:dm:terminal failed") <= 10, err
