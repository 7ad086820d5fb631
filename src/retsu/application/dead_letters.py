"""Dead letters: list, read, redrive (one, or a bounded batch oldest first), delete
(SPEC §3.4).

These check that the queue exists through the details lookup (the shared cache, then
PostgreSQL), never through the per-process name cache: a queue deleted through another
API process must answer 404 here at once, and these operator routes are not hot paths.
A redrive that moved something is announced to the long polls (a message is deliverable).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from retsu.application.ports import (
    DeadLetterRepository,
    IdGenerator,
    MessageSignals,
    QueueDetails,
    QueueEvents,
)
from retsu.domain.audit import AuditAction, AuditEntry, Caller
from retsu.domain.errors import DeadLetterNotFound
from retsu.domain.message import DEFAULT_REDRIVE_LIMIT, REDRIVE_LIMIT, DeadLetter
from retsu.domain.pagination import DEFAULT_LIST_LIMIT, LIST_LIMIT, DeadLetterPosition, Page
from retsu.domain.search import BULK_LIMIT, DEFAULT_BULK_LIMIT, EVERYTHING, BulkOutcome, Search


@dataclass(frozen=True, slots=True)
class ListDeadLettersQuery:
    queue_id: UUID
    limit: int = DEFAULT_LIST_LIMIT
    search: Search = EVERYTHING

    def __post_init__(self) -> None:
        LIST_LIMIT.check(self.limit)


@dataclass(frozen=True, slots=True)
class DeadLetterCommand:
    """An action on one record: redrive, delete."""

    queue_id: UUID
    message_id: UUID
    caller: Caller = field(default_factory=Caller)


@dataclass(frozen=True, slots=True)
class RedriveDeadLettersCommand:
    """A bulk redrive: up to ``limit`` records ``search`` admits, oldest first; ``dry_run``
    only counts them (SPEC §3.4, §3.11)."""

    queue_id: UUID
    limit: int = DEFAULT_REDRIVE_LIMIT
    caller: Caller = field(default_factory=Caller)
    search: Search = EVERYTHING
    dry_run: bool = False


@dataclass(frozen=True, slots=True)
class DeleteDeadLettersCommand:
    """A bulk delete: up to ``limit`` records ``search`` admits, oldest first; ``dry_run``
    only counts them (SPEC §3.11)."""

    queue_id: UUID
    search: Search = EVERYTHING
    limit: int = DEFAULT_BULK_LIMIT
    dry_run: bool = False
    caller: Caller = field(default_factory=Caller)

    def __post_init__(self) -> None:
        BULK_LIMIT.check(self.limit)


class DeadLetterService:
    def __init__(
        self,
        dead_letters: DeadLetterRepository,
        details: QueueDetails,
        ids: IdGenerator,
        events: QueueEvents,
        signals: MessageSignals,
    ) -> None:
        self._dead_letters = dead_letters
        self._details = details
        self._ids = ids
        self._events = events
        self._signals = signals

    async def list(
        self, query: ListDeadLettersQuery, after: DeadLetterPosition | None = None
    ) -> Page[DeadLetter, DeadLetterPosition]:
        """Newest first, a page after ``after``."""
        await self._details.details_of(query.queue_id)  # raises QueueNotFound
        found = await self._dead_letters.list_dead_letters(
            query.queue_id, limit=query.limit + 1, after=after, search=query.search
        )
        rows = found.items
        # A search may end a page short at its scan budget, with where to go on.
        next_position = found.resume_after
        if len(rows) > query.limit:
            rows = rows[: query.limit]
            next_position = rows[-1][1]
        return Page([record for record, _ in rows], next_position)

    async def get(self, queue_id: UUID, message_id: UUID) -> DeadLetter:
        await self._details.details_of(queue_id)  # raises QueueNotFound
        record = await self._dead_letters.get_dead_letter(queue_id, message_id)
        if record is None:
            raise DeadLetterNotFound(message_id)
        return record

    async def redrive(self, cmd: DeadLetterCommand) -> UUID:
        """Put one record back on its queue; the new message's id (a new UUIDv7: attempts
        0, the queue's default lifetime, the record's priority)."""
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
        self._signals.announce(cmd.queue_id)
        self._events.redriven(name)
        return new_id

    async def redrive_many(self, cmd: RedriveDeadLettersCommand) -> BulkOutcome:
        """Put up to ``limit`` records back, oldest first; how many went back (or, on a dry
        run, would). An action that moved none is still an action, and is audited as
        such."""
        limit = REDRIVE_LIMIT.check(cmd.limit)
        name = (await self._details.details_of(cmd.queue_id)).name  # raises QueueNotFound
        if cmd.dry_run:
            matched = await self._dead_letters.count_dead_letters(cmd.queue_id, cmd.search, limit)
            return BulkOutcome(matched, dry_run=True)
        new_ids = self._ids.new_ids(limit)
        details: dict[str, Any] = {"limit": limit}
        if cmd.search != EVERYTHING:
            details["filter"] = cmd.search.described()
        audit = AuditEntry.of_queue(
            AuditAction.DEAD_LETTER_REDRIVEN, cmd.queue_id, cmd.caller, **details
        )
        redriven = await self._dead_letters.redrive_dead_letters(
            cmd.queue_id, new_ids, audit, cmd.search
        )
        if redriven:
            self._signals.announce(cmd.queue_id)
            self._events.redriven(name, redriven)
        return BulkOutcome(redriven, dry_run=False)

    async def delete_many(self, cmd: DeleteDeadLettersCommand) -> BulkOutcome:
        """Delete (or, on a dry run, count) up to ``limit`` records the search admits; one
        audit row naming the filter and the count."""
        await self._details.details_of(cmd.queue_id)  # raises QueueNotFound
        if cmd.dry_run:
            matched = await self._dead_letters.count_dead_letters(
                cmd.queue_id, cmd.search, cmd.limit
            )
            return BulkOutcome(matched, dry_run=True)
        audit = AuditEntry.of_queue(
            AuditAction.DEAD_LETTER_DELETED,
            cmd.queue_id,
            cmd.caller,
            filter=cmd.search.described(),
            limit=cmd.limit,
        )
        deleted = await self._dead_letters.delete_dead_letters(
            cmd.queue_id, cmd.search, cmd.limit, audit
        )
        return BulkOutcome(deleted, dry_run=False)

    async def delete(self, cmd: DeadLetterCommand) -> None:
        await self._details.details_of(cmd.queue_id)  # raises QueueNotFound
        audit = AuditEntry.of_dead_letter(
            AuditAction.DEAD_LETTER_DELETED, cmd.queue_id, cmd.message_id, cmd.caller
        )
        if not await self._dead_letters.delete_dead_letter(cmd.queue_id, cmd.message_id, audit):
            raise DeadLetterNotFound(cmd.message_id)
