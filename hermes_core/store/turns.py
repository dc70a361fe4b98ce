"""Turn markers, crash recovery and durable inbound dedupe of the session store (seed §7;
docs/behaviour.md §5, §6). Mixed into `SessionStore`; brings in the durable intake (`intake.IntakeOps`)
and the delivery ledger (`ledger.LedgerOps`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ..model import format_timestamp, validate_session_id
from .intake import IntakeOps
from .ledger import SILENT_NOTICE, LedgerOps, recovered_text, text_owed
from .records import MessageRow, RetryTurn, StoredMessage
from .rows import normalize_message

log = logging.getLogger(__name__)


class TurnOps(IntakeOps, LedgerOps):
    """Turn markers (`begin_turn` / `end_turn`), `recover_interrupted_turns` and `accept_inbound`.

    Relies on the SessionStore attributes `_b()`, `_now()`, `_locks` and `_mark_resume_locked`.
    """

    async def begin_turn(self, session_key: str, session_id: str, user_message: Mapping[str, Any] | MessageRow,
                         inbound_id: int | None = None, *, accept_event: Mapping[str, Any] | None = None
                         ) -> int | None:
        """Record the user message and set the turn marker (UTC start time) in ONE transaction;
        with `inbound_id`, that intake row becomes 'running' in the same transaction.
        `user_message`: a transcript message dict or its row (`rows.normalize_message`).

        `accept_event` (the event as `accept_inbound_event` takes it, instead of `inbound_id`):
        the message is accepted in this same transaction, its intake row written 'running'
        (docs/behaviour.md §12); a duplicate of an accepted message id writes nothing.

        Returns:
            With `accept_event`: the new intake id, or None for a duplicate. Else `inbound_id`.
        Raises:
            ValueError: bad message or event, or path-unsafe session id.
            StoreError: no entry for `session_key`.
        """
        validate_session_id(session_id)
        row = normalize_message(user_message, self._now)
        accept = self._new_intake(session_key, accept_event) if accept_event is not None else None
        async with self._locks.hold(session_key):
            return await self._b().begin_turn(session_key, session_id, row, self._now().timestamp(), inbound_id,
                                              accept)

    async def retry_turn(self, session_key: str, session_id: str, *, inbound_id: int | None = None,
                         platform_message_id: str | None = None) -> dict[str, Any] | None:
        """`/retry` (seed §3; docs/behaviour.md §11): rewind the session's last user turn (soft
        delete, `rewind_count` + 1) and begin it again, in ONE transaction: its user message is
        recorded anew, exactly as it was (with `platform_message_id`, the `/retry` message's id),
        the key's turn marker set on it and intake row `inbound_id` (the command's) made
        'running'. A crash from then on is the turn's crash recovery (resumed once, or its saved
        reply delivered once, §6), never a second `/retry`; the caller answers it as a resumed
        turn would (`run_turn(begun=True)`).

        Returns:
            `rewind_session`'s dict for the one turn, or None, with nothing changed, when there is
            no user turn or the last one has no text (a file alone: nothing to send again).
        Raises:
            ValueError: path-unsafe session id.
            StoreError: no entry for `session_key` (nothing is changed).
        """
        validate_session_id(session_id)
        now = self._now()
        row = normalize_message({"role": "user", "content": "", "timestamp": now,
                                 "platform_message_id": platform_message_id}, self._now)
        async with self._locks.hold(session_key):
            return await self._b().rewind(session_id, 1, inbound_id, now.timestamp(),
                                          RetryTurn(session_key, row, now.timestamp()))

    async def resume_turn(self, session_key: str, session_id: str) -> dict[str, Any] | None:
        """Start a resumed turn (seed §7 auto-continue): when the session's last user message has
        no reply, set the turn marker on it and return `{"content", "platform_message_id"}` of
        it (the agent answers it again); else return None and change nothing.

        Raises:
            ValueError: path-unsafe session id.
        """
        validate_session_id(session_id)
        async with self._locks.hold(session_key):
            last = await self._b().resume_turn(session_key, session_id, self._now().timestamp())
            if last is None:
                return None
            return {"content": last.content or "", "platform_message_id": last.platform_message_id}

    async def end_turn(self, session_key: str) -> None:
        """Clear the turn marker once the final reply is recorded (or nothing is left to send)."""
        await self._b().end_turn(session_key)

    async def turn_markers(self) -> list[dict[str, Any]]:
        """Persisted in-flight turn markers: `[{"session_key", "session_id", "message_id",
        "started_ts" (epoch seconds UTC)}]`, oldest first (for the recovery sweep)."""
        return [marker.as_dict() for marker in await self._b().turn_markers()]

    async def recover_interrupted_turns(self, max_age_seconds: float, *,
                                        only_keys: set[str] | None = None) -> list[str]:
        """Crash recovery (seed §7): promote each persisted turn marker whose turn has no
        persisted reply to `resume_pending=True`, `resume_reason="restart_interrupted"` (a
        reason a drain already set — `restart_timeout`, `shutdown_timeout` — is kept, with its
        time), and clear the marker. A marker older than `max_age_seconds` (docs/behaviour.md §6:
        `max(3600, 2 × agent_timeout)`) is cleared without resuming; a suspended entry is not
        marked (marker cleared). A marked turn whose reply was persisted is not resumed: when the
        ledger has no obligation for that reply, one is recorded ('pending', judged like a
        normal reply: a silence marker owes `SILENT_NOTICE`, sent as is) with the reply prefixed
        by `RECOVERED_PREFIX` (it may already have reached the chat), and the marker is cleared;
        the start-up ledger sweep delivers it once (seed §7). Sessions without a marker are untouched.
        With `only_keys`, only those sessions' markers are recovered (a takeover of one session
        on a shared engine: `claims.ClaimOps.claim_session`).

        Returns:
            The session keys marked resume_pending.
        """
        marked: list[str] = []
        async with self._locks.hold_all():
            now_ts = self._now().timestamp()
            for marker in await self._b().turn_markers():
                key = marker.session_key
                if only_keys is not None and key not in only_keys:
                    continue
                if now_ts - marker.started_ts > max_age_seconds:
                    log.info("turn marker of %s is stale (%.0f s); cleared without resuming",
                             key, now_ts - marker.started_ts)
                    await self._b().end_turn(key)
                    continue
                reply = await self._b().reply_row_after(marker.session_id, marker.message_id)
                if reply is not None:
                    await self._adopt_orphan_reply(key, marker.session_id, reply)
                    continue
                # A drain's reason (restart_timeout, shutdown_timeout) is more specific: kept.
                if await self._mark_resume_locked(key, "restart_interrupted", clear_marker=True, keep_reason=True):
                    marked.append(key)
                else:
                    await self._b().end_turn(key)
        return marked

    async def _adopt_orphan_reply(self, key: str, session_id: str, reply: StoredMessage) -> None:
        """A persisted reply of a marked turn: make sure the ledger owes it, clear the marker."""
        backend = self._b()
        if await backend.obligation_for_message(reply.id) is None:
            entry = await self._load(key)
            content = text_owed(reply.content, internal=False)
            ob = None
            if content:
                if content != SILENT_NOTICE:  # the fixed notice is not the reply: sent as is
                    content = recovered_text(content)
                ob = self._obligation(key, session_id, entry.origin if entry else None, content, False, None,
                                      message_id=reply.id)
                log.warning("turn of %s has a saved reply that was never recorded for delivery; "
                            "it will be re-sent", key)
            await backend.record_reply(key, session_id, None, ob)
        else:
            await backend.end_turn(key)

    async def accept_inbound(self, platform: str, chat_id: str, message_id: str) -> bool:
        """Dedupe-only record of `(platform, chat_id, message_id)` (docs/behaviour.md §5), without the
        event: for callers that persist the message elsewhere. The gateway runner uses
        `accept_inbound_event`, which also makes the message durable.

        Returns:
            True the first time, False when it was accepted before (also across restarts).
        """
        now = self._now()
        accepted = await self._b().intake_accept(str(platform), str(chat_id), str(message_id), None, None,
                                                 format_timestamp(now), now.timestamp(), done=True)
        return accepted is not None
