"""Use case: acknowledge deliveries (idempotent; a stale receipt removes nothing)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from uuid import UUID

from retsu.application.ports import MessageRepository, QueueEvents, QueueNames
from retsu.domain.message import Receipt


@dataclass(frozen=True, slots=True)
class AcknowledgeCommand:
    queue_id: UUID
    receipts: Sequence[Receipt]


class Acknowledge:
    def __init__(self, messages: MessageRepository, names: QueueNames, events: QueueEvents) -> None:
        self._messages = messages
        self._names = names
        self._events = events

    async def __call__(self, cmd: AcknowledgeCommand) -> int:
        name = await self._names.name_of(cmd.queue_id)  # raises QueueNotFound
        removed = await self._messages.acknowledge(cmd.queue_id, cmd.receipts)
        if removed:
            self._events.acknowledged(name, removed)
        return removed
