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

        # The labelled children, looked up once: ``labels()`` on every message cost the
        # worker ~20 µs a message with metrics on (three calls), measured without HTTP.
        self._children: dict[tuple[Any, ...], Any] = {}

    def _child(self, metric: Counter | Gauge | Histogram, *labels: str) -> Any:
        key = (metric, *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def received(self, queue: str, count: int) -> None:
        self._child(self._received, queue).inc(count)

    def started(self, queue: str) -> None:
        self._child(self._running, queue).inc()

    def finished(self, queue: str, seconds: float) -> None:
        self._child(self._running, queue).dec()
        self._child(self._duration, queue).observe(seconds)

    def outcome(self, queue: str, outcome: str, count: int = 1) -> None:
        self._child(self._outcomes, queue, outcome).inc(count)

    def serve(self, port: int, addr: str = "127.0.0.1", **kwargs: Any) -> None:
        """Expose ``/metrics`` on ``addr:port`` from a background thread."""
        from prometheus_client import start_http_server

        start_http_server(port, addr=addr, registry=self.registry, **kwargs)
