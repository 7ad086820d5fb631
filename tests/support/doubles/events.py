"""Queue event recorders for tests and for runs without metrics."""

from __future__ import annotations

from collections import Counter

from retsu.domain.message import Priority


class NullQueueEvents:
    def enqueued(self, queue_name: str, priority: Priority, count: int = 1) -> None:
        return None

    def acknowledged(self, queue_name: str, count: int = 1) -> None:
        return None

    def dead_lettered(self, queue_name: str, count: int = 1) -> None:
        return None

    def redriven(self, queue_name: str, count: int = 1) -> None:
        return None

    def throttled(self, queue_name: str, reason: str) -> None:
        return None


class RecordingQueueEvents:
    """Counts events by (kind, queue, extra label) so tests can assert on them."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, ...]] = Counter()

    def enqueued(self, queue_name: str, priority: Priority, count: int = 1) -> None:
        self.counts["enqueued", queue_name, priority.name] += count

    def acknowledged(self, queue_name: str, count: int = 1) -> None:
        self.counts["acknowledged", queue_name] += count

    def dead_lettered(self, queue_name: str, count: int = 1) -> None:
        self.counts["dead_lettered", queue_name] += count

    def redriven(self, queue_name: str, count: int = 1) -> None:
        self.counts["redriven", queue_name] += count

    def throttled(self, queue_name: str, reason: str) -> None:
        self.counts["throttled", queue_name, reason] += 1
