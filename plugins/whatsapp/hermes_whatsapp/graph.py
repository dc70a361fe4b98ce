"""Graph API sends for the Cloud API, through httpx (docs/adapters.md §4.5, traps W-T9, W-T10).

`POST /<phone_number_id>/messages` with `{"messaging_product": "whatsapp", "type": "text",
"text": {"body", "preview_url": false}}` addressed as:

* a group: `"recipient_type": "group", "to": <group_id>` — always explicitly, never "reply to the
  sender" (pywa 4.5 sends group replies privately, W-T10);
* a DM: `"recipient_type": "individual"` and either `"to": <phone>` when the chat id is a phone
  number, or `"recipient": <BSUID>` (one of them, never both: `to` would win);

plus `"context": {"message_id": <wamid>}` to quote the trigger. The response's
`messages[0].id` (`wamid.…`) is the sent message's id; the status callbacks name it.

Errors (`{"error": {"code", "message", …}}`): HTTP 429, throughput (130429) and pair rate
(131056) become the SDK's `RetryAfter` (the `Retry-After` header, else `rate_limit_wait`);
131047 (the 24-hour customer-service window is closed) and every other refusal become a
`CloudDeliveryError` — a failed delivery with a clear reason and no retry loop.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx

from hermes_core.sdk import RetryAfter, SendError, SessionSource

log = logging.getLogger(__name__)

RATE_LIMIT_CODES = frozenset({4, 80007, 130429, 131048, 131056})
WINDOW_CLOSED = 131047
TOKEN_REJECTED = 190


class CloudDeliveryError(SendError):
    """The Graph API refused a message for good. The message names the WhatsApp error code and
    what it means; never a token, a URL or the text.

    Attributes:
        code: the Graph error code (131047: outside the 24-hour window), or None.
    """

    def __init__(self, message: str, *, code: int | None = None):
        super().__init__(message)
        self.code = code


def _error(response: httpx.Response) -> tuple[int | None, str]:
    try:
        body = response.json()
    except ValueError:
        return None, f"HTTP {response.status_code}"
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return None, f"HTTP {response.status_code}"
    code = error.get("code")
    code = code if isinstance(code, int) and not isinstance(code, bool) else None
    title = error.get("error_user_title") or error.get("message") or error.get("type") or "refused"
    return code, str(title)[:200]


def _retry_after(response: httpx.Response, default: float) -> float:
    try:
        return float(response.headers["Retry-After"])
    except (KeyError, ValueError):
        return default


def recipient(target: SessionSource) -> dict[str, str]:
    """The addressing fields of a send to `target` (the stored origin, raw ids)."""
    if target.chat_type == "group":
        return {"recipient_type": "group", "to": target.chat_id}
    chat = target.chat_id.lstrip("+")
    if chat.isdigit():
        return {"recipient_type": "individual", "to": chat}
    return {"recipient_type": "individual", "recipient": target.chat_id}


class GraphClient:
    """The business number's Graph API calls.

    Args:
        client: an `httpx.AsyncClient` with `base_url` = the Graph base (version included) and
            the bearer token header set.
        phone_number_id: the business phone number's id.
        rate_limit_wait: seconds to wait on a rate limit without `Retry-After`.
    """

    def __init__(self, client: httpx.AsyncClient, phone_number_id: str, *, rate_limit_wait: float):
        self.client = client
        self.phone_number_id = phone_number_id
        self.rate_limit_wait = rate_limit_wait

    async def _post(self, body: dict[str, Any]) -> dict:
        try:
            response = await self.client.post(f"/{self.phone_number_id}/messages", json=body)
        except httpx.HTTPError as exc:
            raise CloudDeliveryError(f"the WhatsApp Cloud API is unreachable ({type(exc).__name__})") from None
        if response.status_code < 400:
            try:
                result = response.json()
            except ValueError:
                result = {}
            return result if isinstance(result, dict) else {}
        code, title = _error(response)
        if response.status_code == 429 or code in RATE_LIMIT_CODES:
            raise RetryAfter(_retry_after(response, self.rate_limit_wait), scope=f"whatsapp {code or 429}")
        if code == WINDOW_CLOSED:
            raise CloudDeliveryError(
                "WhatsApp error 131047: the 24-hour customer-service window is closed (the user last wrote "
                "more than 24 hours ago); only a template message can reach them now", code=code)
        if code == TOKEN_REJECTED:
            raise CloudDeliveryError("WhatsApp error 190: the access token was rejected "
                                     "(platforms.whatsapp_cloud.access_token)", code=code)
        raise CloudDeliveryError(f"WhatsApp error {code if code is not None else response.status_code}: {title}",
                                 code=code)

    async def send_text(self, target: SessionSource, text: str, reply_to: str | None) -> str | None:
        """Send one text message to `target`'s chat; returns its `wamid` (None if not given).

        Raises:
            RetryAfter: rate limited (the delivery layer waits and retries).
            CloudDeliveryError: refused for good (window closed, bad recipient, token rejected).
        """
        body: dict[str, Any] = {"messaging_product": "whatsapp", **recipient(target), "type": "text",
                                "text": {"body": text, "preview_url": False}}
        if reply_to:
            body["context"] = {"message_id": reply_to}
        result = await self._post(body)
        messages = result.get("messages")
        first = messages[0] if isinstance(messages, list) and messages and isinstance(messages[0], dict) else {}
        wamid = first.get("id")
        return wamid if isinstance(wamid, str) and wamid else None

    async def typing(self, message_id: str) -> None:
        """Mark `message_id` read and show the typing indicator (up to 25 s or until the reply)."""
        await self._post({"messaging_product": "whatsapp", "status": "read", "message_id": message_id,
                          "typing_indicator": {"type": "text"}})
