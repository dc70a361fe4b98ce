"""What a degraded run writes is merged into SQLite when state.db opens again (docs/behaviour.md §0
"nothing accepted is ever lost"): end to end with the installed
`hermes-gateway chat` as real subprocesses, and with real store instances."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_core.model import SessionSource
from hermes_core.settings import GatewayConfig
from hermes_core.store import SessionStore
from hermes_core.store.journal import JOURNAL_FILE_NAME, read_journal

SCRIPT = str(Path(sys.executable).parent / "hermes-gateway")
LOCAL_KEY = "agent:main:local:dm:terminal"


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("HERMES_")}
    env["HERMES_HOME"] = str(home)
    return env


def _cli(home: Path, args: list[str], stdin: str = "") -> tuple[int, str, str]:
    proc = subprocess.run([SCRIPT, *args], env=_env(home), cwd=home.parent, input=stdin,
                          capture_output=True, text=True, timeout=60)
    return proc.returncode, proc.stdout, proc.stderr


def _corrupt(db: Path) -> None:
    db.write_bytes(b"this is not an SQLite database" * 100)


def test_chat_healthy_then_degraded_then_restored_keeps_every_turn(tmp_path):
    home = tmp_path / "home"
    assert _cli(home, ["chat"], "first\n")[:2] == (0, "echo: first\n")
    saved = tmp_path / "saved.db"
    shutil.copy(home / "state.db", saved)
    first_sid = json.loads(_cli(home, ["sessions", "list", "--json"])[1])[0]["session_id"]

    _corrupt(home / "state.db")
    code, out, err = _cli(home, ["chat"], "second\n/new\nthird\n")
    assert code == 0
    # (busy-input notices such as "Queued (position 2)." may come between; the replies are in order)
    replies = [line for line in out.splitlines() if line.startswith("echo: ")]
    assert replies == ["echo: second", "echo: third"]
    new_sid = re.search(r"Session id: (\S+)$", out, re.M).group(1)
    assert err.splitlines() == [
        f"hermes-gateway: ERROR: state.db {home / 'state.db'} cannot be opened: file is not a database; "
        f"running DEGRADED on an in-memory copy journaled to {home / 'sessions' / 'journal.jsonl'} + "
        f"{{session_id}}.jsonl transcripts"]
    assert (home / "sessions" / JOURNAL_FILE_NAME).is_file()

    shutil.copy(saved, home / "state.db")  # the operator restores the database
    code, out, err = _cli(home, ["chat"], "fourth\n")
    assert (code, out) == (0, "echo: fourth\n")
    assert err == ("hermes-gateway: WARNING: state.db is back: merged 1 session(s) and 4 message(s) "
                   "written while running degraded\n")
    assert not (home / "sessions" / JOURNAL_FILE_NAME).exists()

    rows = json.loads(_cli(home, ["sessions", "list", "--json"])[1])
    assert [(r["session_key"], r["session_id"]) for r in rows] == [(LOCAL_KEY, new_sid)]
    old = json.loads(_cli(home, ["sessions", "show", first_sid, "--json"])[1])["messages"]
    assert [m["content"] for m in old] == ["first", "echo: first", "second", "echo: second"]
    new = json.loads(_cli(home, ["sessions", "show", new_sid, "--json"])[1])["messages"]
    assert [m["content"] for m in new] == ["third", "echo: third", "fourth", "echo: fourth"]
    # searchable like any message, and the next start does not merge again
    hits = json.loads(_cli(home, ["sessions", "search", "third", "--json"])[1])
    assert [h["session_id"] for h in hits] == [new_sid, new_sid]
    # the journal and the transcripts it wrote are set aside together, for audit
    assert sorted(p.name for p in (home / "sessions" / "merged").glob("*/*")) == sorted(
        [f"{first_sid}.jsonl", f"{new_sid}.jsonl", "journal.jsonl"])
    code, out, err = _cli(home, ["chat"], "fifth\n")
    assert (code, out, err) == (0, "echo: fifth\n", "")


def _config(home: Path) -> GatewayConfig:
    return GatewayConfig(home=home)


async def _sessions_then_degraded(config: GatewayConfig, tmp_path: Path, *sources: SessionSource) -> tuple[list, Path]:
    """A healthy state.db with a session per source, saved aside, then damaged: the next open runs
    degraded, and copying the saved file back makes the one after it merge. Returns the entries
    and the saved copy."""
    async with SessionStore(config.sessions_dir, config) as store:
        entries = [await store.get_or_create_session(source) for source in sources]
    saved = tmp_path / "saved.db"
    shutil.copy(config.db_path, saved)
    _corrupt(config.db_path)
    return entries, saved


async def test_merge_is_idempotent_and_skips_rewound_lines(tmp_path):
    home = tmp_path / "home"
    config = _config(home)
    source = SessionSource(platform="telegram", chat_id="42", user_id="7")
    async with SessionStore(config.sessions_dir, config) as store:
        entry = await store.get_or_create_session(source)
        await store.append_to_transcript(entry.session_id, {"role": "user", "content": "before",
                                                            "timestamp": "2026-01-01T00:00:00+00:00"})
    saved = tmp_path / "saved.db"
    shutil.copy(config.db_path, saved)
    _corrupt(config.db_path)
    async with SessionStore(config.sessions_dir, config) as store:
        assert store.degraded
        again = await store.get_or_create_session(source)
        assert again.session_id == entry.session_id
        for text in ("kept one", "rewound one"):
            await store.append_to_transcript(entry.session_id, {"role": "user", "content": text})
        assert (await store.rewind_session(entry.session_id, 1)) is not None
    shutil.copy(saved, config.db_path)
    journal = config.sessions_dir / JOURNAL_FILE_NAME
    assert journal.is_file()
    async with SessionStore(config.sessions_dir, config) as store:
        assert not store.degraded
        assert [m["content"] for m in await store.load_transcript(entry.session_id)] == ["before", "kept one"]
    assert not journal.exists()
    # a crash after the merge committed but before its files were set aside: the next open
    # finds them again and adds nothing
    (aside,) = (config.sessions_dir / "merged").iterdir()
    assert [stat.S_IMODE(p.stat().st_mode) for p in (aside.parent, aside)] == [0o700, 0o700]  # transcripts
    for path in aside.iterdir():
        path.rename(config.sessions_dir / path.name)
    async with SessionStore(config.sessions_dir, config) as store:
        assert [m["content"] for m in await store.load_transcript(entry.session_id)] == ["before", "kept one"]
        assert await store._b().db.fetchval("SELECT COUNT(*) FROM messages") == 3  # the rewound one kept inactive
    assert not journal.exists()


async def test_read_only_open_neither_merges_nor_moves_the_journal(tmp_path):
    home = tmp_path / "home"
    config = _config(home)
    _entries, saved = await _sessions_then_degraded(config, tmp_path, SessionSource(platform="telegram", chat_id="1"))
    async with SessionStore(config.sessions_dir, config) as store:
        await store.get_or_create_session(SessionSource(platform="telegram", chat_id="2"))
    shutil.copy(saved, config.db_path)
    journal = config.sessions_dir / JOURNAL_FILE_NAME
    text = journal.read_text()
    async with SessionStore(config.sessions_dir, config, lock_home=False) as store:
        assert [e.session_key for e in await store.list_sessions()] == ["agent:main:telegram:dm:1"]
    assert journal.read_text() == text


async def test_sessions_begun_and_ended_while_degraded_exist_in_sqlite_after_the_merge(tmp_path, caplog):
    import logging

    config = _config(tmp_path / "home")
    source = SessionSource(platform="telegram", chat_id="42", user_id="7")
    (first,), saved = await _sessions_then_degraded(config, tmp_path, source)
    async with SessionStore(config.sessions_dir, config) as store:
        middle = await store.reset_session(first.session_key)
        await store.append_to_transcript(middle.session_id, {"role": "user", "content": "in the middle"})
        last = await store.reset_session(first.session_key)
    shutil.copy(saved, config.db_path)
    caplog.set_level(logging.WARNING, logger="hermes_core.store.session_store")
    async with SessionStore(config.sessions_dir, config) as store:
        # the summary counts the sessions the degraded run began (two), not the routes it moved (one)
        assert caplog.records[-1].getMessage() == (
            "state.db is back: merged 2 session(s) and 1 message(s) written while running degraded")
        assert (await store.get_entry(first.session_key)).session_id == last.session_id
        info = await store.session_info(middle.session_id)
        assert (info["session_key"], info["end_reason"], info["parent_session_id"]) == (
            first.session_key, "reset", first.session_id)
        assert (await store.session_info(first.session_id))["end_reason"] == "reset"
        assert (await store.session_info(last.session_id))["ended_at"] is None
        assert [m["content"] for m in await store.load_transcript(middle.session_id)] == ["in the middle"]
        found = await store.lookup_by_session_id(middle.session_id)
        assert found is not None and found.session_id == middle.session_id


async def test_files_of_an_older_gateways_degraded_run_are_named_not_merged(tmp_path, caplog):
    import logging

    config = _config(tmp_path / "home")
    config.sessions_dir.mkdir(parents=True)
    (config.sessions_dir / ".degraded-since").write_text("1767225600.0\n")
    (config.sessions_dir / "inbound.jsonl").write_text('{"op": "accept", "id": 1}\n')
    caplog.set_level(logging.WARNING, logger="hermes_core.store.session_store")
    async with SessionStore(config.sessions_dir, config) as store:
        assert not store.degraded
    sessions = config.sessions_dir
    assert [r.getMessage() for r in caplog.records] == [
        f"{sessions} holds the files of a degraded run of an older gateway (.degraded-since); they are not "
        f"merged automatically: `hermes-gateway sessions import {sessions}` takes its routes and the "
        f"transcripts of sessions state.db lacks; then delete {sessions / '.degraded-since'}"]
    assert (sessions / "inbound.jsonl").read_text() == '{"op": "accept", "id": 1}\n'


async def test_a_damaged_transcript_merges_what_can_be_read_and_is_kept_aside(tmp_path, caplog):
    # docs/behaviour.md §12: the merge keeps what can be read, keeps the damaged file aside, says
    # so in one log line and in doctor; the other sessions merge as usual.
    import logging

    from hermes_core.ops.doctor import check_leftovers

    config = _config(tmp_path / "home")
    a = SessionSource(platform="telegram", chat_id="1", user_id="1")
    b = SessionSource(platform="telegram", chat_id="2", user_id="2")
    (ea, eb), saved = await _sessions_then_degraded(config, tmp_path, a, b)
    async with SessionStore(config.sessions_dir, config) as store:
        for i in range(3):
            await store.append_to_transcript(ea.session_id, {"role": "user", "content": f"a{i}"})
            await store.append_to_transcript(eb.session_id, {"role": "user", "content": f"b{i}"})
    journal_id = read_journal(config.sessions_dir).journal_id
    transcript = config.sessions_dir / f"{ea.session_id}.jsonl"
    first, middle, last = transcript.read_bytes().splitlines()
    damaged = b"\n".join([first, middle[:20], last]) + b"\n"
    transcript.write_bytes(damaged)
    shutil.copy(saved, config.db_path)
    caplog.set_level(logging.WARNING)
    async with SessionStore(config.sessions_dir, config) as store:
        assert [m["content"] for m in await store.load_transcript(ea.session_id)] == ["a0", "a2"]
        assert [m["content"] for m in await store.load_transcript(eb.session_id)] == ["b0", "b1", "b2"]
    kept = config.sessions_dir / "damaged" / journal_id / f"{ea.session_id}.jsonl"
    assert kept.read_bytes() == damaged
    assert stat.S_IMODE(kept.parent.stat().st_mode) == 0o700
    assert sorted(p.name for p in (config.sessions_dir / "merged" / journal_id).iterdir()) == [
        f"{eb.session_id}.jsonl", "journal.jsonl"]
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR" and "running DEGRADED" not in r.getMessage()]
    assert errors == [
        f"degraded transcript of session {ea.session_id} is damaged: {transcript} lacks 1 line(s) of committed "
        f"transactions (unreadable line(s) 2); merged without the missing line(s), the file is kept as {kept} "
        "to recover them from (docs/behaviour.md §12)"]
    assert caplog.records[-1].getMessage() == (
        "state.db is back: merged 0 session(s) and 5 message(s) written while running degraded; 1 damaged "
        f"transcript(s) merged without their unreadable line(s), kept in {config.sessions_dir / 'damaged'}, see the log")
    (check,) = [c for c in check_leftovers(config) if c.name == "damaged transcripts"]
    assert (check.status, check.detail) == ("warn", f"1 degraded transcript(s) were merged without line(s) that could "
                                                    f"not be read: {kept}; recover what you can from them, then "
                                                    "delete them")


# Ways the record of a committed transaction is found damaged (docs/behaviour.md §12): cut short,
# or blanked as a partial overwrite or a filesystem repair leaves it (same length, no JSON left).
RECORD_DAMAGE = {"truncated": lambda line: line[:30],
                 "empty": lambda line: b"",
                 "whitespace": lambda line: b" " * len(line),
                 "NUL bytes": lambda line: b"\0" * len(line)}


@pytest.mark.parametrize("damage", RECORD_DAMAGE)
async def test_a_damaged_journal_record_is_not_merged_until_the_operator_repairs_or_removes_it(tmp_path, caplog,
                                                                                                damage):
    # docs/behaviour.md §12: an unreadable or blank journal line followed by the same run's
    # transactions is a committed record: the merge leaves state.db and the journal untouched and
    # says so; removing the line merges the rest.
    import logging

    from hermes_core.ops.doctor import check_leftovers

    config = _config(tmp_path / "home")
    a = SessionSource(platform="telegram", chat_id="1", user_id="1")
    (ea,), saved = await _sessions_then_degraded(config, tmp_path, a)
    async with SessionStore(config.sessions_dir, config) as store:
        for i in range(3):
            await store.append_to_transcript(ea.session_id, {"role": "user", "content": f"a{i}"})
    journal = config.sessions_dir / JOURNAL_FILE_NAME
    lines = journal.read_bytes().splitlines()
    lines[3] = RECORD_DAMAGE[damage](lines[3])  # the record of the transaction that wrote "a1"
    journal.write_bytes(b"\n".join(lines) + b"\n")
    damaged = journal.read_bytes()
    shutil.copy(saved, config.db_path)
    caplog.set_level(logging.ERROR)
    async with SessionStore(config.sessions_dir, config) as store:
        assert not store.degraded
        assert await store.load_transcript(ea.session_id) == []
    assert journal.read_bytes() == damaged
    assert caplog.records[-1].getMessage() == (
        f"merging the degraded journal {journal} into {config.db_path} failed (StoreError: {journal} line(s) 4 hold "
        "the damaged record of a committed transaction; repair the line, or remove it to merge the rest without it); "
        "retried at the next start")
    (check,) = [c for c in check_leftovers(config) if c.name == "degraded journal"]
    assert (check.status, check.detail) == ("warn", f"{journal} line(s) 4 hold the damaged record of a committed "
                                                    "transaction: it is not merged until the line is repaired, or "
                                                    "removed to merge the rest without it")
    del lines[3]  # the operator gives that transaction up
    journal.write_bytes(b"\n".join(lines) + b"\n")
    async with SessionStore(config.sessions_dir, config) as store:
        assert [m["content"] for m in await store.load_transcript(ea.session_id)] == ["a0", "a2"]
    assert not journal.exists()


async def test_a_journal_line_torn_by_a_crash_before_the_next_runs_lines_is_skipped(tmp_path):
    config = _config(tmp_path / "home")
    a = SessionSource(platform="telegram", chat_id="1", user_id="1")
    config.home.mkdir(parents=True)
    _corrupt(config.db_path)
    async with SessionStore(config.sessions_dir, config) as store:
        ea = await store.get_or_create_session(a)
        await store.append_to_transcript(ea.session_id, {"role": "user", "content": "kept"})
    journal = config.sessions_dir / JOURNAL_FILE_NAME
    with open(journal, "a") as fh:
        fh.write('{"tx": 99, "run": "gone", "pu')  # a crash cut this record short
    async with SessionStore(config.sessions_dir, config) as store:  # the next run starts a new line
        await store.append_to_transcript(ea.session_id, {"role": "user", "content": "after"})
    config.db_path.unlink()  # a new state.db: healthy again
    async with SessionStore(config.sessions_dir, config) as store:
        assert not store.degraded
        assert [m["content"] for m in await store.load_transcript(ea.session_id)] == ["kept", "after"]
    assert not journal.exists()


async def _one_degraded_message(config: GatewayConfig, tmp_path: Path) -> tuple:
    """A session made healthy, then "a0" written to it degraded. Returns its entry, the saved
    healthy state.db and the journal's lines (its header first)."""
    (ea,), saved = await _sessions_then_degraded(config, tmp_path, SessionSource(platform="telegram", chat_id="1"))
    async with SessionStore(config.sessions_dir, config) as store:
        await store.append_to_transcript(ea.session_id, {"role": "user", "content": "a0"})
    return ea, saved, (config.sessions_dir / JOURNAL_FILE_NAME).read_bytes().splitlines(keepends=True)


def _chat_after_two_turns_then_degraded(home: Path, stdin: str) -> str:
    """Two turns in a healthy `chat` on `home`, state.db damaged, then a `chat` typing `stdin`
    (degraded); returns what that one printed."""
    assert _cli(home, ["chat"], "one\ntwo\n")[0] == 0
    _corrupt(home / "state.db")
    code, out, _err = _cli(home, ["chat"], stdin)
    assert code == 0
    return out


def test_status_while_degraded_says_the_earlier_turns_are_not_counted(tmp_path):
    # docs/behaviour.md §11 (/status) and §12: a session begun before the degraded run has its
    # earlier turns in state.db; one begun while degraded is counted in full.
    out = _chat_after_two_turns_then_degraded(tmp_path / "home", "three\n/status\n/new\nfour\n/status\n")
    turns = [line for line in out.splitlines() if line.startswith("Turns: ")]
    assert turns == ["Turns: at least 1 (earlier ones cannot be counted right now)", "Turns: 1"]


def test_resume_while_degraded_never_lists_a_session_it_cannot_read_as_empty(tmp_path):
    # docs/behaviour.md §12: a transcript the degraded store cannot see whole is never answered
    # as empty; the session begun before the degraded run has its messages in state.db.
    out = _chat_after_two_turns_then_degraded(tmp_path / "home", "/new\nthree\n/resume\n")
    listed = [line.split(" — ")[0] + " — " + line.split(", ", 1)[1] for line in out.splitlines() if line[:3] in
              ("1. ", "2. ")]
    assert listed == ["1. three — 2 message(s) (current)",
                      "2. (cannot be read right now) — at least 0 message(s) (earlier ones cannot be read right now)"]


async def test_a_journal_id_that_is_not_32_hex_digits_is_refused_before_it_names_a_folder(tmp_path):
    # docs/behaviour.md §12: the id names sessions/merged/<id>; an id shaped like a path is a
    # damaged header, never a folder outside sessions/merged.
    import pytest

    from hermes_core.store.db import StoreError

    config = _config(tmp_path / "home")
    ea, saved, (header, *rest) = await _one_degraded_message(config, tmp_path)
    journal = config.sessions_dir / JOURNAL_FILE_NAME
    journal.write_bytes(b'{"journal": 1, "id": "../../outside", "created": "2026-12-07T00:00:00+00:00"}\n'
                        + b"".join(rest))
    shutil.copy(saved, config.db_path)
    with pytest.raises(StoreError) as refused:
        read_journal(config.sessions_dir)
    assert str(refused.value).startswith(
        f"{journal} line 1, the journal header, has an id that is not 32 hex digits ('../../outside'): the journal "
        "is neither merged nor rebuilt until the header is repaired.")
    async with SessionStore(config.sessions_dir, config) as store:
        assert await store.load_transcript(ea.session_id) == []
    assert journal.is_file() and not (tmp_path / "outside").exists()


async def test_a_damaged_journal_header_is_named_with_its_repair_and_nothing_is_merged_until_it_is_repaired(
        tmp_path, caplog):
    # docs/behaviour.md §12: line 1 is the header; its id keys the merge's record and the
    # merged/<id> folder, so it is never guessed at: the healthy start leaves state.db and the
    # journal untouched, the degraded start refuses, doctor says so, each naming line 1 and the repair.
    import logging

    import pytest

    from hermes_core.ops.doctor import check_leftovers
    from hermes_core.store.db import StoreError

    config = _config(tmp_path / "home")
    ea, saved, (header, *rest) = await _one_degraded_message(config, tmp_path)
    journal = config.sessions_dir / JOURNAL_FILE_NAME
    journal.write_bytes(header[:22] + b"\n" + b"".join(rest))  # {"journal":1,"id":"abc… cut short
    damaged = journal.read_bytes()
    expected = (
        f"{journal} line 1, the journal header, cannot be read (Unterminated string starting at: line 1 column 19 "
        '(char 18)): the journal is neither merged nor rebuilt until the header is repaired. A header is one line '
        '{"journal": 1, "id": "<journal id>", "created": "<time>"}: keep the id when all of its 32 lowercase hex '
        "digits can still be read (it keys the merge's record in state.db and names the sessions/merged/<id> "
        "folder); otherwise write a new one of 32 lowercase hex digits (`openssl rand -hex 16`), unless the journal "
        'holds a "merged" line: state.db has it already, so move it aside instead (docs/behaviour.md §12)')
    with pytest.raises(StoreError) as refused:  # still degraded: no rebuild from a journal of unknown id
        await SessionStore(config.sessions_dir, config).open()
    assert str(refused.value) == expected
    (check,) = [c for c in check_leftovers(config) if c.name == "degraded journal"]
    assert (check.status, check.detail) == ("warn", expected)
    shutil.copy(saved, config.db_path)
    caplog.clear()
    caplog.set_level(logging.WARNING)
    async with SessionStore(config.sessions_dir, config) as store:
        assert not store.degraded
        assert await store.load_transcript(ea.session_id) == []
    assert journal.read_bytes() == damaged
    assert [r.getMessage() for r in caplog.records if "journal" in r.getMessage()] == [
        f"merging the degraded journal {journal} into {config.db_path} failed (StoreError: {expected}); retried at "
        "the next start"]
    journal.write_bytes(header + b"".join(rest))  # repaired with its id
    async with SessionStore(config.sessions_dir, config) as store:
        assert [m["content"] for m in await store.load_transcript(ea.session_id)] == ["a0"]
    assert not journal.exists()
