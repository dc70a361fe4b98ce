"""Background work and wake-ups bound to a session: the one core API for plugins and tools
(docs/behaviour.md §10; seed §8 "clearing").

A running gateway has one `SessionWork` (`app.background`, e.g. from the `hermes_startup(app)`
hook). A plugin or tool uses it to:

* `await work.start(source, coroutine, name=...)` — run `coroutine` as background work of the
  session `source` belongs to. The work is recorded under the session key **and the session id
  current when it started**. If the coroutine returns a non-empty str, that text is posted as a
  wake-up bound to that session id (a background completion). `/stop`, `/new` and `/reset` stop
  (cancel) the key's work; a stop is idempotent, and a stopped unit comes back as a completion
  with status "interrupted" (`INTERRUPTED_TEXT`, then the partial output the work returned if
  it caught the cancellation), kept in its session's transcript. While work runs, the key counts as active, so
  pruning never removes its route (`SessionStore.has_active_processes_fn`).
* `await work.post_wakeup(source, text, session_id=None)` — post a wake-up (a scheduled
  notify+wake, a completion noticed elsewhere), bound to `session_id` or, by default, to the
  session the key points at now.

A wake-up is an internal event: durable like every inbound message (an intake row, replayed
after a crash), it enters the session's queue, never interrupts or steers, and survives `/new`,
`/reset` and `/stop`. When it is processed and its key points at another session (or its session
was stopped), it does not run there: its text is appended to its own session's transcript and
nothing is delivered.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Coroutine

from ..model.events import INTERNAL, MessageEvent
from ..model.source import SessionSource

log = logging.getLogger(__name__)

# Message ids of wake-ups (unique, so the intake's dedupe never merges two of them).
WAKE_ID_PREFIX = "wake:"
# The completion a stopped unit comes back with (seed §8: status "interrupted", with the partial
# output the work returned when it caught the stop, on the lines after).
INTERRUPTED_TEXT = "Background work {name!r} was stopped (status=interrupted)."

Poster = Callable[[str, MessageEvent], Awaitable[bool]]


@dataclass(eq=False)
class WorkHandle:
    """One unit of background work: its name, the session key and session id it belongs to,
    and its task (`stopped` is True once `/stop`, `/new`, `/reset` or shutdown cancelled it)."""

    name: str
    session_key: str
    session_id: str
    task: asyncio.Task | None = field(default=None, repr=False)
    stopped: bool = False

    @property
    def done(self) -> bool:
        return self.task is not None and self.task.done()


class SessionWork:
    """The background work of a gateway's sessions (module docstring).

    Args:
        store: the open SessionStore (`session_key(source)`, `get_entry(key)`,
            `get_or_create_session(source)`).
        post: `(session_key, event) -> awaitable bool`: accepts an internal event durably and
            queues it (the runner's `post_internal`); False for a duplicate.
    """

    def __init__(self, store: Any, post: Poster) -> None:
        self._store = store
        self._post = post
        self._work: dict[str, list[WorkHandle]] = {}
        self._closing = False  # a shutdown stops work without a completion for the chat

    async def _current_session(self, source: SessionSource) -> tuple[str, str]:
        key = self._store.session_key(source)
        entry = await self._store.get_entry(key)
        if entry is None:  # a chat that never talked: its first session starts now
            entry = await self._store.get_or_create_session(source)
        return key, entry.session_id

    async def start(self, source: SessionSource, work: Coroutine[Any, Any, Any], *,
                    name: str = "background") -> WorkHandle:
        """Run `work` as background work of `source`'s session (module docstring).

        Args:
            source: the SessionSource of the chat the work is for (routes the completion).
            work: a coroutine; a non-empty str result is posted as a wake-up bound to the session
                id current now. Cancellation (a stop) posts nothing; an exception is logged and
                posts nothing.
            name: a label for logs.
        Returns:
            The WorkHandle (its task is running).
        Raises:
            StoreError: the store failed (the coroutine is closed, nothing runs).
        """
        try:
            key, session_id = await self._current_session(source)
        except BaseException:
            work.close()
            raise
        handle = WorkHandle(name, key, session_id)
        handle.task = asyncio.create_task(self._run(handle, source, work), name=f"background:{name}:{key}")
        self._work.setdefault(key, []).append(handle)
        handle.task.add_done_callback(lambda _task: self._forget(handle))
        log.info("background work %r started for session %s", name, session_id)
        return handle

    async def _run(self, handle: WorkHandle, source: SessionSource, work: Coroutine[Any, Any, Any]) -> None:
        try:
            result = await work
        except asyncio.CancelledError:
            log.info("background work %r of %s stopped", handle.name, handle.session_id)
            if handle.stopped and not self._closing:
                await self._report_interrupted(handle, source, None)
            raise
        except Exception as exc:  # the work's own failure: logged, the gateway goes on
            log.error("background work %r of %s failed: %s: %s", handle.name, handle.session_id,
                      type(exc).__name__, exc)
            return
        if handle.stopped and not self._closing:  # it caught the stop and returned what it had
            await self._report_interrupted(handle, source, result if isinstance(result, str) else None)
        elif isinstance(result, str) and result.strip():
            await self.post_wakeup(source, result, session_id=handle.session_id)

    async def _report_interrupted(self, handle: WorkHandle, source: SessionSource, partial: str | None) -> None:
        """A unit stopped by `/stop`, `/new` or `/reset` comes back as a completion bound to its
        session (seed §8): `INTERRUPTED_TEXT`, then the partial output if it returned any. Its
        session is stopped or no longer current, so the wake-up is kept in that session's
        transcript and nothing is delivered (docs/behaviour.md §10)."""
        text = INTERRUPTED_TEXT.format(name=handle.name)
        if partial and partial.strip():
            text += "\n" + partial
        try:
            await self.post_wakeup(source, text, session_id=handle.session_id)
        except Exception as exc:  # the stop itself stands; only the record of it is missing
            log.error("background work %r of %s: its interrupted completion could not be recorded: %s",
                      handle.name, handle.session_id, exc)

    def _forget(self, handle: WorkHandle) -> None:
        handles = self._work.get(handle.session_key, [])
        if handle in handles:
            handles.remove(handle)
        if not handles:
            self._work.pop(handle.session_key, None)

    async def post_wakeup(self, source: SessionSource, text: str, *, session_id: str | None = None) -> bool:
        """Post a wake-up for `source`'s session key, bound to `session_id` (default: the session
        the key points at now). Durable before this returns.

        Returns:
            True when it was accepted.
        Raises:
            ValueError: `text` is empty.
            StoreError / sqlite3.Error / OSError: it could not be persisted.
        """
        if not text or not text.strip():
            raise ValueError("a wake-up needs a text")
        if session_id is None:
            key, session_id = await self._current_session(source)
        else:
            key = self._store.session_key(source)
        event = MessageEvent(source=source, text=text, kind=INTERNAL, bound_session_id=session_id,
                             message_id=WAKE_ID_PREFIX + uuid.uuid4().hex)
        accepted = await self._post(key, event)
        log.info("wake-up posted for session %s", session_id)
        return accepted

    def stop(self, session_key: str) -> int:
        """Stop (cancel) every unit of background work of `session_key` (`/stop`, `/new`,
        `/reset`). Idempotent. Returns how many were running."""
        count = 0
        for handle in list(self._work.get(session_key, [])):
            if handle.task is not None and not handle.task.done() and not handle.stopped:
                handle.stopped = True
                handle.task.cancel()
                count += 1
        if count:
            log.info("stopped %d background work unit(s) of %s", count, session_key)
        return count

    def active(self, session_key: str) -> bool:
        """True while background work of `session_key` runs (`has_active_processes_fn`)."""
        return any(not h.done and not h.stopped for h in self._work.get(session_key, []))

    async def aclose(self) -> None:
        """Stop all work and wait for it (gateway shutdown). Idempotent."""
        self._closing = True
        tasks = [h.task for hs in self._work.values() for h in hs if h.task is not None]
        for key in list(self._work):
            self.stop(key)
        await asyncio.gather(*tasks, return_exceptions=True)
