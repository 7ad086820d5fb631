"""Use case: add messages to a queue (one, or a batch that is all-or-nothing)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from uuid import UUID

from retsu.application.ports import (
    IdGenerator,
    MessageRepository,
    QueueDetails,
    QueueEvents,
    QueueNames,
)
from retsu.domain.errors import InvalidInput
from retsu.domain.message import MessageToStore, NewMessage


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
        names: QueueNames | None = None,
    ) -> None:
        self._messages = messages
        self._details = details
        self._ids = ids
        self._events = events
        self._names = names

    async def __call__(self, cmd: EnqueueCommand) -> list[UUID]:
        if self._names is not None and not any(m.needs_queue_settings for m in cmd.messages):
            return await self._enqueue_by_name(cmd, self._names)
        # The queue's settings come through the caches: enqueue never reads the
        # queue table itself on a warm path.
        queue = await self._details.details_of(cmd.queue_id)
        to_store = []
        ids = self._ids.new_ids(len(cmd.messages))
        for index, (message, new_id) in enumerate(zip(cmd.messages, ids, strict=True)):
            try:
                to_store.append(message.to_store(new_id, queue.settings))
            except InvalidInput as error:
                if cmd.batch:
                    raise InvalidInput(
                        f"messages[{index}]: {error.detail}", code=error.code
                    ) from None
                raise
        await self._messages.enqueue(queue.id, to_store)
        self._count(queue.name, to_store)
        return [m.id for m in to_store]

    async def _enqueue_by_name(self, cmd: EnqueueCommand, names: QueueNames) -> list[UUID]:
        """No message needs the queue's settings (none has a delay without a lifetime of
        its own): the queue's name (for the metrics; an in-process cache on a warm path)
        is all this looks up, and storage fills in the default lifetime where none is
        given. Measured: a shared-cache round trip less per enqueue (docs/performance.md)."""
        name = await names.name_of(cmd.queue_id)  # raises QueueNotFound
        to_store = []
        ids = self._ids.new_ids(len(cmd.messages))
        for index, (message, new_id) in enumerate(zip(cmd.messages, ids, strict=True)):
            try:
                to_store.append(message.to_store_with_default_lifetime(new_id))
            except InvalidInput as error:
                if cmd.batch:
                    raise InvalidInput(
                        f"messages[{index}]: {error.detail}", code=error.code
                    ) from None
                raise
        await self._messages.enqueue(cmd.queue_id, to_store)
        self._count(name, to_store)
        return [m.id for m in to_store]

    def _count(self, queue_name: str, stored: Sequence[MessageToStore]) -> None:
        for priority, count in Counter(m.priority for m in stored).items():
            self._events.enqueued(queue_name, priority, count)
