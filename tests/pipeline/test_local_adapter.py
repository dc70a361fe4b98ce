"""The local platform adapter  driven through injected streams."""

from __future__ import annotations

import asyncio
import io
import os

import pytest

from hermes_core.platforms.local import LocalAdapter
from hermes_core.sdk.errors import SendError


async def _collect(text: str, **kw):
    events = []

    async def on_message(event):
        events.append(event)

    adapter = LocalAdapter(stdin=io.StringIO(text), stdout=io.StringIO(), user="alice",
                           on_message=on_message, **kw)
    await adapter.start()
    await asyncio.wait_for(adapter.wait_closed(), 10)
    await adapter.stop()
    return adapter, events


async def test_lines_become_events_in_order_until_quit():
    adapter, events = await _collect("first\r\n\n   \nsecond line\n/quit\nnever\n")
    # Blank lines are ignored  by the adapter itself, which just prompts again.
    assert [e.text for e in events] == ["first", "second line"]
    source = events[0].source
    assert (source.platform, source.chat_id, source.chat_type, source.user_id) == ("local", "terminal", "dm", "alice")
    assert events[0].message_id is None  # no platform ids: nothing to dedupe across restarts
    assert adapter.spec.name == "local" and adapter.spec.label == "Local terminal"
    assert adapter.spec.pii_safe is False


async def test_end_of_file_closes_and_send_writes_lines():
    adapter, events = await _collect("only\n")
    assert [e.text for e in events] == ["only"]
    await adapter.send(adapter.source, "reply one")
    await adapter.send(adapter.source, "reply two\n")
    assert adapter.stdout.getvalue() == "reply one\nreply two\n"


async def test_prompt_is_written_after_each_reply_when_set():
    out = io.StringIO()
    adapter = LocalAdapter(stdin=io.StringIO(""), stdout=out, user="alice", prompt="> ")
    adapter.write_prompt()
    await adapter.send(adapter.source, "hi")
    assert out.getvalue() == "> hi\n> "


async def test_undecodable_input_bytes_become_replacement_characters():
    """A Latin-1 byte on a UTF-8 stdin arrives as a lone surrogate (surrogateescape): the
    message is kept, with U+FFFD in place of the byte, instead of failing to store."""
    adapter, events = await _collect("caf\udce9 ok\n")
    assert [e.text for e in events] == ["caf\ufffd ok"]
    assert events[0].text.encode("utf-8") == b"caf\xef\xbf\xbd ok"


async def test_control_characters_are_shown_escaped_and_blank_lines_reprompt():
    out = io.StringIO()
    adapter = LocalAdapter(stdin=io.StringIO("\n"), stdout=out, user="alice", prompt="> ")
    await adapter.send(adapter.source, "echo: \x1b[2Jclear\tok\x07")
    assert out.getvalue() == "echo: \\x1b[2Jclear\tok\\x07\n> "
    out.seek(0)
    out.truncate()
    adapter.bind(lambda event: asyncio.sleep(0))
    await adapter.start()
    await asyncio.wait_for(adapter.wait_closed(), 10)
    await adapter.stop()
    # start prompt, the re-prompt after the blank line, then the newline that ends input
    assert out.getvalue() == "> > \n"


async def test_a_line_the_gateway_refuses_gets_the_failure_notice_not_the_error(caplog):
    """The store refused the line (docs/behaviour.md §0): the chat sees the bound notice, never
    the exception; the log has the exception with its traceback."""
    import sqlite3

    async def refuse(event):
        raise sqlite3.IntegrityError("x")

    seen = []

    def notice(source, error):
        seen.append((source.chat_id, type(error).__name__))
        return "Not now."

    out = io.StringIO()
    adapter = LocalAdapter(stdin=io.StringIO("hello\n"), stdout=out, user="alice")
    adapter.bind(refuse, failure_notice=notice)
    await adapter.start()
    await asyncio.wait_for(adapter.wait_closed(), 10)
    await adapter.stop()
    assert out.getvalue() == "Not now.\n"
    assert seen == [("terminal", "IntegrityError")]
    [record] = [r for r in caplog.records if r.name == "hermes_core.platforms.local"]
    assert record.getMessage() == "line not accepted by the gateway"
    assert record.exc_info[0] is sqlite3.IntegrityError


async def test_without_a_bound_notice_the_default_error_notice_is_sent():
    async def refuse(event):
        raise RuntimeError("secret detail")

    out = io.StringIO()
    adapter = LocalAdapter(stdin=io.StringIO("hello\n"), stdout=out, user="alice", on_message=refuse)
    await adapter.start()
    await asyncio.wait_for(adapter.wait_closed(), 10)
    await adapter.stop()
    assert out.getvalue() == "Sorry, this message could not be processed. Please try again later.\n"


class _ClosedPipe(io.StringIO):
    """An output whose reader went away (`hermes-gateway chat | head`)."""

    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")


async def test_a_closed_output_ends_the_chat_and_later_sends_write_nothing(caplog):
    read_end, write_end = os.pipe()  # an input that never ends by itself
    stdin = os.fdopen(read_end, "r")
    adapter = LocalAdapter(stdin=stdin, stdout=_ClosedPipe(), user="alice")
    await adapter.start()
    try:
        with pytest.raises(BrokenPipeError):
            await adapter.send(adapter.source, "reply one")
        assert adapter.output_closed is True
        await asyncio.wait_for(adapter.wait_closed(), 10)  # reading stopped, as at end of file
        with pytest.raises(SendError, match="^the terminal's output is closed$"):
            await adapter.send(adapter.source, "reply two")
        assert [r.getMessage() for r in caplog.records if r.name == "hermes_core.platforms.local"] == [
            "the chat's output is closed (broken pipe); the chat ends, and the lines it accepted are answered "
            "at the next start"]
    finally:
        await adapter.stop()
        os.close(write_end)


async def test_a_stop_and_start_pause_reading_without_ending_the_input_or_skipping_a_line():
    """A replica that loses the terminal's ingress lease stops the adapter and starts it again
    once it holds the lease (docs/adapters.md §6): the chat must go on, with every line typed
    meanwhile read then, in order; only the end of the input ends it."""
    events = []

    async def on_message(event):
        events.append(event.text)

    read_fd, write_fd = os.pipe()
    stdin = os.fdopen(read_fd, "r")
    adapter = LocalAdapter(stdin=stdin, stdout=io.StringIO(), user="alice", on_message=on_message)
    try:
        await adapter.start()
        os.write(write_fd, b"one\n")
        for _ in range(200):
            if events:
                break
            await asyncio.sleep(0.01)
        await adapter.stop()
        os.write(write_fd, b"two\nthree\n")  # typed while this replica does not receive
        await asyncio.sleep(0.2)
        assert events == ["one"]
        await adapter.start()
        for _ in range(200):
            if len(events) == 3:
                break
            await asyncio.sleep(0.01)
        assert events == ["one", "two", "three"]
        ended = asyncio.ensure_future(adapter.wait_input_ended())
        await asyncio.sleep(0.05)
        assert not ended.done()  # paused and resumed: the input goes on
        os.close(write_fd)
        write_fd = None
        await asyncio.wait_for(ended, 10)
    finally:
        if write_fd is not None:
            os.close(write_fd)
        await adapter.stop()
        stdin.close()


async def test_a_line_refused_because_the_disk_is_full_is_one_error_line_without_a_class_name(caplog):
    """docs/operations.md §4 and docs/behaviour.md §12: a full disk is an expected failure: one
    line naming what failed, no traceback and no `hermes_core.store.db.CommitError`."""
    import sqlite3

    from hermes_core.cli.common import _OneLineFormatter
    from hermes_core.store.db import CommitError

    async def refuse(event):
        cause = sqlite3.OperationalError("database or disk is full")
        raise CommitError("commit of 1 write(s) to state.db /srv/hermes/state.db failed: database or disk is full",
                          cause) from cause

    out = io.StringIO()
    adapter = LocalAdapter(stdin=io.StringIO("hello\n"), stdout=out, user="alice", on_message=refuse)
    await adapter.start()
    await asyncio.wait_for(adapter.wait_closed(), 10)
    await adapter.stop()
    assert out.getvalue() == "Sorry, this message could not be processed. Please try again later.\n"
    formatter = _OneLineFormatter("hermes-gateway: %(levelname)s: %(message)s")
    assert [formatter.format(r) for r in caplog.records if r.name == "hermes_core.platforms.local"] == [
        "hermes-gateway: ERROR: line not accepted by the gateway: disk full (commit of 1 write(s) to state.db "
        "/srv/hermes/state.db failed: database or disk is full)"]
    assert [r for r in caplog.records if r.exc_info] == []


async def test_an_end_of_input_while_not_receiving_ends_the_input_and_keeps_the_lines_read_before_it():
    """A `chat` waiting for the terminal's ingress lease (docs/adapters.md §6) reads ahead: an
    end of input with no message waiting (Ctrl-D, a closed pipe, `/quit`) ends the input at
    once, ending the prompt line, instead of waiting for a lease that would read nothing more;
    messages read before the end wait for `start` and are emitted then, in order, and only then
    does the input end."""
    for typed, messages in ((b"", []), (b"\n/quit\nnever read\n", []), (b"one\n\ntwo\n", ["one", "two"])):
        events = []

        async def on_message(event):
            events.append(event.text)

        read_fd, write_fd = os.pipe()
        stdin = os.fdopen(read_fd, "r")
        out = io.StringIO()
        adapter = LocalAdapter(stdin=stdin, stdout=out, user="alice", on_message=on_message, prompt="> ")
        try:
            adapter.write_prompt()  # as `chat` does on a terminal, before the lease is held
            adapter.read_ahead()
            os.write(write_fd, typed)
            os.close(write_fd)
            ended = asyncio.ensure_future(adapter.wait_input_ended())
            await asyncio.sleep(0.2)
            assert ended.done() is (not messages)
            if not messages:
                assert out.getvalue() == "> \n"
            await adapter.start()
            await asyncio.wait_for(ended, 10)
            assert events == messages
        finally:
            await adapter.stop()
            stdin.close()
