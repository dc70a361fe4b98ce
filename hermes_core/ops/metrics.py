"""The gateway's metrics (docs/operations.md §3), on `prometheus-client` when `[metrics] enabled`.

The pipeline reports events through one call each (`metrics.message(platform, "accepted")`);
with metrics off (the default), or before a gateway has any, those calls go to `NULL_METRICS`,
which does nothing, so `prometheus-client` stays an optional extra
(`pip install 'hermes-gateway-core[metrics]'`).

Labels carry a platform name and an outcome only: never a session key, session id, user id or
text (a label value per user would also grow without bound). Each gateway has its own
`CollectorRegistry`, so two gateways in one process (tests) never share a counter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

METRICS_EXTRA_HINT = "[metrics] enabled needs prometheus-client: pip install 'hermes-gateway-core[metrics]'"

# Turn and delivery durations, in seconds: a reply takes from well under a second (a command,
# the echo agent) to the 30-minute turn limit.
TURN_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 1800)
DELIVERY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class NullMetrics:
    """Metrics switched off: every report is accepted and forgotten."""

    enabled = False
    registry = None

    def message(self, platform: str, outcome: str) -> None:
        """One inbound message: `outcome` is `accepted`, `refused` or `deduplicated`."""

    def turn(self, platform: str, outcome: str, seconds: float) -> None:
        """One turn ended: `outcome` is the turn's status (`completed`, `interrupted`, `timeout`,
        `failed`, `nothing_to_resume`); `seconds` its duration."""

    def interrupt(self, platform: str) -> None:
        """A running turn was interrupted by a follow-up or a command."""

    def resume(self, platform: str) -> None:
        """A turn was auto-continued after a restart (seed §7)."""

    def delivery(self, platform: str, outcome: str, seconds: float) -> None:
        """One reply or notice delivery ended: `outcome` is `delivered` or `failed`."""

    def recoveries(self, counts: Mapping[str, int]) -> None:
        """Start-up recovery: `{kind: n}` (`resumed`, `redelivered`, `suspended`, …)."""

    def publish(self, snapshot: Mapping[str, Any]) -> None:
        """Set the gauges from a status snapshot (`ops.status.collect`)."""


NULL_METRICS = NullMetrics()


class GatewayMetrics(NullMetrics):
    """Counters, histograms and gauges of one gateway in a registry of its own.

    Raises:
        RuntimeError: prometheus-client is not installed (`METRICS_EXTRA_HINT`).
    """

    enabled = True

    def __init__(self) -> None:
        try:
            from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
        except ImportError:
            raise RuntimeError(METRICS_EXTRA_HINT) from None
        self.registry = registry = CollectorRegistry()
        p, o = "platform", "outcome"
        self._messages = Counter("hermes_messages", "Inbound messages by outcome", [p, o], registry=registry)
        self._turns = Counter("hermes_turns", "Turns by outcome", [p, o], registry=registry)
        self._turn_seconds = Histogram("hermes_turn_duration_seconds", "Turn duration", [p, o],
                                       buckets=TURN_BUCKETS, registry=registry)
        self._interrupts = Counter("hermes_interrupts", "Running turns interrupted", [p], registry=registry)
        self._resumes = Counter("hermes_resumes", "Turns auto-continued after a restart", [p], registry=registry)
        self._deliveries = Counter("hermes_deliveries", "Deliveries by outcome", [p, o], registry=registry)
        self._delivery_seconds = Histogram("hermes_delivery_duration_seconds", "Delivery latency", [p, o],
                                           buckets=DELIVERY_BUCKETS, registry=registry)
        self._recoveries = Counter("hermes_recoveries", "Start-up recoveries by kind", [o], registry=registry)
        self._suspensions = Counter("hermes_stuck_loop_suspensions", "Sessions suspended as stuck loops",
                                    registry=registry)
        gauge = lambda name, text, labels=(): Gauge(name, text, list(labels), registry=registry)  # noqa: E731
        self._gauges = {
            "queue_depth": gauge("hermes_queue_depth", "Jobs queued or running over all sessions"),
            "busy_sessions": gauge("hermes_busy_sessions", "Sessions running a job"),
            "ledger_backlog": gauge("hermes_ledger_backlog", "Delivery obligations still owed"),
            "cache_entries": gauge("hermes_agent_cache_entries", "Live transcripts in the agent cache"),
            "anon_memory_bytes": gauge("hermes_anon_memory_bytes", "Anonymous memory of the process"),
            "store_degraded": gauge("hermes_store_degraded", "1 while the store runs degraded"),
            "ready": gauge("hermes_ready", "1 once start-up recovery is done and adapters are up"),
        }
        self._evictions = gauge("hermes_agent_cache_evictions", "Agent cache evictions since start, by reason",
                                [o])
        self._platform_up = gauge("hermes_platform_up", "1 while the platform's adapter reports healthy", [p])

    def message(self, platform: str, outcome: str) -> None:
        self._messages.labels(platform, outcome).inc()

    def turn(self, platform: str, outcome: str, seconds: float) -> None:
        self._turns.labels(platform, outcome).inc()
        self._turn_seconds.labels(platform, outcome).observe(max(0.0, seconds))

    def interrupt(self, platform: str) -> None:
        self._interrupts.labels(platform).inc()

    def resume(self, platform: str) -> None:
        self._resumes.labels(platform).inc()

    def delivery(self, platform: str, outcome: str, seconds: float) -> None:
        self._deliveries.labels(platform, outcome).inc()
        self._delivery_seconds.labels(platform, outcome).observe(max(0.0, seconds))

    def recoveries(self, counts: Mapping[str, int]) -> None:
        for kind, n in counts.items():
            if n:
                self._recoveries.labels(kind).inc(n)
        if counts.get("suspended"):
            self._suspensions.inc(counts["suspended"])

    def publish(self, snapshot: Mapping[str, Any]) -> None:
        for name, gauge in self._gauges.items():
            value = snapshot.get(name)
            if value is not None:
                gauge.set(float(value))
        for reason, n in (snapshot.get("cache_evictions") or {}).items():
            self._evictions.labels(reason).set(n)
        for platform, health in (snapshot.get("platforms") or {}).items():
            self._platform_up.labels(platform).set(1.0 if health.get("ok") else 0.0)


def create_metrics(config: Any) -> NullMetrics:
    """`GatewayMetrics` when `[metrics] enabled`, else `NULL_METRICS`.

    Raises:
        RuntimeError: enabled but prometheus-client is not installed.
    """
    settings = getattr(config, "metrics", None)
    return GatewayMetrics() if settings is not None and settings.enabled else NULL_METRICS
