"""The delivery ledger (docs/behaviour.md §6; seed §7 "record_delivery_obligation"). Mixed into
`SessionStore` through `TurnOps`.

An obligation is a text the gateway owes a chat. States: pending → attempting → delivered |
failed | abandoned. The final reply of a turn is recorded in the same transaction as the
assistant message, and that transaction also clears the turn marker. The live path records it
'attempting' (its first attempt counted), since its send starts as soon as that transaction is
committed — a write of its own before the send would cost every message one more fsync
(docs/behaviour.md §12); a re-send marks it 'attempting' before sending. After the send it is
'delivered' / 'failed'. After a crash, start-up re-sends
'attempting' ones with `RECOVERED_PREFIX` (the chat may already have them) and 'pending' /
'failed' ones plainly; a 'delivered' one never. A reply a crash left persisted but not in the
ledger is recorded at recovery with the prefix already in its text (seed §7), so every send of
it carries the notice. An obligation is abandoned after `MAX_ATTEMPTS` (3) attempts or
`MAX_AGE_S` (24 h). A delivered obligation keeps the platform message ids it produced
(`sent_ids`), so a platform's later delivery report (WhatsApp status callbacks) settles it:
`settle_sent_message`.

A conversation command that changes the transcript (`/undo`, `/compress`) owes its answer the
same way: its `Confirmation` is recorded 'attempting' in the transaction of its rewind or
rewrite, so a crash before the send leaves it to the start-up sweep (docs/behaviour.md §11).

Silence (docs/behaviour.md §6): a reply that is only a silence marker (`[SILENT]`, `SILENT`, `NO_REPLY`,
`NO REPLY`, any case, surrounding blanks ignored) owes nothing for an internal turn and
`SILENT_NOTICE` for a human turn.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any, Callable, Iterable, Sequence

from ..model import SessionSource, TokenUsage, format_timestamp
from ..model.text import to_json
from .records import MessageRow, NewObligation, ReportMatch, SentOutcome
from .rows import normalize_message

log = logging.getLogger(__name__)

OPEN_STATES = ("pending", "attempting", "failed")
# What a platform's delivery report may say about a sent message (`settle_sent_message`).
REPORT_STATES = frozenset({"delivered", "failed"})
MAX_ATTEMPTS = 3
MAX_AGE_S = 24 * 3600
LEDGER_RETENTION_DAYS = 7
RECOVERED_PREFIX = "Recovered reply (may be a duplicate):"
SILENCE_MARKERS = frozenset({"[silent]", "silent", "no_reply", "no reply"})
SILENT_NOTICE = "(The agent chose not to reply to this message.)"


def recovered_text(content: str) -> str:
    """The re-send of a reply that may already have reached the chat: `RECOVERED_PREFIX`, a
    newline, the reply (a text already carrying the prefix is returned as is)."""
    if content.startswith(RECOVERED_PREFIX):
        return content
    return f"{RECOVERED_PREFIX}\n{content}"


def is_silence(text: str | None) -> bool:
    """True when `text` is only a silence marker (case-insensitive, blanks around ignored)."""
    return (text or "").strip().lower() in SILENCE_MARKERS


def text_owed(reply: str | None, *, internal: bool) -> str | None:
    """What a turn whose final reply is `reply` owes its chat: None (nothing: silence on an
    internal turn, or an empty reply), `SILENT_NOTICE` (silence on a human turn), else `reply`."""
    if is_silence(reply):
        return None if internal else SILENT_NOTICE
    return reply or None


@dataclass(frozen=True, slots=True)
class Confirmation:
    """The answer a conversation command owes its chat for a change of the transcript (`/undo`'s
    rewind, `/compress`'s rewrite), recorded as a delivery obligation in the transaction of that
    change (`rewind_session`, `rewrite_transcript`; docs/behaviour.md §6, §11).

    Attributes:
        session_key: the session key the command came in on.
        origin: the chat to deliver to (the command's SessionSource, raw ids).
        reply_to: the platform id of the command's message, or None.
        text: the answer; for a rewind, a function given the rewind's result (the dict
            `rewind_session` returns) that says what was undone. It is called inside the
            transaction: it must only format text (no I/O, no store call).
    """

    session_key: str
    origin: SessionSource
    reply_to: str | None
    text: str | Callable[[dict[str, Any]], str]


class LedgerOps:
    """Delivery-ledger methods. Relies on the SessionStore attributes `_b()`, `_now()`, `_locks`,
    `_load` and `_write_entry`."""

    def _obligation(self, session_key: str, session_id: str, origin: SessionSource | None, content: str,
                    internal: bool, reply_to: str | None, message_id: int | None = None, *,
                    sending: bool = False) -> NewObligation:
        now = self._now()
        return NewObligation(session_key=session_key, session_id=session_id,
                             origin=to_json(origin.to_dict()) if origin else None,
                             content=content, internal=internal, reply_to=reply_to,
                             now_iso=format_timestamp(now), now_ts=now.timestamp(), message_id=message_id,
                             state="attempting" if sending else "pending", attempts=1 if sending else 0)

    def _confirmation(self, confirmation: Confirmation, session_id: str,
                      result: dict[str, Any] | None = None) -> NewObligation:
        """The obligation of `confirmation` in `session_id`, 'attempting' (its send follows the
        commit at once, as a turn's reply does); a callable `text` is given `result`."""
        text = confirmation.text if isinstance(confirmation.text, str) else confirmation.text(result or {})
        return self._obligation(confirmation.session_key, session_id, confirmation.origin, text, False,
                                confirmation.reply_to, sending=True)

    async def record_reply(self, session_key: str, session_id: str, message: Mapping[str, Any] | MessageRow | None, *,
                           origin: SessionSource | None, content: str | None, internal: bool = False,
                           reply_to: str | None = None, sending: bool = False,
                           before: Sequence[Mapping[str, Any] | MessageRow] = (), inbound_ids: Sequence[int] = (),
                           usage: TokenUsage | None = None, completed: bool = False) -> int | None:
        """End a turn durably: append `message` (the assistant reply; None for a notice-only
        turn), record the obligation to send `content` (None: nothing is owed) and clear the turn
        marker — one transaction, which on the live path also carries the rest of the turn's
        bookkeeping (docs/behaviour.md §6, §12).

        Args:
            message / before: transcript message dicts or their rows (`rows.normalize_message`).
            origin: the chat to deliver to (the stored origin, raw ids).
            content: the text owed (see `text_owed`), or None.
            internal: the turn was an internal wake-up.
            reply_to: the platform id of the message answered, or None.
            sending: the caller sends the obligation as soon as this returns: it is recorded
                'attempting' with its first attempt counted (no separate write before the send).
            before: user messages appended before `message` in the same transaction (the
                follow-ups a steered turn took).
            inbound_ids: intake rows finished in the same transaction (the turn's own and those
                of `before`: the transcript and the ledger own the messages from here on).
            usage: the agent's TokenUsage: the entry's counters and `last_prompt_tokens` are
                updated in the same transaction (`update_session`, seed §3).
            completed: the turn really completed: `resume_pending` and `is_fresh_reset` are
                cleared in the same transaction (seed §2 `clear_resume_pending`). `usage` and
                `completed` touch the entry only while the key still points at `session_id`.
        Returns:
            The obligation id, or None when nothing is owed.
        Raises:
            ValueError: bad message. sqlite3.Error / OSError: nothing was recorded.
        """
        row = normalize_message(message, self._now) if message is not None else None
        rows = [normalize_message(m, self._now) for m in before]
        ob = None
        if content:
            ob = self._obligation(session_key, session_id, origin, content, internal, reply_to, sending=sending)
        now = self._now()
        # A partial, not a closure (fewer objects for the collector, docs/behaviour.md §12).
        write = partial(self._b().record_reply, session_key, session_id, row, ob, before=rows,
                        inbound_ids=inbound_ids, now_ts=now.timestamp())
        if usage is None and not completed:
            return (await write())[1]
        async with self._locks.hold(session_key):
            entry = await self._load(session_key)
            if entry is None or entry.session_id != session_id:  # the key moved on: leave its new session
                return (await write())[1]
            entry.updated_at = now
            entry.add_usage(usage, usage.input_tokens if usage is not None else None)
            if completed:
                entry.is_fresh_reset = False
                entry.resume_pending, entry.resume_reason, entry.last_resume_marked_at = False, None, None
            return (await self._write_entry(entry, partial(write, entry=entry)))[1]

    async def start_delivery(self, obligation_id: int) -> None:
        """Mark an obligation 'attempting' (one more attempt) right before sending it."""
        now = self._now()
        await self._b().obligation_update(obligation_id, "attempting", format_timestamp(now), now.timestamp(),
                                          attempt=True)

    async def finish_delivery(self, obligation_id: int, delivered: bool, error: str | None = None, *,
                              sent_ids: Iterable[str | None] = ()) -> None:
        """Mark an obligation 'delivered', or 'failed' with `error` (retried at the next start).

        Args:
            sent_ids: the platform message ids of the chunks that went out (`SendResult.message_id`;
                None entries are skipped). Recorded so that a later delivery report of the
                platform settles this obligation (`settle_sent_message`).
        """
        failed = await self.finish_deliveries([SentOutcome(obligation_id, delivered, error, tuple(sent_ids))])
        if failed:
            raise failed[0][1]

    async def finish_deliveries(self, outcomes: Sequence[SentOutcome]) -> list[tuple[int, Exception]]:
        """`finish_delivery` for several sends at once, in as few writes as the engine allows
        (SQLite: one, all or none; docs/behaviour.md §12 "'delivered' off the session's path").

        Returns:
            `(obligation_id, error)` of each outcome that could not be recorded (empty when all
            were): the obligation stays as it was ('attempting' on the live path, so the next
            start sends it again, labelled).
        """
        if not outcomes:
            return []
        now = self._now()
        finished = []
        for outcome in outcomes:
            ids = [str(i) for i in outcome.sent_ids if i]
            finished.append((outcome.obligation_id, "delivered" if outcome.delivered else "failed", outcome.error,
                             to_json(ids) if ids else None))
        return await self._b().obligations_finished(finished, format_timestamp(now), now.timestamp())

    async def settle_sent_message(self, platform: str, message_id: str, status: str,
                                  error: str | None = None) -> ReportMatch | None:
        """Apply a platform's delivery report about one sent message to its obligation
        (docs/behaviour.md §6 "Delivery reports"; WhatsApp status callbacks).

        Args:
            platform: the platform id of the adapter reporting (`"whatsapp_cloud"`).
            message_id: the platform's id of a message the gateway sent (a `SendResult.message_id`).
            status: `"delivered"` (the platform confirmed it: delivered or read) or `"failed"`.
            error: for `"failed"`, why (shown in the ledger's `last_error`; no secrets, no text).

        Returns:
            None when no obligation of the last `MAX_AGE_S` seconds sent that message (a
            notice, an old message, or one whose outcome is not written yet: only then may the
            caller wait and try again, `GatewayRunner.settle_sent_message`). Otherwise
            `ReportMatch(obligation_id, changed)`; `changed` is False when the report changed
            nothing: the obligation is already in that state (a 'read' after 'delivered'), a
            failure wins over a confirmation (a 'failed' obligation is not made 'delivered' by
            a report about another of its chunks), an 'abandoned' one is left alone.

        Raises:
            ValueError: `status` is neither "delivered" nor "failed".
            sqlite3.Error / OSError: the write failed.
        """
        if status not in REPORT_STATES:
            raise ValueError(f"delivery report status must be one of {sorted(REPORT_STATES)}, got {status!r}")
        if not message_id:
            return None
        now = self._now()
        found = await self._b().obligation_by_sent_id(platform, str(message_id), now.timestamp() - MAX_AGE_S)
        if found is None:
            return None
        ob_id, state = found
        if state == "abandoned" or state == status or (status == "delivered" and state == "failed"):
            return ReportMatch(ob_id, False)
        await self._b().obligation_update(ob_id, status, format_timestamp(now), now.timestamp(),
                                          error=error if status == "failed" else None)
        return ReportMatch(ob_id, True)

    async def abandon_delivery(self, obligation_id: int, reason: str) -> None:
        """Give an obligation up ('abandoned'), recording why."""
        now = self._now()
        await self._b().obligation_update(obligation_id, "abandoned", format_timestamp(now), now.timestamp(),
                                          error=reason)

    async def open_obligations(self) -> list[dict[str, Any]]:
        """Obligations still owed ('pending', 'attempting', 'failed'), oldest first: dicts with
        `id, session_key, session_id, origin (SessionSource | None), content, state, attempts,
        internal (bool), last_error, message_id, reply_to, created_ts, updated_ts` (epoch s)."""
        out = []
        for record in await self._b().obligations(OPEN_STATES):
            ob = record.as_dict()
            try:
                ob["origin"] = SessionSource.from_dict(json.loads(ob["origin"])) if ob.get("origin") else None
            except (TypeError, ValueError) as exc:
                log.error("delivery obligation %s has an unreadable origin (%s)", ob["id"], exc)
                ob["origin"] = None
            ob["internal"] = bool(ob.get("internal"))
            out.append(ob)
        return out

    async def obligations_in(self, *states: str) -> list[dict[str, Any]]:
        """Raw obligations in the given states (admin and tests), oldest first."""
        return [ob.as_dict() for ob in await self._b().obligations(tuple(states))]

    async def prune_obligations(self, retention_days: float = LEDGER_RETENTION_DAYS) -> int:
        """Housekeeping: delete delivered/abandoned obligations older than `retention_days`."""
        cutoff = self._now() - timedelta(days=retention_days)
        return await self._b().obligations_prune(cutoff.timestamp())

    async def resume_pending_entries(self) -> list:
        """Entries with `resume_pending=True` (start-up auto-continue), oldest first."""
        return await self._b().resume_pending_routes()
