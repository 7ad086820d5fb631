"""Use case: delete a queue with its messages, dead letters and idempotency keys."""

from __future__ import annotations

from dataclasses import dataclass, field
from uuid import UUID

from retsu.application.ports import QueueDetails, QueueNames, QueueRepository
from retsu.domain.audit import AuditAction, AuditEntry, Caller
from retsu.domain.errors import QueueNotFound


@dataclass(frozen=True, slots=True)
class DeleteQueueCommand:
    queue_id: UUID
    caller: Caller = field(default_factory=Caller)


class DeleteQueue:
    def __init__(self, queues: QueueRepository, details: QueueDetails, names: QueueNames) -> None:
        self._queues = queues
        self._details = details
        self._names = names

    async def __call__(self, cmd: DeleteQueueCommand) -> None:
        audit = AuditEntry.of_queue(AuditAction.QUEUE_DELETED, cmd.queue_id, cmd.caller)
        if not await self._queues.delete_queue(cmd.queue_id, audit):
            raise QueueNotFound(cmd.queue_id)
        # Database first (done), then the shared cache, then the local one. The name is
        # free again at once: a new queue of that name gets a new id.
        await self._details.forget(cmd.queue_id)
        await self._names.forget(cmd.queue_id)
