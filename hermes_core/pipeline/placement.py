"""The busy-input policy as one pure function (seed §8; docs/behaviour.md §5, §10, §11).

`place(queue, running, event, ...)` reads the state of one session's queue (the jobs waiting, the
job running) and an incoming event, and returns a `Placement`: what the runner should do with the
event. It changes nothing and does no I/O; the runner (`runner.py`) applies the placement
(appends or merges the job, interrupts, acknowledges, answers at once) and does the I/O.

Rules, in order:

1. A message over `[core] max_input_chars` → a refusal notice job (`too_long`).
2. An internal wake-up → an INTERNAL job at the tail: it never interrupts, merges or steers.
3. A media message of an album (same sender, same `media_group_id` as the open job at the tail)
   joins that job, in every mode: an album is one turn (queue depth 1, not one per photo).
4. `"sequential"` (an adapter's override): everything waits in arrival order, commands included.
5. Commands, by their placement in `commands.COMMANDS`: CONTROL (`/new`, `/reset`, `/stop`:
   clear the queue — all human messages, or for `/stop` the one-slot follow-up —, interrupt the
   running turn, run next), QUEUE (`/queue <text>`: one TURN; an empty one is refused), ORDERED
   (wait in arrival order), IMMEDIATE (answered at once while busy, else queued).
6. Plain messages: `"queue"` → a silent TURN each; `"steer"` → handed to the running turn when
   it is a plain agent turn and nothing waits (`STEER`, with a queue fallback when the agent
   cannot steer; the chat is told which happened), else a TURN with "Queued (position N).";
   `"interrupt"` → merged into the open burst at the tail, or a new burst that interrupts the
   running plain turn ("Interrupting the current reply…") or waits ("Queued (position N).").
"""

from __future__ import annotations

from dataclasses import dataclass

from ..model.events import MessageEvent
from . import commands
from .busy import (BURST, COMMAND, CONTROL, INTERNAL, INTERRUPTING_TEXT, QUEUE_EMPTY_TEXT, QUEUED_TEXT,
                   STEER_FALLBACK_TEXT, TURN, Job, SessionQueue)

# Busy-input modes (`[core] busy_input_mode`, or the adapter's override).
INTERRUPT, QUEUE, SEQUENTIAL, STEER = "interrupt", "queue", "sequential", "steer"
MODES = (INTERRUPT, QUEUE, SEQUENTIAL, STEER)

# Placement actions.
APPEND = "append"          # a new job at the tail
MERGE = "merge"            # one more part of the job at the tail
FRONT = "front"            # a CONTROL job ahead of everything except earlier CONTROL jobs
ANSWER_NOW = "answer_now"  # answered at once, without waiting for the running job
HAND_TO_TURN = "steer"     # handed to the running turn (else appended as `fallback_ack` says)

# What a CONTROL command clears.
CLEAR_ALL, CLEAR_SLOT = "all", "slot"


@dataclass(frozen=True, slots=True)
class Placement:
    """What to do with one incoming event.

    Attributes:
        action: APPEND, MERGE, FRONT, ANSWER_NOW or HAND_TO_TURN.
        kind: the Job kind of an appended job (busy.BURST, TURN, INTERNAL, CONTROL, COMMAND).
        text: the job's text when it differs from the event's (the `/queue` argument).
        notice: a job or an immediate answer that sends this text instead of running the event.
        ack: sent to the chat now (acknowledgements are truthful: only for what was done).
        interrupt: interrupt the running turn.
        clear: FRONT only: CLEAR_ALL (`/new`, `/reset`) or CLEAR_SLOT (`/stop`).
        from_queue: a TURN made by `/queue <text>`.
        sealed: a burst merged before a restart (never merged again).
        fallback_ack: HAND_TO_TURN only: when the agent does not take the message, it is
            appended as a TURN and this acknowledgement is sent instead.
    """

    action: str
    kind: str = COMMAND
    text: str | None = None
    notice: str | None = None
    ack: str | None = None
    interrupt: bool = False
    clear: str | None = None
    from_queue: bool = False
    sealed: bool = False
    fallback_ack: str | None = None


def is_agent_turn(job: Job | None) -> bool:
    """True for a job that runs the agent and has not answered yet (what a follow-up, `/new`,
    `/reset`, `/stop` interrupt)."""
    return (job is not None and job.event is not None and job.obligation is None and job.notice is None
            and job.kind in (BURST, TURN, INTERNAL) and not job.answered)


def _is_plain_turn(job: Job | None) -> bool:
    """A human turn a follow-up may interrupt or steer: a burst (interrupt mode) or a plain turn
    (steer mode); not a `/queue` turn or `/retry` (`from_queue`), a resumed turn or a wake-up."""
    return is_agent_turn(job) and job.kind in (BURST, TURN) and not job.from_queue and not job.resume


def place(queue: SessionQueue, running: Job | None, event: MessageEvent, *, mode: str, live: bool,
          too_long: str | None = None, sealed: bool = False, can_steer: bool = False) -> Placement:
    """Decide where `event` goes (module docstring).

    Args:
        queue: the session's waiting jobs (read only).
        running: the job the session's worker is running, or None.
        event: the incoming event.
        mode: INTERRUPT, QUEUE, SEQUENTIAL or STEER.
        live: the message arrives now and the runner is released (False: the start-up replay,
            which only rebuilds the queue: no interrupts, acknowledgements or immediate answers).
        too_long: the refusal notice when the message is over the length limit.
        sealed: a burst already merged before a restart.
        can_steer: the agent supports `Agent.steer`.
    """
    busy = live and ((running is not None and not running.answered) or len(queue) > 0)
    position = len(queue) + 1  # of a job appended now
    if too_long is not None:
        return Placement(APPEND, COMMAND, notice=too_long)
    if event.is_internal:
        return Placement(APPEND, INTERNAL)
    tail = queue.jobs[-1] if queue.jobs else None
    if tail is not None and tail.same_album(event):
        return Placement(MERGE)
    if mode == SEQUENTIAL:
        return _sequential(event)
    if event.is_command:
        return _command(event, running, busy=busy, live=live, position=position)
    if sealed:
        return Placement(APPEND, BURST, sealed=True)
    if mode == QUEUE:
        return Placement(APPEND, TURN)
    if mode == STEER:
        if busy and not queue.jobs and _is_plain_turn(running):
            if can_steer:
                return Placement(HAND_TO_TURN, TURN, fallback_ack=QUEUED_TEXT.format(position=position))
            return Placement(APPEND, TURN, ack=STEER_FALLBACK_TEXT.format(position=position))
        return Placement(APPEND, TURN, ack=QUEUED_TEXT.format(position=position) if busy else None)
    if tail is not None and tail.can_merge(event):
        return Placement(MERGE)
    if not busy:
        return Placement(APPEND, BURST)
    if not queue.jobs and _is_plain_turn(running):
        return Placement(APPEND, BURST, ack=INTERRUPTING_TEXT, interrupt=True)
    return Placement(APPEND, BURST, ack=QUEUED_TEXT.format(position=position))


def _sequential(event: MessageEvent) -> Placement:
    """A script of lines: each waits for the previous answer, commands included."""
    name, arg = event.command()
    if not event.is_command or name != "queue":
        return Placement(APPEND, COMMAND if event.is_command else TURN)
    if not arg and not event.media:
        return Placement(APPEND, COMMAND, notice=QUEUE_EMPTY_TEXT)
    return Placement(APPEND, TURN, text=arg, from_queue=True)


def _command(event: MessageEvent, running: Job | None, *, busy: bool, live: bool, position: int) -> Placement:
    name, arg = event.command()
    placement = commands.placement_of(name)
    if placement == commands.CONTROL:
        return Placement(FRONT, CONTROL, clear=CLEAR_SLOT if name == "stop" else CLEAR_ALL,
                         interrupt=live and is_agent_turn(running))
    if placement == commands.QUEUE:
        if not arg and not event.media:
            # The rejection need not wait for the running turn.
            return Placement(ANSWER_NOW if busy else APPEND, COMMAND, notice=QUEUE_EMPTY_TEXT)
        return Placement(APPEND, TURN, text=arg, from_queue=True,
                         ack=QUEUED_TEXT.format(position=position) if busy else None)
    if placement == commands.IMMEDIATE and busy:
        # Read-only answers need not wait for the running turn (and /status shows the queue).
        return Placement(ANSWER_NOW, COMMAND)
    return Placement(APPEND, COMMAND)
