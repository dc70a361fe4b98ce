"""`hermes_core.sdk.offer_change` (docs/behaviour.md §5 "Edits and deletions"): an edit or a
deletion of an earlier message goes to the gateway's queue first; only an edit the queue did not
take is left to `edits_as_turns`, and a deletion is never a turn."""

from __future__ import annotations

import logging

import pytest

from hermes_core.sdk import MessageEvent, QueuedChange, SessionSource, offer_change

ORIGINAL = SessionSource(platform="acme", chat_id="c1", chat_type="group", user_id="sender", message_id="m1")
AUTHOR = SessionSource(platform="acme", chat_id="c1", chat_type="group", user_id="author", message_id="m1")
EDIT_TURN = MessageEvent(source=ORIGINAL, text="hello, edited", message_id="m1@2")
EDIT = QueuedChange(ORIGINAL, "m1", "hello, edited", EDIT_TURN)
DELETION = QueuedChange(ORIGINAL, "m1", None, alternates=(AUTHOR,))


class Queue:
    """A `QueuedEditor` that takes the change under the sources in `takes`, recording each offer."""

    def __init__(self, *takes: SessionSource):
        self.takes = takes
        self.offers: list[tuple[str, str, str | None]] = []

    async def __call__(self, source: SessionSource, message_id: str, text: str | None) -> bool:
        self.offers.append((source.user_id, message_id, text))
        return source in self.takes


@pytest.mark.parametrize("edits_as_turns", [False, True])
async def test_a_change_the_queue_takes_is_done_with(edits_as_turns):
    queue = Queue(ORIGINAL)
    assert await offer_change(queue, EDIT, edits_as_turns=edits_as_turns, label="acme edit of message m1") is None
    assert queue.offers == [("sender", "m1", "hello, edited")]


async def test_an_edit_the_queue_did_not_take_is_its_own_turn_only_with_edits_as_turns(caplog):
    caplog.set_level(logging.INFO, logger="acme")
    on = await offer_change(Queue(), EDIT, edits_as_turns=True, label="acme edit of message m1",
                            logger=logging.getLogger("acme"))
    assert on is EDIT_TURN
    assert caplog.messages == []
    off = await offer_change(Queue(), EDIT, edits_as_turns=False, label="acme edit of message m1",
                             logger=logging.getLogger("acme"))
    assert off is None
    assert caplog.messages == ["acme edit of message m1 skipped: it is not queued and edits_as_turns is off"]
    assert [r.name for r in caplog.records] == ["acme"]


async def test_an_edit_without_a_turn_to_make_is_done_with(caplog):
    caplog.set_level(logging.INFO, logger="hermes_core.sdk.changes")
    change = QueuedChange(ORIGINAL, "m1", "", None)
    assert await offer_change(Queue(), change, edits_as_turns=True, label="acme edit of message m1") is None
    assert caplog.messages == ["acme edit of message m1 skipped: it is not queued and has no text or attachments"]


async def test_a_deletion_the_queue_did_not_take_is_never_a_turn(caplog):
    caplog.set_level(logging.INFO, logger="hermes_core.sdk.changes")
    queue = Queue()
    assert await offer_change(queue, DELETION, edits_as_turns=True, label="acme deletion of message m1") is None
    assert caplog.messages == ["acme deletion of message m1: it is not queued (nothing to withdraw)"]
    assert DELETION.kind == "deletion" and EDIT.kind == "edit"


async def test_the_alternates_are_tried_in_order_until_one_takes_it():
    queue = Queue(AUTHOR)
    assert await offer_change(queue, DELETION, edits_as_turns=True, label="acme deletion of message m1") is None
    assert queue.offers == [("sender", "m1", None), ("author", "m1", None)]
    third = SessionSource(platform="acme", chat_id="c1", chat_type="group", user_id="third", message_id="m1")
    queue = Queue(AUTHOR)
    change = QueuedChange(ORIGINAL, "m1", "hello, edited", EDIT_TURN, alternates=(AUTHOR, third))
    assert await offer_change(queue, change, edits_as_turns=True, label="acme edit of message m1") is None
    assert queue.offers == [("sender", "m1", "hello, edited"), ("author", "m1", "hello, edited")]


async def test_a_failure_of_the_queue_propagates_and_nothing_is_logged(caplog):
    caplog.set_level(logging.DEBUG)

    async def broken(source, message_id, text):
        raise RuntimeError("store is gone")

    with pytest.raises(RuntimeError, match="store is gone"):
        await offer_change(broken, EDIT, edits_as_turns=True, label="acme edit of message m1")
    assert caplog.messages == []


def test_a_change_is_frozen():
    with pytest.raises(AttributeError):
        EDIT.text = "other"  # type: ignore[misc]
