"""State gauges of the collector leader, served from an in-memory snapshot: queue state
(SPEC §5, §7) and database health (SPEC §10).

Nothing here touches the database: a scrape reads the last snapshot the leader
published. The gauges are registered only when this process first becomes
leader, so standbys never export state (not even zeros), and they go quiet again
when leadership ends (an old leader that is shutting down must not show a
snapshot beside its successor's).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from prometheus_client import Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from retsu.adapters.telemetry.metrics import Metrics
from retsu.application.ports import Clock
from retsu.domain.database_health import DatabaseHealth
from retsu.domain.state import StateSnapshot

COLLECTION_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_LABELS = ("queue_name", "message_priority")


class _StateGauges(Collector):
    def __init__(self, exporter: StateMetricsExporter) -> None:
        self._exporter = exporter

    def collect(self) -> Iterable[GaugeMetricFamily]:
        if not self._exporter.leading:
            return  # an ex-leader (shutting down) exports nothing, not even empty families
        snapshot = self._exporter.snapshot
        ready = GaugeMetricFamily(
            "queue_messages_ready",
            "Messages deliverable now, per queue and priority.",
            labels=_LABELS,
        )
        in_flight = GaugeMetricFamily(
            "queue_messages_in_flight", "Messages under an active lease.", labels=_LABELS
        )
        oldest_ready = GaugeMetricFamily(
            "queue_oldest_ready_message_age_seconds",
            "Age (from enqueue) of the oldest ready message; 0 when none is ready.",
            labels=_LABELS,
        )
        oldest_in_flight = GaugeMetricFamily(
            "queue_oldest_in_flight_message_age_seconds",
            "Age (from enqueue) of the oldest message under an active lease; 0 when none.",
            labels=_LABELS,
        )
        age = GaugeMetricFamily(
            "queue_state_snapshot_age_seconds", "Seconds since the state snapshot was taken."
        )
        if snapshot is not None:
            # Queues past the label budget share "_overflow": counts add up, ages take the max.
            rows: dict[tuple[str, str], list[float]] = {}
            for state in snapshot.priorities:
                key = (self._exporter.metrics.queue_label(state.queue_name), state.priority.name)
                row = rows.setdefault(key, [0.0, 0.0, 0.0, 0.0])
                row[0] += state.ready
                row[1] += state.in_flight
                row[2] = max(row[2], state.oldest_ready_age_seconds)
                row[3] = max(row[3], state.oldest_in_flight_age_seconds)
            for labels, (r, f, oldest_r, oldest_f) in rows.items():
                ready.add_metric(labels, r)
                in_flight.add_metric(labels, f)
                oldest_ready.add_metric(labels, oldest_r)
                oldest_in_flight.add_metric(labels, oldest_f)
            age.add_metric((), self._exporter.snapshot_age_seconds())
        yield from (ready, in_flight, oldest_ready, oldest_in_flight, age)
        yield from _health_gauges(self._exporter.database_health)


def _health_gauges(health: DatabaseHealth | None) -> Iterable[GaugeMetricFamily]:
    """SPEC §10's four gauges; empty families until the leader's first read (or after a
    failed one), like the state gauges before the first snapshot."""
    oldest = GaugeMetricFamily(
        "db_oldest_transaction_age_seconds",
        "Age of the oldest open transaction in Retsu's database (sessions and prepared "
        "transactions); 0 when none.",
    )
    horizon = GaugeMetricFamily(
        "db_xmin_horizon_age_seconds",
        "How long the oldest snapshot holding back cleanup (the xmin horizon) of Retsu's "
        "database has been held; 0 when nothing holds it back.",
    )
    dead = GaugeMetricFamily(
        "db_table_dead_rows", "Dead row versions in each of Retsu's tables.", labels=("table",)
    )
    vacuumed = GaugeMetricFamily(
        "db_table_last_autovacuum_age_seconds",
        "Seconds since autovacuum last processed each of Retsu's tables; +Inf when never.",
        labels=("table",),
    )
    if health is not None:
        oldest.add_metric((), health.oldest_transaction_age_seconds)
        horizon.add_metric((), health.xmin_horizon_age_seconds)
        for table in health.tables:
            dead.add_metric((table.table,), table.dead_rows)
            vacuumed.add_metric((table.table,), table.last_autovacuum_age_seconds(health.taken_at))
    yield from (oldest, horizon, dead, vacuumed)


class StateMetricsExporter:
    """Implements the StateSnapshots port over a process's Metrics registry."""

    def __init__(self, metrics: Metrics, clock: Clock) -> None:
        self.metrics = metrics
        self._clock = clock
        self.snapshot: StateSnapshot | None = None
        self.database_health: DatabaseHealth | None = None
        self.leading = False
        self._registered = False
        self._collections: Counter | None = None
        self._duration: Histogram | None = None

    def leadership_acquired(self) -> None:
        self.leading = True
        if self._registered:
            return
        registry = self.metrics.registry
        self._collections = Counter(
            "queue_state_collections",
            "State refreshes by the collector leader, by outcome.",
            ("outcome",),
            registry=registry,
        )
        self._duration = Histogram(
            "queue_state_collection_duration_seconds",
            "Time one state refresh took.",
            buckets=COLLECTION_BUCKETS,
            registry=registry,
        )
        registry.register(_StateGauges(self))
        self._registered = True

    def leadership_released(self) -> None:
        self.leading = False
        self.snapshot = None
        self.database_health = None

    def publish(self, snapshot: StateSnapshot) -> None:
        self.snapshot = snapshot

    def publish_database_health(self, health: DatabaseHealth | None) -> None:
        self.database_health = health

    def collection_finished(self, outcome: str, duration_seconds: float) -> None:
        if self._collections is not None and self._duration is not None:
            self._collections.labels(outcome).inc()
            self._duration.observe(duration_seconds)

    def snapshot_age_seconds(self, now: datetime | None = None) -> float:
        if self.snapshot is None:
            return 0.0
        moment = now or self._clock.now()
        return max((moment - self.snapshot.taken_at).total_seconds(), 0.0)
