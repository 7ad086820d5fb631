"""Exact queue state in memory (``QueueStateReader``), by the counting rules of SPEC §3.2: the
twin of ``retsu_queue_state`` (migration 0005) and ``adapters/postgres/state.py``."""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from retsu.adapters.memory.tables import (
    MemoryTables,
    age,
    logical,
)
from retsu.domain.browsing import BrowseState
from retsu.domain.message import (
    Priority,
)
from retsu.domain.queue import Queue
from retsu.domain.state import PriorityState


def _by_name(queue: Queue) -> bytes:
    return queue.name.encode()  # byte order, as PostgreSQL's COLLATE "C"


class StatePart(MemoryTables):
    """Implements QueueStateReader over the tables."""

    async def read_state(self, queue_id: UUID | None = None) -> list[PriorityState]:
        """One queue's state; every queue's (by name) when ``queue_id`` is None (the
        leader's read)."""
        if queue_id is not None:
            return self._states([queue_id])
        return self._states([q.id for q in sorted(self._queues.values(), key=_by_name)])

    async def read_states(self, queue_ids: Sequence[UUID]) -> list[PriorityState]:
        return self._states(queue_ids)

    def _states(self, queue_ids: Sequence[UUID]) -> list[PriorityState]:
        now = self._clock.now()
        queues = [self._queues[i] for i in queue_ids if i in self._queues]
        states = []
        for queue in queues:
            messages = list(self._messages[queue.id].values())
            dead = list(self._dead_letters[queue.id].values())
            groups = sum(
                1 for (q, _), lane in self._groups.items() if q == queue.id and lane.live > 0
            )
            for priority in sorted(Priority, reverse=True):
                ready_ages, in_flight_ages = [], []
                delayed = completed = 0
                for m in messages:
                    if m.priority is not priority:
                        continue
                    state = logical(m, queue.settings.max_delivery_attempts, now)
                    if state is BrowseState.READY:
                        ready_ages.append(m.enqueued_at)
                    elif state is BrowseState.IN_FLIGHT:
                        in_flight_ages.append(m.enqueued_at)
                    elif state is BrowseState.DELAYED:
                        delayed += 1
                    elif state is BrowseState.COMPLETED:
                        completed += 1
                states.append(
                    PriorityState(
                        queue_id=queue.id,
                        queue_name=queue.name,
                        priority=priority,
                        ready=len(ready_ages),
                        in_flight=len(in_flight_ages),
                        delayed=delayed,
                        dead_letters=sum(1 for d in dead if d.record.priority is priority),
                        oldest_ready_age_seconds=age(now, ready_ages),
                        oldest_in_flight_age_seconds=age(now, in_flight_ages),
                        completed=completed,
                        # Per queue: carried on the MEDIUM row, as PostgreSQL's rollup does.
                        groups=groups if priority is Priority.MEDIUM else 0,
                    )
                )
        return states
