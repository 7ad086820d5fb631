"""Use case: read one queue with its exact statistics."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from retsu.application.ports import QueueRepository, QueueStateReader
from retsu.domain.errors import QueueNotFound
from retsu.domain.queue import Queue
from retsu.domain.state import QueueStats


@dataclass(frozen=True, slots=True)
class QueueWithStats:
    queue: Queue
    stats: QueueStats


class GetQueue:
    """Reads the queue from storage (never a cache: this is the operator's view) and its
    state through the state reader, whose cost does not grow with the backlog."""

    def __init__(self, queues: QueueRepository, state: QueueStateReader) -> None:
        self._queues = queues
        self._state = state

    async def __call__(self, queue_id: UUID) -> QueueWithStats:
        queue = await self._queues.get_queue(queue_id)
        if queue is None:
            raise QueueNotFound(queue_id)
        priorities = await self._state.read_state(queue_id)
        if not priorities:  # deleted between the two reads
            raise QueueNotFound(queue_id)
        return QueueWithStats(queue, QueueStats.combine(priorities))
