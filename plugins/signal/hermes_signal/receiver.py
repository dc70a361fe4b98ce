"""The event stream of `signal-cli daemon --http`: `GET /api/v1/events` as Server-Sent Events
(docs/adapters.md §5.0, trap G-T6).

Each incoming message is an SSE event `event:receive` / `data:{"envelope": …, "account": …}`
(no space after the colons; httpx-sse's decoder accepts both forms) and the daemon writes a `:`
keep-alive comment every 15 s. The stream is read with httpx-sse; the payloads are handed, in
order and one at a time, to an async callback.

Reconnects (tenacity): when the daemon cannot be reached, answers with an error, or the stream
ends or stays silent for `idle_timeout` seconds (no keep-alive either: a dead connection), the
stream is reopened after an exponential, jittered back-off (`initial` doubling up to `maximum`
seconds). The back-off restarts from `initial` after every connection that was established.

What a restart of the daemon loses: nothing it still holds. Run the daemon with
`--receive-mode=on-connection`: it then fetches messages from Signal's servers only while an
event stream is open, so messages sent while the gateway (or the stream) is down stay queued at
Signal and arrive on the next connection. signal-cli confirms a message to Signal's servers once
it has written it to the stream; the callback is therefore awaited before the next event is
read, and `stop` lets the payload in hand finish.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from typing import Any, Awaitable, Callable

import httpx
from httpx_sse import SSEError, aconnect_sse
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type

from .rpc import EVENTS_PATH

log = logging.getLogger(__name__)

PayloadHandler = Callable[[Any], Awaitable[None]]


class StreamEnded(Exception):
    """The daemon closed the event stream (it stopped or restarted)."""


# Failures that mean "reconnect later" (anything else is a bug and is logged with a traceback,
# then retried the same way so the adapter keeps running).
RECONNECTABLE = (httpx.HTTPError, SSEError, StreamEnded)


class EventStream:
    """Reads the daemon's event stream forever, reconnecting with back-off.

    Args:
        client: the `httpx.AsyncClient` of the daemon (`base_url` set).
        account: the account whose events are wanted (`?account=`; needed in multi-account mode).
        on_payload: awaited with each decoded `receive` event's data, in order. It should not
            raise; if it does, the error is logged and the next event is read.
        idle_timeout: seconds of silence (not even a keep-alive) after which the stream is
            considered dead and reopened.
        initial / maximum: the reconnect back-off, in seconds.
        sleep: awaited for back-off pauses (injectable in tests).

    Attributes:
        connected: True while a stream is open.
        connections: how many times a stream was opened.
        last_error: the last reconnect reason (`"ConnectError: …"`), None while connected.
    """

    def __init__(self, client: httpx.AsyncClient, *, account: str, on_payload: PayloadHandler,
                 idle_timeout: float = 45.0, initial: float = 0.5, maximum: float = 30.0,
                 sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep):
        self.client = client
        self.account = account
        self.on_payload = on_payload
        self.idle_timeout = idle_timeout
        self.initial = initial
        self.maximum = maximum
        self._sleep = sleep
        self.connected = False
        self.connections = 0
        self.last_error: str | None = None
        self._failures = 0
        self._stopping = False
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task | None = None

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Start reading in a background task (idempotent)."""
        if self._task is None or self._task.done():
            self._stopping = False
            self._task = asyncio.create_task(self._run(), name="signal-events")

    async def stop(self, grace: float = 10.0) -> None:
        """Stop reading: let the payload in hand reach `on_payload`'s end (up to `grace`
        seconds), then close the stream. Idempotent."""
        task, self._task = self._task, None
        if task is None:
            return
        self._stopping = True
        try:
            await asyncio.wait_for(self._idle.wait(), grace)
        except asyncio.TimeoutError:
            log.warning("signal event stream: the message in hand was not accepted within %ss of stopping",
                        grace)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        self.connected = False

    @property
    def running(self) -> bool:
        """True while the reading task is alive."""
        return self._task is not None and not self._task.done()

    # ---- reading ---------------------------------------------------------------------------

    def _wait(self, retry_state: RetryCallState) -> float:
        """Exponential back-off with full jitter over consecutive failed connections."""
        ceiling = min(self.maximum, self.initial * 2 ** max(self._failures - 1, 0))
        return random.uniform(ceiling / 2, ceiling)

    def _before_sleep(self, retry_state: RetryCallState) -> None:
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        self.last_error = f"{type(exc).__name__}: {exc}" if exc else None
        level = logging.INFO if isinstance(exc, StreamEnded) and self._failures <= 1 else logging.WARNING
        log.log(level, "signal event stream: %s; reconnecting in %.1fs", self.last_error,
                retry_state.upcoming_sleep)

    async def _run(self) -> None:
        retrying = AsyncRetrying(retry=retry_if_exception_type(Exception), wait=self._wait,
                                 before_sleep=self._before_sleep, sleep=self._sleep, reraise=True)
        await retrying(self._read_once)

    async def _read_once(self) -> None:
        """Open the stream and read it until it ends, then raise the reason to reconnect.
        Returns only when stopping."""
        self._failures += 1
        timeout = httpx.Timeout(10.0, read=self.idle_timeout)
        try:
            async with aconnect_sse(self.client, "GET", EVENTS_PATH, params={"account": self.account},
                                    timeout=timeout) as source:
                response = source.response
                if response.status_code != 200:
                    raise httpx.HTTPStatusError(
                        f"{EVENTS_PATH} answered HTTP {response.status_code}"
                        + (" (wrong Host header: reach the daemon as 127.0.0.1 or localhost)"
                           if response.status_code == 421 else ""),
                        request=response.request, response=response)
                self.connected = True
                self.connections += 1
                self._failures = 0
                self.last_error = None
                log.info("signal event stream connected")
                async for sse in source.aiter_sse():
                    if sse.event != "receive":
                        log.debug("signal event %r ignored", sse.event)
                        continue
                    await self._deliver(sse.data)
                    if self._stopping:
                        return  # stop() is waiting for this payload; read nothing more
        except Exception as exc:
            if not isinstance(exc, RECONNECTABLE):
                log.exception("signal event stream failed unexpectedly; reconnecting")
            raise
        finally:
            self.connected = False
        raise StreamEnded("the daemon closed the event stream")

    async def _deliver(self, data: str) -> None:
        try:
            payload = json.loads(data)
        except ValueError as exc:
            log.warning("skipping malformed signal event: data is not JSON (%s)", exc)
            return
        self._idle.clear()
        try:
            await self.on_payload(payload)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("signal event handler failed; continuing with the next event")
        finally:
            self._idle.set()
