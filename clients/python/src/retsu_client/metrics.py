"""Prometheus metrics for ``Worker`` (the ``metrics`` extra: ``pip install retsu-client[metrics]``).

retsu_worker_messages_received_total{queue}
retsu_worker_messages_total{queue,outcome}   acknowledged | failed | retry_later |
                                             released_on_shutdown | lease_lost | ack_failed
retsu_worker_handler_duration_seconds{queue} (histogram)
retsu_worker_handlers_running{queue}
"""

from __future__ import annotations

from typing import Any

try:
    from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError(
        "retsu_client.metrics needs prometheus-client: pip install 'retsu-client[metrics]'"
    ) from error

__all__ = ["WorkerMetrics"]

_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class WorkerMetrics:
    """The worker's counters, registered in ``registry`` (the default registry if None)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        registry = registry if registry is not None else REGISTRY
        self.registry = registry
        self._received = Counter(
            "retsu_worker_messages_received",
            "Messages this worker dequeued.",
            ["queue"],
            registry=registry,
        )
        self._outcomes = Counter(
            "retsu_worker_messages",
            "Messages this worker finished with, by outcome.",
            ["queue", "outcome"],
            registry=registry,
        )
        self._duration = Histogram(
            "retsu_worker_handler_duration_seconds",
            "Time the handler took per message.",
            ["queue"],
            buckets=_BUCKETS,
            registry=registry,
        )
        self._running = Gauge(
            "retsu_worker_handlers_running",
            "Handlers running now.",
            ["queue"],
            registry=registry,
        )

    def received(self, queue: str, count: int) -> None:
        self._received.labels(queue=queue).inc(count)

    def started(self, queue: str) -> None:
        self._running.labels(queue=queue).inc()

    def finished(self, queue: str, seconds: float) -> None:
        self._running.labels(queue=queue).dec()
        self._duration.labels(queue=queue).observe(seconds)

    def outcome(self, queue: str, outcome: str, count: int = 1) -> None:
        self._outcomes.labels(queue=queue, outcome=outcome).inc(count)

    def serve(self, port: int, addr: str = "127.0.0.1", **kwargs: Any) -> None:
        """Expose ``/metrics`` on ``addr:port`` from a background thread."""
        from prometheus_client import start_http_server

        start_http_server(port, addr=addr, registry=self.registry, **kwargs)
