"""Use case: change a queue's settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from uuid import UUID

from retsu.application.ports import QueueDetails, QueueNames, QueueRepository
from retsu.domain.audit import AuditAction, AuditEntry, Caller
from retsu.domain.errors import QueueNotFound
from retsu.domain.queue import Queue, QueueSettingsUpdate


@dataclass(frozen=True, slots=True)
class UpdateQueueCommand:
    queue_id: UUID
    visibility_timeout_seconds: int | None = None
    max_delivery_attempts: int | None = None
    default_message_ttl_seconds: int | None = None
    caller: Caller = field(default_factory=Caller)


class UpdateQueue:
    def __init__(self, queues: QueueRepository, details: QueueDetails, names: QueueNames) -> None:
        self._queues = queues
        self._details = details
        self._names = names

    async def __call__(self, cmd: UpdateQueueCommand) -> Queue:
        update = QueueSettingsUpdate(
            visibility_timeout_seconds=cmd.visibility_timeout_seconds,
            max_delivery_attempts=cmd.max_delivery_attempts,
            default_message_ttl_seconds=cmd.default_message_ttl_seconds,
        ).require_change()
        audit = AuditEntry.of_queue(
            AuditAction.QUEUE_UPDATED, cmd.queue_id, cmd.caller, changes=update.changes()
        )
        queue = await self._queues.update_queue(cmd.queue_id, update, audit)
        if queue is None:
            raise QueueNotFound(cmd.queue_id)
        # Database first (done), then the shared cache, then the local one; the
        # caches swallow their own failures so a committed write never fails here.
        await self._details.remember(queue)
        await self._names.remember(queue)
        return queue
