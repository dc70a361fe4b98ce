"""Busy input: the per-session queue of work waiting behind the running job (seed §8; docs/behaviour.md §5).

The seed keeps a one-event "next-up" slot (`_pending_messages`) and a FIFO overflow
(`_queued_events`). Here both live in one ordered deque of `Job`s per session key: the head is
the slot, the rest the overflow, so the queue depth is `len(queue)` =
`len(overflow) + (1 if slot occupied else 0)` (seed §8 "queue depth"). No I/O happens here; where
an event goes is decided by `placement.place`, and the runner (`runner.py`) persists, interrupts
and acknowledges.

Kinds of queued jobs (`Job.kind`):

* `BURST` — human follow-ups in `busy_input_mode = "interrupt"`. A follow-up arriving while the
  last queued item is an *open* burst from the same sender is merged into it (texts joined in
  order with "\\n", media appended: "burst collapse" never discards a message). A burst is
  sealed when it starts running; the next follow-up opens a new one.
* `TURN` — one full turn that is never merged: each `/queue <text>`, and each plain message in
  `busy_input_mode = "queue"`.
* `INTERNAL` — gateway-made work (internal wake-ups, resumed turns, ledger re-sends). Survives
  `/new`, `/reset` and `/stop` (seed §8 "clearing").
* `CONTROL` — `/new`, `/reset`, `/stop` (`commands.COMMANDS`): placed ahead of everything else (after earlier control
  commands), so they run right after the interrupted turn and the surviving internal wake-ups
  right after them.
* `COMMAND` — other commands and notices (refusals), run in arrival order.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from ..model.events import REPLY_FIELDS, USER, MessageEvent

BURST = "burst"
TURN = "turn"
INTERNAL = "internal"
CONTROL = "control"
COMMAND = "command"

# Acknowledgements (docs/behaviour.md §5 "acknowledgements are truthful").
INTERRUPTING_TEXT = "Interrupting the current reply…"
QUEUED_TEXT = "Queued (position {position})."
QUEUE_EMPTY_TEXT = "Nothing to queue: write /queue followed by your message (or attach a file)."
STEER_FALLBACK_TEXT = "Queued (position {position}): this assistant cannot take a message while it replies."
STEERED_TEXT = "Added to the current reply."
STOPPED_TEXT = "Stopped. Your next message starts a new session."
NOTHING_TO_STOP_TEXT = "No active task to stop."
DROPPED_TEXT = "Dropped {count} queued message(s)."

# How long the first part of an album waits for the rest before its turn starts (seconds). A
# platform delivers an album's parts as separate updates within a fraction of a second (Telegram:
# one update per photo, same `media_group_id`); without the wait the first part's turn could start
# alone and the rest would follow as another turn (docs/behaviour.md §5).
ALBUM_WINDOW_S = 0.5


@dataclass(slots=True, eq=False)
class Acceptance:
    """The durable acceptance of a message folded into the write that begins its turn (its
    session was idle: docs/behaviour.md §12). `event`: the event as `store.accept_inbound_event`
    takes it; `result`: what `GatewayRunner.handle` waits for — the intake id once that write
    committed (None: a duplicate, nothing written), or the exception that kept it from being
    stored (the adapter must not acknowledge the platform then)."""

    event: dict[str, Any]
    result: asyncio.Future

    @property
    def pending(self) -> bool:
        """Neither stored nor refused yet."""
        return not self.result.done()

    def accepted(self, inbound_id: int | None) -> None:
        """The write committed: `inbound_id` is the intake row (None: a duplicate)."""
        if self.pending:
            self.result.set_result(inbound_id)

    def failed(self, exc: BaseException) -> None:
        """The message was not stored: `handle` raises `exc`."""
        if self.pending:
            self.result.set_exception(exc)


@dataclass(slots=True)
class Job:
    """One unit of work of a session worker.

    Attributes:
        event: the inbound event (None for a ledger re-send). For a merged burst: the first part.
        kind: BURST, TURN, INTERNAL, CONTROL or COMMAND (module docstring).
        notice: set: send this notice instead of running the event (refusals).
        inbound_id: the durable intake row of `event`, finished when the job ends.
        resume: auto-continue of an interrupted turn (seed §7).
        obligation: set: re-send this open ledger obligation (seed §7).
        parts: further `(event, inbound_id)` merged into this burst, in arrival order.
        sealed: a burst that accepts no more merges (it ran, or was merged before a restart).
        stopped: for `/stop`: a turn was interrupted or a follow-up dropped when it arrived.
        dropped: for `/new`, `/reset`, `/stop`: queued human messages cleared when it arrived.
        from_queue: a TURN that a follow-up never interrupts or steers: made by `/queue <text>`
            (`event.text` is the argument), or the turn `/retry` runs.
        steered: follow-ups handed to this running turn (`busy_input_mode = "steer"`), as
            `(event, inbound_id)`; recorded in the transcript with the turn, finished with the job.
        answered: a running turn whose reply is recorded: what is left (sending, bookkeeping)
            is not interrupted, and a follow-up meanwhile is not told it waits.
        queued_at: when the job was queued (`time.monotonic()`, s): an album waits for its parts
            until `ALBUM_WINDOW_S` after it (`album_wait`).
        finished: intake rows the job's own writes already finished (the turn's row with its
            reply, merged parts with the merge, steered follow-ups with their record), so the
            end of the job does not write them again.
        acceptance: set while the job's message is not stored yet: its turn's first write
            accepts it (`Acceptance`), and `inbound_id` is set then.
    """

    event: MessageEvent | None
    kind: str = COMMAND
    notice: str | None = None
    inbound_id: int | None = None
    resume: bool = False
    obligation: dict[str, Any] | None = None
    parts: list[tuple[MessageEvent, int | None]] = field(default_factory=list)
    sealed: bool = False
    stopped: bool = False
    dropped: int = 0
    from_queue: bool = False
    answered: bool = False
    steered: list[tuple[MessageEvent, int | None]] = field(default_factory=list)
    finished: set[int] = field(default_factory=set)
    queued_at: float = field(default_factory=time.monotonic)
    acceptance: Acceptance | None = None

    @property
    def human(self) -> bool:
        """A queued human message for the agent (what `/new`, `/reset` and `/stop` clear)."""
        return self.kind in (BURST, TURN)

    @property
    def inbound_ids(self) -> list[int]:
        """Every durable intake row this job stands for (a merged burst has several)."""
        ids = [self.inbound_id] + [i for _, i in self.parts] + [i for _, i in self.steered]
        return [i for i in ids if i is not None]

    @property
    def open_inbound_ids(self) -> list[int]:
        """The job's intake rows still to finish when it ends (`inbound_ids` but `finished`)."""
        return [i for i in self.inbound_ids if i not in self.finished]

    def same_album(self, event: MessageEvent) -> bool:
        """True when `event` is one more media message of this open job's album (same sender,
        same `media_group_id`): an album is one turn in every busy mode."""
        first = self.event
        return (self.kind in (BURST, TURN) and not self.sealed and first is not None and bool(event.media)
                and event.media_group_id is not None and first.media_group_id == event.media_group_id
                and first.source.user_id == event.source.user_id and first.source.chat_id == event.source.chat_id)

    def album_wait(self) -> float:
        """Seconds this job should still wait for more parts of its album before it runs: an
        open album job (its first part has a `media_group_id`) waits until `ALBUM_WINDOW_S`
        after it was queued; any other job, 0."""
        first = self.event
        if self.sealed or first is None or not first.media or first.media_group_id is None \
                or self.kind not in (BURST, TURN):
            return 0.0
        return max(0.0, self.queued_at + ALBUM_WINDOW_S - time.monotonic())

    def can_merge(self, event: MessageEvent) -> bool:
        """True when `event` may join this burst: open, and from the same sender (a shared chat
        must not attribute one person's words to another through the merge)."""
        return (self.kind == BURST and not self.sealed and self.event is not None
                and self.event.source.user_id == event.source.user_id)

    def merged_event(self) -> MessageEvent:
        """The event the turn answers: one event for a single message; for a burst the texts
        joined in order with "\\n" (empty texts of media-only messages skipped), the media
        appended in order, and the last part's message id, sender, update id and time (the reply
        answers the latest message); the reply context of the latest part that has one, the
        channel context of the first that has one (docs/behaviour.md §7)."""
        assert self.event is not None
        if not self.parts:
            return self.event
        events = [self.event] + [e for e, _ in self.parts]
        last = events[-1]
        replying = next((e for e in reversed(events) if e.reply_to_message_id or e.reply_to_text), None)
        reply = {name: getattr(replying, name) for name in REPLY_FIELDS} if replying is not None else {}
        return MessageEvent(source=last.source, text="\n".join(e.text for e in events if e.text),
                            message_id=last.message_id,
                            media=[m for e in events for m in (e.media or [])],
                            kind=USER, received_at=last.received_at, platform_update_id=last.platform_update_id,
                            channel_context=next((e.channel_context for e in events if e.channel_context), []),
                            **reply)


class SessionQueue:
    """The jobs waiting for one session key (head = slot, rest = overflow; seed §8)."""

    __slots__ = ("jobs",)

    def __init__(self) -> None:
        self.jobs: deque[Job] = deque()

    def __len__(self) -> int:
        return len(self.jobs)

    @property
    def depth(self) -> int:
        """Queued items: `len(overflow) + (1 if slot occupied else 0)` (seed §8 `_queue_depth`)."""
        return len(self.jobs)

    def popleft(self) -> Job:
        """Take the slot (the next job to run); a burst is sealed from now on."""
        job = self.jobs.popleft()
        job.sealed = True
        return job

    def append(self, job: Job) -> int:
        """Add `job` at the tail (`_enqueue_fifo`). Returns its 1-based position."""
        self.jobs.append(job)
        return len(self.jobs)

    def add_control(self, job: Job) -> None:
        """Place a `/new`, `/reset` or `/stop` job ahead of everything except earlier ones."""
        self.insert_after_control(job)

    def insert_after_control(self, job: Job, offset: int = 0) -> None:
        """Place `job` right after the leading CONTROL jobs (plus `offset` places): what a running
        turn hands back runs before anything that arrived after it."""
        index = 0
        while index < len(self.jobs) and self.jobs[index].kind == CONTROL:
            index += 1
        self.jobs.insert(min(index + offset, len(self.jobs)), job)

    def clear_human(self) -> list[Job]:
        """`/new`, `/reset`: remove every queued human message (slot and overflow); internal
        wake-ups, commands and notices stay in order. Returns the removed jobs."""
        return self._remove(j for j in self.jobs if j.human)

    def drop_slot_follow_up(self) -> list[Job]:
        """`/stop`: remove the one-slot follow-up — the first queued human message, the one that
        would have run next — and keep everything else (an overflow item moves up to the slot).
        Returns the removed jobs ([] or one)."""
        for job in self.jobs:
            if job.human:
                return self._remove([job])
        return []

    def take_all(self) -> list[Job]:
        """Remove and return every queued job, in order (a stop leaves them to the next start)."""
        jobs = list(self.jobs)
        self.jobs.clear()
        return jobs

    def find(self, matches: Callable[[MessageEvent], bool]) -> tuple[Job, int] | None:
        """The first queued human message for which `matches(event)` is true (the caller's
        rule: same chat and platform message id, docs/behaviour.md §5 "Edits and deletions"):
        `(job, index)` with index -1 for the job's own event, else its position in `job.parts`;
        None when it is not queued (already running or done, or unknown)."""
        for job in self.jobs:
            if not job.human or job.event is None:
                continue
            if matches(job.event):
                return job, -1
            for index, (event, _) in enumerate(job.parts):
                if matches(event):
                    return job, index
        return None

    def withdraw(self, job: Job, index: int) -> int | None:
        """Remove one queued message (a deletion, docs/behaviour.md §5): a part of a burst, or the burst's
        own event (the next part takes its place), or the whole job when it was its only message.
        Returns the intake id to finish."""
        if index >= 0:
            return job.parts.pop(index)[1]
        gone = job.inbound_id
        if job.parts:
            job.event, job.inbound_id = job.parts.pop(0)
        else:
            self._remove([job])
        return gone

    def _remove(self, doomed: Iterable[Job]) -> list[Job]:
        doomed = list(doomed)
        ids = {id(j) for j in doomed}
        self.jobs = deque(j for j in self.jobs if id(j) not in ids)
        return doomed
