"""Durable intake of inbound messages (docs/behaviour.md §0 "nothing accepted is ever lost", §5 "the queue
is durable: it lives in the inbound table and survives a restart in order"). Mixed into
`SessionStore` through `TurnOps`.

Life of an intake row: `accept_inbound_event` persists the whole event as 'pending' in the same
write as its dedupe id, before the adapter acknowledges the platform; `begin_turn(...,
inbound_id=)` moves it to 'running' in the transaction that records the user message — or
`begin_turn(..., accept_event=)` accepts it there, written 'running' at once, when its session
was idle (docs/behaviour.md §12: one commit less per message);
`finish_inbound` marks it 'done' (payload dropped) when its job ended, or when its queued
message was cleared (`/new`, `/reset`, `/stop`); `merge_inbound` folds a burst of follow-ups
into its first row before their merged turn starts. At start-up
`pending_inbound` returns what was never finished, in arrival order.

Retention (housekeeping, `prune_inbound`): finished rows are kept `INBOUND_RETENTION_DAYS` (7)
days after acceptance, because platforms redeliver for at most about a day (Telegram keeps
updates 24 h) and a week covers a gateway that was down for a few days; after that the id is
forgotten and only then could a (very late) redelivery be answered again.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from ..model import format_timestamp
from ..model.text import to_json
from .records import NewIntake

log = logging.getLogger(__name__)

INBOUND_RETENTION_DAYS = 7
# Prefix of the dedupe id given to events that have no platform message id (the local terminal,
# internal wake-ups): unique, so they are persisted like any other but never deduplicated.
SYNTHETIC_ID_PREFIX = "~"


class IntakeOps:
    """Durable intake methods. Relies on the SessionStore attributes `_b()` and `_now()`."""

    async def accept_inbound_event(self, session_key: str, event: Mapping[str, Any]) -> int | None:
        """Persist one accepted inbound event with its dedupe record, in one write (docs/behaviour.md §5).

        Args:
            session_key: the session the event is routed to.
            event: the event as plain JSON data: `{"source": SessionSource.to_dict(), "text": str,
                "message_id": str | None, "media": [dict], "kind": "user" | "internal",
                "received_at": ISO-8601 UTC}`. A user event with a `message_id` is deduplicated
                on `(source.platform, source.chat_id, message_id)`; other events get a unique
                synthetic id.
        Returns:
            The intake id (increasing in arrival order), or None when the message id was
            already accepted (a redelivery: do not answer it again).
        Raises:
            ValueError: `event` has no `source` with `platform` and `chat_id`, or is not JSON data.
            sqlite3.Error / OSError: the write failed (the adapter must not acknowledge then).
        """
        n = self._new_intake(session_key, event)
        return await self._b().intake_accept(n.platform, n.chat_id, n.message_id, n.session_key, n.payload,
                                             n.accepted_at, n.accepted_ts)

    def _new_intake(self, session_key: str, event: Mapping[str, Any]) -> NewIntake:
        """`event` (the shape `accept_inbound_event` takes) as the intake row to write, now.
        Raises ValueError as `accept_inbound_event` does."""
        source = event.get("source") if isinstance(event, Mapping) else None
        if not isinstance(source, Mapping) or not source.get("platform") or source.get("chat_id") is None:
            raise ValueError("inbound event needs a 'source' with 'platform' and 'chat_id'")
        message_id = event.get("message_id")
        if not message_id or event.get("kind") == "internal":
            message_id = SYNTHETIC_ID_PREFIX + uuid.uuid4().hex
        try:
            payload = to_json(dict(event))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"inbound event is not JSON data: {exc}") from None
        now = self._now()
        return NewIntake(str(source["platform"]), str(source["chat_id"]), str(message_id), session_key, payload,
                         format_timestamp(now), now.timestamp())

    async def finish_inbound(self, inbound_id: int | None) -> None:
        """Mark intake row `inbound_id` done (its job ended: turn completed, failed or refused).
        The payload is dropped; the dedupe id stays until pruned. None is a no-op."""
        if inbound_id is not None:
            await self._b().intake_finish(int(inbound_id), self._now().timestamp())

    async def merge_inbound(self, target_id: int, event: Mapping[str, Any], absorbed_ids: list[int]) -> None:
        """Record a busy-input burst merge durably (docs/behaviour.md §5, seed §8): intake row `target_id`
        (still 'pending') now holds `event` (the merged event, same JSON shape as
        `accept_inbound_event`'s), and the rows `absorbed_ids` are finished, in one atomic write.
        After a restart the merged event replays once, in the target's arrival position.

        Raises:
            ValueError: `event` is not JSON data.
            sqlite3.Error / OSError: the write failed (nothing changed).
        """
        try:
            payload = to_json(dict(event))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"merged inbound event is not JSON data: {exc}") from None
        await self._b().intake_merge(int(target_id), payload, [int(i) for i in absorbed_ids],
                                     self._now().timestamp())

    async def pending_inbound(self) -> list[dict[str, Any]]:
        """Intake rows not finished, in arrival order: `[{"id", "session_key", "state"
        ("pending" | "running"), "event" (the dict given to accept_inbound_event)}]`.

        A 'running' row's turn already began (its user message is in the transcript): start-up
        leaves it to turn-marker recovery and finishes it instead of replaying it. A row whose
        payload cannot be decoded is logged, finished and skipped (never replayed forever).
        """
        out = []
        for row in await self._b().intake_open():
            try:
                event = json.loads(row.payload)
                if not isinstance(event, dict):
                    raise ValueError("not an object")
            except (TypeError, ValueError) as exc:
                log.error("inbound row %s has an unreadable payload (%s); dropped", row.id, exc)
                await self.finish_inbound(row.id)
                continue
            out.append({"id": row.id, "session_key": row.session_key, "state": row.state, "event": event})
        return out

    async def prune_inbound(self, retention_days: float = INBOUND_RETENTION_DAYS) -> int:
        """Housekeeping: forget finished intake rows accepted more than `retention_days` ago
        (module docstring). Returns the number removed."""
        cutoff = self._now() - timedelta(days=retention_days)
        return await self._b().intake_prune(cutoff.timestamp())
