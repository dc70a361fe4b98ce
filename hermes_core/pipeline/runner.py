"""GatewayRunner: the inbound handler of every adapter (seed §3, §7, §8;
docs/behaviour.md §0, §5).

`handle(event)` validates one inbound MessageEvent, records the identity aliases it carries
(`store.record_aliases`, before the key is built), persists it durably (the whole event, in the
same write as its dedupe id: `store.accept_inbound_event`) and places it in its session's queue
(`busy.SessionQueue`); it returns once the message is durable, so an adapter may acknowledge the
platform. A plain message for an idle session is accepted in the transaction that begins its
turn instead (`_folds`; docs/behaviour.md §12 "Three commits per message"): `handle` then waits
for that write, and a duplicate found there ends the turn with nothing written. Each session key
has at most one worker task, which runs that session's jobs one at a
time: different sessions run concurrently, and an exception in one job is reported to its chat
and logged without stopping that worker or any other. When a job ends (turn completed, failed,
interrupted, or the message refused) its intake rows are finished; a job that never ran
(process killed, drain timed out) stays in the intake and is replayed at the next start, in
arrival order per session (`restore_intake`).

Bad input: an empty or whitespace-only message is ignored; a message id already
accepted for the same platform and chat is not answered again — checked first, so a
redelivered over-long message gets no second notice —; a message longer than
`[core] max_input_chars` (for a command: its argument) is refused with a notice stating the limit.
The refused message is accepted without its text: its intake row holds its dedupe id and its
length (`REFUSED_LENGTH`), enough for the one notice, also after a restart, and never the
megabytes no turn will read.

Busy input (seed §8; docs/behaviour.md §5, §10, §11) — where an accepted event goes is decided by
one pure function, `placement.place` (the session's queue and running job + the event → a
`Placement`); this module applies it: appends or merges the job, interrupts the running turn,
sends the acknowledgement, answers read-only commands at once, hands a follow-up to the running
turn (`busy_input_mode = "steer"`, `Agent.steer`) and, for `/new`, `/reset`, `/stop`, clears the
queue and stops the session's background work (`deps.background`). The interrupted turn keeps its
user message in the transcript; its partial reply is not delivered and it owes the chat nothing
more (the acknowledgement, or the /stop and /new replies, already tell the user).

Wake-ups (docs/behaviour.md §10): an internal event is bound to a session id (the one current when
it is accepted, unless the poster bound it: `post_internal`, used by `sdk.SessionWork`). It runs
only while its key still points at that session; otherwise its text is appended to its own
session's transcript and nothing is delivered; an unbound wake-up does not run (fail closed).

Edits and deletions of still-queued messages (docs/behaviour.md §5): adapters call `edit_queued` /
`withdraw_queued`; the queued text is replaced in place, or the message withdrawn, in the queue
and in its intake row. The message is found by canonical chat and sender ids, in any queue
(`_find_queued`). A message no longer queued is not touched (False is returned; the adapter
applies its `edits_as_turns` policy).

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
from typing import Any, Awaitable, Callable, Iterable

from ..model.events import INTERNAL as INTERNAL_KIND
from ..model.events import MessageEvent, event_from_dict, event_to_dict
from ..store import StoreError, is_damaged, is_disk_full
from ..store.backend import LeaseLostError, lease_scope
from . import commands
from .busy import COMMAND, CONTROL, INTERNAL, STEERED_TEXT, TURN, Acceptance, Job, SessionQueue
from .placement import ANSWER_NOW, CLEAR_SLOT, FRONT, HAND_TO_TURN, MERGE, MODES, Placement, place
from .deps import PipelineDeps, maybe_await
from .ledger import OutcomeRecorder, redeliver, send_obligation
from .notices import INTERNAL_ERROR, failure_notice
from .turn import run_turn

log = logging.getLogger(__name__)

TOO_LONG_TEXT = ("Message refused: it is {length} characters long and the limit is {limit} characters "
                 "(core.max_input_chars). Please shorten it.")
# Key added to a merged burst's intake payload: the rows it stands for (sealed at a replay).
MERGED_FROM = "merged_from"
# Key added to the intake payload of a message refused as too long (its text is not kept): the
# length, in characters, its notice states.
REFUSED_LENGTH = "refused_length"


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


class GatewayRunner:
    """Routes inbound events to per-session queues and workers (module docstring).

    Args:
        deps: the gateway's services (config, open store, plugin manager, agent, adapters).
        paused: workers wait for `release()` before running any job (start-up recovery).
    """

    # Seconds between retries of an interrupt that found no agent call running yet (the turn was
    # still recording its user message): the interrupt must not be lost in that window.
    INTERRUPT_RETRY_S = 0.02
    # Longest wait of a delivery report that came before its reply's outcome was written, in
    # seconds (`settle_sent_message`): bounded so a stuck write cannot hold the platform's
    # request that carried the report.
    REPORT_WAIT_S = 10.0

    def __init__(self, deps: PipelineDeps, *, paused: bool = False) -> None:
        self.deps = deps
        self._workers: dict[str, _Worker] = {}
        # Acknowledgements, immediate command answers, interrupt retries: tracked so `join()`
        # and `drain()` wait for (or cancel) them too.
        self._side: set[asyncio.Task] = set()
        # The outcomes of replies sent, recorded together off the sessions' paths (a side task).
        self._outcomes = OutcomeRecorder(deps.store, self._side_task)
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
        # Placed rows finished in the store since the last `forget_settled` (a replica sweep's
        # next read of the open rows cannot return them any more); without a sweep, a finished
        # row is forgotten at once. Either way `_placed` holds only what is open: a
        # long-running gateway does not keep an id per message it ever answered.
        self._settled: list[int] = []

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
        if event.is_internal and event.bound_session_id is None:
            # A wake-up belongs to the session current when it is accepted (docs/behaviour.md §10).
            entry = await maybe_await(self.deps.store.get_entry(key))
            if entry is not None:
                event = replace(event, bound_session_id=entry.session_id)
        refused_length = self._over_limit(event)
        data = None
        if refused_length is not None:
            # Refused before it is written (docs/behaviour.md §5 "Bad input"): no turn reads the
            # text, and a 20-million-character line would grow state.db by as many bytes.
            event = replace(event, text="")
            data = event_to_dict(event)
            data[REFUSED_LENGTH] = refused_length
        # Dedupe before anything else answers: a redelivery gets nothing, not even a notice.
        folded = data is None and self._folds(key, event)
        if folded:
            inbound_id = await self._accept_in_turn(key, event)
        else:
            await self._after_folded_acceptance(key)
            inbound_id = await self.deps.store.accept_inbound_event(key, data or event_to_dict(event))
        if inbound_id is None:
            log.info("duplicate message %s in %s ignored", event.message_id, key)
            self.deps.metrics.message(event.source.platform, "deduplicated")
            return
        self.deps.metrics.message(event.source.platform, "accepted")
        if folded:
            return  # its turn is running
        if self._closed:
            # Durable but not run now: the adapter may acknowledge it, the next start replays it.
            log.warning("message from %s arrived while shutting down; kept for the next start",
                        event.source.platform)
            return
        if self.admit is not None and not await self.admit(key, inbound_id):
            return  # durable; the session's holder (or the takeover just queued) runs it
        await self._place(key, event, inbound_id, live=True, refused_length=refused_length)

    def _folds(self, key: str, event: MessageEvent) -> bool:
        """True when `event` is accepted in the transaction that begins its turn (docs/behaviour.md
        §12: one commit less per message) rather than in a write of its own first: a plain
        message for an idle session of this process (no job queued or running, nothing to tell
        or reset first), where the turn starting at once is exactly what its placement would
        decide. A command, wake-up or album part is accepted first (and an over-long message:
        `handle` does not ask)."""
        return (self.admit is None and self._gate.is_set() and not self._closed and key not in self._workers
                and not event.is_command and not event.is_internal and not event.media
                and self.deps.store.continues_plainly(key))

    async def _accept_in_turn(self, key: str, event: MessageEvent) -> int | None:
        """Start `event`'s turn with its acceptance folded into the turn's first write and wait
        for that write. Returns the intake id, or None for a duplicate (nothing was stored and
        the turn ends there). Raises what kept it from being stored (nothing accepted)."""
        acceptance = Acceptance(event_to_dict(event), asyncio.get_running_loop().create_future())
        await self._place(key, event, None, live=True, acceptance=acceptance)
        return await acceptance.result

    async def _after_folded_acceptance(self, key: str) -> None:
        """Wait while a message of `key` is being accepted with its turn (`_accept_in_turn`), so
        that this one is accepted after it: intake ids keep arrival order, and a second copy of
        that message is found a duplicate (never placed behind it, interrupting it or told it is
        queued). Its outcome is that message's own caller's: nothing is raised here."""
        worker = self._workers.get(key)
        if worker is None:
            return
        jobs = (worker.current, *worker.queue.jobs)
        waiting = [job.acceptance.result for job in jobs
                   if job is not None and job.acceptance is not None and job.acceptance.pending]
        if waiting:
            await asyncio.wait(waiting)

    def placed(self, inbound_id: int, *, or_reserved: bool = True) -> bool:
        """True when intake row `inbound_id` was placed in a queue of this runner (and its job
        not abandoned) or, with `or_reserved`, is being admitted."""
        return inbound_id in self._placed or (or_reserved and inbound_id in self._reserved)

    def forget_settled(self) -> None:
        """Forget the placed intake rows finished since the last call. A replica sweep calls it
        just before it reads the open rows (`store.pending_inbound`): each of these rows was
        finished in a committed write before that read, so no read from then on returns it,
        while a row finished after this call stays `placed` until the next one (a read begun
        earlier may still hold it)."""
        self._placed.difference_update(self._settled)
        self._settled.clear()

    def _settle(self, inbound_ids: Iterable[int]) -> None:
        """Intake rows `inbound_ids` are finished in the store (`forget_settled`)."""
        if self.admit is None:
            self._placed.difference_update(inbound_ids)
        else:
            self._settled.extend(inbound_ids)

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
        self.deps.metrics.message(event.source.platform, "denied")
        if refusal.notice:
            self._side_task(self._send_notice(self.deps.store.session_key(event.source), event,
                                              refusal.notice, session_id=None))
        return True

    def _over_limit(self, event: MessageEvent) -> int | None:
        """`event`'s length in characters when it is over `[core] max_input_chars`, else None.
        A command is measured by its argument (the part that may reach the agent). A wake-up is
        never over it: the limit is on what people send, and a wake-up is the gateway's own event
        (a background unit's result, docs/behaviour.md §10), which no one in the chat could shorten."""
        if event.is_internal:
            return None
        measured = len(event.command()[1]) if event.is_command else len(event.text or "")
        return measured if measured > self.deps.config.core.max_input_chars else None

    def _too_long(self, key: str, event: MessageEvent, refused_length: int | None) -> str | None:
        """The refusal notice of a message over the limit, logged and counted; None for one
        within it. `refused_length`: the length `handle` found (the text is no longer there);
        None → `event` is measured (a wake-up, an intake row written before lengths were)."""
        length = refused_length if refused_length is not None else self._over_limit(event)
        if length is None:
            return None
        limit = self.deps.config.core.max_input_chars
        log.info("message of %d characters refused in %s (limit %d)", length, key, limit)
        self.deps.metrics.message(event.source.platform, "refused")
        return TOO_LONG_TEXT.format(length=length, limit=limit)

    async def _place(self, key: str, event: MessageEvent, inbound_id: int | None, *, live: bool,
                     sealed: bool = False, acceptance: Acceptance | None = None,
                     refused_length: int | None = None) -> None:
        """Put one accepted event into `key`'s queue: `placement.place` decides, this applies it
        (module docstring).

        Args:
            live: a message arriving now (may interrupt, acknowledge, answer at once); False for
                the start-up replay, which only rebuilds the queue in arrival order.
            sealed: a burst that was already merged before a restart (never merged again).
            acceptance: `event` is not stored yet; its turn's first write accepts it (`_folds`
                holds, so it is appended as a turn of an idle session).
            refused_length: `event` was refused as too long (`REFUSED_LENGTH`): its length in
                characters, for the notice.
        """
        worker = self._workers.get(key)
        if worker is None:
            worker = self._workers[key] = _Worker()
        if inbound_id is not None:
            self._placed.add(inbound_id)
            self._reserved.discard(inbound_id)
        queue = worker.queue
        where = place(queue, worker.current, event, mode=self._mode(event), live=live and self._gate.is_set(),
                      too_long=self._too_long(key, event, refused_length), sealed=sealed,
                      can_steer=bool(getattr(self.deps.agent, "can_steer", False)))
        if where.action == ANSWER_NOW:
            self._side_task(self._answer_now(key, event, inbound_id, text=where.notice))
            return
        if where.action == FRONT:
            removed = self._place_control(key, worker, event, inbound_id, where, live=live)
            self._start(key, worker)
            await self._finish_ids([i for job in removed for i in job.inbound_ids])
            return
        ack = where.ack
        if where.action == MERGE:
            queue.jobs[-1].parts.append((event, inbound_id))
        elif where.action == HAND_TO_TURN and self._steer(key, worker, event, inbound_id):
            ack = STEERED_TEXT
        else:
            if where.action == HAND_TO_TURN:
                ack = where.fallback_ack
            turn_event = replace(event, text=where.text) if where.text is not None else event
            queue.append(Job(turn_event, kind=where.kind, notice=where.notice, inbound_id=inbound_id,
                             from_queue=where.from_queue, sealed=where.sealed, acceptance=acceptance))
        if where.interrupt:
            self._interrupt(key, worker)
        if ack is not None:
            self._side_task(self._notify(key, event, ack))
        self._start(key, worker)

    def _steer(self, key: str, worker: _Worker, event: MessageEvent, inbound_id: int | None) -> bool:
        """Hand a follow-up to the running turn (`busy_input_mode = "steer"`). True when the agent
        took it: the message then belongs to the running job (recorded with its turn, its intake
        row finished with it); False → the caller queues it."""
        running = worker.current
        if running is None or not self.deps.agent.steer(key, event.text):
            return False
        running.steered.append((event, inbound_id))
        log.info("follow-up handed to the running turn in %s", key)
        return True

    def _mode(self, event: MessageEvent) -> str:
        """The busy-input mode for `event`: its adapter's `busy_input_mode` (by default its
        `AdapterSpec.busy_input_mode`; "interrupt", "queue", "steer" or "sequential") when set,
        else `[core] busy_input_mode`."""
        adapter = self.deps.adapters.get(event.source.platform)
        override = getattr(adapter, "busy_input_mode", None)
        if override in MODES:
            return override
        return self.deps.config.core.busy_input_mode

    def _place_control(self, key: str, worker: _Worker, event: MessageEvent, inbound_id: int | None,
                       where: Placement, *, live: bool) -> list[Job]:
        """`/new`, `/reset`, `/stop` (seed §8 `_interrupt_and_clear_session`): clear or drop the
        queued human messages, interrupt the running turn, stop the session's background work
        (docs/behaviour.md §10), and queue the command ahead of the rest. Returns the removed jobs
        (the caller finishes their intake rows)."""
        queue = worker.queue
        removed = queue.drop_slot_follow_up() if where.clear == CLEAR_SLOT else queue.clear_human()
        interrupted = where.interrupt and self._interrupt(key, worker)
        background = self.deps.background.stop(key) if live and self.deps.background is not None else 0
        # Messages, not jobs: a merged burst dropped by /stop is every message it holds.
        job = Job(event, kind=CONTROL, inbound_id=inbound_id, dropped=sum(1 + len(j.parts) for j in removed),
                  stopped=bool(interrupted or removed or background))
        queue.add_control(job)
        if removed:
            log.info("/%s in %s cleared %d queued message(s)", event.command()[0], key, len(removed))
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
            refused_length = row["event"].get(REFUSED_LENGTH)
            await self._place(key, event, row["id"], live=False, sealed=bool(row["event"].get(MERGED_FROM)),
                              refused_length=refused_length if isinstance(refused_length, int) else None)
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
        located = self._find_queued(source, message_id)
        if located is None:
            return False
        key, _worker, (job, index) = located
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
        located = self._find_queued(source, message_id)
        if located is None:
            return False
        key, worker, found = located
        inbound_id = worker.queue.withdraw(*found)
        await self._finish_ids([inbound_id] if inbound_id is not None else [])
        log.info("queued message %s in %s withdrawn", message_id, key)
        return True

    def _find_queued(self, source: Any, message_id: str) -> tuple[str, _Worker, tuple[Job, int]] | None:
        """Where the queued message an edit or a deletion names is (docs/behaviour.md §5 "Edits
        and deletions"): `(session key, worker, (job, index))`, or None when it is not queued.

        A queued message matches when it has the same platform, message id and thread, the same
        chat and, when `source` names one, the same sender, chat and sender compared by their
        canonical ids (`store.canonical_id`: the aliases and normalisation the session key uses),
        so a change addressed by another form of the same id finds it (a WhatsApp LID vs phone
        JID, a Signal number vs UUID). It is looked for in `source`'s own session first, then in
        every other queue: the original may be queued under another key (queued before an alias
        was learned), or `source` names no sender (a Discord deletion names no author, and a
        per-user channel's key needs one; docs/adapters.md D-T12).
        """
        store = self.deps.store
        platform, thread = source.platform, source.thread_id or None
        chat = store.canonical_id(platform, "chat", source.chat_id)
        sender = store.canonical_id(platform, "user", source.participant_id)

        def same_message(event: MessageEvent) -> bool:
            origin = event.source
            return (event.message_id == message_id and origin.platform == platform
                    and (origin.thread_id or None) == thread
                    and store.canonical_id(platform, "chat", origin.chat_id) == chat
                    and (sender is None or store.canonical_id(platform, "user", origin.participant_id) == sender))

        key = store.session_key(source)
        own = self._workers.get(key)
        others = [(k, w) for k, w in self._workers.items() if w is not own]
        for where, worker in ([(key, own)] if own is not None else []) + others:
            found = worker.queue.find(same_message)
            if found is not None:
                return where, worker, found
        return None

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
        still recording its user message), keep retrying until it starts, the turn's reply is
        recorded or the job ends."""
        job = worker.current
        if job is None:
            return False
        if not self.deps.agent.interrupt(key):
            self._side_task(self._keep_interrupting(key, worker, job))
        log.info("running turn in %s interrupted", key)
        self.deps.metrics.interrupt(job.event.source.platform if job.event is not None else "unknown")
        return True

    async def _keep_interrupting(self, key: str, worker: _Worker, job: Job) -> None:
        # Also reached when the agent call had already ended (the follow-up came just before the
        # reply was recorded): once it is recorded there is no reply left to interrupt, and a later
        # agent call of this job (the compression summary) must not be cut off.
        while worker.current is job and not job.answered and not self.deps.agent.interrupt(key):
            await asyncio.sleep(self.INTERRUPT_RETRY_S)

    def _side_task(self, coro: Any) -> asyncio.Task:
        task = asyncio.create_task(coro)
        self._side.add(task)
        self._idle.clear()
        task.add_done_callback(self._side_done)
        return task

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
                answer = (await commands.run_command(self.deps, key, event, queue_depth=self.queue_depth(key))).text
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
                if self._closed:
                    # A stop is draining: the running job may finish, no new one starts (what the
                    # stop promised the chat). What is queued stays in the intake for the next start.
                    self._leave_queued(key, worker)
                    break
                # An album at the tail waits for its other parts (they merge into it meanwhile);
                # then the queue is looked at again (a /stop may have cleared it).
                tail = worker.queue.jobs[-1]
                wait = tail.album_wait() if len(worker.queue) == 1 else 0.0
                if wait > 0:
                    await asyncio.sleep(wait)
                    continue
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
                    if self._not_accepted(key, job, exc):
                        continue
                    if is_disk_full(exc):  # one line, not a traceback per message (docs/behaviour.md §12)
                        log.error("job failed in %s: disk full (%s)", key, " ".join(str(exc).split()))
                    elif is_damaged(exc):  # what to do, not a traceback: it fails every message alike
                        log.error("job failed in %s: state.db is damaged (%s): `hermes-gateway doctor` names the "
                                  "damage; stop the gateway and restore state.db from a backup (docs/operations.md "
                                  "§1)", key, " ".join(str(exc).split()))
                    else:
                        log.exception("job failed in %s", key)
                    if job.event is not None:
                        notice = failure_notice(self.deps.pm, self.deps.config, INTERNAL_ERROR, job.event.source, exc)
                        await self._notify(key, job.event, notice)
                    await self._finish_ids(job.open_inbound_ids, finished=job.finished)
                else:
                    await self._finish_ids(job.open_inbound_ids, finished=job.finished)
                finally:
                    worker.current = None
                    if job.acceptance is not None:  # still pending here: the job ended before its write
                        self._not_accepted(key, job, StoreError("the gateway stopped before the message was stored"))
        finally:
            # No await between the emptiness check above and this removal, so no job is stranded.
            if self._workers.get(key) is worker:
                del self._workers[key]
            self._update_idle()

    def _leave_queued(self, key: str, worker: _Worker) -> None:
        """Leave `worker`'s queued jobs to the next start (a stop is draining): their intake rows
        stay and are replayed then; a message not stored yet (its acceptance was to be folded
        into its turn) is refused, so the adapter does not acknowledge it."""
        jobs = worker.queue.take_all()
        stopped = StoreError("the gateway stopped before the message was stored")
        for job in jobs:
            self._not_accepted(key, job, stopped)
        log.warning("shutdown: %d queued message(s) in %s were not processed; they stay in the intake and run "
                    "at the next start", len(jobs), key)

    @staticmethod
    def _not_accepted(key: str, job: Job, exc: BaseException) -> bool:
        """When `job`'s message was never stored (its folded acceptance did not commit), make
        `handle` raise `exc` — the adapter does not acknowledge, the platform delivers it again —
        and return True: nothing is told to the chat and no intake row is left to finish. Not
        logged here: `handle` raises `exc` to the adapter, which reports the refusal in one line,
        as for a message whose own acceptance write failed (docs/operations.md §4)."""
        if job.acceptance is None or not job.acceptance.pending:
            return False
        job.acceptance.failed(exc)
        return True

    async def _finish_ids(self, inbound_ids: list[int], *, finished: Iterable[int] = ()) -> None:
        """Finish intake rows `inbound_ids` (a failure is logged: the row is replayed once more
        after a restart, and stays `placed` until then). Those finished, and those in `finished`
        (the job's own writes finished them), are settled (`_settle`)."""
        settled = list(finished)
        for inbound_id in inbound_ids:
            try:
                await self.deps.store.finish_inbound(inbound_id)
                settled.append(inbound_id)
            except Exception as exc:  # the job ran; at worst it is replayed once more after a restart
                if is_disk_full(exc):
                    log.error("could not finish inbound row %s: disk full", inbound_id)
                else:
                    log.exception("could not finish inbound row %s", inbound_id)
        self._settle(settled)

    async def _run_job(self, key: str, job: Job) -> None:
        event = job.event
        if job.obligation is not None:
            await redeliver(self.deps, job.obligation, recorder=self._outcomes)
        elif job.notice is not None:
            await self._notify(key, event, job.notice)
        elif job.resume:
            await run_turn(self.deps, key, event, resume=True,
                           on_answered=lambda: setattr(job, "answered", True))
        elif job.kind in (CONTROL, COMMAND):
            result = await commands.run_command(self.deps, key, event, queue_depth=self.queue_depth(key),
                                                stopped=job.stopped, dropped=job.dropped, inbound_id=job.inbound_id)
            if result.obligation_id is not None:
                # Owed since the command's change committed (/undo, /compress): sent and marked
                # as a turn's reply is, so a crash before the send leaves it to the start-up sweep.
                # That change also finished the command's intake row: nothing more to write for it.
                if job.inbound_id is not None:
                    job.finished.add(job.inbound_id)
                await send_obligation(self.deps, result.obligation_id, event.source, result.text, session_key=key,
                                      session_id=result.session_id, reply_to=event.message_id, kind="notice",
                                      attempting=True, recorder=self._outcomes)
            else:
                await self._notify(key, event, result.text)
            if result.turn_begun:
                # /retry recorded the rewound message again with its turn marker (one transaction
                # with the rewind: a crash from there on is the turn's recovery, never a second
                # /retry); it is answered as this job's turn, its intake row finished with the
                # reply; /new and /stop may interrupt it, a follow-up waits (from_queue).
                job.kind, job.from_queue = TURN, True
                await self._turn(key, job, event, inbound_id=job.inbound_id, begun=True)
        elif job.kind == INTERNAL and not await self._wake_up_is_current(key, event):
            return
        else:
            turn_event = job.merged_event()
            if job.parts and job.inbound_id is not None:
                # Written down before the turn starts: a crash from here on replays the merged
                # event once (the absorbed rows are finished in the same write).
                data = event_to_dict(turn_event)
                data[MERGED_FROM] = job.inbound_ids
                absorbed = [i for _, i in job.parts if i is not None]
                await self.deps.store.merge_inbound(job.inbound_id, data, absorbed)
                job.finished.update(absorbed)
                log.info("%d follow-ups merged into one turn in %s", len(job.parts) + 1, key)
            await self._turn(key, job, turn_event, inbound_id=job.inbound_id)

    async def _turn(self, key: str, job: Job, event: MessageEvent, *, inbound_id: int | None = None,
                    begun: bool = False) -> None:
        """Run `job`'s turn for `event`. Follow-ups handed to it (steer) that the agent did not
        take before it ended are queued next, in order, as turns of their own."""
        def answered() -> None:  # the reply's transaction also finished the turn's intake row
            job.answered = True
            if inbound_id is not None:
                job.finished.add(inbound_id)

        def accepted(new_id: int | None) -> None:  # the turn's first write accepted the message
            nonlocal inbound_id
            inbound_id = job.inbound_id = new_id
            if new_id is not None:
                self._placed.add(new_id)
            job.acceptance.accepted(new_id)

        acceptance = job.acceptance
        result = await run_turn(self.deps, key, event, inbound_id=inbound_id, begun=begun,
                                steered=job.steered, on_answered=answered,
                                accept_event=acceptance.event if acceptance is not None and acceptance.pending else None,
                                on_accepted=accepted, recorder=self._outcomes)
        job.finished.update(i for _, i in job.steered[:result.steered_used] if i is not None)
        leftover = job.steered[result.steered_used:]
        if leftover:
            del job.steered[result.steered_used:]
            worker = self._workers.get(key)
            if worker is not None:
                for index, (steer_event, steer_id) in enumerate(leftover):
                    worker.queue.insert_after_control(Job(steer_event, kind=TURN, inbound_id=steer_id), index)
                log.info("%d follow-up(s) the turn in %s did not take are queued next", len(leftover), key)

    async def _wake_up_is_current(self, key: str, event: MessageEvent) -> bool:
        """A wake-up runs only in the session it is bound to (docs/behaviour.md §10). When `key`
        now points at another session (`/new`, `/reset`, a switch) or its session is suspended
        (`/stop`: the next message starts a new one), the wake-up's text is appended to its own
        session's transcript and nothing is delivered; an unbound wake-up (its session could not
        be decided) does not run at all (fail closed). Returns True when it may run."""
        bound = event.bound_session_id
        entry = await maybe_await(self.deps.store.get_entry(key))
        if bound is not None and entry is not None and entry.session_id == bound and not entry.suspended:
            return True
        if bound is None:
            log.warning("wake-up in %s has no session binding; not run (fail closed)", key)
            return False
        if await self.deps.store.session_info(bound) is None:
            log.warning("wake-up for unknown session %s in %s; not run", bound, key)
            return False
        # A system row: kept for that session's context, never taken for a user turn (/undo, /retry).
        await self.deps.store.append_to_transcript(bound, {"role": "system", "content": event.text,
                                                           "timestamp": event.received_at})
        self.deps.agent_cache.invalidate_session(bound)
        log.info("wake-up for session %s kept in its transcript; %s now points elsewhere, nothing delivered",
                 bound, key)
        return False

    async def post_internal(self, key: str, event: MessageEvent) -> bool:
        """Accept one internal wake-up for `key` (the background-work API, `sdk.SessionWork`):
        durable like every inbound message, then queued (it never interrupts or steers).

        Args:
            event: an internal MessageEvent with `bound_session_id` and a unique `message_id`.
        Returns:
            False when it was a duplicate (same message id), else True.
        Raises:
            StoreError / sqlite3.Error / OSError: it could not be persisted (nothing accepted).
        """
        inbound_id = await self.deps.store.accept_inbound_event(key, event_to_dict(event))
        if inbound_id is None:
            return False
        if not self._closed:
            await self._place(key, event, inbound_id, live=True)
        return True

    async def _notify(self, key: str, event: MessageEvent, text: str) -> None:
        # The session id only labels the notice's delivery; a store that fails here (often why a
        # job failed: a server store out of reach) must not cost the notice, nor — raised from the
        # worker's error handling — the worker and the jobs queued behind (docs/behaviour.md §5).
        try:
            entry = await maybe_await(self.deps.store.get_entry(key))
        except Exception as exc:
            log.warning("notice to %s sent without its session id: the store failed (%s)", key,
                        " ".join(str(exc).split()) or type(exc).__name__)
            entry = None
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

    async def settle_sent_message(self, platform: str, message_id: str, status: str,
                                  error: str | None = None) -> int | None:
        """Apply a platform's delivery report about a message the gateway sent: what the app binds
        as every adapter's `report_delivery` (docs/behaviour.md §6 "Delivery reports").
        Arguments and errors are `SessionStore.settle_sent_message`'s.

        Returns:
            The id of the obligation the report changed, or None (no obligation sent that
            message, or it changed nothing): `BaseAdapter.report_delivery`'s contract.

        A reply's sent message ids reach its obligation with its outcome, which is recorded off
        the session's path (`OutcomeRecorder`, docs/behaviour.md §12) after the whole send, so
        a report can arrive before them and find no obligation. When that happens while
        outcomes wait to be written, or while the send that sent the message goes on (a later
        chunk still being sent), the report waits for that outcome's write (at most
        `REPORT_WAIT_S` seconds in all) and is tried once more: a quick 'failed' is applied
        after the 'delivered' recorded for the send, not lost. A report that found its
        obligation, changed or not (a 'read' of one already 'delivered'), waits for nothing.
        """
        store = self.deps.store
        found = await store.settle_sent_message(platform, message_id, status, error)
        if found is None and await self._outcomes.flush(self.REPORT_WAIT_S, report=(platform, str(message_id))):
            found = await store.settle_sent_message(platform, message_id, status, error)
        return found.obligation_id if found is not None and found.changed else None

    async def drain(self, timeout: float) -> list[str]:
        """Stop accepting events and starting jobs (what is queued stays in the intake for the next
        start), wait up to `timeout` seconds for the running ones, then cancel them; the outcomes
        of replies already sent are still recorded (`OutcomeRecorder.flush`, waiting up to
        `timeout` seconds more).

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
                    self._leave_queued(key, worker)
            # The record of replies already sent is not cut off with the turns: cancelled, it
            # would leave them 'attempting', sent again at the next start as possible duplicates.
            recording = self._outcomes.task
            tasks = [w.task for w in self._workers.values() if w.task is not None] + [
                task for task in self._side if task is not recording]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            # Bounded too (as long again as the drain): a stuck write must not hold the stop up;
            # what it did not record stays 'attempting' and is sent again at the next start (§6).
            await self._outcomes.flush(timeout)
            if unwritten := self._outcomes.unwritten:
                # Said here: the process ends with the write still going on, its task cancelled
                # without a line of its own.
                log.warning("stop: the outcome of sent reply(ies) %s was not recorded within %g s more; they stay "
                            "'attempting' and are sent again %s, labelled as possible duplicates",
                            ", ".join(map(str, unwritten)), timeout, self._outcomes.recovered_by)
            return interrupted
