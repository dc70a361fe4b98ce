"""A fake OpenAI chat-completions server on 127.0.0.1 (aiohttp), recording request bodies."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web


class FakeChatServer:
    """Serves POST /v1/chat/completions. `reply`/`usage` shape the answer; `hang` blocks forever;
    `status` != 200 answers with an error body."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.reply = "fake reply"
        self.usage = {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16,
                      "prompt_tokens_details": {"cached_tokens": 3}}
        self.hang = False
        self.status = 200
        self.html = False
        # Set: the answer is this body (bytes) with HTTP 200 and content type application/json,
        # whatever it holds (a proxy that cut the body short, a server answering in its own shape).
        self.raw_json_body: bytes | None = None
        # Set: the next request waits for this event before answering (then it is cleared).
        self.hold: asyncio.Event | None = None
        # Extra fields of the reply message (what reasoning models add beside the content).
        self.message_extra: dict = {}
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.base_url = ""

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append(await request.json())
        self.headers.append(dict(request.headers))
        self.started.set()
        if self.hang:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
        if self.hold is not None:
            hold, self.hold = self.hold, None
            await hold.wait()
        if self.status != 200:
            return web.json_response({"error": {"message": "boom", "type": "server_error"}},
                                     status=self.status)
        if self.html:  # a 200 that is not a chat completion (a proxy's page)
            return web.Response(text="<html>upstream says hello</html>", content_type="text/html")
        if self.raw_json_body is not None:
            return web.Response(body=self.raw_json_body, content_type="application/json")
        return web.json_response({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000,
            "model": self.requests[-1].get("model", "m"),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": self.reply, **self.message_extra}}],
            "usage": self.usage,
        })


@pytest.fixture
async def fake_chat_server():
    server = FakeChatServer()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", server.handle)
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    server.base_url = f"http://127.0.0.1:{port}/v1"
    yield server
    await runner.cleanup()
