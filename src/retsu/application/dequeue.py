"""Use case: claim the next deliverable message(s) of a queue."""

from __future__ import annotations

from dataclasses import dataclass, field
from uuid import UUID

from retsu.application.ports import MessageRepository, QueueDetails, QueueEvents
from retsu.domain.dequeue import DequeueOptions
from retsu.domain.message import DEAD_LETTER_BATCH_SIZE, DeliveredMessage


@dataclass(frozen=True, slots=True)
class DequeueCommand:
    queue_id: UUID
    options: DequeueOptions = field(default_factory=DequeueOptions)


class Dequeue:
    def __init__(
        self, messages: MessageRepository, details: QueueDetails, events: QueueEvents
    ) -> None:
        self._messages = messages
        self._details = details
        self._events = events

    async def __call__(self, cmd: DequeueCommand) -> list[DeliveredMessage]:
        queue = await self._details.details_of(cmd.queue_id)
        if queue.paused:
            return []
        result = await self._messages.dequeue(
            queue.id,
            limit=cmd.options.limit,
            visibility_timeout_seconds=(
                cmd.options.visibility_timeout_seconds or queue.settings.visibility_timeout_seconds
            ),
            max_delivery_attempts=queue.settings.max_delivery_attempts,
            dead_letter_batch_size=DEAD_LETTER_BATCH_SIZE,
        )
        if result.dead_lettered:
            self._events.dead_lettered(queue.name, result.dead_lettered)
        return result.messages
