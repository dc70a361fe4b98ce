"""A fake `signal-cli daemon --http` on 127.0.0.1 (aiohttp), for driving the real httpx /
httpx-sse client (docs/adapters.md §5.3 "Offline").

Serves the daemon's three endpoints as signal-cli 0.14 does:

* `GET /api/v1/events`: Server-Sent Events, `event:receive` / `data:<json>` / blank line (no
  space after the colons) and a `:` keep-alive comment every `keepalive` seconds. Messages wait
  in `pending`, as Signal's servers hold them for a daemon in `--receive-mode=on-connection`:
  one is removed only once it has been written to a connected stream, so messages pushed while
  no stream is open (or while the daemon is down) arrive on the next connection.
* `POST /api/v1/rpc`: JSON-RPC 2.0 — `send` (recipient or groupId; the answer carries the
  timestamp and per-recipient results), `sendTyping`, `sendReaction`, `listGroups`, `version`;
  unknown methods get -32601. Scripted failures reproduce signal-cli's error answers: rate limit
  (-5 with `retryAfterSeconds`, or without a wait), captcha (-5 with a token), untrusted identity
  (-4), unregistered recipient (-1).
* `GET /api/v1/check`: 200.

As the real daemon: a Host header other than 127.0.0.1/localhost/::1 with the bound port gets
421, a POST without `Content-Type: application/json` gets 415. `stop()` / `start()` restart the
daemon on the same port, keeping what it holds (`abrupt=True` cuts open streams mid-flight).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any, Callable

from aiohttp import web

ACCOUNT = "+15559990000"
ACCOUNT_UUID = "5e4d3c2b-1a09-4f8e-9d7c-6b5a49382716"
ALLOWED_HOSTS = ("127.0.0.1", "localhost", "::1")


@dataclass
class Failure:
    """A scripted error: answer `method` with `kind` `times` times (when `when(params)` holds)."""

    method: str
    kind: str
    times: int = 1
    retry_after: int | None = 1
    when: Callable[[dict], bool] | None = None


@dataclass
class Call:
    """One JSON-RPC request: method, params, monotonic arrival time, error code answered (or None)."""

    method: str
    params: dict
    at: float
    error: int | None = None


async def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll `predicate()` every 10 ms until it holds (for state of the gateway or the adapter,
    which `FakeSignalDaemon.wait_for` only looks at when the daemon's own state changes)."""
    async def poll():
        while not predicate():
            await asyncio.sleep(0.01)
    await asyncio.wait_for(poll(), timeout)


def _address(params: dict) -> dict:
    recipient = (params.get("recipient") or [None])[0]
    is_uuid = isinstance(recipient, str) and not recipient.startswith("+")
    return {"uuid": recipient if is_uuid else "7d1e2c3b-4a59-4687-9a0b-1c2d3e4f5a6b",
            "number": None if is_uuid else recipient, "username": None}


class FakeSignalDaemon:
    """The fake daemon. `async with FakeSignalDaemon() as daemon:`; `daemon.base_url` is what
    `SignalSettings.base_url` takes."""

    def __init__(self, *, keepalive: float = 15.0):
        self.keepalive = keepalive
        self.pending: list[str] = []          # SSE frames waiting for a stream
        self.delivered: list[str] = []        # frames written to a stream, in order
        self.calls: list[Call] = []
        self.sent: list[dict] = []            # params of every successful send
        self.sent_timestamps: list[int] = []  # the timestamp each successful send returned
        self.typing: list[dict] = []
        self.failures: list[Failure] = []
        self.stream_requests: list[dict] = []  # query of each GET /api/v1/events
        self.open_streams = 0
        self.port: int | None = None
        self._next_timestamp = 1767225601000
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self._transports: set[Any] = set()   # transports of open event streams
        self._closing = False

    # ---- control -------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def push(self, *payloads: Any) -> None:
        """Queue `receive` events: each payload is written as `data:<compact json>`."""
        await self.push_frames(*(f"event:receive\ndata:{json.dumps(p, separators=(',', ':'))}\n\n"
                                 for p in payloads))

    async def push_frames(self, *frames: str) -> None:
        """Queue raw SSE text (a recorded frame, a keep-alive, garbage) exactly as given."""
        async with self._changed:
            self.pending.extend(frames)
            self._changed.notify_all()

    def fail(self, method: str, kind: str, *, times: int = 1, retry_after: int | None = 1,
             when: Callable[[dict], bool] | None = None) -> None:
        """Script the next `times` matching calls of `method` to fail with `kind`: "rate_limit",
        "captcha", "untrusted", "unregistered" or "internal"."""
        self.failures.append(Failure(method, kind, times, retry_after, when))

    def calls_of(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method == method]

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        """Wait until `predicate()` holds (checked whenever the daemon's state changes)."""
        async def _wait():
            async with self._changed:
                await self._changed.wait_for(predicate)
        await asyncio.wait_for(_wait(), timeout)

    # ---- server --------------------------------------------------------------------------

    async def start(self) -> None:
        """Start listening (on the previous port after a `stop`)."""
        app = web.Application()
        app.router.add_post("/api/v1/rpc", self._rpc)
        app.router.add_get("/api/v1/events", self._events)
        app.router.add_get("/api/v1/check", self._check)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port or 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        self._closing = False

    async def stop(self, *, abrupt: bool = False) -> None:
        """Stop the daemon: open streams end (cleanly, or cut with `abrupt`); pending messages
        are kept, as Signal's servers keep them."""
        if self._runner is None:
            return
        self._closing = True
        if abrupt:
            for transport in list(self._transports):
                transport.abort()
        async with self._changed:
            self._changed.notify_all()
        await self._runner.cleanup()
        self._runner = None

    async def __aenter__(self) -> "FakeSignalDaemon":
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    def _host_allowed(self, request: web.Request) -> bool:
        host, _, port = (request.headers.get("Host") or "").rpartition(":")
        return host.strip("[]").lower() in ALLOWED_HOSTS and port == str(self.port)

    async def _check(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def _events(self, request: web.Request) -> web.StreamResponse:
        if not self._host_allowed(request):
            return web.Response(status=421)
        response = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        transport = request.transport
        self._transports.add(transport)
        async with self._changed:
            self.stream_requests.append(dict(request.query))
            self.open_streams += 1
            self._changed.notify_all()
        try:
            while not self._closing:
                async with self._changed:
                    if not self.pending:
                        try:
                            await asyncio.wait_for(self._changed.wait_for(
                                lambda: bool(self.pending) or self._closing), self.keepalive)
                        except asyncio.TimeoutError:
                            pass
                    frame = self.pending[0] if self.pending and not self._closing else None
                if self._closing:
                    break
                try:
                    await response.write((frame or ":\n").encode("utf-8"))
                except (ConnectionError, RuntimeError):
                    break  # the client went away; the frame stays pending
                if frame is not None:
                    async with self._changed:
                        if self.pending and self.pending[0] is frame:
                            self.pending.pop(0)
                        self.delivered.append(frame)
                        self._changed.notify_all()
        finally:
            self._transports.discard(transport)
            async with self._changed:
                self.open_streams -= 1
                self._changed.notify_all()
        return response

    # ---- JSON-RPC ------------------------------------------------------------------------

    async def _rpc(self, request: web.Request) -> web.Response:
        if not self._host_allowed(request):
            return web.Response(status=421)
        if not (request.headers.get("Content-Type") or "").startswith("application/json"):
            return web.Response(status=415)
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"jsonrpc": "2.0", "id": None,
                                      "error": {"code": -32700, "message": "Parse error", "data": None}})
        method, params, ident = body.get("method"), body.get("params") or {}, body.get("id")
        call = Call(method, params, time.monotonic())
        async with self._changed:
            self.calls.append(call)
            self._changed.notify_all()
        error = self._scripted(method, params) or self._validate(method, params)
        if error is None:
            handler = getattr(self, f"_m_{method}", None)
            if handler is None:
                error = {"code": -32601, "message": "Method not implemented", "data": None}
            else:
                result = await handler(params)
                async with self._changed:
                    self._changed.notify_all()
                return web.json_response({"jsonrpc": "2.0", "result": result, "id": ident})
        call.error = error["code"]
        return web.json_response({"jsonrpc": "2.0", "error": error, "id": ident})

    def _scripted(self, method: str, params: dict) -> dict | None:
        for failure in self.failures:
            if failure.method == method and failure.times > 0 and (failure.when is None or failure.when(params)):
                failure.times -= 1
                return self._error(failure, params)
        return None

    def _result(self, params: dict, kind: str, **extra) -> dict:
        return {"timestamp": self._stamp(), "results": [{"recipientAddress": _address(params), "type": kind, **extra}]}

    def _error(self, failure: Failure, params: dict) -> dict:
        # signal-cli's SendMessageResultUtils / SignalJsonRpcCommandHandler answers.
        if failure.kind in ("rate_limit", "captcha"):
            extra = {} if failure.retry_after is None else {"retryAfterSeconds": failure.retry_after}
            if failure.kind == "captcha":
                extra["token"] = "5c1a-challenge"
            return {"code": -5, "message": "Failed to send message due to rate limiting",
                    "data": {"response": self._result(params, "RATE_LIMIT_FAILURE", **extra)}}
        if failure.kind == "untrusted":
            return {"code": -4, "message": "Failed to send message due to untrusted identities",
                    "data": {"response": self._result(params, "IDENTITY_FAILURE")}}
        if failure.kind == "unregistered":
            return {"code": -1, "message": "Failed to send message",
                    "data": {"response": self._result(params, "UNREGISTERED_FAILURE")}}
        return {"code": -32603, "message": "An internal server error has occurred.", "data": None}

    def _validate(self, method: str, params: dict) -> dict | None:
        if method in ("send", "sendTyping", "sendReaction"):
            if bool(params.get("recipient")) == bool(params.get("groupId")):
                return {"code": -1, "message": "No recipients given", "data": None}
            if params.get("recipient") is not None and not isinstance(params["recipient"], list):
                return {"code": -32602, "message": "recipient must be a list", "data": None}
        if method == "send" and not isinstance(params.get("message"), str):
            return {"code": -1, "message": "No message given", "data": None}
        return None

    def _stamp(self) -> int:
        self._next_timestamp += 1
        return self._next_timestamp

    async def _m_send(self, params):
        self.sent.append(params)
        result = self._result(params, "SUCCESS")
        self.sent_timestamps.append(result["timestamp"])
        return result

    async def _m_sendTyping(self, params):
        self.typing.append(params)
        return {}

    async def _m_sendReaction(self, params):
        return self._result(params, "SUCCESS")

    async def _m_listGroups(self, params):
        return []

    async def _m_version(self, params):
        return {"version": "0.14.1"}
