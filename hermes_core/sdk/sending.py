"""Shared send-side helpers (docs/adapters.md §0.4): per-chat ordering and retry-after handling.

* `ChatSendQueue` serialises sends per chat, so the chunks of one reply (and replies that follow
  it) reach the chat in order even when several tasks send at once. `asyncio.Lock` wakes its
  waiters first-in first-out, which is what makes the order hold.
* `send_with_retry` calls one send and, when the adapter raises `RetryAfter`, waits exactly the
  server's value and tries again (tenacity); a wait above `RetryPolicy.max_wait_s` or more than
  `max_attempts` tries gives up with `RetryAfterExceeded`, so a session is never blocked forever.
* `send_chunks` sends the chunks of one plan under the chat's lock: the first chunk replies to
  the trigger, the rest are plain.
* `deliver_plan` wraps `send_chunks` into a `DeliveryOutcome` that never raises.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable, TypeVar

from tenacity import AsyncRetrying, RetryError, retry_if_exception_type, stop_after_attempt
from tenacity.stop import stop_base

from ..types import DeliveryOutcome, DeliveryPlan
from .errors import RetryAfter, RetryAfterExceeded, SendError

log = logging.getLogger(__name__)

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How long a send may wait for a rate limit.

    Attributes:
        max_wait_s: longest single server-requested wait honoured, in seconds (default 60).
            A longer `retry_after` fails the send at once (waiting less would be rejected anyway).
        max_attempts: total tries of one chunk, the first included (default 4).
    """

    max_wait_s: float = 60.0
    max_attempts: int = 4


DEFAULT_RETRY_POLICY = RetryPolicy()


class _StopWhenWaitTooLong(stop_base):
    """tenacity stop condition: the server asked for more than the cap."""

    def __init__(self, cap: float):
        self.cap = cap

    def __call__(self, retry_state) -> bool:
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        return isinstance(exc, RetryAfter) and exc.seconds > self.cap


def _wait_server_value(retry_state) -> float:
    exc = retry_state.outcome.exception()
    return exc.seconds if isinstance(exc, RetryAfter) else 0.0


async def send_with_retry(call: Callable[[], Awaitable[T]], *, policy: RetryPolicy = DEFAULT_RETRY_POLICY,
                          sleep: Sleep = asyncio.sleep) -> T:
    """Await `call()`, honouring `RetryAfter` from the adapter.

    Args:
        call: a zero-argument coroutine function performing one send.
        policy: wait cap and attempt limit.
        sleep: awaited with the wait in seconds (injectable for tests; default `asyncio.sleep`).

    Returns:
        What `call()` returned.

    Raises:
        RetryAfterExceeded: the server's wait exceeded `policy.max_wait_s`, or it kept asking
            after `policy.max_attempts` tries.
        Exception: any other error from `call()` propagates unchanged on its first occurrence.
    """
    # The first try runs bare: almost every send succeeds at once, and tenacity's machinery costs
    # more than the send itself on that path. When it is rate limited, tenacity takes over with
    # that answer as its first attempt (replayed, not sent again), so the policy is unchanged.
    try:
        return await call()
    except RetryAfter as exc:
        first: list[RetryAfter] = [exc]

    async def attempt() -> T:
        if first:
            raise first.pop()
        return await call()

    retrying = AsyncRetrying(
        retry=retry_if_exception_type(RetryAfter),
        wait=_wait_server_value,
        stop=stop_after_attempt(policy.max_attempts) | _StopWhenWaitTooLong(policy.max_wait_s),
        sleep=sleep,
        reraise=False,
    )
    try:
        return await retrying(attempt)
    except RetryError as err:
        last = err.last_attempt.exception()
        attempts = err.last_attempt.attempt_number
        seconds = last.seconds if isinstance(last, RetryAfter) else 0.0
        if seconds > policy.max_wait_s:
            why = f"server asked to wait {seconds:g}s, above the {policy.max_wait_s:g}s cap"
        else:
            why = f"still rate limited after {attempts} attempts"
        raise RetryAfterExceeded(f"giving up on send: {why}", retry_after=seconds,
                                 attempts=attempts, cause=last) from last


class ChatSendQueue:
    """Per-chat FIFO locks: one sender at a time per chat, waiters served in arrival order.

    Locks are created on demand and dropped when no task holds or waits for them, so the map
    does not grow with every chat ever seen.
    """

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: dict[str, int] = {}

    @staticmethod
    def chat_key(target: Any) -> str:
        """Ordering key of a target: `platform` + `chat_id` (threads of one chat share the
        platform's per-chat rate limit, so they share the order too)."""
        platform = getattr(target, "platform", "")
        chat_id = getattr(target, "chat_id", target)
        return f"{platform}\x00{chat_id}"

    @asynccontextmanager
    async def hold(self, target: Any) -> AsyncIterator[None]:
        """Hold the chat's lock for the `async with` body."""
        key = self.chat_key(target)
        lock = self._locks.setdefault(key, asyncio.Lock())
        self._users[key] = self._users.get(key, 0) + 1
        try:
            async with lock:
                yield
        finally:
            self._users[key] -= 1
            if self._users[key] == 0:
                del self._users[key]
                del self._locks[key]

    def active_chats(self) -> int:
        """Number of chats with a sender holding or waiting (for health and tests)."""
        return len(self._locks)


async def send_chunks(adapter: Any, target: Any, chunks: list[str], *, reply_to: str | None = None,
                      metadata: dict[str, Any] | None = None, queue: ChatSendQueue | None = None,
                      policy: RetryPolicy = DEFAULT_RETRY_POLICY, sleep: Sleep = asyncio.sleep,
                      on_sent: Callable[[Any], None] | None = None) -> list:
    """Send `chunks` to `target` through `adapter.send`, in order, under the chat's lock.

    Args:
        adapter: a `BaseAdapter` (anything with `async send(target, text, *, reply_to, metadata)`).
        target: the SessionSource to send to (raw ids).
        chunks: texts already within the adapter's limit (see `chunk_text`).
        reply_to: platform message id the first chunk replies to; later chunks are plain.
        queue: the app's `ChatSendQueue` (a private one when None: ordering within this call only).
        policy / sleep: retry-after handling, see `send_with_retry`.
        on_sent: called with each chunk's `SendResult` as soon as that chunk is sent, before the
            next one goes out (the gateway notes the platform message ids of a send in
            progress, docs/behaviour.md §6 "Delivery reports"); it must not raise.

    Returns:
        The `SendResult` of each chunk, in order.

    Raises:
        SendError: a chunk failed; `err.sent` holds the results of the chunks already sent.
    """
    queue = queue or ChatSendQueue()
    results: list = []
    async with queue.hold(target):
        for index, chunk in enumerate(chunks):
            anchor = reply_to if index == 0 else None

            async def one(chunk: str = chunk, anchor: str | None = anchor):
                return await adapter.send(target, chunk, reply_to=anchor, metadata=metadata)

            try:
                results.append(result := await send_with_retry(one, policy=policy, sleep=sleep))
            except RetryAfterExceeded as err:
                err.sent = tuple(results)
                raise
            except Exception as exc:  # the adapter's own error: report which chunk failed
                raise SendError(f"chunk {index + 1}/{len(chunks)} failed: {type(exc).__name__}: {exc}",
                                cause=exc, sent=tuple(results)) from exc
            if on_sent is not None:
                on_sent(result)
    return results


async def deliver_plan(adapter: Any, target: Any, plan: DeliveryPlan, *, queue: ChatSendQueue | None = None,
                       policy: RetryPolicy = DEFAULT_RETRY_POLICY,
                       sleep: Sleep = asyncio.sleep, on_sent: Callable[[Any], None] | None = None) -> DeliveryOutcome:
    """Perform a `DeliveryPlan` and describe the result; never raises for send failures.
    `queue`, `policy`, `sleep` and `on_sent` are `send_chunks`'s.

    Returns:
        `DeliveryOutcome(delivered=True, message_ids=…)` when every chunk went out;
        `delivered=False` with `error` set when the plan was vetoed or a chunk failed
        (`message_ids` then lists the chunks that did go out).
    """
    if plan.veto:
        return DeliveryOutcome(delivered=False, error=f"vetoed: {plan.reason or 'no reason given'}")
    try:
        results = await send_chunks(adapter, target, plan.chunks, reply_to=plan.reply_to_message_id,
                                    metadata=plan.metadata or None, queue=queue, policy=policy, sleep=sleep,
                                    on_sent=on_sent)
    except SendError as err:
        log.warning("delivery failed after %d chunk(s): %s", len(err.sent), err)
        return DeliveryOutcome(delivered=False,
                               message_ids=tuple(getattr(r, "message_id", None) for r in err.sent),
                               error=str(err))
    return DeliveryOutcome(delivered=True, message_ids=tuple(getattr(r, "message_id", None) for r in results))
