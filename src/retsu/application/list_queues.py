"""Use case: list queues by name in byte order, a page at a time."""

from __future__ import annotations

from dataclasses import dataclass

from retsu.application.ports import QueueRepository, ServerSecrets
from retsu.domain.cursor import (
    DEFAULT_LIST_LIMIT,
    LIST_LIMIT,
    CursorKind,
    Page,
    QueuePosition,
    open_cursor,
    seal_cursor,
)
from retsu.domain.queue import Queue, is_valid_queue_name


@dataclass(frozen=True, slots=True)
class ListQueuesQuery:
    limit: int = DEFAULT_LIST_LIMIT
    cursor: str | None = None
    # An exact name; a malformed one is invalid_queue_name (it could never match).
    name: str | None = None


class ListQueues:
    def __init__(self, queues: QueueRepository, secrets: ServerSecrets) -> None:
        self._queues = queues
        self._secrets = secrets

    async def __call__(self, query: ListQueuesQuery) -> Page[Queue]:
        limit = LIST_LIMIT.check(query.limit)
        name = query.name
        if name is not None and not is_valid_queue_name(name):
            # No queue can have this name: an exact-name filter matches nothing.
            return Page(items=[], next_cursor=None)
        scope: list[str | None] = [name]
        after = None
        if query.cursor is not None:
            key = await self._secrets.cursor_signing_key()
            after = QueuePosition.read(open_cursor(key, CursorKind.QUEUES, scope, query.cursor))
        # One more than asked tells whether another page exists, so a next_cursor never
        # leads to an empty page.
        queues = await self._queues.list_queues(limit=limit + 1, after=after, name=name)
        next_cursor = None
        if len(queues) > limit:
            queues = queues[:limit]
            key = await self._secrets.cursor_signing_key()
            position = QueuePosition(queues[-1].name).seal()
            next_cursor = seal_cursor(key, CursorKind.QUEUES, scope, position)
        return Page(queues, next_cursor)
