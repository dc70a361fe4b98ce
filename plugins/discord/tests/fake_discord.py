"""A fake Discord (REST API + gateway websocket) on 127.0.0.1 (aiohttp), for driving the real
discord.py client (docs/adapters.md §2.2 "Full fake server on 127.0.0.1").

The tests point discord.py at it by patching `discord.http.Route.BASE` (= `fake.api_base`) and
`discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY` (= `fake.gateway_url`), or through the
adapter's `api_base` / `gateway_url` settings.

REST (`/api/v10`, `Authorization: Bot <token>` checked, 401 otherwise; every JSON body with
`Content-Type: application/json` exactly — discord.py treats anything else as text):
* `GET /users/@me`, `GET /oauth2/applications/@me` (called by `login`; the application `flags`
  say whether the Message Content intent is enabled);
* `GET /channels/{id}` from `fake.channels` (404 Unknown Channel otherwise);
* `POST /channels/{id}/messages` with Discord's checks: content of 1–2000 characters (50035 /
  50006), no posting into forum/media channels (50008), a reference to a deleted message fails
  unless `fail_if_not_exists` is false (50035); per-channel rate-limit buckets announced with
  `X-RateLimit-*` headers, and a 429 (`retry_after` float seconds, `Via` header as Discord's
  edge sends it) when a client ignores them;
* `PATCH /channels/{id}/messages/{mid}`, `POST /channels/{id}/typing` (204);
* scripted failures: `fake.fail("create_message", "429", retry_after=…)`, `"429_cloudflare"`
  (no `Via`, as a Cloudflare ban), `"403"`.

Gateway (`/gw`, and `/gw/resume`, the `resume_gateway_url` READY announces): HELLO, heartbeat
ACKs, IDENTIFY → READY + GUILD_CREATE (4004 for a wrong token, 4014 for a privileged intent the
application lacks), RESUME → the session's events after the client's sequence, then RESUMED
(op 9 when the session is unknown or `invalidate_next_resume` is set). Events pushed while no
connection is live are kept in the session, as Discord holds them for a RESUME. `drop()` closes
the connection like a network failure; `request_reconnect()` sends op 7.
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from aiohttp import WSMsgType, web

BOT_ID = "1200000000000000000"
GUILD_ID = "1100000000000000001"
GENERAL_ID = "1100000000000000010"
FORUM_ID = "1100000000000000012"
FORUM_POST_ID = "1100000000000000030"
DM_ID = "1600000000000000001"
ALICE_ID = "1300000000000000001"
ROLE_ID = "1400000000000000001"

FLAG_GATEWAY_MESSAGE_CONTENT_LIMITED = 1 << 19
INTENT_MESSAGE_CONTENT = 1 << 15

BOT_USER = {"id": BOT_ID, "username": "hermes", "discriminator": "0", "global_name": None,
            "avatar": None, "bot": True, "flags": 0, "mfa_enabled": False, "verified": True}

ALICE = {"id": ALICE_ID, "username": "alice", "global_name": "Alice", "discriminator": "0", "avatar": None}

# The channels of docs/adapters.md §2.1 (D1, D2, D3) as the REST API returns them.
GENERAL = {"id": GENERAL_ID, "type": 0, "guild_id": GUILD_ID, "name": "general", "topic": "Ask the agent here",
           "parent_id": None, "position": 0, "permission_overwrites": [], "nsfw": False, "flags": 0,
           "rate_limit_per_user": 0, "last_message_id": None}
FORUM = {"id": FORUM_ID, "type": 15, "guild_id": GUILD_ID, "name": "support",
         "topic": "Post one bug per thread. Include logs.", "parent_id": None, "position": 1,
         "permission_overwrites": [], "nsfw": False, "flags": 0, "available_tags": [],
         "rate_limit_per_user": 0, "default_reaction_emoji": None, "default_sort_order": None,
         "default_forum_layout": 0, "default_thread_rate_limit_per_user": 0, "last_message_id": None}
FORUM_POST = {"id": FORUM_POST_ID, "type": 11, "guild_id": GUILD_ID, "parent_id": FORUM_ID,
              "owner_id": ALICE_ID, "name": "Bug: login loop", "applied_tags": ["1600000000000000009"],
              "thread_metadata": {"archived": False, "auto_archive_duration": 4320,
                                  "archive_timestamp": "2026-01-01T00:00:00+00:00", "locked": False},
              "message_count": 1, "member_count": 1, "rate_limit_per_user": 0, "flags": 0,
              "last_message_id": None}
DM = {"id": DM_ID, "type": 1, "recipients": [ALICE], "last_message_id": None}


def guild_payload(channels: list[dict], threads: list[dict]) -> dict:
    """A GUILD_CREATE `d` for "Hermes Lab" with the @everyone role (id = guild id) and role
    1400000000000000001."""
    def role(rid: str, name: str, position: int) -> dict:
        return {"id": rid, "name": name, "color": 0, "hoist": False, "position": position,
                "permissions": "1024", "managed": False, "mentionable": False, "flags": 0}

    return {"id": GUILD_ID, "name": "Hermes Lab", "unavailable": False, "owner_id": ALICE_ID,
            "member_count": 3, "large": False, "features": [], "emojis": [], "stickers": [],
            "roles": [role(GUILD_ID, "@everyone", 0), role(ROLE_ID, "agents", 1)],
            "channels": [{k: v for k, v in c.items() if k != "guild_id"} for c in channels],
            "threads": threads, "members": [], "voice_states": [], "presences": [],
            "stage_instances": [], "guild_scheduled_events": [], "soundboard_sounds": [],
            "joined_at": "2025-01-01T00:00:00+00:00", "afk_timeout": 300, "verification_level": 0,
            "default_message_notifications": 0, "explicit_content_filter": 0, "mfa_level": 0,
            "nsfw_level": 0, "premium_tier": 0, "preferred_locale": "en-US", "system_channel_flags": 0}


@dataclass
class Call:
    """One REST request: method, route name, path, decoded JSON body, monotonic arrival time,
    HTTP status answered."""

    method: str
    route: str
    path: str
    body: Any
    at: float
    status: int = 200


@dataclass
class Failure:
    """A scripted REST error for the next `times` calls of `route`."""

    route: str
    kind: str
    times: int = 1
    retry_after: float = 1.0


@dataclass
class Session:
    """A gateway session: every dispatch frame sent in it (index + 1 = its sequence number)."""

    id: str
    frames: list[dict] = field(default_factory=list)


async def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll `predicate()` every 10 ms until it holds (for state of the gateway or the adapter,
    which `FakeDiscord.wait_for` only looks at when the fake sees traffic)."""
    async def poll():
        while not predicate():
            await asyncio.sleep(0.01)
    await asyncio.wait_for(poll(), timeout)


class FakeDiscord:
    """The fake server. Use `async with FakeDiscord() as fake:`."""

    def __init__(self, token: str = "MTIwMDAwMDAwMDAwMDAwMDAwMA.fake.discord-token-Zq9", *,
                 message_content_enabled: bool = True):
        self.token = token
        self.app_flags = FLAG_GATEWAY_MESSAGE_CONTENT_LIMITED if message_content_enabled else 0
        # The gateway's own check (4014); normally it agrees with the application flags.
        self.refuse_message_content: bool | None = None
        self.channels: dict[str, dict] = {c["id"]: copy.deepcopy(c) for c in (GENERAL, FORUM, FORUM_POST, DM)}
        # What GUILD_CREATE carries: the guild's channels, and no threads (the forum post is
        # known to the REST API only: an uncached thread, D-T1).
        self.guild_channels = [GENERAL_ID, FORUM_ID]
        self.guild_threads: list[str] = []
        self.calls: list[Call] = []
        self.sent: list[dict] = []
        self.edits: list[dict] = []
        self.typing: list[str] = []
        self.failures: list[Failure] = []
        self.deleted_messages: set[str] = set()
        self.bucket_limit = 50
        self.bucket_window = 1.0
        self._buckets: dict[str, tuple[float, int]] = {}
        self._next_id = 1900000000000000000
        # gateway
        self.sessions: dict[str, Session] = {}
        self.session_id: str | None = None
        self.identifies: list[dict] = []
        self.resumes: list[dict] = []
        self.connections: list[str] = []
        self.replay_overlap = 0
        self.invalidate_next_resume = False
        self._ws: web.WebSocketResponse | None = None
        self._lock = asyncio.Lock()
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    # ---- addresses -------------------------------------------------------------------------------

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/v10"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/gw"

    # ---- control ---------------------------------------------------------------------------------

    def fail(self, route: str, kind: str, *, times: int = 1, retry_after: float = 1.0) -> None:
        """Script the next `times` calls of `route` (`"create_message"`, `"get_channel"`, …) to
        fail with `kind` (`"429"`, `"429_cloudflare"`, `"403"`)."""
        self.failures.append(Failure(route, kind, times, retry_after))

    def calls_of(self, route: str) -> list[Call]:
        return [c for c in self.calls if c.route == route]

    @property
    def connected(self) -> bool:
        return self._ws is not None

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        """Wait until `predicate()` holds (checked whenever a request or frame comes and goes)."""
        async def _wait():
            async with self._changed:
                await self._changed.wait_for(predicate)
        await asyncio.wait_for(_wait(), timeout)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def push(self, t: str, d: dict) -> int:
        """Dispatch event `t` in the current session (sent now when connected, else held for a
        RESUME). Returns its sequence number."""
        async with self._lock:
            if self.session_id is None:
                raise RuntimeError("no gateway session yet")
            seq = await self._dispatch(self.sessions[self.session_id], t, d)
        await self._notify()
        return seq

    async def message(self, d: dict) -> int:
        """Dispatch a MESSAGE_CREATE with `d`."""
        return await self.push("MESSAGE_CREATE", d)

    async def drop(self, code: int = 4000) -> None:
        """Close the live connection the way a failing network or a gateway restart does; the
        client reconnects to `resume_gateway_url` and RESUMEs."""
        async with self._lock:
            ws, self._ws = self._ws, None
        if ws is not None:
            await ws.close(code=code, message=b"fake gateway dropped the connection")
        await self._notify()

    async def request_reconnect(self) -> None:
        """Send op 7 RECONNECT on the live connection."""
        async with self._lock:
            ws, self._ws = self._ws, None
            if ws is not None:
                await ws.send_str(json.dumps({"op": 7, "d": None, "s": None, "t": None}))
        await self._notify()

    # ---- server ----------------------------------------------------------------------------------

    async def __aenter__(self) -> "FakeDiscord":
        app = web.Application()
        api = "/api/v10"
        app.router.add_get(f"{api}/users/@me", self._route("get_me", self._get_me))
        app.router.add_get(f"{api}/oauth2/applications/@me", self._route("get_application", self._get_application))
        app.router.add_get(f"{api}/channels/{{channel_id}}", self._route("get_channel", self._get_channel))
        app.router.add_post(f"{api}/channels/{{channel_id}}/messages",
                            self._route("create_message", self._create_message))
        app.router.add_patch(f"{api}/channels/{{channel_id}}/messages/{{message_id}}",
                             self._route("edit_message", self._edit_message))
        app.router.add_post(f"{api}/channels/{{channel_id}}/typing", self._route("typing", self._typing))
        app.router.add_get("/gw", self._gateway)
        app.router.add_get("/gw/resume", self._gateway)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def __aexit__(self, *exc) -> None:
        await self.drop(code=1001)
        if self._runner is not None:
            await self._runner.cleanup()

    # ---- REST ------------------------------------------------------------------------------------

    @staticmethod
    def json(payload: Any, status: int = 200, headers: dict | None = None) -> web.Response:
        # Exactly `application/json`: aiohttp's json_response adds "; charset=utf-8", which
        # discord.py does not recognise as JSON.
        return web.Response(body=json.dumps(payload).encode(), status=status,
                            headers={"Content-Type": "application/json", **(headers or {})})

    def _route(self, name: str, handler):
        async def handle(request: web.Request) -> web.Response:
            body = await request.json() if request.can_read_body else None
            call = Call(request.method, name, request.path, body, time.monotonic())
            self.calls.append(call)
            try:
                if request.headers.get("Authorization") != f"Bot {self.token}":
                    response = self.json({"message": "401: Unauthorized", "code": 0}, 401)
                else:
                    response = self._scripted(name) or await handler(request, body)
            finally:
                await self._notify()
            call.status = response.status
            return response
        return handle

    def _scripted(self, route: str) -> web.Response | None:
        for failure in self.failures:
            if failure.route == route and failure.times > 0:
                failure.times -= 1
                if failure.kind == "429":
                    return self.json({"message": "You are being rate limited.", "retry_after": failure.retry_after,
                                      "global": False}, 429,
                                     {"Via": "1.1 google", "Retry-After": str(int(failure.retry_after + 0.999)),
                                      "X-RateLimit-Scope": "user"})
                if failure.kind == "429_cloudflare":
                    return web.Response(text="error code: 1015", status=429, content_type="text/plain")
                if failure.kind == "403":
                    return self.json({"message": "Missing Permissions", "code": 50013}, 403)
                raise ValueError(f"unknown failure kind {failure.kind!r}")
        return None

    async def _get_me(self, request, body):
        return self.json(BOT_USER)

    async def _get_application(self, request, body):
        return self.json({"id": BOT_ID, "name": "Hermes", "icon": None, "description": "", "bot_public": False,
                          "bot_require_code_grant": False, "verify_key": "0" * 64, "flags": self.app_flags,
                          "owner": ALICE, "team": None, "interactions_endpoint_url": None})

    async def _get_channel(self, request, body):
        channel = self.channels.get(request.match_info["channel_id"])
        if channel is None:
            return self.json({"message": "Unknown Channel", "code": 10003}, 404)
        return self.json(channel)

    def _bucket(self, channel_id: str) -> tuple[bool, dict]:
        """Count one request against the channel's bucket; (allowed, X-RateLimit headers)."""
        now = time.monotonic()
        start, used = self._buckets.get(channel_id, (now, 0))
        if now - start >= self.bucket_window:
            start, used = now, 0
        allowed = used < self.bucket_limit
        if allowed:
            used += 1
        self._buckets[channel_id] = (start, used)
        reset_after = max(0.0, self.bucket_window - (now - start))
        return allowed, {"X-RateLimit-Limit": str(self.bucket_limit),
                         "X-RateLimit-Remaining": str(self.bucket_limit - used),
                         "X-RateLimit-Reset-After": f"{reset_after:.3f}",
                         "X-RateLimit-Reset": f"{time.time() + reset_after:.3f}",
                         "X-RateLimit-Bucket": f"create-message-{channel_id}"}

    def _message(self, channel_id: str, content: str, message_id: str | None = None) -> dict:
        if message_id is None:
            self._next_id += 1
            message_id = str(self._next_id)
        return {"id": message_id, "type": 0, "channel_id": channel_id, "author": BOT_USER, "content": content,
                "timestamp": "2026-01-01T00:00:00.000000+00:00", "edited_timestamp": None, "tts": False,
                "mention_everyone": False, "mentions": [], "mention_roles": [], "attachments": [],
                "embeds": [], "pinned": False, "flags": 0, "components": []}

    async def _create_message(self, request, body):
        channel_id = request.match_info["channel_id"]
        allowed, headers = self._bucket(channel_id)
        if not allowed:
            retry = float(headers["X-RateLimit-Reset-After"])
            return self.json({"message": "You are being rate limited.", "retry_after": retry, "global": False},
                             429, {**headers, "Via": "1.1 google", "X-RateLimit-Scope": "user"})
        channel = self.channels.get(channel_id)
        if channel is not None and channel["type"] in (15, 16):
            return self.json({"message": "Cannot send messages in a non-text channel", "code": 50008}, 400, headers)
        content = (body or {}).get("content") or ""
        if not content:
            return self.json({"message": "Cannot send an empty message", "code": 50006}, 400, headers)
        if len(content) > 2000:
            return self.json({"message": "Invalid Form Body", "code": 50035, "errors": {"content": {"_errors": [
                {"code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 2000 or fewer in length."}]}}}, 400, headers)
        reference = (body or {}).get("message_reference")
        if reference and str(reference.get("message_id")) in self.deleted_messages \
                and reference.get("fail_if_not_exists", True) is not False:
            return self.json({"message": "Invalid Form Body", "code": 50035, "errors": {"message_reference": {
                "_errors": [{"code": "MESSAGE_REFERENCE_UNKNOWN_MESSAGE", "message": "Unknown message"}]}}},
                400, headers)
        message = self._message(channel_id, content)
        self.sent.append({"channel_id": channel_id, "id": message["id"], **body})
        return self.json(message, 200, headers)

    async def _edit_message(self, request, body):
        message = self._message(request.match_info["channel_id"], (body or {}).get("content") or "",
                                request.match_info["message_id"])
        self.edits.append({"channel_id": message["channel_id"], "id": message["id"], **(body or {})})
        return self.json(message)

    async def _typing(self, request, body):
        self.typing.append(request.match_info["channel_id"])
        return web.Response(status=204)

    # ---- gateway ---------------------------------------------------------------------------------

    async def _dispatch(self, session: Session, t: str, d: Any) -> int:
        frame = {"op": 0, "t": t, "s": len(session.frames) + 1, "d": d}
        session.frames.append(frame)
        if self._ws is not None and self.session_id == session.id:
            await self._ws.send_str(json.dumps(frame))
        return frame["s"]

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.connections.append(request.path)
        await ws.send_str(json.dumps({"op": 10, "d": {"heartbeat_interval": 41250}, "s": None, "t": None}))
        try:
            async for msg in ws:
                if msg.type is not WSMsgType.TEXT:
                    continue
                frame = json.loads(msg.data)
                op, d = frame.get("op"), frame.get("d")
                if op == 1:
                    await ws.send_str(json.dumps({"op": 11, "d": None, "s": None, "t": None}))
                elif op == 2:
                    await self._identify(ws, d)
                elif op == 6:
                    await self._resume(ws, d)
        finally:
            async with self._lock:
                if self._ws is ws:
                    self._ws = None
            await self._notify()
        return ws

    async def _identify(self, ws: web.WebSocketResponse, d: dict) -> None:
        self.identifies.append(d)
        if d.get("token") != self.token:
            await ws.close(code=4004, message=b"Authentication failed.")
            return
        refuse = (not self.app_flags) if self.refuse_message_content is None else self.refuse_message_content
        if d.get("intents", 0) & INTENT_MESSAGE_CONTENT and refuse:
            await ws.close(code=4014, message=b"Disallowed intent(s).")
            return
        async with self._lock:
            session = Session(f"fake-session-{len(self.sessions) + 1}")
            self.sessions[session.id] = session
            self.session_id = session.id
            self._ws = ws
            ready = {"v": 10, "user": BOT_USER, "guilds": [{"id": GUILD_ID, "unavailable": True}],
                     "session_id": session.id, "resume_gateway_url": f"ws://127.0.0.1:{self.port}/gw/resume",
                     "application": {"id": BOT_ID, "flags": self.app_flags}, "private_channels": []}
            await self._dispatch(session, "READY", ready)
            await self._dispatch(session, "GUILD_CREATE", guild_payload(
                [self.channels[c] for c in self.guild_channels], [self.channels[t] for t in self.guild_threads]))
        await self._notify()

    async def _resume(self, ws: web.WebSocketResponse, d: dict) -> None:
        self.resumes.append(d)
        session = self.sessions.get(d.get("session_id"))
        async with self._lock:
            if d.get("token") != self.token or session is None or session.id != self.session_id \
                    or self.invalidate_next_resume:
                self.invalidate_next_resume = False
                await ws.send_str(json.dumps({"op": 9, "d": False, "s": None, "t": None}))
                return
            after = int(d.get("seq") or 0) - self.replay_overlap
            for frame in session.frames[after:]:
                await ws.send_str(json.dumps(frame))
            self._ws = ws
            await self._dispatch(session, "RESUMED", {})
        await self._notify()
