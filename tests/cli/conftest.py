"""A chat-completions server on 127.0.0.1 for `chat` subprocess tests: it never answers (an
agent turn that blocks, for crash tests) unless `answer` is set."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from aiohttp import web

# The CLI tests share `cli_helpers` from this folder (tests are imported with
# --import-mode=importlib, so their folder is not on sys.path by itself).
sys.path.insert(0, str(Path(__file__).parent))


class ChatCompletionsServer:
    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.started = asyncio.Event()
        self.base_url = ""
        self.answer: str | None = None
        self.usage = {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16,
                      "prompt_tokens_details": {"cached_tokens": 3}}

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        self.started.set()
        if self.answer is None:
            await asyncio.sleep(3600)
        return web.json_response({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000, "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": self.answer}}],
            "usage": self.usage})


@pytest.fixture
async def chat_completions_server():
    server = ChatCompletionsServer()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", server.handle)
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server.base_url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/v1"
    yield server
    await runner.cleanup()
