"""Use case: add messages to a queue (one, or a batch that is all-or-nothing)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from uuid import UUID

from retsu.application.ports import IdGenerator, MessageRepository, QueueDetails, QueueEvents
from retsu.domain.errors import InvalidInput
from retsu.domain.message import NewMessage


@dataclass(frozen=True, slots=True)
class EnqueueCommand:
    queue_id: UUID
    messages: Sequence[NewMessage]
    # A batch request names the failing entry's index even when it holds one entry.
    batch: bool = False


class Enqueue:
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

    async def __call__(self, cmd: EnqueueCommand) -> list[UUID]:
        # The queue's settings come through the caches: enqueue never reads the
        # queue table itself on a warm path.
        queue = await self._details.details_of(cmd.queue_id)
        to_store = []
        for index, message in enumerate(cmd.messages):
            try:
                to_store.append(message.to_store(self._ids.new_id(), queue.settings))
            except InvalidInput as error:
                if cmd.batch:
                    raise InvalidInput(
                        f"messages[{index}]: {error.detail}", code=error.code
                    ) from None
                raise
        await self._messages.enqueue(queue.id, to_store)
        for priority, count in Counter(m.priority for m in to_store).items():
            self._events.enqueued(queue.name, priority, count)
        return [m.id for m in to_store]
