"""GatewayRunner: the inbound handler of every adapter (issue 2 item 8; seed §3, §7, §8;
SPEC.md §0, §5).

`handle(event)` validates one inbound MessageEvent, persists it durably (the whole event, in the
same write as its dedupe id: `store.accept_inbound_event`) and queues it on its session's
worker; it returns once the message is durable, so an adapter may acknowledge the platform.
Each session key has at most one worker task, which runs that session's jobs strictly in order:
one turn at a time per session, different sessions concurrently, and an exception in one job is
reported to its chat and logged without stopping that worker or any other. When a job ends
(turn completed, failed, or the message refused) its intake row is finished; a job that never
ran (process killed, drain timed out) stays in the intake and is replayed at the next start,
in arrival order per session (`restore_intake`).

Bad input (issue 2): an empty or whitespace-only message is ignored; a message id already
accepted for the same platform and chat is not answered again — checked first, so a
redelivered over-long message gets no second notice —; a message longer than
`[core] max_input_chars` (for a command: its argument) is refused with a notice stating the limit.

Start-up (seed §7): the app creates the runner `paused`, queues the recovery jobs
(`enqueue_redelivery`, `enqueue_resume`, `restore_intake`) before any adapter starts, then
`release()`s it: per session, recovered work runs before new input.

Busy input: a message arriving while its session's turn runs waits for that turn (FIFO). The
seed §8 / SPEC.md §5 policies (interrupt-and-merge, `/queue`) replace `_enqueue`/`_drain` in the
queueing issue; `Agent.interrupt(session_key)` and `busy_sessions()` are the hooks for it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass
from typing import Any

from ..model.events import INTERNAL, MessageEvent
from . import commands
from .deps import PipelineDeps, maybe_await
from .intake import event_from_dict, event_to_dict
from .ledger import redeliver
from .turn import run_turn

log = logging.getLogger(__name__)

TOO_LONG_TEXT = ("Message refused: it is {length} characters long and the limit is {limit} characters "
                 "(core.max_input_chars). Please shorten it.")
ERROR_TEXT = "Sorry, this message could not be processed: {error}"


@dataclass(slots=True)
class _Job:
    event: MessageEvent | None
    notice: str | None = None  # set: send this notice instead of running the event
    inbound_id: int | None = None  # the durable intake row, finished when the job ends
    resume: bool = False  # auto-continue of an interrupted turn (seed §7)
    obligation: dict[str, Any] | None = None  # set: re-send this open ledger obligation


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
        paused: workers wait for `release()` before running any job (start-up recovery).
    """

    def __init__(self, deps: PipelineDeps, *, paused: bool = False) -> None:
        self.deps = deps
        self._workers: dict[str, _Worker] = {}
        self._idle = asyncio.Event()
        self._idle.set()
        self._closed = False
        # Workers wait for this before running anything: start-up queues recovered work first.
        self._gate = asyncio.Event()
        if not paused:
            self._gate.set()

    def release(self) -> None:
        """Let the workers run (after start-up recovery queued its jobs and adapters started)."""
        self._gate.set()

    # ---- intake ------------------------------------------------------------------------------

    async def handle(self, event: MessageEvent) -> None:
        """Accept one inbound event (the adapters' `on_message` handler).

        Returns after the event is durable and queued (or ignored/refused). Never raises for
        bad input; raises StoreError / sqlite3.Error / OSError only when the event cannot be
        persisted (the adapter must not acknowledge the platform then: nothing was accepted).
        """
        text = event.text or ""
        if not text.strip() and not event.media:
            log.debug("empty message from %s ignored", event.source.platform)
            return
        if event.source.platform not in self.deps.adapters:
            log.error("event from platform %r, which has no running adapter; ignored", event.source.platform)
            return
        key = self.deps.store.session_key(event.source)
        # Dedupe before anything else answers: a redelivery gets nothing, not even a notice.
        inbound_id = await self.deps.store.accept_inbound_event(key, event_to_dict(event))
        if inbound_id is None:
            log.info("duplicate message %s in %s ignored", event.message_id, key)
            return
        if self._closed:
            # Durable but not run now: the adapter may acknowledge it, the next start replays it.
            log.warning("message from %s arrived while shutting down; kept for the next start",
                        event.source.platform)
            return
        self._enqueue(key, self._job_for(key, event, inbound_id))

    def _job_for(self, key: str, event: MessageEvent, inbound_id: int | None) -> _Job:
        limit = self.deps.config.core.max_input_chars
        # A command is measured by its argument (the part that may reach the agent).
        measured = event.command()[1] if event.is_command else (event.text or "")
        if len(measured) > limit:
            log.info("message of %d characters refused in %s (limit %d)", len(measured), key, limit)
            return _Job(event, notice=TOO_LONG_TEXT.format(length=len(measured), limit=limit),
                        inbound_id=inbound_id)
        return _Job(event, inbound_id=inbound_id)

    async def restore_intake(self, rows: list[dict[str, Any]]) -> int:
        """Queue the intake rows a previous run accepted but never finished (seed §7 start-up;
        SPEC.md §5), in the order given (`store.pending_inbound()`: arrival order).

        A 'running' row's turn already began (its user message is in the transcript): turn-marker
        recovery owns it (resume or ledger), so it is finished here, not replayed. A row whose
        platform has no running adapter is kept for a later start.

        Returns:
            The number of messages queued for replay.
        """
        queued = 0
        for row in rows:
            if row["state"] == "running":
                await self.deps.store.finish_inbound(row["id"])
                continue
            try:
                event = event_from_dict(row["event"])
            except (KeyError, TypeError, ValueError) as exc:
                log.error("inbound row %s cannot be replayed (%s); dropped", row["id"], exc)
                await self.deps.store.finish_inbound(row["id"])
                continue
            if event.source.platform not in self.deps.adapters:
                log.warning("inbound row %s is for platform %s, which is not running; kept",
                            row["id"], event.source.platform)
                continue
            key = row.get("session_key") or self.deps.store.session_key(event.source)
            self._enqueue(key, self._job_for(key, event, row["id"]))
            queued += 1
        return queued

    def enqueue_resume(self, key: str, entry: Any) -> None:
        """Queue the auto-continue of `entry`'s interrupted turn (seed §7): an internal event
        from the stored origin, processed once."""
        event = MessageEvent(source=entry.origin, text="", kind=INTERNAL)
        self._enqueue(key, _Job(event, resume=True))

    def enqueue_redelivery(self, obligation: dict[str, Any]) -> None:
        """Queue the re-send of one open ledger obligation (`store.open_obligations()` item)."""
        self._enqueue(obligation["session_key"], _Job(None, obligation=obligation))

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
            await self._gate.wait()
            while worker.jobs:
                job = worker.jobs.popleft()
                worker.busy = True
                try:
                    await self._run_job(key, job)
                except asyncio.CancelledError:
                    # Not finished: the intake row stays and is replayed (or resumed) at the next start.
                    raise
                except Exception as exc:  # isolation: report, keep this worker and the others going
                    log.exception("job failed in %s", key)
                    if job.event is not None:
                        await self._notify(key, job.event, ERROR_TEXT.format(error=f"{type(exc).__name__}: {exc}"))
                    await self._finish(job)
                else:
                    await self._finish(job)
                finally:
                    worker.busy = False
        finally:
            # No await between the emptiness check above and this removal, so no job is stranded.
            if self._workers.get(key) is worker:
                del self._workers[key]
            if not self._workers:
                self._idle.set()

    async def _finish(self, job: _Job) -> None:
        if job.inbound_id is None:
            return
        try:
            await self.deps.store.finish_inbound(job.inbound_id)
        except Exception:  # the job ran; at worst it is replayed once more after a restart
            log.exception("could not finish inbound row %s", job.inbound_id)

    async def _run_job(self, key: str, job: _Job) -> None:
        event = job.event
        if job.obligation is not None:
            await redeliver(self.deps, job.obligation)
        elif job.notice is not None:
            await self._notify(key, event, job.notice)
        elif job.resume:
            await run_turn(self.deps, key, event, resume=True)
        elif event.is_command and not event.is_internal:
            answer = await commands.run_command(self.deps, key, event)
            await self._notify(key, event, answer)
        else:
            await run_turn(self.deps, key, event, inbound_id=job.inbound_id)

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
                    log.warning("shutdown: %d queued message(s) in %s were not processed; they stay "
                                "in the intake and run at the next start", len(worker.jobs), key)
            tasks = [w.task for w in self._workers.values() if w.task is not None]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            return interrupted
