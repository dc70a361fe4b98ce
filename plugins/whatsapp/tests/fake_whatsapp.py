"""Fake WhatsApp servers on 127.0.0.1 (aiohttp), for driving the plugin's real httpx clients
(docs/adapters.md §4.4 "Library and offline tests"), and a signed webhook poster playing Meta.

* `FakeBridge` — the bridge contract of the plugin's README: `GET /events?after=N&timeout=S`
  (long poll; `after` acknowledges, unacknowledged events are kept and served again, also after
  a restart), `POST /send` (recorded; scripted 429s with `Retry-After` and refusals), `POST
  /typing`, `GET /groups/<jid>`, `GET /health`. `stop()` / `start()` restart it on the same port.
* `FakeGraph` — `POST /<phone_number_id>/messages` of the Graph API: text sends (recorded, each
  answered with a new `wamid`), read + typing-indicator requests, scripted Graph errors
  (`{"error": {"code": …}}` with the HTTP status Meta uses). A wrong bearer token gets 401 / 190.
* `post_webhook` — POST a body to the adapter's webhook with `X-Hub-Signature-256` computed over
  the exact bytes sent, as Meta does; `MetaPoster` re-posts on a non-2xx answer, as Meta retries.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from typing import Any, Callable

import httpx
from aiohttp import web

APP_SECRET = "test-app-secret"
VERIFY_TOKEN = "test-verify-token"
ACCESS_TOKEN = "test-access-token"
PHONE_NUMBER_ID = "109876543210001"
BOT_JID = "15550001111:12@s.whatsapp.net"
BOT_LID = "222333444555666:12@lid"


def bridge_settings(bridge, **overrides) -> dict:
    """Adapter settings for `bridge` (fast polls and reconnects), with `overrides`."""
    settings = {"bridge_url": bridge.base_url, "poll_timeout": 1.0, "reconnect_initial": 0.05, "reconnect_max": 0.2}
    settings.update(overrides)
    return settings


def cloud_settings(graph, **overrides) -> dict:
    """Adapter settings for `graph` (test secrets, a free webhook port), with `overrides`."""
    settings = {"access_token": ACCESS_TOKEN, "app_secret": APP_SECRET, "verify_token": VERIFY_TOKEN,
                "phone_number_id": PHONE_NUMBER_ID, "graph_base_url": graph.base_url, "http_port": 0,
                "rate_limit_wait": 0.5}
    settings.update(overrides)
    return settings


def sign(raw: bytes, secret: str = APP_SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()


async def post_webhook(url: str, body: Any, *, secret: str | None = APP_SECRET, raw: bytes | None = None,
                       signature: str | None = None) -> httpx.Response:
    """POST `body` (JSON) or `raw` bytes to `url`, signed with `secret` (None: unsigned)."""
    data = raw if raw is not None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if signature is not None:
        headers["X-Hub-Signature-256"] = signature
    elif secret is not None:
        headers["X-Hub-Signature-256"] = sign(data, secret)
    async with httpx.AsyncClient(timeout=30) as client:
        return await client.post(url, content=data, headers=headers)


class MetaPoster:
    """Posts a notification like Meta: again after a non-2xx answer or a refused connection
    (pause `retry_s`), up to `attempts` times. `answers` holds every status code received, in
    order (0 for no connection)."""

    def __init__(self, url: str, *, retry_s: float = 0.05, attempts: int = 50):
        self.url = url
        self.retry_s = retry_s
        self.attempts = attempts
        self.answers: list[int] = []

    async def deliver(self, body: Any) -> int:
        for _ in range(self.attempts):
            try:
                status = (await post_webhook(self.url, body)).status_code
            except httpx.TransportError:  # nobody listens (the gateway is down): retry later
                status = 0
            self.answers.append(status)
            if 200 <= status < 300:
                return status
            await asyncio.sleep(self.retry_s)
        return self.answers[-1]


class _Server:
    """A restartable aiohttp server on 127.0.0.1."""

    def __init__(self) -> None:
        self.port: int | None = None
        self._runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    async def start(self) -> None:
        app = web.Application()
        self.routes(app)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port or 0).start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def __aenter__(self):
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError("condition not reached within %.1f s" % timeout)
            await asyncio.sleep(0.01)


@dataclass
class Failure:
    """A scripted refusal of a send: `status` (HTTP) with `body`, `times` times, when `when(body)`."""

    status: int
    body: dict
    times: int = 1
    headers: dict | None = None
    when: Callable[[dict], bool] | None = None


@dataclass
class Call:
    """One send request: its JSON body, monotonic arrival time, and the HTTP status answered."""

    body: dict
    at: float
    status: int


class _Failing:
    failures: list[Failure]
    calls: list[Call]

    def _failure_for(self, body: dict) -> Failure | None:
        for failure in self.failures:
            if failure.times > 0 and (failure.when is None or failure.when(body)):
                failure.times -= 1
                return failure
        return None


class FakeBridge(_Server, _Failing):
    """The fake bridge. `push(*events)` queues events; `sent` holds successful `/send` bodies."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[int, Any]] = []   # (seq, event) not yet acknowledged
        self.seq = 0
        self.acked = 0
        self.polls: list[dict] = []               # query of each GET /events
        self.sent: list[dict] = []
        self.calls: list[Call] = []
        self.typing: list[dict] = []
        self.failures: list[Failure] = []
        self.groups: dict[str, str] = {"120363025555555555@g.us": "Book Club"}
        self.group_lookups: list[str] = []
        self.poll_failures: list[int] = []        # HTTP statuses the next polls are answered with
        self._changed = asyncio.Event()

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/health", self._health)
        app.router.add_get("/events", self._events)
        app.router.add_post("/send", self._send)
        app.router.add_post("/typing", self._typing)
        app.router.add_get("/groups/{jid}", self._group)

    def push(self, *events: Any) -> list[int]:
        """Queue events; returns their seqs."""
        seqs = []
        for event in events:
            self.seq += 1
            self.events.append((self.seq, event))
            seqs.append(self.seq)
        self._changed.set()
        return seqs

    @property
    def pending(self) -> list[Any]:
        """Events not acknowledged yet."""
        return [event for _, event in self.events]

    def fail_send(self, status: int, error: str = "refused", *, times: int = 1, retry_after: float | None = None,
                  when: Callable[[dict], bool] | None = None) -> None:
        headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else None
        self.failures.append(Failure(status, {"error": error}, times, headers, when))

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "connected", "me": {"id": BOT_JID, "lid": BOT_LID}})

    async def _events(self, request: web.Request) -> web.Response:
        self.polls.append(dict(request.query))
        if self.poll_failures:
            status = self.poll_failures.pop(0)
            return web.json_response({"error": "busy"}, status=status, headers={"Retry-After": "0.1"})
        try:
            after = int(request.query.get("after", "0"))
            timeout = float(request.query.get("timeout", "0"))
        except ValueError:
            return web.json_response({"error": "bad after/timeout"}, status=400)
        self.acked = max(self.acked, after)
        self.events = [(seq, event) for seq, event in self.events if seq > after]
        deadline = time.monotonic() + timeout
        while not self.events and time.monotonic() < deadline:
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                break
        return web.json_response({"events": [{"seq": seq, "event": event} for seq, event in self.events]})

    async def _send(self, request: web.Request) -> web.Response:
        body = await request.json()
        failure = self._failure_for(body)
        status = failure.status if failure else 200
        self.calls.append(Call(body, time.monotonic(), status))
        if failure:
            return web.json_response(failure.body, status=failure.status, headers=failure.headers)
        self.sent.append(body)
        return web.json_response({"messageId": f"3EB0BOT{len(self.sent):012d}"})

    async def _typing(self, request: web.Request) -> web.Response:
        self.typing.append(await request.json())
        return web.json_response({})

    async def _group(self, request: web.Request) -> web.Response:
        jid = request.match_info["jid"]
        self.group_lookups.append(jid)
        if jid not in self.groups:
            return web.json_response({"error": "item-not-found"}, status=404)
        return web.json_response({"id": jid, "subject": self.groups[jid]})


class FakeGraph(_Server, _Failing):
    """The fake Graph API. `sent` holds successful text sends (JSON bodies), `typing` the
    read + typing-indicator requests; `wamids` the ids answered, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[dict] = []
        self.wamids: list[str] = []
        self.typing: list[dict] = []
        self.calls: list[Call] = []
        self.failures: list[Failure] = []

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/{phone_number_id}/messages", self._messages)

    def fail(self, code: int, *, status: int = 400, title: str = "refused", times: int = 1,
             retry_after: float | None = None, when: Callable[[dict], bool] | None = None) -> None:
        """Answer the next `times` text sends (matching `when`) with Graph error `code`."""
        headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else None
        body = {"error": {"message": f"({code}) {title}", "type": "OAuthException", "code": code,
                          "error_data": {"messaging_product": "whatsapp", "details": title},
                          "fbtrace_id": "Az8or2yhqkZfEZ-_4Qn_Bam"}}
        self.failures.append(Failure(status, body, times, headers, when))

    async def _messages(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {ACCESS_TOKEN}":
            return web.json_response({"error": {"message": "Invalid OAuth access token.", "code": 190}}, status=401)
        if request.match_info["phone_number_id"] != PHONE_NUMBER_ID:
            return web.json_response({"error": {"message": "Unsupported post request", "code": 100}}, status=400)
        body = await request.json()
        if body.get("status") == "read":
            self.typing.append(body)
            return web.json_response({"success": True})
        failure = self._failure_for(body)
        status = failure.status if failure else 200
        self.calls.append(Call(body, time.monotonic(), status))
        if failure:
            return web.json_response(failure.body, status=failure.status, headers=failure.headers)
        self.sent.append(body)
        wamid = f"wamid.BOT{len(self.sent):06d}"
        self.wamids.append(wamid)
        return web.json_response({"messaging_product": "whatsapp",
                                  "contacts": [{"input": body.get("to") or body.get("recipient")}],
                                  "messages": [{"id": wamid}]})
