"""A chat-completions server on 127.0.0.1 that never answers (an agent turn that blocks), for
crash tests of the `chat` subprocess."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web


class HangingChatServer:
    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.started = asyncio.Event()
        self.base_url = ""

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append(await request.json())
        self.started.set()
        await asyncio.sleep(3600)
        return web.json_response({})


@pytest.fixture
async def hanging_chat_server():
    server = HangingChatServer()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", server.handle)
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server.base_url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/v1"
    yield server
    await runner.cleanup()
