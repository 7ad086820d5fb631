"""Queue history in memory (``QueueHistoryReader``, ``HistoryMaintenance``, the leader's
snapshots; SPEC §3.8): the twin of ``adapters/postgres/history.py``."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime, timedelta
from uuid import UUID

from retsu.adapters.memory.tables import MemoryTables, Snapshot
from retsu.domain.history import HistoryPoint, Throughput, downsample
from retsu.domain.state import PriorityState


def _throughput(counts: dict[str, int]) -> Throughput:
    return Throughput(
        enqueued=counts.get("enqueued", 0),
        delivered=counts.get("delivered", 0),
        acknowledged=counts.get("acknowledged", 0),
        dead_lettered=counts.get("dead_lettered", 0),
        expired=counts.get("expired", 0),
    )


class HistoryPart(MemoryTables):
    """Implements QueueHistoryReader and HistoryMaintenance, and records the leader's
    snapshots, over the tables."""

    async def record_history(self, state: Sequence[PriorityState]) -> None:
        now = self._clock.now()
        depth: dict[UUID, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
        for p in state:
            row = depth[p.queue_id]
            row[0] += p.ready
            row[1] += p.in_flight
            row[2] += p.delayed
            row[3] += p.dead_letters
        for queue_id, (ready, in_flight, delayed, dead_letters) in depth.items():
            if queue_id not in self._queues:
                continue  # deleted since the state was read
            snapshots = self._history[queue_id]
            if snapshots and snapshots[-1].point.at == now:
                continue  # (queue_id, at) is the key: ON CONFLICT DO NOTHING
            totals = _throughput(self.totals[queue_id])
            previous = snapshots[-1].totals if snapshots else Throughput()
            point = HistoryPoint(now, ready, in_flight, delayed, dead_letters, totals - previous)
            snapshots.append(Snapshot(point, totals))

    async def read_history(
        self, queue_id: UUID, *, since: datetime, bucket_seconds: int
    ) -> list[HistoryPoint]:
        return self._history_of(queue_id, since, bucket_seconds)

    async def read_histories(
        self, queue_ids: Sequence[UUID], *, since: datetime, bucket_seconds: int
    ) -> dict[UUID, list[HistoryPoint]]:
        return {
            queue_id: self._history_of(queue_id, since, bucket_seconds) for queue_id in queue_ids
        }

    def _history_of(
        self, queue_id: UUID, since: datetime, bucket_seconds: int
    ) -> list[HistoryPoint]:
        points = [s.point for s in self._history.get(queue_id, []) if s.point.at >= since]
        return downsample(points, bucket_seconds)

    async def delete_history_older_than(self, age_seconds: int, batch_size: int) -> int:
        horizon = self._clock.now() - timedelta(seconds=age_seconds)
        doomed = sorted(
            (
                (s.point.at, queue_id)
                for queue_id, snapshots in self._history.items()
                for s in snapshots
                if s.point.at < horizon
            ),
        )[:batch_size]
        for at, queue_id in doomed:
            self._history[queue_id] = [s for s in self._history[queue_id] if s.point.at != at]
        return len(doomed)
