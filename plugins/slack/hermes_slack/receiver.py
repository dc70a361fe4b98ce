"""Receiving Slack events with slack-bolt's `AsyncApp`, over Socket Mode or the HTTP Events API
(docs/adapters.md §3.2, §3.3 "Events API delivery", §6).

Acknowledgement after durable acceptance (docs/behaviour.md §0, §12): the app runs with
`process_before_response=True`, so Bolt acknowledges an event only after the listener returned.
The listener hands the envelope to `on_envelope`, which returns True once the gateway durably
accepted the message (or deliberately skipped the event); then it acks. On False it answers 500:
in Socket Mode no ack is sent and Slack redelivers the envelope, over HTTP Slack retries the
request (`X-Slack-Retry-Num`). A redelivery of an accepted message is refused by the core's
inbound dedupe on `(channel, ts)`, so it never becomes a second turn.

One catch-all event listener (`app.event(<any type>)`) sees every event kind, so unknown kinds
are logged by the mapping and acknowledged instead of being answered 404 by Bolt (which Slack
would retry). An envelope no listener can take (not an event callback: `app_rate_limited`; an
event with no type) is acknowledged too, with one warning naming its type (`_on_error`): Bolt
would answer it 404 over HTTP and leave it unacknowledged over Socket Mode, and Slack would
deliver it again and again.

HTTP mode: an aiohttp listener checks `X-Slack-Signature` / `X-Slack-Request-Timestamp` with
slack-sdk's `SignatureVerifier` (HMAC-SHA256, 5-minute window) before Bolt sees the request; a
bad signature is answered 401 and logged without the body (Bolt's own verification logs the
body, so it only runs as a second line behind this one). Bolt answers Slack's `url_verification`
challenge and `ssl_check`.

Socket Mode: slack-sdk's aiohttp `SocketModeClient` (through Bolt's `AsyncSocketModeHandler`).
The first WebSocket URL is fetched here with `apps.connections.open`, so a wrong app token fails
`start()` with a clear error instead of the client's endless reconnect loop; later reconnects
(Slack's `disconnect` frames, network cuts) are the client's own.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any, Awaitable, Callable

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_bolt.error import BoltUnhandledRequestError
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from .settings import SlackSettings

log = logging.getLogger(__name__)

# Handles one envelope: True = done (ack), False = not accepted (no ack; Slack redelivers).
EnvelopeHandler = Callable[[dict, int], Awaitable[bool]]

CONNECT_TIMEOUT_S = 15.0
ANY_EVENT = re.compile(r".*")


class SlackStartError(RuntimeError):
    """The adapter could not start (missing or rejected token, unreachable API, port in use).
    The message never contains a token or secret."""


def _retry_num(headers: Any) -> int:
    """Slack's retry counter of a delivery (`X-Slack-Retry-Num`; 0 for a first delivery)."""
    values = headers.get("x-slack-retry-num") if headers else None
    value = values[0] if isinstance(values, (list, tuple)) and values else values
    try:
        return int(value) if value is not None else 0
    except (TypeError, ValueError):
        return 0


class SlackReceiver:
    """The Bolt app and its transport.

    Args:
        settings: the adapter settings (mode, tokens, listener address).
        client: the bot's `AsyncWebClient` (Bolt calls `auth.test` with it and listeners may use it).
        on_envelope: awaited for every event envelope with Slack's retry counter.
    """

    def __init__(self, settings: SlackSettings, client: AsyncWebClient, on_envelope: EnvelopeHandler):
        self.settings = settings
        self.client = client
        self._on_envelope = on_envelope
        self._handler: AsyncSocketModeHandler | None = None
        self._runner: web.AppRunner | None = None
        self._verifier: SignatureVerifier | None = None
        self.http_address: tuple[str, int] | None = None
        http = settings.mode == "http"
        secret = settings.signing_secret.get_secret_value() if settings.signing_secret else None
        self.app = AsyncApp(
            client=client,
            signing_secret=secret,
            process_before_response=True,
            request_verification_enabled=http,
            logger=logging.getLogger("hermes_slack.bolt"),
            name="hermes-slack",
            raise_error_for_unhandled_request=True,
        )
        self.app.event(ANY_EVENT)(self._listener)
        self.app.error(self._on_error)

    @staticmethod
    async def _on_error(error: Exception, body: dict) -> BoltResponse | None:
        """Bolt's error handler: an envelope no listener takes is acknowledged (module
        docstring), naming its type but not its body (it may hold a user's text); a listener's
        own failure is logged as Bolt logs it and stays a 500 (Slack delivers it again)."""
        if isinstance(error, BoltUnhandledRequestError):
            kind = body.get("type") if isinstance(body, dict) else None
            event = body.get("event") if isinstance(body, dict) else None
            event_type = event.get("type") if isinstance(event, dict) else None
            log.warning("slack envelope of type %r (event type %r) has no handler; acknowledged and skipped",
                        kind, event_type)
            return BoltResponse(status=200, body="")
        log.error("slack listener failed: %s: %s", type(error).__name__, error, exc_info=error)
        return None

    async def _listener(self, body: dict, ack, request: AsyncBoltRequest) -> BoltResponse | None:
        """Bolt listener of every event: ack only when `on_envelope` says the event is done."""
        done = await self._on_envelope(body, _retry_num(request.headers))
        if done:
            await ack()
            return None
        return BoltResponse(status=500, body="")

    # ---- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the Socket Mode connection, or start the HTTP listener.

        Raises:
            SlackStartError: missing app token / signing secret, rejected app token, the
                connection could not be opened in time, or the port is in use.
        """
        if self.settings.mode == "socket":
            await self._start_socket()
        else:
            await self._start_http()

    async def stop(self) -> None:
        """Close the connection or the listener. Idempotent."""
        if self._handler is not None:
            handler, self._handler = self._handler, None
            await handler.close_async()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()
            self.http_address = None

    async def connected(self) -> bool:
        """True while the socket is open (Socket Mode) or the listener runs (HTTP)."""
        if self._handler is not None:
            return await self._handler.client.is_connected()
        return self._runner is not None

    async def _start_socket(self) -> None:
        if self.settings.app_token is None:
            raise SlackStartError("platforms.slack.app_token is not set (Socket Mode needs an xapp- token; "
                                  "set HERMES_PLATFORMS__SLACK__APP_TOKEN)")
        app_token = self.settings.app_token.get_secret_value()
        app_client = AsyncWebClient(token=app_token, base_url=self.settings.api_base_url,
                                    logger=self.client.logger)
        try:
            url = (await app_client.apps_connections_open(app_token=app_token))["url"]
        except SlackApiError as exc:
            error = exc.response.get("error") if exc.response is not None else "error"
            raise SlackStartError(f"slack apps.connections.open refused the app token: {error}") from None
        except Exception as exc:
            raise SlackStartError(f"slack apps.connections.open failed: {type(exc).__name__}") from None
        handler = AsyncSocketModeHandler(self.app, app_token=app_token, web_client=app_client,
                                         ping_interval=self.settings.ping_interval,
                                         logger=logging.getLogger("hermes_slack.socket_mode"))
        handler.client.wss_uri = url
        try:
            await asyncio.wait_for(handler.connect_async(), CONNECT_TIMEOUT_S)
        except Exception as exc:  # TimeoutError included
            await handler.close_async()
            raise SlackStartError(f"slack Socket Mode connection failed: {type(exc).__name__}") from None
        self._handler = handler

    async def _start_http(self) -> None:
        if self.settings.signing_secret is None:
            raise SlackStartError("platforms.slack.signing_secret is not set (HTTP mode verifies every request "
                                  "with it; set HERMES_PLATFORMS__SLACK__SIGNING_SECRET)")
        self._verifier = SignatureVerifier(self.settings.signing_secret.get_secret_value())
        webapp = web.Application()
        webapp.router.add_post(self.settings.http_path, self._on_http)
        runner = web.AppRunner(webapp, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.settings.http_listen, self.settings.http_port)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise SlackStartError(f"slack HTTP listener on {self.settings.http_listen}:{self.settings.http_port} "
                                  f"could not start: {exc.strerror or type(exc).__name__}") from None
        self._runner = runner
        host, port = runner.addresses[0][:2]
        self.http_address = (host, port)

    async def _on_http(self, request: web.Request) -> web.Response:
        """One Events API request: verify the signature, then let Bolt dispatch it."""
        raw = await request.text()
        timestamp = request.headers.get("X-Slack-Request-Timestamp", "")
        signature = request.headers.get("X-Slack-Signature", "")
        assert self._verifier is not None
        if not self._verifier.is_valid(raw, timestamp, signature):
            # Never log the body: it is a user's message (and an attacker's choice of text).
            log.warning("slack request from %s refused (401): bad or expired signature", request.remote)
            return web.Response(status=401, text="invalid request")
        headers = {name.lower(): [value] for name, value in request.headers.items()}
        try:
            bolt_request = AsyncBoltRequest(body=raw, query=request.query_string, headers=headers)
        except (AttributeError, TypeError, ValueError) as exc:
            # A signed body Bolt cannot read as an envelope (a JSON list): a 400 and one line
            # naming what failed, where aiohttp answered 500 with a traceback. No body logged.
            log.warning("slack request from %s refused (400): its body is not an envelope (%s)",
                        request.remote, type(exc).__name__)
            return web.Response(status=400, text="invalid request")
        return await to_aiohttp_response(await self.app.async_dispatch(bolt_request))
