"""Use case: put a bounded batch of dead letters back on their queue, oldest first."""

from __future__ import annotations

from dataclasses import dataclass, field
from uuid import UUID

from retsu.application.ports import DeadLetterRepository, IdGenerator, QueueDetails, QueueEvents
from retsu.domain.audit import AuditAction, AuditEntry, Caller
from retsu.domain.message import DEFAULT_REDRIVE_LIMIT, REDRIVE_LIMIT


@dataclass(frozen=True, slots=True)
class RedriveDeadLettersCommand:
    queue_id: UUID
    limit: int = DEFAULT_REDRIVE_LIMIT
    caller: Caller = field(default_factory=Caller)


class RedriveDeadLetters:
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

    async def __call__(self, cmd: RedriveDeadLettersCommand) -> int:
        """How many records went back (oldest first); an action that moved none is
        still an action, and is audited as such."""
        limit = REDRIVE_LIMIT.check(cmd.limit)
        name = (await self._details.details_of(cmd.queue_id)).name  # raises QueueNotFound
        new_ids = self._ids.new_ids(limit)
        audit = AuditEntry.of_queue(
            AuditAction.DEAD_LETTER_REDRIVEN, cmd.queue_id, cmd.caller, limit=limit
        )
        redriven = await self._dead_letters.redrive_dead_letters(cmd.queue_id, new_ids, audit)
        if redriven:
            self._events.redriven(name, redriven)
        return redriven
