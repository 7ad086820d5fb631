"""Prometheus metrics (SPEC §7): one ``Metrics`` object per process.

Every metric lives in a private ``CollectorRegistry`` owned by the instance, so
tests can build as many as they like. ``Metrics`` implements the ``QueueEvents``
port (enqueued / acknowledged / dead_lettered), and offers small recording
methods for HTTP, database and cache adapters.

Queue labels are bounded: the first ``max_queues`` distinct queue names keep
their own label; every later new name is reported as ``_overflow`` and counted
once in ``telemetry_label_overflow_total``.

With several API processes sharing a port, prometheus-client's multiprocess mode
aggregates them: set ``PROMETHEUS_MULTIPROC_DIR`` (an empty directory) before
prometheus_client is first imported; ``render`` then reports the sum over every
process writing to that directory.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest

from retsu.domain.message import Priority

OVERFLOW_LABEL = "_overflow"
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4  # "text/plain; version=0.0.4; charset=utf-8"

# How late a schedule's message is enqueued after its due time (SPEC §3.12): normally well
# under a second; minutes to hours after an outage with no scheduler.
SCHEDULE_LAG_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0)

# Request latencies: sub-millisecond hot path up to a 20 s long poll.
HTTP_DURATION_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    25.0,
)
DB_DURATION_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)

_PRIORITY_LABELS = {p: p.name for p in Priority}
# Any other method is labelled "_OTHER", so a client cannot mint label values.
HTTP_METHODS = frozenset(
    {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"}
)


class Metrics:
    """The process's metrics; implements the ``QueueEvents`` port."""

    def __init__(
        self, *, max_queues: int = 10000, registry: CollectorRegistry | None = None
    ) -> None:
        if max_queues < 1:
            raise ValueError("max_queues must be at least 1")
        # `*_created` series double the exposition for no use here. The switch is
        # process-wide, which matches "one Metrics per process".
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.max_queues = max_queues
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        if registry is None:
            # process_* (CPU, memory, file descriptors) and python_* series: every role
            # exports them, standbys included.
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)
            GCCollector(registry=self.registry)
        self._queue_labels: dict[str, str] = {}
        self._known_queues = 0
        # Labelled children of the hot-path metrics, so a request does not pay for
        # `labels()` (a lock and a tuple) each time. Keys are bounded label values.
        self._http_children: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}
        self._enqueued_children: dict[tuple[str, Priority], Counter] = {}
        self._acknowledged_children: dict[str, Counter] = {}
        self._cache_children: dict[tuple[str, bool], Counter] = {}
        r = self.registry

        # -- HTTP -------------------------------------------------------------
        self._http_requests = Counter(
            "http_server_requests",
            "HTTP requests answered, by method, route template and status code.",
            ("method", "route", "status"),
            registry=r,
        )
        self._http_duration = Histogram(
            "http_server_request_duration_seconds",
            "Time to answer an HTTP request, by method and route template.",
            ("method", "route"),
            buckets=HTTP_DURATION_BUCKETS,
            registry=r,
        )
        self._http_active = Gauge(
            "http_server_active_requests",
            "HTTP requests being answered right now.",
            registry=r,
            multiprocess_mode="livesum",
        )

        # -- queue events ------------------------------------------------------
        self._messages_enqueued = Counter(
            "queue_messages_enqueued",
            "Messages added to a queue.",
            ("queue_name", "message_priority"),
            registry=r,
        )
        self._messages_acknowledged = Counter(
            "queue_messages_acknowledged",
            "Messages acknowledged (removed after processing).",
            ("queue_name",),
            registry=r,
        )
        self._messages_dead_lettered = Counter(
            "queue_messages_dead_lettered",
            "Messages moved to dead-letter storage.",
            ("queue_name",),
            registry=r,
        )
        self._messages_expired = Counter(
            "queue_messages_expired",
            "Expired messages removed by the cleaner, by whether they were ever delivered.",
            ("queue_name", "delivery_history"),
            registry=r,
        )
        self._dead_letters_purged = Counter(
            "queue_dead_letter_messages_purged",
            "Dead-letter records removed after their retention.",
            ("queue_name",),
            registry=r,
        )
        self._messages_redriven = Counter(
            "queue_messages_redriven",
            "Dead letters put back onto their queue.",
            ("queue_name",),
            registry=r,
        )
        self._deliveries_throttled = Counter(
            "queue_deliveries_throttled",
            "Dequeues that got fewer messages than they could have because of a limit.",
            ("queue_name", "reason"),
            registry=r,
        )

        # -- schedules (SPEC §3.12) -------------------------------------------------
        self._schedule_runs = Counter(
            "queue_schedule_runs",
            "Due times of schedules handled by the scheduler, by outcome: enqueued, missed "
            "(passed while no scheduler ran: skipped), duplicate (its message was stored "
            "already; nothing enqueued).",
            ("queue_name", "outcome"),
            registry=r,
        )
        self._schedule_lag = Histogram(
            "queue_schedule_lag_seconds",
            "From a schedule's due time to the enqueue of its message.",
            ("queue_name",),
            buckets=SCHEDULE_LAG_BUCKETS,
            registry=r,
        )

        # -- database ----------------------------------------------------------
        self._db_pool_acquire = Histogram(
            "db_pool_acquire_duration_seconds",
            "Time to acquire a database connection from the pool.",
            buckets=DB_DURATION_BUCKETS,
            registry=r,
        )
        self._db_operation = Histogram(
            "db_operation_duration_seconds",
            "Time of one database operation, by operation and outcome.",
            ("operation", "outcome"),
            buckets=DB_DURATION_BUCKETS,
            registry=r,
        )

        # -- caches ------------------------------------------------------------
        self._cache_requests = Counter(
            "cache_requests",
            "Cache lookups, by cache and outcome (hit or miss).",
            ("cache_name", "outcome"),
            registry=r,
        )
        self._cache_load = Histogram(
            "cache_load_duration_seconds",
            "Time to load a cache entry on a miss, by cache and outcome.",
            ("cache_name", "outcome"),
            buckets=DB_DURATION_BUCKETS,
            registry=r,
        )

        # -- consumer tracking (SPEC §3.7) ---------------------------------------
        self._consumer_flushes = Counter(
            "consumer_sighting_flushes",
            "Coalesced writes of consumer sightings, by outcome (success or failure).",
            ("outcome",),
            registry=r,
        )
        self._consumer_flushed = Counter(
            "consumer_sightings_flushed",
            "Consumer entries written by the coalesced writes.",
            registry=r,
        )
        self._consumer_dropped = Counter(
            "consumer_sightings_dropped",
            "Sightings of new consumers not kept because the tracker was full.",
            registry=r,
        )

        # -- telemetry itself --------------------------------------------------
        self._label_overflow = Counter(
            "telemetry_label_overflow",
            'Queues reported under queue_name="_overflow" because the label budget was spent.',
            registry=r,
        )

    # -- exposition ------------------------------------------------------------

    def render(self) -> tuple[bytes, str]:
        """The Prometheus text exposition (format 0.0.4) and its content type."""
        multiprocess_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        if multiprocess_dir:
            from prometheus_client import multiprocess

            aggregate = CollectorRegistry()
            multiprocess.MultiProcessCollector(aggregate, path=multiprocess_dir)  # type: ignore[no-untyped-call]
            return generate_latest(aggregate), CONTENT_TYPE
        return generate_latest(self.registry), CONTENT_TYPE

    # -- bounded queue labels --------------------------------------------------

    def queue_label(self, queue_name: str) -> str:
        """The label for a queue: its name while the budget lasts, else ``_overflow``."""
        label = self._queue_labels.get(queue_name)
        if label is not None:
            return label
        if self._known_queues < self.max_queues:
            self._known_queues += 1
            label = queue_name
        else:
            label = OVERFLOW_LABEL
            self._label_overflow.inc()
        # Overflowing names are remembered too, so each one is counted only once.
        # The map is bounded by the number of queues that ever existed in this process.
        self._queue_labels[queue_name] = label
        return label

    # -- HTTP --------------------------------------------------------------------

    def http_request_started(self) -> None:
        self._http_active.inc()

    def http_request_finished(
        self, method: str, route: str, status: int, duration_seconds: float
    ) -> None:
        """Record one answered request. ``route`` must be a route template, never a raw path."""
        if method not in HTTP_METHODS:
            method = "_OTHER"
        key = (method, route, status)
        children = self._http_children.get(key)
        if children is None:
            children = self._http_children[key] = (
                self._http_requests.labels(method, route, str(status)),
                self._http_duration.labels(method, route),
            )
        self._http_active.dec()
        children[0].inc()
        children[1].observe(duration_seconds)

    # -- queue events (the QueueEvents port) ------------------------------------

    def enqueued(self, queue_name: str, priority: Priority, count: int = 1) -> None:
        key = (queue_name, priority)
        child = self._enqueued_children.get(key)
        if child is None:
            child = self._enqueued_children[key] = self._messages_enqueued.labels(
                self.queue_label(queue_name), _PRIORITY_LABELS[priority]
            )
        child.inc(count)

    def acknowledged(self, queue_name: str, count: int = 1) -> None:
        child = self._acknowledged_children.get(queue_name)
        if child is None:
            child = self._acknowledged_children[queue_name] = self._messages_acknowledged.labels(
                self.queue_label(queue_name)
            )
        child.inc(count)

    def dead_lettered(self, queue_name: str, count: int = 1) -> None:
        self._messages_dead_lettered.labels(self.queue_label(queue_name)).inc(count)

    def expired(self, queue_name: str, delivery_history: str, count: int = 1) -> None:
        """``delivery_history`` is ``never_delivered`` or ``previously_delivered``."""
        self._messages_expired.labels(self.queue_label(queue_name), delivery_history).inc(count)

    def dead_letters_purged(self, queue_name: str, count: int = 1) -> None:
        self._dead_letters_purged.labels(self.queue_label(queue_name)).inc(count)

    def redriven(self, queue_name: str, count: int = 1) -> None:
        self._messages_redriven.labels(self.queue_label(queue_name)).inc(count)

    def throttled(self, queue_name: str, reason: str) -> None:
        """``reason``: max_in_flight, rate_limit or group_rate_limit (a fixed set)."""
        self._deliveries_throttled.labels(self.queue_label(queue_name), reason).inc()

    # -- schedules (the ScheduleEvents port) ----------------------------------------

    def schedule_ran(self, queue_name: str, outcome: str, lag_seconds: float) -> None:
        label = self.queue_label(queue_name)
        self._schedule_runs.labels(label, outcome).inc()
        self._schedule_lag.labels(label).observe(lag_seconds)

    def schedule_missed(self, queue_name: str, count: int) -> None:
        self._schedule_runs.labels(self.queue_label(queue_name), "missed").inc(count)

    # -- consumer tracking (the ConsumerEvents port) ------------------------------

    def consumer_sightings_dropped(self, count: int = 1) -> None:
        self._consumer_dropped.inc(count)

    def consumer_flush_finished(self, outcome: str, entries: int) -> None:
        """``outcome`` is ``success`` or ``failure``."""
        self._consumer_flushes.labels(outcome).inc()
        if outcome == "success":
            self._consumer_flushed.inc(entries)

    # -- database ------------------------------------------------------------------

    def db_pool_acquired(self, duration_seconds: float) -> None:
        self._db_pool_acquire.observe(duration_seconds)

    def db_operation_finished(self, operation: str, outcome: str, duration_seconds: float) -> None:
        """``operation`` is a fixed name (``dequeue``…); ``outcome`` is ``success`` or ``error``."""
        self._db_operation.labels(operation, outcome).observe(duration_seconds)

    def db_operation_observers(
        self, operation: str
    ) -> tuple[Callable[[float], None], Callable[[float], None]]:
        """Pre-labelled ``observe`` functions for one operation: (success, error).

        For the instrumenting decorator, which resolves them once per operation so a call
        does not pay for ``labels()``. ``operation`` must come from a fixed set (method
        names), never from request data.
        """
        return (
            self._db_operation.labels(operation, "success").observe,
            self._db_operation.labels(operation, "error").observe,
        )

    # -- caches --------------------------------------------------------------------

    def cache_request(self, cache_name: str, *, hit: bool) -> None:
        """``cache_name`` is ``queue_names`` or ``queue_details``."""
        key = (cache_name, hit)
        child = self._cache_children.get(key)
        if child is None:
            child = self._cache_children[key] = self._cache_requests.labels(
                cache_name, "hit" if hit else "miss"
            )
        child.inc()

    def cache_loaded(self, cache_name: str, outcome: str, duration_seconds: float) -> None:
        """``outcome`` is ``success``, ``not_found`` or ``error``."""
        self._cache_load.labels(cache_name, outcome).observe(duration_seconds)
