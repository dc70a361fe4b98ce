"""Edits and deletions of earlier messages, offered to the gateway's queue first
(docs/behaviour.md §5 "Edits and deletions"; docs/plugins.md §3, §4 "Edits and deletions").

A plugin's mapping describes an edit or a deletion it reads as a `QueuedChange` naming the original
message; the adapter hands it to `offer_change`, which offers it to the gateway's queue
(`BaseAdapter.edit_queued`): a message still queued takes the new text in place, or is withdrawn.
Only an edit the queue did not take is left to the platform's `edits_as_turns`; a deletion is
never a turn. What a failure of the gateway means (redelivery, one error line, an HTTP 500) stays
each transport's own: `offer_change` raises it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..model.events import MessageEvent
from ..model.identity import IdentityAlias
from ..model.source import SessionSource
from .adapter import QueuedEditor

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class QueuedChange:
    """An edit (`text`) or a deletion (`text=None`) of an earlier message (docs/behaviour.md §5).

    Attributes:
        source: the SessionSource the original message produced (same chat, thread and sender,
            so the same session key); it routes the change to the original's session.
        message_id: the id the original was emitted with (its `MessageEvent.message_id`): what
            the gateway queued it under and what `edit_queued` takes.
        text: the new full text, or None for a deletion.
        event: the edit as a turn of its own (the edit's own message id, the new text, media of
            an edited caption), emitted only when the original is no longer queued and
            `edits_as_turns` is on; None for a deletion, or for an edit with nothing to make a
            turn of.
        alternates: other SessionSources the original may have been queued under, tried in order
            when `source` finds nothing (a group message deleted by an admin: under its author,
            rather than under the admin who sent the deletion).
        aliases: identity aliases the change's own payload reveals (a WhatsApp LID ↔ phone
            pair). The adapter records them before it offers the change, as the core records a
            `MessageEvent`'s before its key is built, so a change that is the first to tell a
            pair still finds an original queued under the other id (docs/behaviour.md §4, §5).
    """

    source: SessionSource
    message_id: str
    text: str | None
    event: MessageEvent | None = None
    alternates: tuple[SessionSource, ...] = ()
    aliases: tuple[IdentityAlias, ...] = ()

    @property
    def kind(self) -> str:
        """`"edit"` or `"deletion"`."""
        return "deletion" if self.text is None else "edit"


async def offer_change(edit_queued: QueuedEditor, change: QueuedChange, *, edits_as_turns: bool, label: str,
                       logger: logging.Logger | None = None) -> MessageEvent | None:
    """Offer `change` to the gateway's queue, under `change.source` and then each of its
    `alternates` until one takes it (docs/behaviour.md §5 "Edits and deletions").

    Args:
        edit_queued: the adapter's `edit_queued` (`BaseAdapter.edit_queued`, or any
            `QueuedEditor`: `(source, message_id, text | None) -> bool`).
        change: the edit or deletion.
        edits_as_turns: the platform's setting: whether an edit of a message no longer queued
            becomes a turn of its own.
        label: what the log lines call the change, e.g. `"signal edit of message 1767225600123"`:
            never message text or a phone number.
        logger: where the lines go (the plugin's logger); the SDK's own when None.

    Returns:
        The event to emit as a turn: `change.event`, when the queue did not take an edit and
        `edits_as_turns` is on. None otherwise: the queue took it, or it is a deletion (never a
        turn), or `edits_as_turns` is off, or the edit has no event; the change is then done
        with (the last three logged at INFO as `"<label>: it is not queued (nothing to
        withdraw)"` or `"<label> skipped: it is not queued and …"`).

    Raises:
        Exception: whatever `edit_queued` raised: the gateway could not apply it, and whether it
            reached the queue is unknown. The caller keeps its transport's policy (leave the
            event unacknowledged for redelivery, log and drop it, answer an error); it must not
            make the edit a turn, which could answer it twice.
    """
    logger = logger or log
    for source in (change.source, *change.alternates):
        if await edit_queued(source, change.message_id, change.text):
            return None
    if change.text is None:
        logger.info("%s: it is not queued (nothing to withdraw)", label)
        return None
    if not edits_as_turns:
        logger.info("%s skipped: it is not queued and edits_as_turns is off", label)
        return None
    if change.event is None:
        logger.info("%s skipped: it is not queued and has no text or attachments", label)
        return None
    return change.event
