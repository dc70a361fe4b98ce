"""docs/behaviour.md §12, §6: a degraded run is killed with a reply recorded but not delivered
(its obligation 'attempting') and a second message still waiting; the operator restores
state.db; the merge into state.db is killed with SIGKILL at each of its steps, then runs again
at the next start. Whatever the step: the reply reaches the chat exactly once, with the literal
"Recovered reply (may be a duplicate):" notice (it was being sent at the kill), the waiting
message is answered exactly once, every message is in the transcript once, and a further start
owes nothing. Real subprocesses, real SIGKILL, real SQLite and journal files."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import sqlite3
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPT = str(Path(__file__).with_name("crash_gateway_script.py"))

# Opens the store on HOME (state.db healthy again, the journal waiting) and kills itself with
# SIGKILL at one step of the merge: when the SQL statement starting with POINT begins (the
# merge's transaction), before the journal is sealed (`seal`), or at the N-th file move
# (`move:N`, setting the journal's files aside).
MERGE_KILLER = textwrap.dedent("""
    import asyncio, os, signal, sys
    from pathlib import Path
    from hermes_core.settings import GatewayConfig
    from hermes_core.store import SessionStore, db, merge

    home, point = Path(sys.argv[1]), sys.argv[2]

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    if point == "seal":
        merge.seal_journal = lambda path, damaged=(): die()
    elif point.startswith("move:"):
        moves, real_replace = [0], os.replace
        def replace(src, dst):
            moves[0] += 1
            if moves[0] == int(point[5:]):
                die()
            return real_replace(src, dst)
        os.replace = replace
    else:
        configure = db.Database._configure
        async def traced(self, conn):
            await configure(self, conn)
            await conn.set_trace_callback(lambda sql: die() if sql.lstrip().startswith(point) else None)
        db.Database._configure = traced

    async def main():
        config = GatewayConfig(home=home, platforms={"testchat": {"allow_all": True}})
        async with SessionStore(config.sessions_dir, config):
            pass

    asyncio.run(main())
""")

KILL_POINTS = ["BEGIN IMMEDIATE", "INSERT INTO sessions", "INSERT INTO routes", "INSERT INTO inbound",
               "INSERT INTO delivery_obligations", "INSERT INTO messages", "INSERT INTO meta", "COMMIT", "seal",
               "move:1", "move:2"]


async def run(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(sys.executable, *args, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode, out.decode(), err.decode()


async def gateway(home: Path, mode: str, *messages: str) -> tuple[int, list[dict], str]:
    code, out, err = await run(SCRIPT, str(home), mode, *messages)
    return code, [json.loads(line) for line in out.splitlines()], err


@pytest.fixture(scope="module")
def degraded_home(tmp_path_factory) -> Path:
    """A home whose degraded run died sending the reply to "hello" with "later" waiting, and
    whose state.db the operator has restored."""
    home = tmp_path_factory.mktemp("degraded") / "home"

    async def prepare() -> None:
        assert (await gateway(home, "serve", "first:m0"))[0] == 0
        shutil.copy(home / "state.db", home.parent / "saved.db")
        (home / "state.db").write_bytes(b"not a database" * 100)
        code, sent, err = await gateway(home, "kill-in-send-queued", "hello:m1", "later:m2")
        assert code == -signal.SIGKILL, err
        assert sent == []
        shutil.copy(home.parent / "saved.db", home / "state.db")
    asyncio.run(prepare())
    assert (home / "sessions" / "journal.jsonl").is_file()
    return home


def transcript(home: Path) -> list[tuple[str, str]]:
    conn = sqlite3.connect(home / "state.db")
    try:
        return conn.execute("SELECT role, content FROM messages WHERE active = 1 ORDER BY id").fetchall()
    finally:
        conn.close()


@pytest.mark.parametrize("point", ["no kill"] + KILL_POINTS)
async def test_merge_killed_at_any_step_then_merged_again_delivers_everything_once(degraded_home, tmp_path, point):
    home = tmp_path / "home"
    shutil.copytree(degraded_home, home)
    if point != "no kill":
        code, _, err = await run("-c", MERGE_KILLER, str(home), point)
        assert code == -signal.SIGKILL, f"the merge never reached {point!r}: {err}"

    code, sent, err = await gateway(home, "serve")
    assert code == 0, err
    assert sent == [
        {"chat": "100", "text": "Recovered reply (may be a duplicate):\necho: hello", "reply_to": "m1"},
        {"chat": "100", "text": "echo: later", "reply_to": "m2"}]
    assert transcript(home) == [("user", "first"), ("assistant", "echo: first"), ("user", "hello"),
                                ("assistant", "echo: hello"), ("user", "later"), ("assistant", "echo: later")]
    assert not (home / "sessions" / "journal.jsonl").exists()

    # nothing is owed any more, and a redelivery of either message is not answered again
    code, sent, err = await gateway(home, "serve", "hello:m1", "later:m2")
    assert (code, sent) == (0, []), err
    assert len(transcript(home)) == 6
