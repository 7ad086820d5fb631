"""Use case: read one dead-letter record."""

from __future__ import annotations

from uuid import UUID

from retsu.application.ports import DeadLetterRepository, QueueDetails
from retsu.domain.errors import DeadLetterNotFound
from retsu.domain.message import DeadLetter


class GetDeadLetter:
    def __init__(self, dead_letters: DeadLetterRepository, details: QueueDetails) -> None:
        self._dead_letters = dead_letters
        self._details = details

    async def __call__(self, queue_id: UUID, message_id: UUID) -> DeadLetter:
        await self._details.details_of(queue_id)  # raises QueueNotFound
        record = await self._dead_letters.get_dead_letter(queue_id, message_id)
        if record is None:
            raise DeadLetterNotFound(message_id)
        return record
