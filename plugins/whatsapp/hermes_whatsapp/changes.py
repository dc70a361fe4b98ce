"""Edits and deletions of earlier messages, for both transports (docs/behaviour.md §5 "Edits and
deletions", docs/adapters.md §4.1 and §4.3).

The mappings turn an edit or a deletion into a `Change` naming the original message; the adapter
offers it to the gateway's queue first (`BaseAdapter.edit_queued`): a message still queued takes
the new text in place, or is withdrawn. Only an edit the queue did not take is left to
`edits_as_turns`; a deletion is never a turn.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from hermes_core.sdk import BaseAdapter, MessageEvent, SessionSource

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Change:
    """An edit (`text`) or a deletion (`text=None`) of the message `original_id`.

    Attributes:
        source: the SessionSource the original message produced (same chat, same sender), so
            the change reaches that message's session; its `message_id` is `original_id`.
        original_id: the platform id the original was emitted with.
        text: the new full text, or None for a deletion.
        event: the edit as a turn of its own (the edit's own message id, the new text, media of
            an edited caption), for `edits_as_turns`; None for a deletion.
        alternates: other sources the original may have been filed under, tried in order when
            `source` finds nothing (a group message deleted by an admin: its author, named in
            the revoke, rather than the admin who sent it).
    """

    source: SessionSource
    original_id: str
    text: str | None
    event: MessageEvent | None = None
    alternates: tuple[SessionSource, ...] = ()

    @property
    def kind(self) -> str:
        return "deletion" if self.text is None else "edit"


async def settle(adapter: BaseAdapter, change: Change, *, label: str, edits_as_turns: bool) -> MessageEvent | None:
    """Offer `change` to the gateway's queue (docs/behaviour.md §5).

    Returns:
        The event to emit as a turn (an edit of a message no longer queued, with
        `edits_as_turns` on), else None: the change is done with.

    Raises:
        Exception: the gateway could not apply it (the caller offers it again later).
    """
    for source in (change.source, *change.alternates):
        if await adapter.edit_queued(source, change.original_id, change.text):
            return None
    if change.event is None:
        log.debug("%s %s of message %s: not queued, nothing to change", label, change.kind, change.original_id)
        return None
    if not edits_as_turns:
        log.info("%s edit of message %s skipped: it is no longer queued and edits_as_turns is off",
                 label, change.original_id)
        return None
    return change.event
