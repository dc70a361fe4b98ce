"""`/metrics`, `/healthz` and `/readyz` (docs/operations.md §3) on `[metrics] listen:port`.

Served by a small threaded WSGI server (the standard library's, as `prometheus_client`'s own
`start_http_server` does) in a daemon thread, so a scrape never waits for the event loop, and
a blocked event loop is exactly what `/healthz` can see:

* `/healthz`: 200 `ok` while the event loop is alive (it stamps a heartbeat every second);
  503 when the last heartbeat is older than `STALE_AFTER_S`.
* `/readyz`: 503 until start-up recovery has been queued and every adapter has started (and
  again from the moment the gateway begins to stop); 200 `ready` in between.
* `/metrics`: the gateway's registry in the Prometheus text format.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from socketserver import ThreadingMixIn
from typing import Any, Callable
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

log = logging.getLogger(__name__)

HEARTBEAT_S = 1.0
STALE_AFTER_S = 10.0


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    """No access line per scrape on stderr (a scrape every 15 s would fill the terminal)."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        log.debug("metrics endpoint: " + format, *args)


class HealthServer:
    """The endpoints of one gateway.

    Args:
        registry: the gateway's prometheus `CollectorRegistry`.
        is_ready: `() -> bool`, read on each `/readyz`.
        listen / port: where to bind (`port = 0`: a free port, see `.port` after `start`).
    """

    def __init__(self, registry: Any, is_ready: Callable[[], bool], listen: str, port: int) -> None:
        from prometheus_client import make_wsgi_app

        self._metrics_app = make_wsgi_app(registry)
        self._is_ready = is_ready
        self.listen, self.port = listen, port
        self._beat = time.monotonic()
        self._beat_handle: asyncio.TimerHandle | None = None
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def _heartbeat(self) -> None:
        self._beat = time.monotonic()
        self._beat_handle = asyncio.get_running_loop().call_later(HEARTBEAT_S, self._heartbeat)

    def _wsgi(self, environ: dict, start_response: Callable) -> Any:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            return self._metrics_app(environ, start_response)
        if path == "/healthz":
            alive = time.monotonic() - self._beat < STALE_AFTER_S
            return self._plain(start_response, 200 if alive else 503, "ok" if alive else "event loop stalled")
        if path == "/readyz":
            ready = self._is_ready()
            return self._plain(start_response, 200 if ready else 503, "ready" if ready else "not ready")
        return self._plain(start_response, 404, "not found: /metrics, /healthz, /readyz")

    @staticmethod
    def _plain(start_response: Callable, code: int, text: str) -> list[bytes]:
        reason = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}[code]
        body = (text + "\n").encode()
        start_response(f"{code} {reason}", [("Content-Type", "text/plain; charset=utf-8"),
                                            ("Content-Length", str(len(body)))])
        return [body]

    def start(self) -> None:
        """Bind and serve (call on the gateway's event loop: the heartbeat runs there).

        Raises:
            OSError: the address cannot be bound (in use, not local).
        """
        self._server = make_server(self.listen, self.port, self._wsgi, server_class=_Server,
                                   handler_class=_QuietHandler)
        self.port = self._server.server_address[1]
        self._heartbeat()
        self._thread = threading.Thread(target=self._server.serve_forever, name="hermes-metrics", daemon=True)
        self._thread.start()
        log.info("metrics and health endpoints on http://%s:%d/ (/metrics, /healthz, /readyz)", self.listen, self.port)

    def stop(self) -> None:
        """Stop serving and release the port (idempotent)."""
        if self._beat_handle is not None:
            self._beat_handle.cancel()
            self._beat_handle = None
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
