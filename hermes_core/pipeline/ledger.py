"""Sending what the delivery ledger owes (docs/behaviour.md §6; seed §7).

`send_obligation` is the one path from a recorded obligation to the chat: 'attempting' before
the send (recorded with the reply on the live path), 'delivered' / 'failed' after, through the
runner's `OutcomeRecorder` for every send of the runner's jobs (replies, command answers,
pending notices, the sweep's re-sends). `redeliver`
is the start-up sweep's step for one obligation left open by a previous run: give up after
`MAX_ATTEMPTS` attempts or `MAX_AGE_S`, re-send an 'attempting' one (the chat may have it
already) with `RECOVERED_PREFIX`, a 'pending' or 'failed' one plainly.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Coroutine

from ..model.source import SessionSource
from ..store.backend import lease_scope, scope_tokens
from ..store.ledger import MAX_AGE_S, MAX_ATTEMPTS, recovered_text
from ..store.records import SentOutcome
from .deps import PipelineDeps

log = logging.getLogger(__name__)


async def send_obligation(deps: PipelineDeps, obligation_id: int, target: SessionSource, text: str, *,
                          session_key: str, session_id: str | None, reply_to: str | None,
                          kind: str = "reply", attempting: bool = False,
                          recorder: "OutcomeRecorder | None" = None) -> bool:
    """Send obligation `obligation_id` (`text` to `target`) and record the outcome.

    Args:
        attempting: the obligation was recorded 'attempting' with this attempt counted (the
            live path, `store.record_reply(sending=True)`): no write before the send.
        recorder: records the outcome off the session's path (`OutcomeRecorder`): this returns
            once the send is done, so the session's next write need not wait for that commit
            (docs/behaviour.md §12). A crash before it commits is a crash during the send
            (re-sent once, labelled, §6); a failure to record it is logged. The recorder also
            knows the platform message ids of the chunks sent so far while the send goes on,
            so a delivery report about one of them waits for this outcome (§6 "Delivery
            reports"). None: recorded before this returns.

    Returns:
        True when delivered. A missing adapter or a failed send leaves it 'failed' (retried at
        the next start, up to MAX_ATTEMPTS).
    """
    store = deps.store
    adapter = deps.adapters.get(target.platform)
    if adapter is None:
        log.error("no running adapter for %s: obligation %s stays owed", target.platform, obligation_id)
        return False
    if not attempting:
        await store.start_delivery(obligation_id)
    if recorder is None:
        outcome = await deps.deliverer.deliver(adapter, target, text, session_key=session_key,
                                               session_id=session_id, reply_to=reply_to, kind=kind)
        await store.finish_delivery(obligation_id, outcome.delivered, outcome.error, sent_ids=outcome.message_ids)
        return outcome.delivered
    send = recorder.begin(target.platform)
    try:
        outcome = await deps.deliverer.deliver(adapter, target, text, session_key=session_key,
                                               session_id=session_id, reply_to=reply_to, kind=kind,
                                               on_sent=send.sent)
        recorder.add(session_key, SentOutcome(obligation_id, outcome.delivered, outcome.error, outcome.message_ids),
                     send)
    finally:  # cancelled too: nothing is kept about a send that ended
        recorder.end(send)
    return outcome.delivered


class SendInProgress:
    """A send of an obligation that is going on, as its `OutcomeRecorder` knows it
    (`OutcomeRecorder.begin`): the platform message ids of its chunks sent so far, so that a
    delivery report about one of them, which finds no obligation yet, waits for this send's
    outcome (docs/behaviour.md §6 "Delivery reports"). Memory only; forgotten when the send ends.
    """

    __slots__ = ("_index", "platform", "ids", "written", "ended")

    def __init__(self, index: dict[tuple[str, str], "SendInProgress"], platform: str) -> None:
        self._index = index
        self.platform = platform
        self.ids: list[str] = []
        # The write that takes this send's outcome (set when it is queued); `ended` resolves when
        # the send ends, made only when a report waits for it (most sends get no early report).
        self.written: asyncio.Future | None = None
        self.ended: asyncio.Future | None = None

    def sent(self, result: Any) -> None:
        """Note a chunk just sent (its `SendResult`; one without a message id is skipped)."""
        message_id = getattr(result, "message_id", None)
        if message_id:
            self.ids.append(message_id := str(message_id))
            self._index[(self.platform, message_id)] = self


class OutcomeRecorder:
    """Records the outcomes of sends off the sessions' paths, those that came in together in one
    store write (docs/behaviour.md §12 "'delivered' off the session's path").

    `add` only queues an outcome; one background task at a time (started with `spawn`, which
    tracks it, `GatewayRunner._side_task`) writes what is queued with `store.finish_deliveries`,
    then what came in meanwhile, until nothing is left. Under load that is one write, and one
    group member, for the outcomes of many sessions, instead of a task, a coroutine and a member
    for each. On a store that leases sessions to replicas each outcome is written apart, under
    the lease tokens of the job that sent it (`lease_scope`), as that job's own writes are: a
    job whose lease was lost records nothing more. An outcome that could not be recorded is
    logged with its obligation and session: the obligation stays 'attempting', so it is sent
    again, labelled (§6), by whoever recovers the session next: the next start, or on a leased
    store the replica that takes the session over.

    The sends whose outcomes it records are known to it while they go on (`begin` … `end`,
    `SendInProgress`): a delivery report about a chunk already sent waits, through `flush`, for
    the outcome of its send as for one already queued (§6 "Delivery reports").

    Args:
        store: the SessionStore.
        spawn: runs a coroutine as a tracked background task.
    """

    def __init__(self, store: Any, spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task]) -> None:
        self._store = store
        # Read once, while the store is open: a write the stop did not wait for may fail after
        # the store closed, and its log line must still be written (§6 "Drain timeout").
        self._leased = bool(store.leased)
        self._spawn = spawn
        self._queued: list[tuple[str, SentOutcome, dict[str, int] | None]] = []
        self._writing: list[tuple[str, SentOutcome, dict[str, int] | None]] = []  # the write going on
        # Resolved once the outcomes queued now, and those in the write going on, are written
        # (or logged as not written): what `flush` waits for.
        self._queued_done: asyncio.Future | None = None
        self._writing_done: asyncio.Future | None = None
        self._task: asyncio.Task | None = None
        # The sends going on, by (platform, platform message id) of each chunk sent so far.
        self._sending: dict[tuple[str, str], SendInProgress] = {}

    @property
    def task(self) -> asyncio.Task | None:
        """The background task writing the queued outcomes, None before the first."""
        return self._task

    def _awaited(self) -> asyncio.Future | None:
        """What `flush` waits for: the write that takes the outcomes queued now (it follows the
        write going on), else the write going on; None when neither is left."""
        done = self._queued_done or self._writing_done
        return done if done is not None and not done.done() else None

    @property
    def sending(self) -> int:
        """How many chunks of sends going on are known (`SendInProgress`): 0 when none is."""
        return len(self._sending)

    async def flush(self, timeout: float | None = None, *, report: tuple[str, str] | None = None) -> bool:
        """Wait until the outcomes queued so far are written (or logged as not written), at most
        `timeout` seconds when given: the last step of a drain that timed out, which cancels
        the turns it cut off but not this record of replies already sent (docs/behaviour.md §6
        "Drain timeout"), and what a delivery report that came before its outcome waits for
        (`GatewayRunner.settle_sent_message`). Outcomes queued after the call are not waited
        for: under steady traffic the task never runs out of them. Never raises.

        Args:
            timeout: seconds, in all; None waits as long as it takes.
            report: `(platform, platform message id)` of a delivery report. When a send going on
                sent that message, what is waited for is that send's end, then the write of its
                outcome (a send cancelled, or ended without an outcome, ends the wait), instead
                of the outcomes queued now.

        Returns:
            Whether there was anything to wait for (written in time or not).
        """
        send = self._sending.get(report) if report is not None else None
        if send is None:
            done = self._awaited()
        else:
            loop = asyncio.get_running_loop()
            started = loop.time()
            if send.ended is None:
                send.ended = loop.create_future()
            await asyncio.wait({send.ended}, timeout=timeout)
            if not send.ended.done():
                return True
            done = send.written if send.written is not None and not send.written.done() else None
            if timeout is not None:
                timeout = max(0.0, timeout - (loop.time() - started))
        if done is not None:
            # The task too: cancelled before it took the queued outcomes, it never resolves them.
            await asyncio.wait({done, self._task}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        return send is not None or done is not None

    @property
    def unwritten(self) -> list[int]:
        """The obligation ids of the outcomes queued or being written, in the order sent: what a
        stop that did not wait for them longer leaves 'attempting'."""
        return [outcome.obligation_id for _, outcome, _ in self._writing + self._queued]

    @property
    def recovered_by(self) -> str:
        """Who sends an unrecorded outcome's obligation again, in the log lines' words."""
        return "by the replica that takes it over, or at the next start" if self._leased else "at the next start"

    def begin(self, platform: str) -> SendInProgress:
        """A send to `platform` begins: the returned record notes its chunks as they are sent
        (`SendInProgress.sent`); `end` it however the send ends."""
        return SendInProgress(self._sending, platform)

    def end(self, send: SendInProgress) -> None:
        """The send `send` ended (its outcome queued with `add`, or not: failed, cancelled): it is
        forgotten, and the reports waiting for it go on to the write of its outcome."""
        for message_id in send.ids:
            # A platform reusing an id for a later send of ours: that send's entry stays.
            if self._sending.get(key := (send.platform, message_id)) is send:
                del self._sending[key]
        if send.ended is not None:
            send.ended.set_result(None)

    def add(self, session_key: str, outcome: SentOutcome, send: SendInProgress | None = None) -> None:
        """Queue `outcome` (of a send for `session_key`, from the job that sent it) for the next
        write; `send` is that send, when `begin` announced it."""
        self._queued.append((session_key, outcome, scope_tokens()))
        if self._queued_done is None:
            self._queued_done = asyncio.get_running_loop().create_future()
        if send is not None:
            send.written = self._queued_done
        # A running task sees it at its next look at the queue: nothing awaits between its last
        # look and its end, so an outcome queued here is never left behind.
        if self._task is None or self._task.done():
            self._task = self._spawn(self._write())

    async def _write(self) -> None:
        while self._queued:
            batch, self._queued = self._queued, []
            done = self._writing_done = self._queued_done
            self._queued_done = None
            self._writing = batch
            try:
                await self._write_batch(batch)
            finally:  # cancelled too: nothing is left for a waiting `flush` to wait for
                self._writing = []
                done.set_result(None)

    async def _write_batch(self, batch: list[tuple[str, SentOutcome, dict[str, int] | None]]) -> None:
        """Write one batch of queued outcomes; log each that could not be recorded."""
        keys = {outcome.obligation_id: key for key, outcome, _ in batch}
        try:
            if self._leased:
                failed = await self._write_fenced(batch)
            else:
                failed = await self._store.finish_deliveries([outcome for _, outcome, _ in batch])
        except Exception as exc:
            failed = [(ob_id, exc) for ob_id in keys]
        for ob_id, exc in failed:
            log.error("obligation %s of %s was sent but its outcome could not be recorded (%s); it is sent "
                      "again, labelled as a possible duplicate, when the session is next recovered (%s)",
                      ob_id, keys.get(ob_id), " ".join(str(exc).split()), self.recovered_by)

    async def _write_fenced(self, batch: list[tuple[str, SentOutcome, dict[str, int] | None]]
                            ) -> list[tuple[int, Exception]]:
        """Each outcome in a task of its own started in its job's lease scope (the task keeps
        that context); returns the failures."""
        tasks = []
        for _, outcome, tokens in batch:
            with lease_scope(tokens):
                tasks.append(asyncio.ensure_future(self._store.finish_deliveries([outcome])))
        failed: list[tuple[int, Exception]] = []
        for (_, outcome, _), result in zip(batch, await asyncio.gather(*tasks, return_exceptions=True)):
            if isinstance(result, Exception):
                failed.append((outcome.obligation_id, result))
            elif isinstance(result, BaseException):
                raise result
            else:
                failed.extend(result)
        return failed


async def redeliver(deps: PipelineDeps, ob: dict[str, Any], *, recorder: OutcomeRecorder | None = None) -> str:
    """Start-up sweep step for one open obligation (a dict of `store.open_obligations()`).

    Args:
        recorder: records the re-send's outcome as a live reply's is (`send_obligation`), so a
            platform's delivery report on the re-sent message that comes before that outcome
            is written waits for it (docs/behaviour.md §6 "Delivery reports").

    Returns:
        What happened: `"abandoned"`, `"delivered"`, `"failed"` or `"no_adapter"`.
    """
    store = deps.store
    ob_id, key = ob["id"], ob["session_key"]
    age = deps.clock().timestamp() - float(ob.get("created_ts") or 0)
    if int(ob.get("attempts") or 0) >= MAX_ATTEMPTS or age > MAX_AGE_S:
        reason = (f"gave up after {ob.get('attempts')} attempts" if int(ob.get("attempts") or 0) >= MAX_ATTEMPTS
                  else f"older than {MAX_AGE_S // 3600} h")
        log.warning("delivery obligation %s of %s abandoned: %s", ob_id, key, reason)
        await store.abandon_delivery(ob_id, reason)
        return "abandoned"
    target = ob.get("origin")
    if target is None:
        await store.abandon_delivery(ob_id, "no origin to deliver to")
        return "abandoned"
    if target.platform not in deps.adapters:
        log.error("obligation %s of %s: platform %s is not running; kept for a later start",
                  ob_id, key, target.platform)
        return "no_adapter"
    text = recovered_text(ob["content"]) if ob["state"] == "attempting" else ob["content"]
    ok = await send_obligation(deps, ob_id, target, text, session_key=key, session_id=ob.get("session_id"),
                               reply_to=ob.get("reply_to"), kind="recovered", recorder=recorder)
    return "delivered" if ok else "failed"
