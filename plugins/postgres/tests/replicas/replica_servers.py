"""The outside world of the replica tests, on 127.0.0.1 in the test process: a fake chat
platform (long-polled by `replica_adapter.PolledAdapter`, redelivering what is not acknowledged,
like a webhook sender) and a scripted chat-completions agent that counts its runs per message."""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter, deque
from dataclasses import dataclass, field

from aiohttp import web

TOKEN = re.compile(r"s\d+-m\d+")
REDELIVER_AFTER_S = 3.0


@dataclass
class Sent:
    chat: str
    text: str
    reply_to: str | None
    replica: str


@dataclass
class FakePlatform:
    """Messages wait in `inbox` (optionally pinned to one replica) until a replica polls them;
    one not acknowledged within REDELIVER_AFTER_S goes back to the inbox for any replica."""

    inbox: deque = field(default_factory=deque)
    unacked: dict = field(default_factory=dict)
    sent: list[Sent] = field(default_factory=list)
    polled_by: Counter = field(default_factory=Counter)
    base_url: str = ""

    def push(self, message_id: str, chat: str, text: str, replica: str | None = None) -> None:
        self.inbox.append(({"id": message_id, "chat": chat, "user": f"user-{chat}", "text": text}, replica))

    def _take(self, replica: str) -> list[dict]:
        now = time.monotonic()
        for message_id, (item, _who, since) in list(self.unacked.items()):
            if now - since > REDELIVER_AFTER_S:
                del self.unacked[message_id]
                self.inbox.appendleft((item, None))
        batch, keep = [], deque()
        while self.inbox:
            item, pinned = self.inbox.popleft()
            if pinned in (None, replica) and len(batch) < 20:
                batch.append(item)
                self.unacked[item["id"]] = (item, replica, now)
            else:
                keep.append((item, pinned))
        self.inbox = keep
        return batch

    async def poll(self, request: web.Request) -> web.Response:
        replica = request.query["replica"]
        self.polled_by[replica] += 1
        for _ in range(10):
            batch = self._take(replica)
            if batch:
                return web.json_response(batch)
            await asyncio.sleep(0.05)
        return web.json_response([])

    async def ack(self, request: web.Request) -> web.Response:
        self.unacked.pop((await request.json())["id"], None)
        return web.json_response({})

    async def send(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.sent.append(Sent(body["chat"], body["text"], body.get("reply_to"), body["replica"]))
        return web.json_response({"id": f"out-{len(self.sent)}"})

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/poll", self.poll)
        app.router.add_post("/ack", self.ack)
        app.router.add_post("/send", self.send)


@dataclass
class ScriptedAgent:
    """Answers `answer <token>` for the `sN-mM` token of the last user message. The first run
    of a token in `hold` waits for `release` (a turn in flight while its replica is killed or
    stopped); later runs answer at once. `runs` counts runs per token."""

    hold: set = field(default_factory=set)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    runs: Counter = field(default_factory=Counter)
    held_now: set = field(default_factory=set)
    base_url: str = ""

    async def complete(self, request: web.Request) -> web.Response:
        body = await request.json()
        users = [m for m in body["messages"] if m.get("role") == "user"]
        content = users[-1]["content"] if users else ""
        content = content if isinstance(content, str) else " ".join(p.get("text", "") for p in content)
        found = TOKEN.findall(content)
        token = found[-1] if found else "none"
        self.runs[token] += 1
        if token in self.hold and self.runs[token] == 1:
            self.held_now.add(token)
            await self.release.wait()
        await asyncio.sleep(0.02)
        return web.json_response({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000, "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": f"answer {token}"}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}})

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self.complete)


async def serve(*parts) -> tuple[web.AppRunner, str]:
    """Serve `parts` (objects with `routes(app)`) on a free port of 127.0.0.1; returns the
    runner and the base URL."""
    app = web.Application()
    for part in parts:
        part.routes(app)
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
