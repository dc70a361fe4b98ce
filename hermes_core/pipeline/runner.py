"""GatewayRunner: the inbound handler of every adapter (issue 2 item 8; seed §3, §8).

`handle(event)` validates and accepts one inbound MessageEvent and queues it on its session's
worker; it returns once the message is accepted (so an adapter may acknowledge the platform).
Each session key has at most one worker task, which runs that session's jobs strictly in order:
one turn at a time per session, different sessions concurrently, and an exception in one job is
reported to its chat and logged without stopping that worker or any other.

Bad input (issue 2): an empty or whitespace-only message is ignored; a message longer than
`[core] max_input_chars` (for a command: its argument) is refused with a notice stating the limit; a message id already
accepted for the same platform and chat is not answered again (`store.accept_inbound`).

Busy input: a message arriving while its session's turn runs waits for that turn (FIFO). The
seed §8 / SPEC.md §5 policies (interrupt-and-merge, `/queue`, durable queue in the `inbound`
table) replace `_enqueue`/`_drain` in the queueing issue; `Agent.interrupt(session_key)` and
`busy_sessions()` are the hooks for it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass

from ..model.events import MessageEvent
from . import commands
from .deps import PipelineDeps, maybe_await
from .turn import run_turn

log = logging.getLogger(__name__)

TOO_LONG_TEXT = ("Message refused: it is {length} characters long and the limit is {limit} characters "
                 "(core.max_input_chars). Please shorten it.")
ERROR_TEXT = "Sorry, this message could not be processed: {error}"


@dataclass(slots=True)
class _Job:
    event: MessageEvent
    notice: str | None = None  # set: send this notice instead of running the event


class _Worker:
    """The FIFO of one session key and the task draining it."""

    __slots__ = ("jobs", "task", "busy")

    def __init__(self) -> None:
        self.jobs: deque[_Job] = deque()
        self.task: asyncio.Task | None = None
        self.busy = False


class GatewayRunner:
    """Routes inbound events to per-session workers.

    Args:
        deps: the gateway's services (config, open store, plugin manager, agent, adapters).
    """

    def __init__(self, deps: PipelineDeps) -> None:
        self.deps = deps
        self._workers: dict[str, _Worker] = {}
        self._idle = asyncio.Event()
        self._idle.set()
        self._closed = False

    # ---- intake ------------------------------------------------------------------------------

    async def handle(self, event: MessageEvent) -> None:
        """Accept one inbound event (the adapters' `on_message` handler).

        Returns after the event is queued (or ignored/refused). Never raises for bad input;
        raises StoreError only when the dedupe record cannot be written (the adapter should not
        acknowledge the platform then).
        """
        if self._closed:
            log.warning("event from %s arrived after shutdown began; not accepted", event.source.platform)
            return
        text = event.text or ""
        if not text.strip() and not event.media:
            log.debug("empty message from %s ignored", event.source.platform)
            return
        if event.source.platform not in self.deps.adapters:
            log.error("event from platform %r, which has no running adapter; ignored", event.source.platform)
            return
        key = self.deps.store.session_key(event.source)
        limit = self.deps.config.core.max_input_chars
        # A command is measured by its argument (the part that may reach the agent).
        measured = event.command()[1] if event.is_command else text
        if len(measured) > limit:
            log.info("message of %d characters refused in %s (limit %d)", len(measured), key, limit)
            self._enqueue(key, _Job(event, notice=TOO_LONG_TEXT.format(length=len(measured), limit=limit)))
            return
        if event.message_id and not event.is_internal:
            fresh = await self.deps.store.accept_inbound(event.source.platform, event.source.chat_id,
                                                         event.message_id)
            if not fresh:
                log.info("duplicate message %s in %s ignored", event.message_id, key)
                return
        self._enqueue(key, _Job(event))

    def _enqueue(self, key: str, job: _Job) -> None:
        worker = self._workers.get(key)
        if worker is None:
            worker = self._workers[key] = _Worker()
        worker.jobs.append(job)
        self._idle.clear()
        if worker.task is None:
            worker.task = asyncio.create_task(self._drain(key, worker), name=f"session-worker:{key}")

    # ---- workers -----------------------------------------------------------------------------

    async def _drain(self, key: str, worker: _Worker) -> None:
        try:
            while worker.jobs:
                job = worker.jobs.popleft()
                worker.busy = True
                try:
                    await self._run_job(key, job)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # isolation: report, keep this worker and the others going
                    log.exception("job failed in %s", key)
                    await self._notify(key, job.event, ERROR_TEXT.format(error=f"{type(exc).__name__}: {exc}"))
                finally:
                    worker.busy = False
        finally:
            # No await between the emptiness check above and this removal, so no job is stranded.
            if self._workers.get(key) is worker:
                del self._workers[key]
            if not self._workers:
                self._idle.set()

    async def _run_job(self, key: str, job: _Job) -> None:
        event = job.event
        if job.notice is not None:
            await self._notify(key, event, job.notice)
        elif event.is_command and not event.is_internal:
            answer = await commands.run_command(self.deps, key, event)
            await self._notify(key, event, answer)
        else:
            await run_turn(self.deps, key, event)

    async def _notify(self, key: str, event: MessageEvent, text: str) -> None:
        adapter = self.deps.adapters.get(event.source.platform)
        if adapter is None:
            return
        entry = await maybe_await(self.deps.store.get_entry(key))
        try:
            await self.deps.deliverer.deliver(adapter, event.source, text, session_key=key,
                                              session_id=getattr(entry, "session_id", None),
                                              reply_to=event.message_id, kind="notice")
        except Exception:  # the notice is best effort; the failure itself is logged
            log.exception("could not send a notice to %s", key)

    # ---- state and shutdown ------------------------------------------------------------------

    def busy_sessions(self) -> list[str]:
        """Keys whose worker is running a job right now."""
        return [key for key, worker in self._workers.items() if worker.busy]

    def pending(self) -> int:
        """Jobs queued or running, over all sessions."""
        return sum(len(w.jobs) + (1 if w.busy else 0) for w in self._workers.values())

    async def join(self) -> None:
        """Wait until every queued job has run (the CLI waits for this before quitting)."""
        await self._idle.wait()

    async def drain(self, timeout: float) -> list[str]:
        """Stop accepting events, wait up to `timeout` seconds for queued jobs, then cancel the rest.

        Returns:
            The session keys whose turn was still running when the drain timed out (the app marks
            them `resume_pending` with reason `shutdown_timeout`, seed §7).
        """
        self._closed = True
        try:
            async with asyncio.timeout(timeout):
                await self._idle.wait()
            return []
        except TimeoutError:
            interrupted = self.busy_sessions()
            for key, worker in self._workers.items():
                if worker.jobs:
                    log.warning("shutdown: %d queued message(s) in %s were not processed",
                                len(worker.jobs), key)
            tasks = [w.task for w in self._workers.values() if w.task is not None]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            return interrupted
