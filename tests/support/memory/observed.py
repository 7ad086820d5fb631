"""The memory twin of the consumer and history storage (SPEC §3.7, §3.8), a mixin of
``InMemoryRepository`` with the PostgreSQL adapters' rules (``adapters/postgres/consumers.py``
and ``history.py``): held to the same contract suite.

``totals`` are the cumulative counts the hot-path statements keep in the rollup; the
repository's operations add to them as they happen.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from uuid import UUID

from retsu.application.ports import Clock
from retsu.domain.consumer import ConsumerPosition, ConsumerRecord, ConsumerSighting, SeenBetween
from retsu.domain.history import HistoryPoint, Throughput, downsample
from retsu.domain.queue import Queue
from retsu.domain.state import PriorityState


@dataclass(frozen=True, slots=True)
class _Snapshot:
    point: HistoryPoint
    totals: Throughput


def _throughput(counts: Counter[str]) -> Throughput:
    return Throughput(
        enqueued=counts["enqueued"],
        delivered=counts["delivered"],
        acknowledged=counts["acknowledged"],
        dead_lettered=counts["dead_lettered"],
        expired=counts["expired"],
    )


class ConsumersAndHistory:
    """Implements ConsumerStore, ConsumerMaintenance, QueueHistoryReader and
    HistoryMaintenance over the repository's queues."""

    _clock: Clock
    _queues: dict[UUID, Queue]

    def _init_observed(self) -> None:
        self.totals: defaultdict[UUID, Counter[str]] = defaultdict(Counter)
        self._consumers: dict[tuple[UUID, str], ConsumerRecord] = {}
        self._history: defaultdict[UUID, list[_Snapshot]] = defaultdict(list)

    def _forget_observed(self, queue_id: UUID) -> None:
        """What the foreign keys' ON DELETE CASCADE does when a queue goes."""
        self.totals.pop(queue_id, None)
        self._history.pop(queue_id, None)
        for key in [k for k in self._consumers if k[0] == queue_id]:
            del self._consumers[key]

    # -- consumers -------------------------------------------------------------

    async def record_consumers(self, sightings: Sequence[ConsumerSighting]) -> None:
        for s in sightings:
            queue = self._queues.get(s.queue_id)
            if queue is None:
                continue  # the queue is gone
            old = self._consumers.get((s.queue_id, s.name))
            if old is None:
                self._consumers[s.queue_id, s.name] = ConsumerRecord(
                    s.queue_id, queue.name, s.name, s.first_seen_at, s.last_seen_at, s.deliveries
                )
            else:
                self._consumers[s.queue_id, s.name] = replace(
                    old,
                    first_seen_at=min(old.first_seen_at, s.first_seen_at),
                    last_seen_at=max(old.last_seen_at, s.last_seen_at),
                    deliveries=old.deliveries + s.deliveries,
                )

    async def list_consumers(
        self,
        *,
        limit: int,
        after: ConsumerPosition | None,
        queue_id: UUID | None,
        seen: SeenBetween,
    ) -> list[ConsumerRecord]:
        chosen = sorted(
            (
                c
                for c in self._consumers.values()
                if (queue_id is None or c.queue_id == queue_id)
                and seen.holds(c.last_seen_at)
                and (after is None or c.position.sort_key() > after.sort_key())
            ),
            key=lambda c: c.position.sort_key(),
        )
        return chosen[:limit]

    async def delete_consumers_not_seen_for(self, age_seconds: int, batch_size: int) -> int:
        horizon = self._clock.now() - timedelta(seconds=age_seconds)
        doomed = sorted(
            (c for c in self._consumers.values() if c.last_seen_at < horizon),
            key=lambda c: c.last_seen_at,
        )[:batch_size]
        for c in doomed:
            del self._consumers[c.queue_id, c.name]
        return len(doomed)

    # -- history -----------------------------------------------------------------

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
            snapshots.append(_Snapshot(point, totals))

    async def read_history(
        self, queue_id: UUID, *, since: datetime, bucket_seconds: int
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
