"""A full disk during a turn (docs/behaviour.md §12): the computed reply is not thrown away — it
is sent once when the disk has room again, or the turn is resumed once at the next start — and
the log gets one line per failed attempt, never a traceback.

The disk fills for real as far as SQLite can tell: `PRAGMA max_page_count` on the store's writer
connection makes every write that needs a new page fail with SQLITE_FULL ("database or disk is
full"), exactly as a full file system does."""

import logging

import pytest

from hermes_core.agents.echo import EchoAgent

from pipeline_helpers import KEY, RecordingAdapter, dm, start_app, until

LONG = "x" * 20_000  # the reply ("echo: " + this) needs new pages: it cannot fit in free space
UNLIMITED = 1_073_741_823


class FillingAgent(EchoAgent):
    """Answers like the echo agent, but the disk is full by the time the reply is written."""

    def __init__(self):
        super().__init__()
        self.store = None

    async def _generate(self, context, history, message, system_context):
        await _set_max_pages(self.store, None)
        return await super()._generate(context, history, message, system_context)


async def _set_max_pages(store, pages):
    conn = store._backend.db._require()  # the writer connection
    if pages is None:
        async with conn.execute("PRAGMA page_count") as cursor:
            pages = (await cursor.fetchone())[0]
    await conn.execute(f"PRAGMA max_page_count = {pages}")


def _tracebacks(caplog):
    return [r.getMessage() for r in caplog.records if r.exc_info]


async def test_the_reply_is_sent_once_when_the_disk_has_room_again(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    adapter, agent = RecordingAdapter(limit=30_000), FillingAgent()
    app = await start_app(tmp_path, adapter, agent)
    agent.store = app.store
    try:
        await app.runner.handle(_event(LONG, "m1"))
        await until(lambda: f"disk full: the reply of {KEY} is kept in memory" in caplog.text)
        assert adapter.sent == []
        await _set_max_pages(app.store, UNLIMITED)
        await app.runner.join()
        assert adapter.sent == [("100", "echo: " + LONG, "m1")]
        transcript = await app.store.load_transcript((await app.store.get_entry(KEY)).session_id)
        assert [m["role"] for m in transcript] == ["user", "assistant"]
    finally:
        await app.stop()
    assert _tracebacks(caplog) == []


async def test_a_message_whose_user_message_finds_the_disk_full_is_answered_once_there_is_room(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    adapter = RecordingAdapter(limit=30_000)
    app = await start_app(tmp_path, adapter, EchoAgent())
    begin_turn = app.store.begin_turn

    async def on_a_full_disk(*args, **kwargs):  # accepted; the disk fills before it is recorded
        app.store.begin_turn = begin_turn
        await _set_max_pages(app.store, None)
        return await begin_turn(*args, **kwargs)

    app.store.begin_turn = on_a_full_disk
    try:
        await app.runner.handle(_event(LONG, "m1"))
        await until(lambda: f"disk full: the user message of {KEY} is kept in memory" in caplog.text)
        assert adapter.sent == []  # no "could not be processed" notice: the message waits
        await _set_max_pages(app.store, UNLIMITED)
        await app.runner.join()
        assert adapter.sent == [("100", "echo: " + LONG, "m1")]
        assert await app.store.pending_inbound() == []
    finally:
        await app.stop()
    assert _tracebacks(caplog) == []


async def test_a_shutdown_while_the_disk_is_full_resumes_the_turn_once(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    agent = FillingAgent()
    first = RecordingAdapter(limit=30_000)
    app = await start_app(tmp_path, first, agent, scheduler={"drain_timeout_s": 0.3})
    agent.store = app.store
    await app.runner.handle(_event(LONG, "m1"))
    await until(lambda: "disk full: the reply of" in caplog.text)
    await app.stop()  # the drain gives up on the turn still waiting for room
    assert first.sent == []
    second = RecordingAdapter(limit=30_000)
    app = await start_app(tmp_path, second, EchoAgent())
    try:
        await until(lambda: len(second.sent) == 1)
        await app.runner.join()
        assert second.sent == [("100", "echo: " + LONG, "m1")]
    finally:
        await app.stop()
    assert _tracebacks(caplog) == []


def _event(text, message_id):
    from hermes_core.model import MessageEvent

    return MessageEvent(source=dm(), text=text, message_id=message_id)


def _terminal_lines(caplog):
    """The records as the terminal shows them (WARNING and up, one line each; docs/operations.md §4)."""
    from hermes_core.cli.common import _OneLineFormatter

    formatter = _OneLineFormatter("hermes-gateway: %(levelname)s: %(message)s")
    return [formatter.format(r) for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("earlier", [[], ["hello"]], ids=["new session", "running session"])
async def test_a_terminal_line_refused_on_a_full_disk_is_one_line_naming_what_failed(tmp_path, caplog, earlier):
    # docs/operations.md §4: one line per record on stderr, no exception class names for an
    # expected failure; docs/behaviour.md §0: the chat gets the configured notice only. The
    # refusal is said once, by the adapter that could not accept the line (docs/behaviour.md §12).
    import io
    import os

    from hermes_core import GatewayConfig
    from hermes_core.app import GatewayApp
    from hermes_core.platforms.local import LocalAdapter

    read_end, write_end = os.pipe()
    stdin = os.fdopen(read_end, "r")
    out = io.StringIO()
    config = GatewayConfig(home=tmp_path, platforms={"local": {"allow_all": True}})
    app = GatewayApp(config, adapters={"local": LocalAdapter(stdin=stdin, stdout=out, user="alice")},
                     agent=EchoAgent(), watcher=False)
    await app.start()
    try:
        for line in earlier:
            os.write(write_end, f"{line}\n".encode())
            await until(lambda: f"echo: {line}\n" in out.getvalue())
            await app.runner.join()
        await _set_max_pages(app.store, None)
        caplog.clear()
        os.write(write_end, f"{LONG}\n".encode())
        notice = "Sorry, this message could not be processed. Please try again later.\n"
        await until(lambda: out.getvalue().endswith(notice))
        await app.runner.join()
    finally:
        await _set_max_pages(app.store, UNLIMITED)
        os.close(write_end)
        await app.stop()
        stdin.close()
    assert _terminal_lines(caplog) == [
        "hermes-gateway: ERROR: line not accepted by the gateway: disk full (database or disk is full)"]
    assert _tracebacks(caplog) == []
