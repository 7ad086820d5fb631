"""Use case: remove every live message of a queue (dead letters stay)."""

from __future__ import annotations

from dataclasses import dataclass, field
from uuid import UUID

from retsu.application.ports import QueueRepository
from retsu.domain.audit import AuditAction, AuditEntry, Caller
from retsu.domain.errors import QueueNotFound


@dataclass(frozen=True, slots=True)
class PurgeQueueCommand:
    queue_id: UUID
    caller: Caller = field(default_factory=Caller)


class PurgeQueue:
    def __init__(self, queues: QueueRepository) -> None:
        self._queues = queues

    async def __call__(self, cmd: PurgeQueueCommand) -> int:
        audit = AuditEntry.of_queue(AuditAction.QUEUE_PURGED, cmd.queue_id, cmd.caller)
        purged = await self._queues.purge_queue(cmd.queue_id, audit)
        if purged is None:
            raise QueueNotFound(cmd.queue_id)
        return purged
