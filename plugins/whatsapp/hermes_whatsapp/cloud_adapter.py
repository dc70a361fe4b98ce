"""`WhatsAppCloudAdapter`: Meta's WhatsApp Cloud API, platform `whatsapp_cloud`
(docs/adapters.md §4.3, §4.5).

Receiving: the webhook listener (`webhook.WebhookListener`) verifies the `hub.challenge`
handshake and every POST's `X-Hub-Signature-256`, then `handle_body` maps the body
(`cloud_mapping.map_webhook`) and hands each turn to the gateway. The webhook is answered 200
only once every turn in it was accepted (and every edit, deletion and status report applied);
otherwise 500, and Meta redelivers. Edits and deletions (`edit` / `revoke` messages) are offered
to the gateway's queue (`offer_change`, docs/behaviour.md §5): a message still queued takes the new
text or is withdrawn; only an edit it did not take becomes a turn, with `edits_as_turns` on.
Each event is posted once, so any replica may receive (`ingress = "shared"`).

Status callbacks: `delivered` / `read` confirm, `failed` fails the delivery obligation that sent
the message (`BaseAdapter.report_delivery`), with the WhatsApp error code and its meaning in the
ledger's `last_error` (131047: the 24-hour window is closed). `sent` is progress only. No status
creates a turn.

Sending: Graph API `POST /<phone_number_id>/messages` (`graph.GraphClient`): groups to their
group id, DMs to the phone or the business-scoped user id of the chat; the first chunk quotes the
trigger. 4096 characters per message. While a turn runs the trigger is marked read and the chat
shows the typing indicator.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import httpx
from pydantic import BaseModel

from hermes_core.sdk import (CAP_TYPING, CAP_WEBHOOK, INGRESS_SHARED, AdapterSpec, BaseAdapter, MalformedPayload,
                             MessageEvent, SendResult, SessionSource, measure, offer_change)

from .cloud_mapping import PLATFORM, map_webhook
from .graph import GraphClient
from .settings import WhatsAppCloudSettings
from .webhook import WebhookListener, WebhookListenerError

log = logging.getLogger(__name__)

MAX_TEXT_CHARS = 4096      # Cloud API text body limit (docs/adapters.md §4.5)
TYPING_EVERY_S = 20.0      # the indicator lasts 25 s: renew it, but not on every 4 s tick
REQUIRED = ("access_token", "app_secret", "verify_token", "phone_number_id")


class WhatsAppCloudStartError(RuntimeError):
    """The adapter cannot start: a required setting is missing or the port is in use. The
    message names the setting, never its value."""


class WhatsAppCloudAdapter(BaseAdapter):
    """WhatsApp Cloud API adapter (entry point `hermes_core.adapters: whatsapp_cloud`).

    Args:
        settings: a `WhatsAppCloudSettings` (or a dict validated into one).
        on_message: the gateway's inbound handler (see `BaseAdapter`).
        transport: an httpx transport for the Graph API instead of the network.

    Attributes:
        http_address: `(host, port)` the webhook listens on once started (port 0 resolved).
    """

    spec = AdapterSpec(
        name=PLATFORM,
        label="WhatsApp",
        pii_safe=True,           # phone numbers and business-scoped ids are redactable identifiers
        max_message_length=MAX_TEXT_CHARS,
        length_unit="chars",
        capabilities=frozenset({CAP_TYPING, CAP_WEBHOOK}),
        settings_model=WhatsAppCloudSettings,
        required_env=(),
        install_hint="pip install hermes-gateway-whatsapp",
        ingress=INGRESS_SHARED,  # each webhook event is posted once (docs/adapters.md §6)
    )

    def __init__(self, settings: BaseModel | dict | None = None, *, on_message=None,
                 transport: httpx.AsyncBaseTransport | None = None):
        if settings is None:
            settings = WhatsAppCloudSettings()
        elif isinstance(settings, dict):
            settings = WhatsAppCloudSettings.model_validate(settings)
        elif not isinstance(settings, WhatsAppCloudSettings):
            settings = WhatsAppCloudSettings.model_validate(settings.model_dump())
        super().__init__(settings, on_message=on_message)
        self.settings: WhatsAppCloudSettings = settings
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self._graph: GraphClient | None = None
        self._listener: WebhookListener | None = None
        self._typing: dict[str, float] = {}
        self.malformed = 0

    @property
    def http_address(self) -> tuple[str, int] | None:
        return self._listener.address if self._listener else None

    def _secret(self, name: str) -> str:
        value = getattr(self.settings, name)
        if value is None:
            raise WhatsAppCloudStartError(
                f"platforms.whatsapp_cloud.{name} is not set (set HERMES_PLATFORMS__WHATSAPP_CLOUD__{name.upper()})")
        return value.get_secret_value() if hasattr(value, "get_secret_value") else str(value)

    def _new_client(self) -> httpx.AsyncClient:
        token = self._secret("access_token")
        return httpx.AsyncClient(base_url=self.settings.graph_base_url, transport=self._transport,
                                 headers={"Authorization": f"Bearer {token}"}, timeout=self.settings.request_timeout)

    async def start(self) -> None:
        """Start the webhook listener and open the Graph API client. Idempotent.

        Raises:
            WhatsAppCloudStartError: a required setting is missing, or the listener's port is in use.
        """
        if self._listener is not None:
            return
        secrets = {name: self._secret(name) for name in REQUIRED}
        listener = WebhookListener(self.settings.http_path, app_secret=secrets["app_secret"],
                                   verify_token=secrets["verify_token"], on_body=self.handle_body,
                                   max_body_bytes=self.settings.max_body_bytes)
        try:
            await listener.start(self.settings.http_listen, self.settings.http_port)
        except WebhookListenerError as exc:
            raise WhatsAppCloudStartError(str(exc)) from None
        self._client = self._new_client()
        self._graph = GraphClient(self._client, secrets["phone_number_id"], rate_limit_wait=self.settings.rate_limit_wait)
        self._listener = listener
        log.info("whatsapp_cloud adapter started (webhook on %s:%s%s)", *listener.address, self.settings.http_path)

    async def stop(self) -> None:
        """Stop the webhook listener (requests in progress finish). Idempotent. Sending keeps
        working on a short-lived client (the gateway drains turns after it stops receiving)."""
        if self._listener is None:
            return
        listener, self._listener = self._listener, None
        await listener.stop()
        if self._client is not None:
            await self._client.aclose()
        self._client = None
        self._graph = None
        log.info("whatsapp_cloud adapter stopped")

    async def health(self) -> dict[str, Any]:
        """`{"ok", "listening", "malformed"}`: ok while the webhook listener runs."""
        listening = bool(self._listener and self._listener.running)
        return {"ok": listening, "listening": listening, "malformed": self.malformed}

    # ---- receiving -----------------------------------------------------------------------

    async def handle_body(self, body: Any) -> bool:
        """Handle one verified webhook body; True when it may be acknowledged (200).

        Turns go to the gateway in order, then edits and deletions to its queue; status reports
        go to the delivery ledger. False (answer 500: Meta redelivers) when the gateway refused a
        turn or a change, or the ledger could not be written. Malformed messages are logged with
        the field at fault and skipped.
        """
        try:
            batch = map_webhook(body, phone_number_id=self.settings.phone_number_id)
        except MalformedPayload as exc:
            self.malformed += 1
            log.warning("skipping malformed whatsapp_cloud webhook: %s", exc)
            return True
        except Exception:
            self.malformed += 1
            log.exception("skipping whatsapp_cloud webhook: it could not be mapped")
            return True
        for line in batch.malformed:
            self.malformed += 1
            log.warning("skipping malformed whatsapp_cloud message: malformed payload: %s", line)
        for _, event in batch.turns:
            if not await self._emit(event):
                return False
        for change in batch.changes:
            # After the turns (an edit never precedes its original): offered to the gateway's
            # queue first (docs/behaviour.md §5); only an edit it did not take may be a turn.
            label = f"whatsapp_cloud {change.kind} of message {change.message_id}"
            try:
                event = await offer_change(self.edit_queued, change, label=label, logger=log,
                                           edits_as_turns=self.settings.edits_as_turns)
            except Exception as exc:
                log.warning("%s not applied to the queue: %s; Meta will redeliver", label, type(exc).__name__)
                return False
            if event is not None and not await self._emit(event):
                return False
        for report in batch.reports:
            if report.status == "failed":
                log.warning("whatsapp_cloud message %s failed: %s", report.message_id, report.error)
            try:
                settled = await self.report_delivery(report.message_id, report.status, report.error)
            except RuntimeError as exc:  # no reporter bound: nothing to update
                log.debug("whatsapp_cloud status not applied: %s", exc)
                continue
            except Exception as exc:
                log.warning("whatsapp_cloud status of %s not recorded: %s: %s; Meta will redeliver",
                            report.message_id, type(exc).__name__, exc)
                return False
            if settled is None:
                log.debug("whatsapp_cloud status %s of %s changed no delivery obligation",
                          report.status, report.message_id)
        return True

    async def _emit(self, event: MessageEvent) -> bool:
        """Hand one turn to the gateway; False (logged) when it refused it."""
        try:
            await self.emit(event)
        except Exception as exc:
            log.warning("whatsapp_cloud message %s not accepted by the gateway: %s: %s; Meta will redeliver",
                        event.message_id, type(exc).__name__, exc)
            return False
        return True

    # ---- sending -------------------------------------------------------------------------

    async def _with_graph(self, method: str, *args: Any) -> Any:
        if self._graph is not None:
            return await getattr(self._graph, method)(*args)
        async with self._new_client() as client:
            graph = GraphClient(client, self._secret("phone_number_id"), rate_limit_wait=self.settings.rate_limit_wait)
            return await getattr(graph, method)(*args)

    async def send(self, target: SessionSource, text: str, *, reply_to: str | None = None,
                   metadata: dict[str, Any] | None = None) -> SendResult:
        """Send one chunk (≤ 4096 characters) to `target`'s chat (group id, phone or BSUID),
        quoting `reply_to` (a `wamid`).

        Returns:
            SendResult whose message id is the `wamid` the status callbacks will name.

        Raises:
            hermes_core.sdk.RetryAfter: rate limited (HTTP 429, 130429, 131056).
            CloudDeliveryError: refused for good (131047 outside the 24-hour window, …).
            ValueError: the chunk is longer than 4096 characters.
        """
        if measure(text, "chars") > MAX_TEXT_CHARS:
            raise ValueError(f"whatsapp message is longer than {MAX_TEXT_CHARS} characters; chunk it first")
        return SendResult(message_id=await self._with_graph("send_text", target, text, reply_to))

    async def send_typing(self, target: SessionSource) -> None:
        """Mark the trigger (`target.message_id`) read and show the typing indicator, renewed at
        most every 20 s. Best effort: a failure is logged at DEBUG."""
        message_id = target.message_id
        if not message_id:
            return
        now = time.monotonic()
        if now - self._typing.get(message_id, float("-inf")) < TYPING_EVERY_S:
            return
        self._typing = {k: v for k, v in self._typing.items() if now - v < TYPING_EVERY_S}
        self._typing[message_id] = now
        try:
            await self._with_graph("typing", message_id)
        except Exception as exc:
            log.debug("whatsapp_cloud typing indicator not sent: %s", exc)
