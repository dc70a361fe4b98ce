"""A fake Slack on 127.0.0.1 (aiohttp) for driving the real slack-sdk / slack-bolt clients
(docs/adapters.md §3.2 "Library and offline tests").

Web API, `POST|GET /api/{method}` with the token in `Authorization: Bearer …`:

* `auth.test` (bot token) → team T0ACME001, bot user U0BOT0001, bot B0HERMES01;
* `apps.connections.open` (app token) → `{"ok": true, "url": "ws://127.0.0.1:<port>/link/?ticket=<n>"}`;
* `users.info`, `conversations.info` from the tables of docs/adapters.md §3.1 ("Lookups the samples
  assume"); unknown ids answer `user_not_found` / `channel_not_found`;
* `chat.postMessage` (records every attempt and every posted message, answers a new `ts`),
  `chat.update`, `assistant.threads.setStatus`;
* scripted failures: HTTP 429 with a `Retry-After` header and `{"ok": false, "error":
  "ratelimited"}`, or any `{"ok": false, "error": …}`; a wrong token answers `invalid_auth`;
  `held[method] = asyncio.Event()` makes a method hang until the event is set.

Socket Mode, `GET /link/` (WebSocket): sends `hello`, then every `events_api` envelope Slack still
holds for the app (pushed with `push`, not yet acknowledged), and records the acks
(`{"envelope_id": …}`). An envelope that is not acknowledged is sent again, with `retry_attempt`
increased, on the next connection — as Slack redelivers to a reconnecting app — and, when
`redeliver_after` is set, on the open connection after that many seconds (Slack's own retry of
an envelope that was not acknowledged in time). `disconnect()`
sends Slack's `{"type": "disconnect"}` frame so the client reconnects through
`apps.connections.open`.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import aiohttp
from aiohttp import web

BOT_TOKEN = "xoxb-1111-2222-fakebottoken"
APP_TOKEN = "xapp-1-A0APP0001-3333-fakeapptoken"
SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
TEAM_ID = "T0ACME001"
BOT_USER_ID = "U0BOT0001"
BOT_ID = "B0HERMES01"

USERS = {
    "U0ALICE01": {"display_name": "Alice", "real_name": "Alice Archer"},
    "U0BOB0002": {"display_name": "Bob", "real_name": "Bob Builder"},
    "U0CAROL03": {"display_name": "", "real_name": "Carol"},
}
CHANNELS = {
    "C0GENERAL1": {"name": "general", "is_private": False, "purpose": "Company-wide announcements"},
    "C0PRIVATE9": {"name": "release-crew", "is_private": True, "purpose": ""},
    "G0LEGACY01": {"name": "leads", "is_private": True, "purpose": ""},
    "G0MPIM0001": {"name": "mpdm-alice--bob--hermes-1", "is_private": True, "is_mpim": True, "purpose": ""},
    "D0DMALICE1": {"is_im": True, "user": "U0ALICE01"},
}


@dataclass
class Call:
    """One Web API request: method, decoded arguments, monotonic arrival time, what was answered."""

    method: str
    args: dict
    at: float
    status: int = 200
    error: str | None = None


@dataclass
class Failure:
    """Answer the next `times` calls of `method` (matching `when`) with `error`; `"ratelimited"`
    is an HTTP 429 with `Retry-After: retry_after`."""

    method: str
    error: str
    times: int = 1
    retry_after: int = 1
    when: Callable[[dict], bool] | None = None


@dataclass
class Envelope:
    """An event Slack holds for the app until it is acknowledged (Socket Mode)."""

    envelope_id: str
    payload: dict
    attempts: int = 0
    acked: bool = False
    delivered_at: list[float] = field(default_factory=list)


def sign(body: str, secret: str = SIGNING_SECRET, timestamp: int | None = None) -> dict[str, str]:
    """Slack's request-signing headers for `body` (v0 HMAC-SHA256 of `v0:<ts>:<body>`)."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    digest = hmac.new(secret.encode(), f"v0:{ts}:{body}".encode(), hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest}",
            "Content-Type": "application/json"}


def adapter_settings(slack: "FakeSlack", **overrides) -> dict:
    """`[platforms.slack]` settings pointing an adapter at the fake (Socket Mode unless
    `mode="http"`; HTTP listener on a free port; 1 s Socket Mode pings)."""
    settings = {"bot_token": BOT_TOKEN, "app_token": APP_TOKEN, "signing_secret": SIGNING_SECRET,
                "api_base_url": slack.api_url, "http_port": 0, "ping_interval": 1}
    settings.update(overrides)
    return settings


async def post_event(url: str, envelope: dict, *, secret: str = SIGNING_SECRET, retry_num: int | None = None,
                     timestamp: int | None = None) -> tuple[int, str]:
    """POST one Events API request to `url` as Slack does (signed; `X-Slack-Retry-Num` on a
    retry). Returns `(HTTP status, body)`."""
    body = json.dumps(envelope)
    headers = sign(body, secret, timestamp)
    if retry_num is not None:
        headers["X-Slack-Retry-Num"] = str(retry_num)
        headers["X-Slack-Retry-Reason"] = "http_timeout"
    async with aiohttp.ClientSession() as http:
        async with http.post(url, data=body, headers=headers) as resp:
            return resp.status, await resp.text()


class FakeSlack:
    """The fake. `async with FakeSlack() as slack:`; `slack.api_url` is what
    `SlackSettings.api_base_url` takes."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.posted: list[dict] = []
        self.updates: list[dict] = []
        self.statuses: list[dict] = []
        self.failures: list[Failure] = []
        self.envelopes: list[Envelope] = []
        self.acks: list[str] = []
        self.connections = 0
        self.sockets: list[web.WebSocketResponse] = []
        self.status_error: str | None = None
        self.redeliver_after: float | None = None  # seconds; None: redeliver on reconnect only
        self.held: dict[str, asyncio.Event] = {}  # method → answered only once the event is set
        self._redeliveries: set[asyncio.Task] = set()
        self._ts = itertools.count(1)
        self._envelope_ids = itertools.count(1)
        self._tickets = itertools.count(1)
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    # ---- control -------------------------------------------------------------------------

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/"

    def fail(self, method: str, error: str, *, times: int = 1, retry_after: int = 1,
             when: Callable[[dict], bool] | None = None) -> None:
        """Script the next `times` matching calls of `method` to fail with `error`."""
        self.failures.append(Failure(method, error, times, retry_after, when))

    def calls_of(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method == method]

    async def push(self, *payloads: dict) -> list[str]:
        """Hold events for the app and send them on the open socket(s); returns envelope ids."""
        ids = []
        for payload in payloads:
            envelope = Envelope(f"env-{next(self._envelope_ids):04d}", payload)
            self.envelopes.append(envelope)
            ids.append(envelope.envelope_id)
            if self.sockets:
                await self._deliver(self.sockets[-1], envelope)
        return ids

    def pending(self) -> list[Envelope]:
        """Envelopes Slack still holds (not acknowledged)."""
        return [e for e in self.envelopes if not e.acked]

    async def disconnect(self, reason: str = "refresh_requested") -> None:
        """Ask the connected client(s) to reconnect, as Slack does every few hours."""
        for ws in list(self.sockets):
            await ws.send_str(json.dumps({"type": "disconnect", "reason": reason,
                                          "debug_info": {"host": "fake-slack"}}))

    async def drop_connections(self) -> None:
        """Close every socket without warning (a network cut)."""
        for ws in list(self.sockets):
            await ws.close()

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        """Wait until `predicate()` holds: checked whenever a request or frame arrives, and every
        20 ms (for conditions the fake does not see, such as a handler's own records)."""
        async def _wait():
            async with self._changed:
                while not predicate():
                    try:
                        await asyncio.wait_for(self._changed.wait(), 0.02)
                    except asyncio.TimeoutError:
                        pass
        await asyncio.wait_for(_wait(), timeout)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # ---- server --------------------------------------------------------------------------

    async def __aenter__(self) -> "FakeSlack":
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_get("/link/", self._socket)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def __aexit__(self, *exc) -> None:
        for task in list(self._redeliveries):
            task.cancel()
        for ws in list(self.sockets):
            await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _args(self, request: web.Request) -> dict:
        args: dict[str, Any] = dict(request.query)
        if request.can_read_body:
            if request.content_type == "application/json":
                args.update(await request.json())
            else:
                args.update(await request.post())
        return args

    def _scripted(self, method: str, args: dict) -> Failure | None:
        for failure in self.failures:
            if failure.method == method and failure.times > 0 and (failure.when is None or failure.when(args)):
                failure.times -= 1
                return failure
        return None

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        args = await self._args(request)
        call = Call(method, args, time.monotonic())
        self.calls.append(call)
        try:
            token = request.headers.get("Authorization", "").removeprefix("Bearer ")
            expected = APP_TOKEN if method == "apps.connections.open" else BOT_TOKEN
            if token != expected:
                call.error = "invalid_auth"
                return web.json_response({"ok": False, "error": "invalid_auth"})
            failure = self._scripted(method, args)
            if failure is not None:
                call.error = failure.error
                if failure.error == "ratelimited":
                    call.status = 429
                    return web.json_response({"ok": False, "error": "ratelimited"}, status=429,
                                             headers={"Retry-After": str(failure.retry_after)})
                return web.json_response({"ok": False, "error": failure.error})
            if method in self.held:
                await self.held[method].wait()  # a Web API method that hangs (a slow Slack)
            handler = getattr(self, "_m_" + method.replace(".", "_"), None)
            if handler is None:
                call.error = "unknown_method"
                return web.json_response({"ok": False, "error": "unknown_method"})
            result = await handler(args)
            call.error = None if result.get("ok") else result.get("error")
            return web.json_response(result)
        finally:
            await self._notify()

    # ---- Web API methods -----------------------------------------------------------------

    async def _m_auth_test(self, args):
        return {"ok": True, "url": "https://acme.slack.com/", "team": "Acme", "user": "hermes",
                "team_id": TEAM_ID, "user_id": BOT_USER_ID, "bot_id": BOT_ID, "is_enterprise_install": False}

    async def _m_apps_connections_open(self, args):
        return {"ok": True, "url": f"ws://127.0.0.1:{self.port}/link/?ticket={next(self._tickets)}"}

    async def _m_users_info(self, args):
        user = USERS.get(args.get("user", ""))
        if user is None:
            return {"ok": False, "error": "user_not_found"}
        return {"ok": True, "user": {"id": args["user"], "team_id": TEAM_ID, "name": user["real_name"].lower(),
                                     "real_name": user["real_name"], "is_bot": False,
                                     "profile": {"display_name": user["display_name"],
                                                 "real_name": user["real_name"]}}}

    async def _m_conversations_info(self, args):
        channel_id = args.get("channel", "")
        info = CHANNELS.get(channel_id)
        if info is None:
            return {"ok": False, "error": "channel_not_found"}
        channel = {"id": channel_id, "is_im": bool(info.get("is_im")), "is_mpim": bool(info.get("is_mpim"))}
        if info.get("is_im"):
            channel["user"] = info["user"]
        else:
            channel.update(name=info["name"], is_channel=not info["is_private"], is_group=info["is_private"],
                           is_private=info["is_private"], topic={"value": "", "creator": "", "last_set": 0},
                           purpose={"value": info["purpose"], "creator": "", "last_set": 0})
        return {"ok": True, "channel": channel}

    async def _m_chat_postMessage(self, args):
        ts = f"1767300000.{next(self._ts):06d}"
        message = dict(args, ts=ts)
        self.posted.append(message)
        return {"ok": True, "channel": args.get("channel"), "ts": ts,
                "message": {"type": "message", "text": args.get("text", ""), "user": BOT_USER_ID,
                            "bot_id": BOT_ID, "ts": ts, "thread_ts": args.get("thread_ts")}}

    async def _m_chat_update(self, args):
        self.updates.append(args)
        return {"ok": True, "channel": args.get("channel"), "ts": args.get("ts"), "text": args.get("text")}

    async def _m_assistant_threads_setStatus(self, args):
        self.statuses.append(args)
        if self.status_error:
            return {"ok": False, "error": self.status_error}
        return {"ok": True}

    # ---- Socket Mode ---------------------------------------------------------------------

    async def _deliver(self, ws: web.WebSocketResponse, envelope: Envelope) -> None:
        frame = {"envelope_id": envelope.envelope_id, "type": "events_api", "accepts_response_payload": False,
                 "retry_attempt": envelope.attempts, "retry_reason": "timeout" if envelope.attempts else "",
                 "payload": envelope.payload}
        envelope.attempts += 1
        envelope.delivered_at.append(time.monotonic())
        await ws.send_str(json.dumps(frame))
        if self.redeliver_after is not None:
            task = asyncio.create_task(self._redeliver(ws, envelope, self.redeliver_after))
            self._redeliveries.add(task)
            task.add_done_callback(self._redeliveries.discard)

    async def _redeliver(self, ws: web.WebSocketResponse, envelope: Envelope, delay: float) -> None:
        await asyncio.sleep(delay)
        if not envelope.acked and ws in self.sockets and not ws.closed:
            await self._deliver(ws, envelope)

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        self.connections += 1
        self.sockets.append(ws)
        await self._notify()
        try:
            await ws.send_str(json.dumps({"type": "hello", "num_connections": len(self.sockets),
                                          "debug_info": {"host": "fake-slack", "approximate_connection_time": 18060},
                                          "connection_info": {"app_id": "A0APP0001"}}))
            for envelope in self.pending():
                await self._deliver(ws, envelope)
            async for message in ws:
                if message.type != aiohttp.WSMsgType.TEXT:
                    continue
                data = json.loads(message.data)
                envelope_id = data.get("envelope_id")
                self.acks.append(envelope_id)
                for envelope in self.envelopes:
                    if envelope.envelope_id == envelope_id:
                        envelope.acked = True
                await self._notify()
        finally:
            if ws in self.sockets:
                self.sockets.remove(ws)
            await self._notify()
        return ws
