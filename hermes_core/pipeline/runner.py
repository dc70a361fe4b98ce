"""GatewayRunner: the inbound handler of every adapter (seed §3, §7, §8;
docs/behaviour.md §0, §5).

`handle(event)` validates one inbound MessageEvent, records the identity aliases it carries
(`store.record_aliases`, before the key is built), persists it durably (the whole event, in the
same write as its dedupe id: `store.accept_inbound_event`) and places it in its session's queue
(`busy.SessionQueue`); it returns once the message is durable, so an adapter may acknowledge the
platform. Each session key has at most one worker task, which runs that session's jobs one at a
time: different sessions run concurrently, and an exception in one job is reported to its chat
and logged without stopping that worker or any other. When a job ends (turn completed, failed,
interrupted, or the message refused) its intake rows are finished; a job that never ran
(process killed, drain timed out) stays in the intake and is replayed at the next start, in
arrival order per session (`restore_intake`).

Bad input: an empty or whitespace-only message is ignored; a message id already
accepted for the same platform and chat is not answered again — checked first, so a
redelivered over-long message gets no second notice —; a message longer than
`[core] max_input_chars` (for a command: its argument) is refused with a notice stating the limit.

Busy input (seed §8, docs/behaviour.md §5) — a message for a session whose worker is running a job:

* `[core] busy_input_mode = "interrupt"` (default): a plain follow-up opens a burst in the slot
  and interrupts the running turn (`Agent.interrupt(session_key)`) when that turn is itself an
  interruptible plain turn and nothing else waits ahead; the chat gets "Interrupting the current
  reply…" once per burst. Further follow-ups merge into the waiting burst (no second notice);
  the merged burst runs as one turn: texts joined with "\n", media appended. A follow-up that
  cannot interrupt (the running job is a `/queue` turn, a resumed turn, a command, or other work
  waits ahead) waits and gets "Queued (position N)." once per burst.
  The interrupted turn keeps its user message in the transcript; its partial reply is not
  delivered and it owes the chat nothing more (the acknowledgement above, or the /stop and /new
  replies, already tell the user).
* `"queue"`: every plain follow-up waits silently as its own turn, FIFO (as before this mode
  existed); commands behave as in interrupt mode.
* `"sequential"` — only as an adapter's override (`adapter.busy_input_mode`, e.g. the local
  terminal reading piped lines, which are a script): everything, commands included, waits in
  arrival order; no interrupts, no acknowledgements, no clearing.
* `/queue <text>` (both modes): one full turn per call, FIFO, never merged and never
  interrupted by a follow-up; "Queued (position N)." when it waits. `/queue` with no text and
  no media → "Nothing to queue: write /queue followed by your message (or attach a file)."
* `/new`, `/reset`: interrupt the running turn, clear the session's queued human messages
  (their intake rows are finished, never replayed) and run right after the interrupted turn.
  `/stop`: interrupts the running turn, drops the one-slot follow-up and marks the session
  `suspended` (the next message starts a new session id): "Stopped. Your next message starts a
  new session.", or "No active task to stop." when nothing ran or waited. Internal wake-ups
  survive all three and run right after the command.
* `/status`, `/help` and unknown commands are answered at once, without waiting for the
  running turn; `/status` adds "Queued: N" (the queue depth) when N > 0.
* Edits and deletions of still-queued messages (docs/behaviour.md §5): adapters call `edit_queued` /
  `withdraw_queued`; the queued text is replaced in place, or the message withdrawn, in the
  queue and in its intake row. A message no longer queued is not touched (False is returned;
  the adapter applies its `edits_as_turns` policy).

Durability: every queued message is an intake row. A merged burst is written down
(`store.merge_inbound`) just before its turn starts; bursts still waiting at a crash are merged
again at the replay, because the replay places the pending rows through the same rules.

Start-up (seed §7): the app creates the runner `paused`, queues the recovery jobs
(`enqueue_redelivery`, `enqueue_resume`, `restore_intake`) before any adapter starts, then
`release()`s it: per session, recovered work runs before new input.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Any, Awaitable, Callable

from ..model.events import INTERNAL as INTERNAL_KIND
from ..model.events import MessageEvent, event_from_dict, event_to_dict
from ..store import is_disk_full
from ..store.backend import LeaseLostError, lease_scope
from . import commands
from .busy import (BURST, COMMAND, CONTROL, CONTROL_COMMANDS, INTERNAL, INTERRUPTING_TEXT, QUEUE_EMPTY_TEXT,
                   QUEUED_TEXT, TURN, Job, SessionQueue)
from .deps import PipelineDeps, maybe_await
from .ledger import redeliver
from .notices import INTERNAL_ERROR, failure_notice
from .turn import run_turn

log = logging.getLogger(__name__)

TOO_LONG_TEXT = ("Message refused: it is {length} characters long and the limit is {limit} characters "
                 "(core.max_input_chars). Please shorten it.")
# Busy-input modes (`[core] busy_input_mode`, or the adapter's override: `AdapterSpec.busy_input_mode`).
INTERRUPT, QUEUE, SEQUENTIAL = "interrupt", "queue", "sequential"
# Key added to a merged burst's intake payload: the rows it stands for (sealed at a replay).
MERGED_FROM = "merged_from"


class _Worker:
    """The queue of one session key, the job it is running and the task draining it."""

    __slots__ = ("queue", "task", "current")

    def __init__(self) -> None:
        self.queue = SessionQueue()
        self.task: asyncio.Task | None = None
        self.current: Job | None = None

    @property
    def busy(self) -> bool:
        return self.current is not None


def _is_agent_turn(job: Job | None) -> bool:
    """True for a job that runs the agent and has not answered yet (what a follow-up, `/new`,
    `/reset`, `/stop` interrupt)."""
    return (job is not None and job.event is not None and job.obligation is None and job.notice is None
            and job.kind in (BURST, TURN, INTERNAL) and not job.answered)


class GatewayRunner:
    """Routes inbound events to per-session queues and workers (module docstring).

    Args:
        deps: the gateway's services (config, open store, plugin manager, agent, adapters).
        paused: workers wait for `release()` before running any job (start-up recovery).
    """

    # Seconds between retries of an interrupt that found no agent call running yet (the turn was
    # still recording its user message): the interrupt must not be lost in that window.
    INTERRUPT_RETRY_S = 0.02

    def __init__(self, deps: PipelineDeps, *, paused: bool = False) -> None:
        self.deps = deps
        self._workers: dict[str, _Worker] = {}
        # Acknowledgements, immediate command answers, interrupt retries: tracked so `join()`
        # and `drain()` wait for (or cancel) them too.
        self._side: set[asyncio.Task] = set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._closed = False
        # Workers wait for this before running anything: start-up queues recovered work first.
        self._gate = asyncio.Event()
        if not paused:
            self._gate.set()
        # On a shared store: `(session_key, inbound_id) -> bool`, whether this replica runs an
        # accepted message now (`replicas.ReplicaCoordinator.admit`); None runs everything.
        self.admit: Callable[[str, int], Awaitable[bool]] | None = None
        # Intake rows placed in a queue here (a sweep of a shared store never places one twice;
        # forgotten when a lost lease abandons their jobs), and rows being admitted.
        self._placed: set[int] = set()
        self._reserved: set[int] = set()

    def release(self) -> None:
        """Let the workers run (after start-up recovery queued its jobs and adapters started)."""
        self._gate.set()

    # ---- intake ------------------------------------------------------------------------------

    async def handle(self, event: MessageEvent) -> None:
        """Accept one inbound event (the adapters' `on_message` handler).

        Returns after the event is durable and placed in its session's queue (or ignored /
        refused); acknowledgements and immediate command answers are sent by background tasks.
        Never raises for bad input; raises StoreError / sqlite3.Error / OSError only when the
        event cannot be persisted (the adapter must not acknowledge the platform then: nothing
        was accepted).
        """
        text = event.text or ""
        if not text.strip() and not event.media:
            log.debug("empty message from %s ignored", event.source.platform)
            return
        if event.source.platform not in self.deps.adapters:
            log.error("event from platform %r, which has no running adapter; ignored", event.source.platform)
            return
        if self._refused(event):
            return
        if event.aliases:
            # Before the key: the key, pseudonyms and owner scoping use the canonical ids
            # (docs/behaviour.md §4). A failed write raises: nothing is accepted then.
            await self.deps.store.record_aliases(event.aliases)
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
        if self.admit is not None and not await self.admit(key, inbound_id):
            return  # durable; the session's holder (or the takeover just queued) runs it
        await self._place(key, event, inbound_id, live=True)

    def placed(self, inbound_id: int, *, or_reserved: bool = True) -> bool:
        """True when intake row `inbound_id` was placed in a queue of this runner (and its job
        not abandoned) or, with `or_reserved`, is being admitted."""
        return inbound_id in self._placed or (or_reserved and inbound_id in self._reserved)

    def reserve(self, inbound_id: int, reserved: bool = True) -> None:
        """Mark row `inbound_id` as being admitted (a concurrent sweep leaves it alone), or
        not any more (`reserved=False`)."""
        if reserved:
            self._reserved.add(inbound_id)
        else:
            self._reserved.discard(inbound_id)

    def _refused(self, event: MessageEvent) -> bool:
        """docs/behaviour.md §9: True when the sender may not talk to the agent; then nothing
        is stored and the refusal notice (if one is owed) is sent in the background."""
        try:
            refusal = self.deps.access.check(event)
        except Exception:  # a broken hermes_authorize fails closed
            log.exception("access decision failed on %s; message refused", event.source.platform)
            return True
        if refusal is None:
            return False
        if refusal.notice:
            self._side_task(self._send_notice(self.deps.store.session_key(event.source), event,
                                              refusal.notice, session_id=None))
        return True

    def _too_long(self, key: str, event: MessageEvent) -> str | None:
        limit = self.deps.config.core.max_input_chars
        # A command is measured by its argument (the part that may reach the agent).
        measured = event.command()[1] if event.is_command else (event.text or "")
        if len(measured) > limit:
            log.info("message of %d characters refused in %s (limit %d)", len(measured), key, limit)
            return TOO_LONG_TEXT.format(length=len(measured), limit=limit)
        return None

    async def _place(self, key: str, event: MessageEvent, inbound_id: int | None, *, live: bool,
                     sealed: bool = False) -> None:
        """Put one accepted event into `key`'s queue by the busy-input rules (module docstring).

        Args:
            live: a message arriving now (may interrupt, acknowledge, answer at once); False for
                the start-up replay, which only rebuilds the queue in arrival order.
            sealed: a burst that was already merged before a restart (never merged again).
        """
        worker = self._workers.get(key)
        if worker is None:
            worker = self._workers[key] = _Worker()
        if inbound_id is not None:
            self._placed.add(inbound_id)
            self._reserved.discard(inbound_id)
        queue, running = worker.queue, worker.current
        mode = self._mode(event)
        # "Busy": this message cannot run right now because its session is doing something.
        # (A turn that already answered is only sending and writing down: not busy for this.)
        busy = live and self._gate.is_set() and ((running is not None and not running.answered) or len(queue) > 0)
        notice = self._too_long(key, event)
        if notice is not None:
            queue.append(Job(event, kind=COMMAND, notice=notice, inbound_id=inbound_id))
        elif event.is_internal:
            queue.append(Job(event, kind=INTERNAL, inbound_id=inbound_id))
        elif mode == SEQUENTIAL:
            # A script of lines: each waits for the previous answer, commands included.
            kind = COMMAND if event.is_command and event.command()[0] != "queue" else TURN
            from_queue = kind == TURN and event.is_command
            if from_queue:
                event = replace(event, text=event.command()[1])
            if kind == TURN and not event.text and not event.media:
                queue.append(Job(event, kind=COMMAND, notice=QUEUE_EMPTY_TEXT, inbound_id=inbound_id))
            else:
                queue.append(Job(event, kind=kind, inbound_id=inbound_id, from_queue=from_queue))
        elif event.is_command:
            name, arg = event.command()
            if name in CONTROL_COMMANDS:
                removed = self._place_control(key, worker, event, inbound_id, name, live=live)
                self._start(key, worker)
                await self._finish_ids([i for job in removed for i in job.inbound_ids])
                return
            if name == "queue":
                if not arg and not event.media:
                    log.info("empty /queue in %s rejected", key)
                    if busy:  # the rejection need not wait for the running turn
                        self._side_task(self._answer_now(key, event, inbound_id, text=QUEUE_EMPTY_TEXT))
                        return
                    queue.append(Job(event, kind=COMMAND, notice=QUEUE_EMPTY_TEXT, inbound_id=inbound_id))
                else:
                    position = queue.append(Job(replace(event, text=arg), kind=TURN, inbound_id=inbound_id,
                                                from_queue=True))
                    if busy:
                        self._side_task(self._notify(key, event, QUEUED_TEXT.format(position=position)))
            elif busy:
                # Read-only answers need not wait for the running turn (and /status shows the queue).
                self._side_task(self._answer_now(key, event, inbound_id))
                return
            else:
                queue.append(Job(event, kind=COMMAND, inbound_id=inbound_id))
        elif mode == QUEUE:
            # "As before": each follow-up waits silently for its own turn, in arrival order.
            queue.append(Job(event, kind=TURN, inbound_id=inbound_id))
        elif sealed:
            queue.append(Job(event, kind=BURST, inbound_id=inbound_id, sealed=True))
        else:
            _, merged = queue.add_follow_up(event, inbound_id)
            if busy and not merged:
                if len(queue) == 1 and running is not None and running.kind == BURST and _is_agent_turn(running):
                    self._interrupt(key, worker)
                    self._side_task(self._notify(key, event, INTERRUPTING_TEXT))
                else:
                    self._side_task(self._notify(key, event, QUEUED_TEXT.format(position=len(queue))))
        self._start(key, worker)

    def _mode(self, event: MessageEvent) -> str:
        """The busy-input mode for `event`: its adapter's `busy_input_mode` (by default its
        `AdapterSpec.busy_input_mode`; "interrupt", "queue" or "sequential") when set, else
        `[core] busy_input_mode`."""
        adapter = self.deps.adapters.get(event.source.platform)
        override = getattr(adapter, "busy_input_mode", None)
        if override in (INTERRUPT, QUEUE, SEQUENTIAL):
            return override
        return self.deps.config.core.busy_input_mode

    def _place_control(self, key: str, worker: _Worker, event: MessageEvent, inbound_id: int | None,
                       name: str, *, live: bool) -> list[Job]:
        """`/new`, `/reset`, `/stop` (seed §8 `_interrupt_and_clear_session`): clear or drop the
        queued human messages, interrupt the running turn, and queue the command ahead of the
        rest. Returns the removed jobs (the caller finishes their intake rows)."""
        queue = worker.queue
        removed = queue.drop_slot_follow_up() if name == "stop" else queue.clear_human()
        interrupted = live and _is_agent_turn(worker.current) and self._interrupt(key, worker)
        job = Job(event, kind=CONTROL, inbound_id=inbound_id, dropped=len(removed),
                  stopped=bool(interrupted or removed))
        queue.add_control(job)
        if removed:
            log.info("/%s in %s cleared %d queued message(s)", name, key, len(removed))
        return removed

    async def restore_intake(self, rows: list[dict[str, Any]]) -> int:
        """Queue the intake rows a previous run accepted but never finished (seed §7 start-up;
        docs/behaviour.md §5), in the order given (`store.pending_inbound()`: arrival order), through the
        same busy-input rules as live messages (a waiting burst merges again, a `/new` clears
        what preceded it) but without interrupts or acknowledgements.

        A 'running' row's turn already began (its user message is in the transcript): turn-marker
        recovery owns it (resume or ledger), so it is finished here, not replayed. A row whose
        platform has no running adapter is kept for a later start.

        Returns:
            The number of rows queued for replay.
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
            await self._place(key, event, row["id"], live=False,
                              sealed=bool(row["event"].get(MERGED_FROM)))
            queued += 1
        return queued

    async def edit_queued(self, source: Any, message_id: str, text: str) -> bool:
        """An edit of a message that is still queued (docs/behaviour.md §5): its queued text becomes
        `text`, same position (a `/queue` message keeps being one turn: "/queue new text" or
        just "new text" both replace its argument). Written to its intake row, so a restart
        replays the edited text.

        Args:
            source: the SessionSource of the edited message (routes it to its session).
            message_id: the platform id of the edited message.
            text: the new full text.
        Returns:
            True when a queued message was edited; False when it is not queued (already running,
            answered, or unknown): the adapter then applies its platform's edit policy
            (`edits_as_turns`).
        """
        key = self.deps.store.session_key(source)
        worker = self._workers.get(key)
        found = worker.queue.find(source.chat_id, message_id) if worker is not None else None
        if found is None:
            return False
        job, index = found
        old, inbound_id = (job.event, job.inbound_id) if index < 0 else job.parts[index]
        # The intake row keeps the message as sent (a /queue message stays a /queue command, so a
        # replay rebuilds the same job); the job keeps what the agent will get.
        turn_text = row_text = text
        if job.from_queue:
            name, arg = replace(old, text=text).command()
            turn_text, row_text = (arg, text) if name == "queue" else (text, "/queue " + text)
        if not turn_text.strip() and not old.media:
            return await self.withdraw_queued(source, message_id)
        new = replace(old, text=turn_text)
        if index < 0:
            job.event = new
        else:
            job.parts[index] = (new, inbound_id)
        if inbound_id is not None:
            await self.deps.store.merge_inbound(inbound_id, event_to_dict(replace(old, text=row_text)), [])
        log.info("queued message %s in %s edited", message_id, key)
        return True

    async def withdraw_queued(self, source: Any, message_id: str) -> bool:
        """A deletion of a message that is still queued (docs/behaviour.md §5): it is withdrawn (its
        intake row finished, never replayed; a burst keeps its other messages).

        Returns:
            True when a queued message was withdrawn; False when it is not queued.
        """
        key = self.deps.store.session_key(source)
        worker = self._workers.get(key)
        found = worker.queue.find(source.chat_id, message_id) if worker is not None else None
        if found is None:
            return False
        inbound_id = worker.queue.withdraw(*found)
        await self._finish_ids([inbound_id] if inbound_id is not None else [])
        log.info("queued message %s in %s withdrawn", message_id, key)
        return True

    def enqueue_resume(self, key: str, entry: Any) -> None:
        """Queue the auto-continue of `entry`'s interrupted turn (seed §7): an internal event
        from the stored origin, processed once."""
        event = MessageEvent(source=entry.origin, text="", kind=INTERNAL_KIND)
        self._append(key, Job(event, kind=INTERNAL, resume=True))

    def enqueue_redelivery(self, obligation: dict[str, Any]) -> None:
        """Queue the re-send of one open ledger obligation (`store.open_obligations()` item)."""
        self._append(obligation["session_key"], Job(None, kind=INTERNAL, obligation=obligation))

    def _append(self, key: str, job: Job) -> None:
        worker = self._workers.get(key)
        if worker is None:
            worker = self._workers[key] = _Worker()
        worker.queue.append(job)
        self._start(key, worker)

    def _start(self, key: str, worker: _Worker) -> None:
        self._idle.clear()
        if worker.task is None:
            worker.task = asyncio.create_task(self._drain(key, worker), name=f"session-worker:{key}")

    # ---- interrupts, acknowledgements, immediate answers ---------------------------------------

    def _interrupt(self, key: str, worker: _Worker) -> bool:
        """Interrupt `worker`'s running turn. If the agent call has not started yet (the turn is
        still recording its user message), keep retrying until it starts or the job ends."""
        job = worker.current
        if job is None:
            return False
        if not self.deps.agent.interrupt(key):
            self._side_task(self._keep_interrupting(key, worker, job))
        log.info("running turn in %s interrupted", key)
        return True

    async def _keep_interrupting(self, key: str, worker: _Worker, job: Job) -> None:
        while worker.current is job and not self.deps.agent.interrupt(key):
            await asyncio.sleep(self.INTERRUPT_RETRY_S)

    def _side_task(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._side.add(task)
        self._idle.clear()
        task.add_done_callback(self._side_done)

    def _side_done(self, task: asyncio.Task) -> None:
        self._side.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task failed: %r", task.exception())
        self._update_idle()

    def _update_idle(self) -> None:
        if not self._workers and not self._side:
            self._idle.set()

    async def _answer_now(self, key: str, event: MessageEvent, inbound_id: int | None,
                          text: str | None = None) -> None:
        """Answer `event` (a read-only command, or with `text`) without waiting for the running
        job, then finish its intake row."""
        answer = text
        if answer is None:
            try:
                answer = await commands.run_command(self.deps, key, event, queue_depth=self.queue_depth(key))
            except Exception as exc:  # isolation: report like a failed job (detail in the log only)
                log.exception("command failed in %s", key)
                answer = failure_notice(self.deps.pm, self.deps.config, INTERNAL_ERROR, event.source, exc)
        await self._notify(key, event, answer)
        await self._finish_ids([inbound_id] if inbound_id is not None else [])

    # ---- workers -----------------------------------------------------------------------------

    async def _drain(self, key: str, worker: _Worker) -> None:
        try:
            await self._gate.wait()
            while worker.queue:
                job = worker.queue.popleft()
                worker.current = job
                try:
                    with lease_scope():  # the job writes under the lease tokens it started with
                        await self._run_job(key, job)
                except asyncio.CancelledError:
                    # Not finished: the intake row stays and is replayed (or resumed) at the next start.
                    raise
                except LeaseLostError as exc:
                    # The session was taken over while this job ran (this replica stalled past
                    # its lease): nothing more of the job may be written or sent. Its intake rows
                    # stay for the holder, whose takeover recovery resumes the turn; later jobs
                    # fence on their own.
                    self._placed.difference_update(job.inbound_ids)
                    log.error("%s; the job in %s is abandoned to the session's holder", exc, key)
                except Exception as exc:  # isolation: report, keep this worker and the others going
                    if is_disk_full(exc):  # one line, not a traceback per message (docs/behaviour.md §12)
                        log.error("job failed in %s: disk full (%s)", key, " ".join(str(exc).split()))
                    else:
                        log.exception("job failed in %s", key)
                    if job.event is not None:
                        notice = failure_notice(self.deps.pm, self.deps.config, INTERNAL_ERROR, job.event.source, exc)
                        await self._notify(key, job.event, notice)
                    await self._finish_ids(job.inbound_ids)
                else:
                    await self._finish_ids(job.inbound_ids)
                finally:
                    worker.current = None
        finally:
            # No await between the emptiness check above and this removal, so no job is stranded.
            if self._workers.get(key) is worker:
                del self._workers[key]
            self._update_idle()

    async def _finish_ids(self, inbound_ids: list[int]) -> None:
        for inbound_id in inbound_ids:
            try:
                await self.deps.store.finish_inbound(inbound_id)
            except Exception as exc:  # the job ran; at worst it is replayed once more after a restart
                if is_disk_full(exc):
                    log.error("could not finish inbound row %s: disk full", inbound_id)
                else:
                    log.exception("could not finish inbound row %s", inbound_id)

    async def _run_job(self, key: str, job: Job) -> None:
        event = job.event
        if job.obligation is not None:
            await redeliver(self.deps, job.obligation)
        elif job.notice is not None:
            await self._notify(key, event, job.notice)
        elif job.resume:
            await run_turn(self.deps, key, event, resume=True,
                           on_answered=lambda: setattr(job, "answered", True))
        elif job.kind == CONTROL:
            answer = await commands.run_control(self.deps, key, event, stopped=job.stopped, dropped=job.dropped)
            await self._notify(key, event, answer)
        elif job.kind == COMMAND:
            answer = await commands.run_command(self.deps, key, event, queue_depth=self.queue_depth(key))
            await self._notify(key, event, answer)
        else:
            turn_event = job.merged_event()
            if job.parts and job.inbound_id is not None:
                # Written down before the turn starts: a crash from here on replays the merged
                # event once (the absorbed rows are finished in the same write).
                data = event_to_dict(turn_event)
                data[MERGED_FROM] = job.inbound_ids
                await self.deps.store.merge_inbound(job.inbound_id, data, [i for _, i in job.parts if i is not None])
                log.info("%d follow-ups merged into one turn in %s", len(job.parts) + 1, key)
            await run_turn(self.deps, key, turn_event, inbound_id=job.inbound_id,
                           on_answered=lambda: setattr(job, "answered", True))

    async def _notify(self, key: str, event: MessageEvent, text: str) -> None:
        entry = await maybe_await(self.deps.store.get_entry(key))
        await self._send_notice(key, event, text, session_id=getattr(entry, "session_id", None))

    async def _send_notice(self, key: str, event: MessageEvent, text: str, *, session_id: str | None) -> None:
        adapter = self.deps.adapters.get(event.source.platform)
        if adapter is None:
            return
        try:
            await self.deps.deliverer.deliver(adapter, event.source, text, session_key=key, session_id=session_id,
                                              reply_to=event.message_id, kind="notice")
        except Exception:  # the notice is best effort; the failure itself is logged
            log.exception("could not send a notice to %s", key)

    # ---- state and shutdown ------------------------------------------------------------------

    def busy_sessions(self) -> list[str]:
        """Keys whose worker is running a job right now."""
        return [key for key, worker in self._workers.items() if worker.busy]

    def queue_depth(self, session_key: str) -> int:
        """Jobs waiting for `session_key` behind the running one (seed §8 `_queue_depth`: overflow
        + 1 if the slot is occupied; a merged burst counts once)."""
        worker = self._workers.get(session_key)
        return worker.queue.depth if worker is not None else 0

    def pending(self) -> int:
        """Jobs queued or running, over all sessions."""
        return sum(len(w.queue) + (1 if w.busy else 0) for w in self._workers.values())

    async def join(self) -> None:
        """Wait until every queued job and every acknowledgement has run (the CLI waits for this
        before quitting)."""
        while True:
            await self._idle.wait()
            # A side task may have finished just as a worker started; re-check before returning.
            if not self._workers and not self._side:
                return
            self._idle.clear()
            self._update_idle()

    async def drain(self, timeout: float) -> list[str]:
        """Stop accepting events, wait up to `timeout` seconds for queued jobs, then cancel the rest.

        Returns:
            The session keys whose turn was still running when the drain timed out (the app marks
            them `resume_pending` with reason `shutdown_timeout`, seed §7).
        """
        self._closed = True
        try:
            async with asyncio.timeout(timeout):
                await self.join()
            return []
        except TimeoutError:
            interrupted = self.busy_sessions()
            for key, worker in self._workers.items():
                if worker.queue:
                    log.warning("shutdown: %d queued message(s) in %s were not processed; they stay "
                                "in the intake and run at the next start", len(worker.queue), key)
            tasks = [w.task for w in self._workers.values() if w.task is not None] + list(self._side)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            return interrupted
