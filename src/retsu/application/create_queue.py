"""Use case: create a queue."""

from __future__ import annotations

from dataclasses import dataclass, field

from retsu.application.ports import Clock, IdGenerator, QueueDetails, QueueNames, QueueRepository
from retsu.domain.audit import AuditAction, AuditEntry, Caller
from retsu.domain.queue import Queue, QueueSettings, validate_queue_name


@dataclass(frozen=True, slots=True)
class CreateQueueCommand:
    name: str
    visibility_timeout_seconds: int | None = None
    max_delivery_attempts: int | None = None
    default_message_ttl_seconds: int | None = None
    caller: Caller = field(default_factory=Caller)


class CreateQueue:
    def __init__(
        self,
        queues: QueueRepository,
        details: QueueDetails,
        names: QueueNames,
        ids: IdGenerator,
        clock: Clock,
    ) -> None:
        self._queues = queues
        self._details = details
        self._names = names
        self._ids = ids
        self._clock = clock

    async def __call__(self, cmd: CreateQueueCommand) -> Queue:
        name = validate_queue_name(cmd.name)
        settings = QueueSettings.from_optional(
            visibility_timeout_seconds=cmd.visibility_timeout_seconds,
            max_delivery_attempts=cmd.max_delivery_attempts,
            default_message_ttl_seconds=cmd.default_message_ttl_seconds,
        )
        now = self._clock.now()
        queue_id = self._ids.new_id()
        audit = AuditEntry.of_queue(
            AuditAction.QUEUE_CREATED,
            queue_id,
            cmd.caller,
            name=name,
            visibility_timeout_seconds=settings.visibility_timeout_seconds,
            max_delivery_attempts=settings.max_delivery_attempts,
            default_message_ttl_seconds=settings.default_message_ttl_seconds,
        )
        queue = await self._queues.add_queue(
            Queue(
                id=queue_id,
                name=name,
                settings=settings,
                paused=False,
                created_at=now,
                updated_at=now,
            ),
            audit,
        )
        # Write order: database, then shared cache, then local cache. A fresh queue
        # may have a negative entry in the shared cache from a lookup a moment ago.
        await self._details.remember(queue)
        await self._names.remember(queue)
        return queue
