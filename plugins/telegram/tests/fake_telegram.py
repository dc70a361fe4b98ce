"""A fake Telegram Bot API server on 127.0.0.1 (aiohttp), for driving the real PTB client.

Serves `POST /bot{token}/{method}` (docs/adapters.md §1.2 "Local Bot API fake"):

* getMe; getUpdates with Telegram's offset semantics (an update is confirmed, and dropped, once a
  getUpdates asks for an offset above its id; unconfirmed updates are returned again) and long
  polling (waits up to `timeout` seconds for a new update);
* sendMessage (records every attempt and every delivered message), sendChatAction;
* setWebhook / deleteWebhook / getWebhookInfo, close / logOut;
* scripted failures with the Bot API's real error bodies: 429 with `retry_after`,
  "message thread not found", "can't parse entities", a group → supergroup migration.

A wrong token gets 401 Unauthorized, as the real API answers.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any, Callable

from aiohttp import web

BOT_ID = 7000000001
BOT_USER = {"id": BOT_ID, "is_bot": True, "first_name": "Hermes", "username": "hermes_test_bot",
            "can_join_groups": True, "can_read_all_group_messages": False,
            "supports_inline_queries": False}

ERRORS = {
    "429": lambda f: (429, {"ok": False, "error_code": 429,
                            "description": f"Too Many Requests: retry after {f.retry_after}",
                            "parameters": {"retry_after": f.retry_after}}),
    "thread_not_found": lambda f: (400, {"ok": False, "error_code": 400,
                                         "description": "Bad Request: message thread not found"}),
    "parse": lambda f: (400, {"ok": False, "error_code": 400,
                              "description": "Bad Request: can't parse entities: Can't find end of "
                                             "the entity starting at byte offset 12"}),
    "migrated": lambda f: (400, {"ok": False, "error_code": 400,
                                 "description": "Bad Request: group chat was upgraded to a supergroup chat",
                                 "parameters": {"migrate_to_chat_id": f.migrate_to}}),
    "server": lambda f: (502, {"ok": False, "error_code": 502, "description": "Bad Gateway"}),
}


@dataclass
class Failure:
    """A scripted error: answer `method` with `kind` `times` times when `when(body)` holds."""

    method: str
    kind: str
    times: int = 1
    retry_after: int = 1
    migrate_to: int | None = None
    when: Callable[[dict], bool] | None = None


@dataclass
class Call:
    """One request: method, decoded body, monotonic time it arrived, HTTP status answered."""

    method: str
    body: dict
    at: float
    status: int = 200


def _decode(value: Any) -> Any:
    """PTB sends every parameter as a string; nested objects as JSON text."""
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


class FakeTelegram:
    """The fake server. Use `async with FakeTelegram() as tg:`; `tg.base_url` is what
    `TelegramSettings.base_url` takes (the token is appended by PTB)."""

    def __init__(self, token: str = "123456:TEST-fake-token"):
        self.token = token
        self.pending: list[dict] = []
        self.calls: list[Call] = []
        self.sent: list[dict] = []
        self.failures: list[Failure] = []
        self.webhook: dict | None = None
        self.media: list[tuple[str, dict]] = []
        self.edits: list[dict] = []
        self.max_poll_wait = 5.0
        self._next_message_id = 1000
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    # ---- control -------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/bot"

    async def push(self, *updates: dict) -> None:
        """Queue updates for getUpdates (as Telegram holds them until confirmed)."""
        async with self._changed:
            self.pending.extend(updates)
            self._changed.notify_all()

    def fail(self, method: str, kind: str, *, times: int = 1, retry_after: int = 1,
             migrate_to: int | None = None, when: Callable[[dict], bool] | None = None) -> None:
        """Script the next `times` matching calls of `method` to fail with `kind` (see ERRORS)."""
        self.failures.append(Failure(method, kind, times, retry_after, migrate_to, when))

    def calls_of(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method == method]

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        """Wait until `predicate()` holds (checked whenever a request arrives)."""
        async def _wait():
            async with self._changed:
                await self._changed.wait_for(predicate)
        await asyncio.wait_for(_wait(), timeout)

    # ---- server --------------------------------------------------------------------------

    async def __aenter__(self) -> "FakeTelegram":
        app = web.Application()
        app.router.add_route("POST", "/bot{token}/{method}", self._handle)
        app.router.add_route("GET", "/bot{token}/{method}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def __aexit__(self, *exc) -> None:
        async with self._changed:
            self._changed.notify_all()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _body(self, request: web.Request) -> dict:
        if request.content_type == "application/json":
            raw = await request.json() if request.can_read_body else {}
        else:
            raw = {}
            for name, value in (await request.post()).items():
                if isinstance(value, web.FileField):  # an upload (multipart)
                    value = {"filename": value.filename, "content": value.file.read()}
                raw[name] = value
        return {k: _decode(v) for k, v in (raw or {}).items()}

    def _scripted(self, method: str, body: dict) -> Failure | None:
        for failure in self.failures:
            if failure.method == method and failure.times > 0 and (failure.when is None or failure.when(body)):
                failure.times -= 1
                return failure
        return None

    async def _handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        body = await self._body(request)
        call = Call(method, body, time.monotonic())
        async with self._changed:
            self.calls.append(call)
            self._changed.notify_all()
        if request.match_info["token"] != self.token:
            call.status = 401
            return web.json_response({"ok": False, "error_code": 401, "description": "Unauthorized"},
                                     status=401)
        failure = self._scripted(method, body)
        if failure is not None:
            status, payload = ERRORS[failure.kind](failure)
            call.status = status
            return web.json_response(payload, status=status)
        handler = getattr(self, f"_m_{method}", None)
        if handler is None:
            call.status = 404
            return web.json_response({"ok": False, "error_code": 404, "description": "Not Found"}, status=404)
        return web.json_response({"ok": True, "result": await handler(body)})

    # ---- methods -------------------------------------------------------------------------

    async def _m_getMe(self, body):
        return BOT_USER

    async def _m_setMyCommands(self, body):
        return True

    async def _m_getUpdates(self, body):
        offset = body.get("offset")
        limit = int(body.get("limit") or 100)
        timeout = min(float(body.get("timeout") or 0), self.max_poll_wait)
        if offset is not None:
            offset = int(offset)
            # Telegram semantics: asking for `offset` confirms every update below it.
            self.pending = [u for u in self.pending if u.get("update_id", 0) >= offset]

        def ready():
            return [u for u in self.pending if offset is None or u.get("update_id", 0) >= offset]

        if not ready() and timeout > 0:
            try:
                async with self._changed:
                    await asyncio.wait_for(self._changed.wait_for(lambda: bool(ready())), timeout)
            except asyncio.TimeoutError:
                pass
        return ready()[:limit]

    async def _m_sendMessage(self, body):
        self._next_message_id += 1
        chat_id = int(body["chat_id"])
        message = {"message_id": self._next_message_id, "date": 1767225600,
                   "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "supergroup"},
                   "from": BOT_USER, "text": body["text"]}
        if body.get("message_thread_id") is not None:
            message["message_thread_id"] = int(body["message_thread_id"])
        self.sent.append(body)
        return message

    async def _m_editMessageText(self, body):
        self.edits.append(body)
        return {"message_id": int(body["message_id"]), "date": 1767225600, "edit_date": 1767225700,
                "chat": {"id": int(body["chat_id"]), "type": "private"}, "text": body["text"]}

    async def _media(self, method, body):
        self._next_message_id += 1
        self.media.append((method, body))
        chat_id = int(body["chat_id"])
        return {"message_id": self._next_message_id, "date": 1767225600,
                "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "supergroup"},
                "document": {"file_id": "BQAD", "file_unique_id": "u"}}

    async def _m_sendDocument(self, body):
        return await self._media("sendDocument", body)

    async def _m_sendPhoto(self, body):
        return await self._media("sendPhoto", body)

    async def _m_sendChatAction(self, body):
        return True

    async def _m_setWebhook(self, body):
        self.webhook = body
        return True

    async def _m_deleteWebhook(self, body):
        self.webhook = None
        return True

    async def _m_getWebhookInfo(self, body):
        return {"url": (self.webhook or {}).get("url", ""), "has_custom_certificate": False,
                "pending_update_count": len(self.pending)}

    async def _m_close(self, body):
        return True

    async def _m_logOut(self, body):
        return True
