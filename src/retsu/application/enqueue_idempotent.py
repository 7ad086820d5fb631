"""Use case: add one message under an Idempotency-Key (SPEC §3.3).

A repeat of the key with the same message (within 24 h, in the same queue) answers
the first message's id and stores nothing, also when the repeats race and after the
message was consumed; the key with a different message is a conflict.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from retsu.application.ports import IdGenerator, MessageRepository, QueueDetails, QueueEvents
from retsu.domain.idempotency import IdempotentEnqueued, fingerprint, validate_idempotency_key
from retsu.domain.message import NewMessage


@dataclass(frozen=True, slots=True)
class EnqueueIdempotentCommand:
    queue_id: UUID
    message: NewMessage
    idempotency_key: str


class EnqueueIdempotent:
    def __init__(
        self,
        messages: MessageRepository,
        details: QueueDetails,
        ids: IdGenerator,
        events: QueueEvents,
    ) -> None:
        self._messages = messages
        self._details = details
        self._ids = ids
        self._events = events

    async def __call__(self, cmd: EnqueueIdempotentCommand) -> IdempotentEnqueued:
        key = validate_idempotency_key(cmd.idempotency_key)
        queue = await self._details.details_of(cmd.queue_id)
        to_store = cmd.message.to_store(self._ids.new_id(), queue.settings)
        result = await self._messages.enqueue_idempotent(
            queue.id, to_store, key, fingerprint(cmd.message)
        )
        if not result.replayed:  # a replay stored nothing: nothing to count
            self._events.enqueued(queue.name, to_store.priority)
        return result
