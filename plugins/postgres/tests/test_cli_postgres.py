"""The admin commands on a home whose store is PostgreSQL (docs/operations.md §5): there is no
state.db there, the database `[store] dsn` names is the state."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

GATEWAY = str(Path(sys.executable).with_name("hermes-gateway"))


def gateway(args: list[str], home: Path, dsn: str, stdin: str | None = None) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("HERMES_")}
    env.update(HERMES_HOME=str(home), HERMES_STORE__BACKEND="postgres", HERMES_STORE__DSN=dsn)
    done = subprocess.run([GATEWAY, *args], env=env, input=stdin, capture_output=True, text=True, timeout=60,
                          stdin=None if stdin is not None else subprocess.DEVNULL)
    return done.returncode, done.stdout, done.stderr


def test_sessions_commands_read_the_postgres_store(tmp_path, pg_dsn):
    home = tmp_path / "home"
    code, out, err = gateway(["chat"], home, pg_dsn, stdin="hello there\n")
    assert (code, out) == (0, "echo: hello there\n"), err
    assert not (home / "state.db").exists()
    code, out, err = gateway(["sessions", "list", "--json"], home, pg_dsn)
    assert code == 0, err
    [row] = json.loads(out)
    assert row["session_key"] == "agent:main:local:dm:terminal"
    code, out, err = gateway(["sessions", "show", row["session_id"], "--json"], home, pg_dsn)
    assert code == 0, err
    assert [(m["role"], m["content"]) for m in json.loads(out)["messages"]] == [
        ("user", "hello there"), ("assistant", "echo: hello there")]
    code, out, err = gateway(["sessions", "search", "hello", "--json"], home, pg_dsn)
    assert (code, [h["session_id"] for h in json.loads(out)]) == (0, [row["session_id"]] * 2), err
    code, out, err = gateway(["sessions", "export", row["session_id"]], home, pg_dsn)
    assert (code, [json.loads(line)["content"] for line in out.splitlines()]) == (
        0, ["hello there", "echo: hello there"]), err


def test_what_is_built_for_state_db_only_says_so_in_one_line(tmp_path, pg_dsn):
    home = tmp_path / "home"
    assert gateway(["chat"], home, pg_dsn, stdin="hello\n")[0] == 0
    code, out, err = gateway(["sessions", "list", "--all"], home, pg_dsn)
    assert (code, out, err) == (2, "", "hermes-gateway: error: listing every stored session (--all) is built for "
                                      "the SQLite store (state.db) only\n")


def _doctor(home: Path, dsn: str) -> tuple[int, dict[str, dict]]:
    code, out, err = gateway(["doctor", "--json"], home, dsn)
    assert err == ""
    return code, {row["check"]: row for row in json.loads(out)}


def test_doctor_opens_the_postgres_store_instead_of_looking_for_state_db(tmp_path, pg_dsn, pg_cluster):
    home = tmp_path / "home"
    assert gateway(["chat"], home, pg_dsn, stdin="hello\n")[0] == 0
    code, checks = _doctor(home, pg_dsn)
    database = pg_dsn.split("dbname=")[1].split()[0]
    assert code == 0
    assert checks["store"] == {"check": "store", "status": "ok",
                               "detail": f"postgres: 127.0.0.1:{pg_cluster.port}/{database}"}
    assert "state.db" not in checks and "leftovers" not in checks


def test_doctor_fails_on_an_unreachable_postgres_store_naming_it(tmp_path, pg_cluster):
    home = tmp_path / "home"
    home.mkdir()
    dsn = f"postgresql://postgres:s3cret-pw@127.0.0.1:{pg_cluster.port}/absent_db?connect_timeout=2"
    code, checks = _doctor(home, dsn)
    assert code == 1
    assert checks["store"]["status"] == "fail"
    assert checks["store"]["detail"].startswith(f"PostgreSQL store 127.0.0.1:{pg_cluster.port}/absent_db cannot "
                                                "be reached: ")
    assert "s3cret-pw" not in checks["store"]["detail"]
    assert "state.db" not in checks


async def test_a_second_chat_on_the_store_says_it_waits_for_the_terminal_another_replica_holds(tmp_path, pg_dsn):
    """The terminal is a single-receiver platform (docs/adapters.md §6): a second `chat` on the
    same database reads nothing while another replica receives for it. It says so on its first
    sweep, instead of sitting silent, and answers once the first one has stopped."""
    import asyncio

    def start(home: Path) -> "asyncio.Future":
        env = {k: v for k, v in os.environ.items() if not k.upper().startswith("HERMES_")}
        env.update(HERMES_HOME=str(home), HERMES_STORE__BACKEND="postgres", HERMES_STORE__DSN=pg_dsn)
        return asyncio.create_subprocess_exec(GATEWAY, "chat", env=env, stdin=asyncio.subprocess.PIPE,
                                              stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)

    first = await start(tmp_path / "a")
    first.stdin.write(b"hello\n")
    await first.stdin.drain()
    assert await asyncio.wait_for(first.stdout.readline(), 60) == b"echo: hello\n"
    second = await start(tmp_path / "b")
    second.stdin.write(b"hi\n")
    await second.stdin.drain()
    try:
        assert await asyncio.wait_for(second.stderr.readline(), 30) == (
            b"hermes-gateway: WARNING: another replica receives for local; this replica starts receiving for it "
            b"when that one stops (its ingress lease runs out)\n")
    finally:
        first.stdin.close()
        await asyncio.wait_for(first.wait(), 60)
    assert await asyncio.wait_for(second.stdout.readline(), 60) == b"echo: hi\n"
    second.stdin.close()
    assert await asyncio.wait_for(second.wait(), 60) == 0


async def test_status_after_a_sigkill_says_a_replica_takes_the_sessions_over(tmp_path, pg_dsn):
    """docs/operations.md §2: on a server store the start runs no recovery of its own; the
    replica that takes the killed one's sessions over (once their leases run out) does."""
    import asyncio
    import signal

    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("HERMES_")}
    env.update(HERMES_HOME=str(home), HERMES_STORE__BACKEND="postgres", HERMES_STORE__DSN=pg_dsn)
    chat = await asyncio.create_subprocess_exec(GATEWAY, "chat", env=env, stdin=asyncio.subprocess.PIPE,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    chat.stdin.write(b"hello\n")
    await chat.stdin.drain()
    assert await asyncio.wait_for(chat.stdout.readline(), 60) == b"echo: hello\n"
    for _ in range(600):  # its first status snapshot
        if (home / "status.json").exists():
            break
        await asyncio.sleep(0.05)
    chat.send_signal(signal.SIGKILL)
    await chat.wait()
    code, out, err = gateway(["status"], home, pg_dsn)
    assert (code, err) == (3, "")
    assert out.splitlines()[1:] == ["it did not stop cleanly: whichever replica of its store takes its sessions over "
                                    "(once their leases run out) recovers any turns and replies it left unfinished"]


async def test_a_chat_that_loses_the_terminals_ingress_lease_goes_on_once_it_holds_it_again(tmp_path, pg_dsn):
    """A database blip or a pause past the lease makes the replica lose `ingress:local`; it stops
    reading the terminal (docs/adapters.md §6) and starts again once it holds the lease again.
    The chat used to end there, exit code 0, with the lines typed next never read."""
    import asyncio

    import psycopg

    home = tmp_path / "home"
    home.mkdir()
    (home / "hermes.toml").write_text('[store]\nbackend = "postgres"\nlease_ttl_s = 2\npoll_interval_s = 0.2\n')
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("HERMES_")}
    env.update(HERMES_HOME=str(home), HERMES_STORE__DSN=pg_dsn)
    chat = await asyncio.create_subprocess_exec(GATEWAY, "chat", env=env, stdin=asyncio.subprocess.PIPE,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    chat.stdin.write(b"one\n")
    await chat.stdin.drain()
    assert await asyncio.wait_for(chat.stdout.readline(), 60) == b"echo: one\n"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # another holder, for 2 s
        conn.execute("UPDATE session_leases SET holder = 'elsewhere', token = token + 1, "
                     "expires_at = now() + interval '2 seconds' WHERE session_key = 'ingress:local'")
    lost = b"hermes-gateway: ERROR: lost the ingress lease of local; this replica stops receiving for it\n"
    back = b"hermes-gateway: WARNING: this replica now receives for local (its ingress lease)\n"
    seen = []
    while back not in seen or lost not in seen:
        seen.append(await asyncio.wait_for(chat.stderr.readline(), 30))
        assert seen[-1], (chat.returncode, seen)
    assert chat.returncode is None  # still running
    chat.stdin.write(b"two\n")
    await chat.stdin.drain()
    assert await asyncio.wait_for(chat.stdout.readline(), 30) == b"echo: two\n"
    chat.stdin.close()
    assert await asyncio.wait_for(chat.wait(), 60) == 0
