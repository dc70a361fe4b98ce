"""Turn markers, crash recovery and durable inbound dedupe of the session store (seed §7;
SPEC.md §5, §6). Mixed into `SessionStore`."""

from __future__ import annotations

import logging
from typing import Any, Mapping

from ..model import format_timestamp, validate_session_id
from .rows import normalize_message

log = logging.getLogger(__name__)


class TurnOps:
    """Turn markers (`begin_turn` / `end_turn`), `recover_interrupted_turns` and `accept_inbound`.

    Relies on the SessionStore attributes `_b()`, `_now()`, `_lock` and `_mark_resume_locked`.
    """

    async def begin_turn(self, session_key: str, session_id: str, user_message: Mapping[str, Any]) -> None:
        """Record the user message and set the turn marker (UTC start time) in ONE transaction.

        Raises:
            ValueError: bad message or path-unsafe session id.
            StoreError: no entry for `session_key`.
        """
        validate_session_id(session_id)
        row = normalize_message(user_message, self._now)
        async with self._lock:
            await self._b().begin_turn(session_key, session_id, row, self._now().timestamp())

    async def end_turn(self, session_key: str) -> None:
        """Clear the turn marker once the final reply is recorded (or nothing is left to send)."""
        await self._b().end_turn(session_key)

    async def turn_markers(self) -> list[dict[str, Any]]:
        """Persisted in-flight turn markers: `[{"session_key", "session_id", "message_id",
        "started_ts" (epoch seconds UTC)}]`, oldest first (for the recovery sweep)."""
        return await self._b().turn_markers()

    async def recover_interrupted_turns(self, max_age_seconds: float) -> list[str]:
        """Crash recovery (seed §7): promote each persisted turn marker whose turn has no
        persisted reply to `resume_pending=True`, `resume_reason="restart_interrupted"`, and
        clear the marker. A marker older than `max_age_seconds` (SPEC.md §6:
        `max(3600, 2 × agent_timeout)`) is cleared without resuming; a suspended entry is not
        marked (marker cleared). Markers of turns whose reply was persisted are left for the
        delivery-ledger sweep. Sessions without a marker are untouched.

        Returns:
            The session keys marked resume_pending.
        """
        marked: list[str] = []
        async with self._lock:
            now_ts = self._now().timestamp()
            for marker in await self._b().turn_markers():
                key = marker["session_key"]
                if now_ts - float(marker["started_ts"]) > max_age_seconds:
                    log.info("turn marker of %s is stale (%.0f s); cleared without resuming",
                             key, now_ts - marker["started_ts"])
                    await self._b().end_turn(key)
                    continue
                if await self._b().reply_after(marker["session_id"], marker["message_id"]):
                    continue
                if await self._mark_resume_locked(key, "restart_interrupted", clear_marker=True):
                    marked.append(key)
                else:
                    await self._b().end_turn(key)
        return marked

    async def accept_inbound(self, platform: str, chat_id: str, message_id: str) -> bool:
        """Durable inbound dedupe (SPEC.md §5): record `(platform, chat_id, message_id)`.

        Returns:
            True the first time, False when it was accepted before (also across restarts).
        """
        return await self._b().accept_inbound(str(platform), str(chat_id), str(message_id),
                                              format_timestamp(self._now()))
