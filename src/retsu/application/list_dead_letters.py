"""Use case: browse a queue's dead letters, newest first, a page at a time.

The dead-letter use cases check that the queue exists through the details lookup (the
shared cache, then PostgreSQL), never through the per-process name cache: a queue
deleted through another API process must answer 404 here at once, and these operator
routes are not hot paths.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from retsu.application.ports import DeadLetterRepository, QueueDetails, ServerSecrets
from retsu.domain.cursor import (
    DEFAULT_LIST_LIMIT,
    LIST_LIMIT,
    CursorKind,
    DeadLetterPosition,
    Page,
    open_cursor,
    seal_cursor,
)
from retsu.domain.message import DeadLetter


@dataclass(frozen=True, slots=True)
class ListDeadLettersQuery:
    queue_id: UUID
    limit: int = DEFAULT_LIST_LIMIT
    cursor: str | None = None


class ListDeadLetters:
    def __init__(
        self, dead_letters: DeadLetterRepository, details: QueueDetails, secrets: ServerSecrets
    ) -> None:
        self._dead_letters = dead_letters
        self._details = details
        self._secrets = secrets

    async def __call__(self, query: ListDeadLettersQuery) -> Page[DeadLetter]:
        limit = LIST_LIMIT.check(query.limit)
        # A cursor is bound to its queue: one from another queue is invalid_cursor.
        scope = [str(query.queue_id)]
        after = None
        if query.cursor is not None:
            key = await self._secrets.cursor_signing_key()
            after = DeadLetterPosition.read(
                open_cursor(key, CursorKind.DEAD_LETTERS, scope, query.cursor)
            )
        await self._details.details_of(query.queue_id)  # raises QueueNotFound
        rows = await self._dead_letters.list_dead_letters(
            query.queue_id, limit=limit + 1, after=after
        )
        next_cursor = None
        if len(rows) > limit:
            rows = rows[:limit]
            key = await self._secrets.cursor_signing_key()
            next_cursor = seal_cursor(key, CursorKind.DEAD_LETTERS, scope, rows[-1][1].seal())
        return Page([record for record, _ in rows], next_cursor)
