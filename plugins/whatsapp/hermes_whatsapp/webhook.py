"""The Cloud API webhook listener (aiohttp, as the Slack plugin's HTTP mode): docs/adapters.md
§4.3, trap W-T8.

* `GET <path>?hub.mode=subscribe&hub.verify_token=…&hub.challenge=…` — the verification
  handshake: the challenge is echoed when the token matches (compared in constant time), else 403.
* `POST <path>` — a notification. `X-Hub-Signature-256: sha256=<hex HMAC-SHA256(app_secret, raw
  body)>` is checked on the raw bytes before anything is parsed; a missing or wrong signature is
  answered 401, logged without the body, and nothing is stored. A body that is not JSON is
  logged and answered 200 (a retry would not mend it). Otherwise the body goes to `on_body`,
  which returns True once every message in it is durably accepted: 200. False: 500, and Meta
  redelivers the notification (the core's dedupe answers a message only once).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from typing import Any, Awaitable, Callable

from aiohttp import web

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Hub-Signature-256"
BodyHandler = Callable[[Any], Awaitable[bool]]


def signature(app_secret: str, raw: bytes) -> str:
    """The `X-Hub-Signature-256` value Meta sends for `raw` (`"sha256=<hex>"`)."""
    return "sha256=" + hmac.new(app_secret.encode("utf-8"), raw, hashlib.sha256).hexdigest()


class WebhookListenerError(RuntimeError):
    """The listener could not start (the port is in use); no secret in the message."""


class WebhookListener:
    """The aiohttp server of the webhook.

    Args:
        path: the URL path (`/whatsapp/webhook`).
        app_secret / verify_token: the secrets (plain strings, kept in memory only).
        on_body: awaited with each verified, decoded body.
        max_body_bytes: larger bodies are refused (413).
    """

    def __init__(self, path: str, *, app_secret: str, verify_token: str, on_body: BodyHandler,
                 max_body_bytes: int):
        self.path = path
        self._secret = app_secret
        self._verify_token = verify_token
        self._on_body = on_body
        self._max = max_body_bytes
        self._runner: web.AppRunner | None = None
        self.address: tuple[str, int] | None = None

    async def start(self, host: str, port: int) -> None:
        """Listen on `host:port` (`port` 0: a free one, see `address`).

        Raises:
            WebhookListenerError: the address cannot be bound.
        """
        app = web.Application(client_max_size=self._max)
        app.router.add_get(self.path, self._handshake)
        app.router.add_post(self.path, self._notification)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as exc:
            await runner.cleanup()
            raise WebhookListenerError(f"whatsapp_cloud webhook listener on {host}:{port} could not start: "
                                       f"{exc.strerror or type(exc).__name__}") from None
        self._runner = runner
        self.address = tuple(runner.addresses[0][:2])  # type: ignore[assignment]

    async def stop(self) -> None:
        """Stop listening (requests in progress finish first). Idempotent."""
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()
            self.address = None

    @property
    def running(self) -> bool:
        return self._runner is not None

    async def _handshake(self, request: web.Request) -> web.Response:
        mode = request.query.get("hub.mode", "")
        token = request.query.get("hub.verify_token", "")
        challenge = request.query.get("hub.challenge", "")
        if mode == "subscribe" and hmac.compare_digest(token.encode("utf-8"), self._verify_token.encode("utf-8")):
            log.info("whatsapp_cloud webhook verified by Meta")
            return web.Response(text=challenge)
        log.warning("whatsapp_cloud webhook verification from %s refused (403): wrong mode or verify token",
                    request.remote)
        return web.Response(status=403, text="forbidden")

    async def _notification(self, request: web.Request) -> web.Response:
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            log.warning("whatsapp_cloud webhook body from %s refused (413): larger than %d bytes",
                        request.remote, self._max)
            return web.Response(status=413, text="too large")
        given = request.headers.get(SIGNATURE_HEADER, "")
        if not hmac.compare_digest(given.encode("utf-8", "replace"), signature(self._secret, raw).encode("ascii")):
            # Never log the body: it is a user's message (or an attacker's choice of text).
            log.warning("whatsapp_cloud webhook POST from %s refused (401): %s", request.remote,
                        "bad X-Hub-Signature-256" if given else "no X-Hub-Signature-256 header")
            return web.Response(status=401, text="invalid signature")
        try:
            body = json.loads(raw)
        except ValueError as exc:  # UnicodeDecodeError and oversized integers included
            log.warning("whatsapp_cloud webhook body skipped: not valid JSON (%s)", type(exc).__name__)
            return web.Response(text="ok")
        accepted = await self._on_body(body)
        return web.Response(text="ok") if accepted else web.Response(status=500, text="retry later")
