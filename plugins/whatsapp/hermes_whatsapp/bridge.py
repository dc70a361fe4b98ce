"""The bridge's HTTP contract, through httpx, and its session files (docs/adapters.md §4.4, §4.5).

A bridge is a local process (Baileys in Node, whatsmeow in Go) holding the linked-device
session. The plugin speaks this JSON contract to it (the README has it in full):

    GET  /health                       → {"status": "connected" | …, "me": {"id", "lid"}?}
    GET  /events?after=N&timeout=S     → {"events": [{"seq": int, "event": {…}}, …]} (long poll)
    POST /send   {"chatId", "message", "replyTo"?}  → {"messageId": "…"}
    POST /typing {"chatId"}            → {}
    GET  /groups/<jid>                 → {"id", "subject"}

`after=N` acknowledges every event up to `seq` N: the bridge forgets them and keeps the rest, so
a restart of the gateway (or of the poll) loses nothing the bridge still holds. A 429 with
`Retry-After` becomes the SDK's `RetryAfter`; any other refusal a `BridgeError`.

`lid_mappings(session_dir)` reads Baileys' multi-file auth state: `lid-mapping-<pnUser>.json`
holds the LID user as a JSON string, `lid-mapping-<lidUser>_reverse.json` the PN user.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from hermes_core.sdk import IdentityAlias, RetryAfter, SendError

from .jid import alias_pair

log = logging.getLogger(__name__)

MAPPING_PREFIX = "lid-mapping-"
REVERSE_SUFFIX = "_reverse"
MAX_MAPPING_FILE_BYTES = 4096   # a mapping file holds one quoted id
DEFAULT_RETRY_AFTER_S = 1.0


class BridgeError(SendError):
    """The bridge refused a request or is unreachable; the message says why, never a URL or a
    token (it may reach the operator's log and the ledger's `last_error`)."""


def _retry_after(response: httpx.Response) -> float:
    value = response.headers.get("Retry-After")
    try:
        return float(value) if value is not None else DEFAULT_RETRY_AFTER_S
    except ValueError:
        return DEFAULT_RETRY_AFTER_S


def _error_of(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return f"HTTP {response.status_code}"
    error = body.get("error") if isinstance(body, dict) else None
    return f"HTTP {response.status_code}: {error}" if isinstance(error, str) and error else f"HTTP {response.status_code}"


class BridgeClient:
    """Calls to the bridge over an `httpx.AsyncClient` whose `base_url` is the bridge.

    Args:
        client: the httpx client (base URL, bearer token header and timeout set by the adapter).
        poll_timeout: seconds one `GET /events` may wait (the read timeout is a little longer).
    """

    def __init__(self, client: httpx.AsyncClient, *, poll_timeout: float):
        self.client = client
        self.poll_timeout = poll_timeout

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = await self.client.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise BridgeError(f"the WhatsApp bridge is unreachable ({type(exc).__name__})") from None
        if response.status_code == 429:
            raise RetryAfter(_retry_after(response), scope="bridge")
        if response.status_code >= 400:
            raise BridgeError(f"the WhatsApp bridge refused {method} {path.split('?')[0]}: {_error_of(response)}")
        try:
            return response.json() if response.content else {}
        except ValueError:
            raise BridgeError(f"the WhatsApp bridge answered {path.split('?')[0]} with something that is not JSON") from None

    async def health(self) -> dict:
        """`GET /health` (the bridge's connection state and own ids)."""
        body = await self._call("GET", "/health", timeout=5.0)
        return body if isinstance(body, dict) else {}

    async def events(self, after: int) -> list[tuple[int, Any]]:
        """One long poll: the events after `seq` `after` (acknowledging those up to it), as
        `(seq, event)` in order; `[]` when none arrived within `poll_timeout`.

        Raises:
            BridgeError: the bridge is down or answered something unreadable.
        """
        body = await self._call("GET", "/events", params={"after": after, "timeout": self.poll_timeout},
                                timeout=httpx.Timeout(10.0, read=self.poll_timeout + 10.0))
        events = body.get("events") if isinstance(body, dict) else None
        if not isinstance(events, list):
            raise BridgeError("the WhatsApp bridge answered /events without an 'events' list")
        out = []
        for item in events:
            seq = item.get("seq") if isinstance(item, dict) else None
            if isinstance(seq, bool) or not isinstance(seq, int) or not 0 < seq < 2 ** 63:
                log.warning("whatsapp bridge event without a valid 'seq' skipped")
                continue
            out.append((seq, item.get("event")))
        return out

    async def acknowledge(self, after: int) -> None:
        """Acknowledge the events up to `seq` `after` without waiting for new ones (a poll with
        `timeout=0` whose events are left to the next poll)."""
        await self._call("GET", "/events", params={"after": after, "timeout": 0}, timeout=5.0)

    async def send(self, chat_id: str, text: str, reply_to: str | None) -> str | None:
        """`POST /send`; returns the new message's id (None if the bridge gave none).

        Raises:
            RetryAfter: the bridge is pacing sends (429).
            BridgeError: any other refusal.
        """
        body: dict[str, Any] = {"chatId": chat_id, "message": text}
        if reply_to:
            body["replyTo"] = reply_to
        result = await self._call("POST", "/send", json=body)
        message_id = result.get("messageId") if isinstance(result, dict) else None
        return message_id if isinstance(message_id, str) and message_id else None

    async def typing(self, chat_id: str) -> None:
        """`POST /typing`: the chat shows "typing…" (Baileys `composing` presence)."""
        await self._call("POST", "/typing", json={"chatId": chat_id}, timeout=5.0)

    async def group_subject(self, jid: str) -> str | None:
        """`GET /groups/<jid>` → the group's subject, or None."""
        body = await self._call("GET", f"/groups/{quote(jid, safe='@.')}", timeout=5.0)
        subject = body.get("subject") if isinstance(body, dict) else None
        return subject if isinstance(subject, str) and subject else None


def lid_mappings(session_dir: Path) -> list[IdentityAlias]:
    """The LID ↔ phone aliases in a Baileys auth folder's `lid-mapping-*.json` files.

    A file that cannot be read or does not hold one JSON string is logged (without its content)
    and skipped. Returns the aliases in file-name order, without duplicates.
    """
    found: list[IdentityAlias] = []
    try:
        paths = sorted(session_dir.glob(f"{MAPPING_PREFIX}*.json"))
    except OSError as exc:
        log.warning("whatsapp session folder cannot be listed: %s", exc.strerror or type(exc).__name__)
        return found
    for path in paths:
        stem = path.name[len(MAPPING_PREFIX):-len(".json")]
        reverse = stem.endswith(REVERSE_SUFFIX)
        user = stem[:-len(REVERSE_SUFFIX)] if reverse else stem
        try:
            if path.stat().st_size > MAX_MAPPING_FILE_BYTES:
                raise ValueError("too large")
            other = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(other, str):
                raise ValueError("not a JSON string")
        except (OSError, ValueError) as exc:
            log.warning("whatsapp mapping file %s skipped: %s", path.name, exc)
            continue
        lid, pn = (user, other) if reverse else (other, user)
        alias = alias_pair(lid, pn, "lid-mapping file")
        if alias is not None and alias not in found:
            found.append(alias)
    return found
