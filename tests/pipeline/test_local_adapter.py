"""The local platform adapter (issue 2 item 9) driven through injected streams."""

from __future__ import annotations

import asyncio
import io

from hermes_core.platforms.local import LocalAdapter


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
    adapter, events = await _collect("first\r\n\nsecond line\n/quit\nnever\n")
    assert [e.text for e in events] == ["first", "", "second line"]
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
