"""`/undo`, `/retry` and `/compress` across a crash (docs/behaviour.md §11, §6): a process killed
with SIGKILL after the command changed the transcript never runs it a second time at the next
start — one `/undo` undoes one turn, one `/retry` answers its message once, one `/compress` is not
answered "Nothing to compress yet." for the summary it wrote — and the retried message is never
lost. The answer of `/undo` and `/compress` is a delivery obligation recorded with the change:
killed before it was sent, the next start sends it once, labelled. Real store (SQLite, and the
degraded engine where the ledger is concerned), real subprocess killed with SIGKILL."""

from __future__ import annotations

import signal
import sqlite3
from pathlib import Path

import pytest
from test_pipeline_ledger import ledger_rows, run_script


def active_transcript(home: Path) -> list[tuple[str, str]]:
    conn = sqlite3.connect(home / "state.db")
    try:
        return conn.execute("SELECT role, content FROM messages WHERE active = 1 ORDER BY id").fetchall()
    finally:
        conn.close()


def reply(text: str, to: str) -> dict:
    return {"chat": "100", "text": text, "reply_to": to}


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "degraded"])
async def test_undo_killed_before_its_answer_sends_that_answer_once_and_undoes_nothing_more(tmp_path, backend):
    if backend == "degraded":
        (tmp_path / "state.db").mkdir()  # SQLite cannot open a directory: the journaled engine
    code, sent, err = await run_script(tmp_path, "kill-in-third-send", "hello:m1", "world:m2", "/undo:m3")
    assert code == -signal.SIGKILL, err
    assert sent == [reply("echo: hello", "m1"), reply("echo: world", "m2")]
    code, sent, err = await run_script(tmp_path, "serve")
    assert code == 0, err
    # The undo was done once, before the kill; its answer was owed in the same transaction and
    # may have reached the chat: it is sent once, labelled (docs/behaviour.md §6, §11).
    answer = 'Undid 1 turn(s) (2 message(s)), back to before "world".'
    assert sent == [reply("Recovered reply (may be a duplicate):\n" + answer, "m3")]
    assert ledger_rows(tmp_path)[-1] == (answer, "delivered", 2)
    code, sent, err = await run_script(tmp_path, "serve")
    assert (code, sent) == (0, []), err
    if backend == "sqlite":
        assert active_transcript(tmp_path) == [("user", "hello"), ("assistant", "echo: hello")]


@pytest.mark.slow
async def test_retry_killed_before_its_turn_ran_answers_the_message_once_at_the_next_start(tmp_path):
    code, sent, err = await run_script(tmp_path, "kill-in-second-send", "hello:m1", "/retry:m2")
    assert code == -signal.SIGKILL, err
    assert sent == [reply("echo: hello", "m1")]
    code, sent, err = await run_script(tmp_path, "serve")
    assert code == 0, err
    # The retried turn had begun (its message and turn marker are written with the rewind):
    # crash recovery answers it once (docs/behaviour.md §6), /retry is not run again.
    assert sent == [reply("echo: hello", "m2")]
    assert active_transcript(tmp_path) == [("user", "hello"), ("assistant", "echo: hello")]


@pytest.mark.slow
async def test_retry_killed_in_its_replys_send_resends_that_reply_once_and_retries_nothing_more(tmp_path):
    code, sent, err = await run_script(tmp_path, "kill-in-third-send", "hello:m1", "/retry:m2")
    assert code == -signal.SIGKILL, err
    assert sent == [reply("echo: hello", "m1"), reply('Retrying "hello".', "m2")]
    code, sent, err = await run_script(tmp_path, "serve")
    assert code == 0, err
    assert sent == [reply("Recovered reply (may be a duplicate):\necho: hello", "m2")]
    assert active_transcript(tmp_path) == [("user", "hello"), ("assistant", "echo: hello")]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "degraded"])
async def test_compress_killed_before_its_answer_sends_that_answer_once_and_compresses_once(tmp_path, backend):
    if backend == "degraded":
        (tmp_path / "state.db").mkdir()
    code, sent, err = await run_script(tmp_path, "kill-in-third-send", "hello:m1", "world:m2", "/compress:m3")
    assert code == -signal.SIGKILL, err
    assert sent == [reply("echo: hello", "m1"), reply("echo: world", "m2")]
    code, sent, err = await run_script(tmp_path, "serve")
    assert code == 0, err
    # The compression was done once, before the kill, with its answer owed: the next start sends
    # that answer once, labelled, and neither compresses again nor says "Nothing to compress yet.".
    answer = "Compressed the conversation: 2 earlier message(s) summarised, 2 kept as they were."
    assert sent == [reply("Recovered reply (may be a duplicate):\n" + answer, "m3")]
    assert ledger_rows(tmp_path)[-1] == (answer, "delivered", 2)
    code, sent, err = await run_script(tmp_path, "serve")
    assert (code, sent) == (0, []), err
    if backend == "sqlite":
        assert active_transcript(tmp_path) == [
            ("system", "Summary of the earlier conversation:\nSummary of 2 earlier message(s). The user wrote: hello"),
            ("user", "world"), ("assistant", "echo: world")]
