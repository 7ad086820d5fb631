"""Use case: delete one dead-letter record."""

from __future__ import annotations

from dataclasses import dataclass, field
from uuid import UUID

from retsu.application.ports import DeadLetterRepository, QueueDetails
from retsu.domain.audit import AuditAction, AuditEntry, Caller
from retsu.domain.errors import DeadLetterNotFound


@dataclass(frozen=True, slots=True)
class DeleteDeadLetterCommand:
    queue_id: UUID
    message_id: UUID
    caller: Caller = field(default_factory=Caller)


class DeleteDeadLetter:
    def __init__(self, dead_letters: DeadLetterRepository, details: QueueDetails) -> None:
        self._dead_letters = dead_letters
        self._details = details

    async def __call__(self, cmd: DeleteDeadLetterCommand) -> None:
        await self._details.details_of(cmd.queue_id)  # raises QueueNotFound
        audit = AuditEntry.of_dead_letter(
            AuditAction.DEAD_LETTER_DELETED, cmd.queue_id, cmd.message_id, cmd.caller
        )
        if not await self._dead_letters.delete_dead_letter(cmd.queue_id, cmd.message_id, audit):
            raise DeadLetterNotFound(cmd.message_id)
