"""`hermes_core.sdk.describe_failure` (docs/plugins.md §3): a caught exception in words for an
operator's one line — what the innermost network or OS cause says, never a bare class name
such as `httpx.ConnectError` or `KeyError: 'result'` — checked on real client-library errors."""

from __future__ import annotations

import socket

import aiohttp
import httpx
import pytest

from hermes_core.ops.status import _platform_health
from hermes_core.sdk import describe_failure


def _closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on (bound, then let go)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_a_refused_connection_is_named_in_words_through_the_client_libraries():
    url = f"http://127.0.0.1:{_closed_port()}/"
    with pytest.raises(httpx.ConnectError) as httpx_error:
        async with httpx.AsyncClient() as client:
            await client.get(url)
    assert str(httpx_error.value) == "All connection attempts failed"  # what it would say by itself
    assert describe_failure(httpx_error.value) == "connection refused"
    with pytest.raises(aiohttp.ClientConnectorError) as aiohttp_error:
        async with aiohttp.ClientSession() as session:
            await session.get(url)
    assert describe_failure(aiohttp_error.value) == "connection refused"


@pytest.mark.parametrize(("exc", "words"), [
    (socket.gaierror(socket.EAI_NONAME, "Name or service not known"), "host name not found"),
    (TimeoutError(), "timed out"),
    (KeyError("result"), "'result' is missing"),
    (ValueError("no  such\nthing"), "no such thing"),
    (RuntimeError(), "failed with no message (RuntimeError)"),
])
def test_plain_exceptions(exc, words):
    assert describe_failure(exc) == words


def test_an_error_raised_from_none_is_taken_at_its_word():
    try:
        try:
            raise ConnectionRefusedError(111, "Connection refused")
        except OSError:
            raise RuntimeError("acme login failed: cannot reach https://api.acme.test: connection refused") from None
    except RuntimeError as exc:
        assert describe_failure(exc) == "acme login failed: cannot reach https://api.acme.test: connection refused"


async def test_a_failing_health_probe_is_reported_in_words():
    class Broken:
        async def health(self):
            return {}["connected"]

    assert await _platform_health({"acme": Broken()}) == {
        "acme": {"ok": False, "error": "health check failed: 'connected' is missing"}}
