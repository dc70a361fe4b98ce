"""Signal platform plugin for hermes_core (distribution `hermes-gateway-signal`).

Talks to `signal-cli daemon --http=127.0.0.1:PORT`: JSON-RPC requests on `POST /api/v1/rpc`,
incoming messages as Server-Sent Events on `GET /api/v1/events` (docs/adapters.md §5).

Modules:
    mapping   pure envelope → (SessionSource, MessageEvent) mapping (docs/adapters.md §5.1)
    settings  the `[platforms.signal]` model (`SignalSettings`)
    rpc       the JSON-RPC client and the reading of `send` results (docs/adapters.md §5.4)
    receiver  the event stream: SSE over httpx-sse, reconnecting with back-off (tenacity)
    adapter   `SignalAdapter`, the `hermes_core.adapters` entry point
    hooks     the `hermes_core.plugins` entry point (hookimpls, `HERMES_API = 1`)
"""

__version__ = "0.1.0"
