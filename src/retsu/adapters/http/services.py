"""What the HTTP adapter needs from the rest of the program: use cases, readiness, metrics."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from retsu.adapters.telemetry.metrics import Metrics
from retsu.application.acknowledge import Acknowledge
from retsu.application.create_queue import CreateQueue
from retsu.application.dequeue import Dequeue
from retsu.application.enqueue import Enqueue
from retsu.application.update_queue import UpdateQueue


@dataclass(frozen=True)
class ApiServices:
    create_queue: CreateQueue
    update_queue: UpdateQueue
    enqueue: Enqueue
    dequeue: Dequeue
    acknowledge: Acknowledge
    # Raises when the service cannot serve (the real one checks PostgreSQL).
    readiness: Callable[[], Awaitable[None]]
    metrics: Metrics
