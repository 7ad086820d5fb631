"""Queue lookups with no cache at all: every lookup reads the repository.

Used when both cache layers are disabled, and as the innermost layer that the
real caches decorate.
"""

from __future__ import annotations

from uuid import UUID

from retsu.application.ports import QueueDetails, QueueRepository
from retsu.domain.errors import QueueNotFound
from retsu.domain.queue import Queue


class RepositoryQueueDetails:
    def __init__(self, queues: QueueRepository) -> None:
        self._queues = queues

    async def details_of(self, queue_id: UUID) -> Queue:
        queue = await self._queues.get_queue(queue_id)
        if queue is None:
            raise QueueNotFound(queue_id)
        return queue

    async def remember(self, queue: Queue) -> None:
        return None

    async def forget(self, queue_id: UUID) -> None:
        return None


class DetailsQueueNames:
    """Names resolved through whatever details lookup sits below (the shared cache, or
    the repository directly). Remembering and forgetting are the details side's job."""

    def __init__(self, details: QueueDetails) -> None:
        self._details = details

    async def name_of(self, queue_id: UUID) -> str:
        return (await self._details.details_of(queue_id)).name

    async def remember(self, queue: Queue) -> None:
        return None

    async def forget(self, queue_id: UUID) -> None:
        return None
