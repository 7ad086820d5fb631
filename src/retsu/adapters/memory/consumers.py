"""Named consumers in memory (``ConsumerStore``, ``ConsumerMaintenance``; SPEC §3.7): the twin
of ``adapters/postgres/consumers.py``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from uuid import UUID

from retsu.adapters.memory.tables import MemoryTables
from retsu.domain.consumer import ConsumerPosition, ConsumerRecord, ConsumerSighting, SeenBetween


class ConsumersPart(MemoryTables):
    """Implements ConsumerStore and ConsumerMaintenance over the tables."""

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

    async def count_consumers(self, *, seen: SeenBetween) -> dict[UUID, int]:
        counts: dict[UUID, int] = {}
        for consumer in self._consumers.values():
            if seen.holds(consumer.last_seen_at):
                counts[consumer.queue_id] = counts.get(consumer.queue_id, 0) + 1
        return counts

    async def delete_consumers_not_seen_for(self, age_seconds: int, batch_size: int) -> int:
        horizon = self._clock.now() - timedelta(seconds=age_seconds)
        doomed = sorted(
            (c for c in self._consumers.values() if c.last_seen_at < horizon),
            key=lambda c: c.last_seen_at,
        )[:batch_size]
        for c in doomed:
            del self._consumers[c.queue_id, c.name]
        return len(doomed)
