"""JSON-RPC to `signal-cli daemon --http` (`POST /api/v1/rpc`) and the reading of `send` results
(docs/adapters.md §5.4).

signal-cli answers a request with `{"jsonrpc": "2.0", "result": …, "id": …}` or
`{"jsonrpc": "2.0", "error": {"code", "message", "data"}, "id": …}`. The error codes it uses
besides the JSON-RPC standard ones: -1 user error, -3 I/O error, -4 untrusted identity, -5 rate
limit, -6 captcha rejected. A failed `send` carries the per-recipient results in
`error.data.response` (`{"timestamp", "results": [{"recipientAddress", "type",
"retryAfterSeconds"?, "token"?}]}`), with `type` one of SUCCESS, NETWORK_FAILURE,
UNREGISTERED_FAILURE, IDENTITY_FAILURE, RATE_LIMIT_FAILURE, INVALID_PRE_KEY_FAILURE.

`send_timestamp` turns a `send` outcome into what the core's delivery layer understands:
the sent message's timestamp; `RetryAfter` for a rate limit with a known wait (the delivery
layer waits it out, capped); `SignalDeliveryError` — a clear, user-safe reason — for a refusal
that retrying now cannot fix (untrusted identity, unregistered recipient, a rate limit without a
wait, a captcha challenge).
"""

from __future__ import annotations

import itertools
import logging
from typing import Any

import httpx

from hermes_core.sdk import RetryAfter, SendError

log = logging.getLogger(__name__)

RPC_PATH = "/api/v1/rpc"
EVENTS_PATH = "/api/v1/events"
CHECK_PATH = "/api/v1/check"

USER_ERROR = -1
IO_ERROR = -3
UNTRUSTED_KEY_ERROR = -4
RATE_LIMIT_ERROR = -5
CAPTCHA_REJECTED_ERROR = -6

SUCCESS = "SUCCESS"
RATE_LIMIT_FAILURE = "RATE_LIMIT_FAILURE"
IDENTITY_FAILURE = "IDENTITY_FAILURE"
UNREGISTERED_FAILURE = "UNREGISTERED_FAILURE"
NETWORK_FAILURE = "NETWORK_FAILURE"

# What the operator reads in the delivery ledger and the log (no ids: the session key names
# the chat). Users never see these texts.
UNTRUSTED_TEXT = ("Signal did not send the message: the recipient's safety number changed (untrusted "
                  "identity). Verify it, then trust the new identity with `signal-cli trust`.")
UNREGISTERED_TEXT = "Signal did not send the message: the recipient is not registered on Signal."
RATE_LIMIT_TEXT = "Signal did not send the message: the account is rate limited and Signal gave no retry time."
CAPTCHA_TEXT = ("Signal did not send the message: the account must solve a captcha first "
                "(`signal-cli submitRateLimitChallenge`).")


class SignalRpcError(Exception):
    """A JSON-RPC error answer (or an HTTP status signal-cli uses instead of one).

    Attributes:
        code: the JSON-RPC error code (-32603 internal error, -1 … -6 signal-cli errors), or the
            HTTP status for a non-JSON-RPC answer (421 wrong Host header, 415, 404 …).
        data: the error's `data` member (signal-cli puts the send results in `data.response`).
    """

    def __init__(self, code: int, message: str, data: Any = None):
        self.code = code
        self.data = data
        super().__init__(f"signal-cli error {code}: {message}")


class SignalDeliveryError(SendError):
    """Signal refused a message for a reason retrying now will not fix; the reply is recorded
    as a failed delivery with this (user-safe, id-free) message.

    Attributes:
        reason: `"untrusted_identity"`, `"unregistered"`, `"rate_limited"` or `"captcha"`.
    """

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


class SignalRpc:
    """A JSON-RPC client for one account of a signal-cli HTTP daemon.

    Args:
        client: an `httpx.AsyncClient` whose `base_url` is the daemon (`http://127.0.0.1:8080`).
        account: the account's number; sent as `params.account` with every request (required in
            multi-account mode, ignored by a single-account daemon).
        timeout: seconds a request may take.
    """

    def __init__(self, client: httpx.AsyncClient, account: str, *, timeout: float = 60.0):
        self.client = client
        self.account = account
        self.timeout = timeout
        self._ids = itertools.count(1)

    async def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """Call `method` and return its `result`.

        Raises:
            SignalRpcError: a JSON-RPC error answer, a non-JSON answer or an HTTP error status.
            httpx.HTTPError: the daemon could not be reached (connection refused, timeout).
        """
        request_id = next(self._ids)
        body = {"jsonrpc": "2.0", "method": method, "params": {"account": self.account, **(params or {})},
                "id": request_id}
        response = await self.client.post(RPC_PATH, json=body, timeout=self.timeout)
        if response.status_code == 201:  # a notification: no answer expected (not used here)
            return None
        status = response.status_code
        if status != 200:
            # signal-cli answers 421 to a Host header other than its bind address, localhost or
            # 127.0.0.1 (a proxy or a container name in base_url).
            hint = "wrong Host header: reach the daemon as 127.0.0.1 or localhost" if status == 421 \
                else response.reason_phrase
            raise SignalRpcError(status, f"{method}: HTTP {status} ({hint})")
        try:
            answer = response.json()
        except ValueError:
            raise SignalRpcError(-32700, f"{method}: the daemon's answer is not JSON") from None
        if not isinstance(answer, dict):
            raise SignalRpcError(-32700, f"{method}: the daemon's answer is not a JSON-RPC object")
        error = answer.get("error")
        if error is not None:
            if not isinstance(error, dict):
                raise SignalRpcError(-32603, f"{method}: malformed error member")
            code = error.get("code")
            raise SignalRpcError(code if isinstance(code, int) and not isinstance(code, bool) else -32603,
                                 f"{method}: {error.get('message') or 'no message'}", error.get("data"))
        if answer.get("id") != request_id:
            raise SignalRpcError(-32603, f"{method}: the answer's id {answer.get('id')!r} is not {request_id}")
        return answer.get("result")


def _results(response: Any) -> list[dict]:
    results = response.get("results") if isinstance(response, dict) else None
    return [r for r in results if isinstance(r, dict)] if isinstance(results, list) else []


def _retry_after(results: list[dict]) -> float | None:
    waits = [r.get("retryAfterSeconds") for r in results if r.get("type") == RATE_LIMIT_FAILURE]
    waits = [w for w in waits if isinstance(w, (int, float)) and not isinstance(w, bool) and w >= 0]
    return float(max(waits)) if waits else None


def _refusal(results: list[dict]) -> Exception | None:
    """The exception for per-recipient results none of which succeeded, or None when one did
    (or there are no results to judge)."""
    if not results or any(r.get("type") == SUCCESS for r in results):
        return None
    types = {r.get("type") for r in results}
    if types == {RATE_LIMIT_FAILURE}:
        wait = _retry_after(results)
        if wait is not None:
            return RetryAfter(wait, scope="recipient")
        if any(r.get("token") for r in results):
            return SignalDeliveryError(CAPTCHA_TEXT, "captcha")
        return SignalDeliveryError(RATE_LIMIT_TEXT, "rate_limited")
    if IDENTITY_FAILURE in types:
        return SignalDeliveryError(UNTRUSTED_TEXT, "untrusted_identity")
    if types == {UNREGISTERED_FAILURE}:
        return SignalDeliveryError(UNREGISTERED_TEXT, "unregistered")
    # NETWORK_FAILURE, INVALID_PRE_KEY_FAILURE, mixtures: transient; the ledger retries later.
    return SendError(f"Signal did not send the message ({', '.join(sorted(str(t) for t in types))}).")


def send_timestamp(result: Any = None, error: SignalRpcError | None = None) -> int:
    """Read the outcome of a JSON-RPC `send`.

    Args:
        result: the `result` of a successful call (`{"timestamp", "results"}`).
        error: the `SignalRpcError` raised by the call instead.

    Returns:
        The sent message's timestamp (its Signal id), when at least one recipient got it.

    Raises:
        RetryAfter: rate limited with a known wait (`retryAfterSeconds`, the longest one).
        SignalDeliveryError: untrusted identity (-4), unregistered recipient, rate limited
            without a wait, captcha required (-5 with a token).
        SendError: any other refusal (the error code and message, never an id).
    """
    if error is not None:
        response = error.data.get("response") if isinstance(error.data, dict) else None
        refusal = _refusal(_results(response))
        if error.code == UNTRUSTED_KEY_ERROR:
            raise SignalDeliveryError(UNTRUSTED_TEXT, "untrusted_identity") from error
        if error.code == RATE_LIMIT_ERROR:
            raise (refusal if isinstance(refusal, (RetryAfter, SignalDeliveryError))
                   else SignalDeliveryError(RATE_LIMIT_TEXT, "rate_limited")) from error
        if error.code == CAPTCHA_REJECTED_ERROR:
            raise SignalDeliveryError(CAPTCHA_TEXT, "captcha") from error
        if refusal is not None:
            raise refusal from error
        raise SendError(str(error)) from error
    if not isinstance(result, dict):
        raise SendError("signal-cli answered send without a result object")
    refusal = _refusal(_results(result))
    if refusal is not None:
        raise refusal
    timestamp = result.get("timestamp")
    if isinstance(timestamp, bool) or not isinstance(timestamp, int):
        raise SendError("signal-cli answered send without a timestamp")
    failed = sorted({str(r.get("type")) for r in _results(result) if r.get("type") != SUCCESS})
    if failed:  # a group send that reached some members: delivered, but say who it missed
        log.warning("signal message %s did not reach every recipient: %s", timestamp, ", ".join(failed))
    return timestamp
