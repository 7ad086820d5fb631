"""Use case: put one dead letter back on its queue as a fresh message."""

from __future__ import annotations

from dataclasses import dataclass, field
from uuid import UUID

from retsu.application.ports import DeadLetterRepository, IdGenerator, QueueDetails, QueueEvents
from retsu.domain.audit import AuditAction, AuditEntry, Caller
from retsu.domain.errors import DeadLetterNotFound


@dataclass(frozen=True, slots=True)
class RedriveDeadLetterCommand:
    queue_id: UUID
    message_id: UUID
    caller: Caller = field(default_factory=Caller)


class RedriveDeadLetter:
    def __init__(
        self,
        dead_letters: DeadLetterRepository,
        details: QueueDetails,
        ids: IdGenerator,
        events: QueueEvents,
    ) -> None:
        self._dead_letters = dead_letters
        self._details = details
        self._ids = ids
        self._events = events

    async def __call__(self, cmd: RedriveDeadLetterCommand) -> UUID:
        """The new message's id (a new UUIDv7: attempts 0, the queue's default lifetime,
        the record's priority)."""
        name = (await self._details.details_of(cmd.queue_id)).name  # raises QueueNotFound
        new_id = self._ids.new_id()
        audit = AuditEntry.of_dead_letter(
            AuditAction.DEAD_LETTER_REDRIVEN,
            cmd.queue_id,
            cmd.message_id,
            cmd.caller,
            new_message_id=str(new_id),
        )
        if not await self._dead_letters.redrive_dead_letter(
            cmd.queue_id, cmd.message_id, new_id, audit
        ):
            raise DeadLetterNotFound(cmd.message_id)
        self._events.redriven(name)
        return new_id
