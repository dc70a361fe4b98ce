"""Errors adapters raise so the shared send helpers can react uniformly (docs/adapters.md §0.4),
and `describe_failure`: a caught exception in words for the operator's one line."""

from __future__ import annotations

import os


class SendError(Exception):
    """A send failed for good (after retries, or a permanent platform error).

    Attributes:
        attempts: how many sends of the failing chunk were tried.
        cause: the last exception seen (also `__cause__`).
        sent: results of the chunks of the same reply that did go out before the failure.
    """

    def __init__(self, message: str, *, attempts: int = 1, cause: BaseException | None = None,
                 sent: tuple = ()):
        super().__init__(message)
        self.attempts = attempts
        self.cause = cause
        self.sent = sent


class RetryAfter(Exception):
    """The platform asked us to wait before sending again (HTTP 429 and friends).

    Adapters translate their client library's rate-limit error into this one: Telegram's
    `parameters.retry_after`, Discord's `retry_after` (float seconds), Slack's `Retry-After`
    header, Signal's `retryAfterSeconds`.

    Args:
        seconds: the server's wait, in seconds (>= 0; negative values are clamped to 0).
        scope: optional note of what is limited (`"chat"`, `"global"`), for logs only.
    """

    def __init__(self, seconds: float, scope: str | None = None):
        self.seconds = max(0.0, float(seconds))
        self.scope = scope
        super().__init__(f"rate limited: retry after {self.seconds:g}s" + (f" ({scope})" if scope else ""))


class RetryAfterExceeded(SendError):
    """The server asked for a longer wait than the cap, or kept asking past the attempt limit:
    the delivery is reported failed instead of blocking the chat forever (docs/adapters.md §0.4).

    Attributes:
        retry_after: the last wait the server asked for, in seconds.
    """

    def __init__(self, message: str, *, retry_after: float, attempts: int,
                 cause: BaseException | None = None):
        super().__init__(message, attempts=attempts, cause=cause)
        self.retry_after = retry_after


class MalformedPayload(ValueError):
    """A platform payload cannot be mapped to a MessageEvent (docs/adapters.md §0).

    Raised by a plugin's mapping function; the adapter logs `str(err)` (which names the field,
    never its value: values may be message text or phone numbers), skips or acknowledges the
    payload as its platform requires, and keeps serving.

    Args:
        field: dotted path of the offending field in the payload (`"message.chat.id"`).
        problem: what is wrong with it (`"is missing"`, `"must be an integer"`).

    Attributes:
        field / problem: as given.
    """

    def __init__(self, field: str, problem: str):
        self.field = field
        self.problem = problem
        super().__init__(f"malformed payload: {field} {problem}")


def _causes(exc: BaseException) -> list[BaseException]:
    """`exc` and what it was raised from, outermost first: `__cause__`, else `__context__`,
    even where a library hid it with `raise … from None` (httpcore does: the OS error that says
    what happened is under it)."""
    chain: list[BaseException] = []
    while exc is not None and all(exc is not seen for seen in chain):
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    return chain


def describe_failure(exc: BaseException) -> str:
    """What went wrong, in words, for an operator's one line: "connection refused", "host name
    not found", "timed out", "TLS certificate not accepted (…)", "'result' is missing" — never a
    bare exception class name such as `httpx.ConnectError` or `KeyError: 'result'`.

    The innermost network or OS cause speaks first (a client library's `ConnectError` wraps the
    `ConnectionRefusedError` that says what happened); else the exception's own message; an
    exception without a message is named in a sentence (`failed with no message (RuntimeError)`).
    `exc` itself raised `from None` is taken at its word: its message was written to be read
    (an adapter's `…StartError`).
    The caller says what failed ("cannot reach https://…: <this>") and logs the traceback.
    Never raises.

    Args:
        exc: the exception caught.
    Returns:
        One line, lower-case words first.
    """
    import socket
    import ssl

    chain = [exc] if exc.__suppress_context__ and exc.__cause__ is None else _causes(exc)
    for inner in reversed(chain):
        if isinstance(inner, socket.gaierror):
            return "host name not found"
        if isinstance(inner, ssl.SSLCertVerificationError):
            return f"TLS certificate not accepted ({inner.verify_message or inner.reason})"
        if isinstance(inner, ssl.SSLError):
            return f"TLS failed ({inner.reason or 'handshake'})"
        if isinstance(inner, TimeoutError) or type(inner).__name__.endswith(("Timeout", "TimeoutError")):
            return "timed out"
        if isinstance(inner, OSError) and inner.errno:
            return os.strerror(inner.errno).lower()
    if isinstance(exc, KeyError) and exc.args:
        return f"{exc.args[0]!r} is missing"
    text = " ".join(str(exc).split())
    return text or f"failed with no message ({type(exc).__name__})"
