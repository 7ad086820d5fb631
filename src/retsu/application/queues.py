"""Queues: create, change, pause, resume, purge, delete, and read them (SPEC §3.2).

Every change writes storage first (with its audit row, in the same transaction), then the
shared cache, then the local one; the caches swallow their own failures so a committed
write never fails here. A pause, a resume or a delete is announced to the long polls as a
change of the queue itself (a resume wakes them, a pause makes them read the queue again,
a delete makes them answer 404 at once).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from retsu.application.ports import (
    Clock,
    IdGenerator,
    MessageSignals,
    QueueDetails,
    QueueNames,
    QueueRepository,
    QueueStateReader,
)
from retsu.domain.audit import AuditAction, AuditEntry, Caller
from retsu.domain.errors import QueueNotFound
from retsu.domain.pagination import DEFAULT_LIST_LIMIT, LIST_LIMIT, Page, QueuePosition
from retsu.domain.queue import (
    Queue,
    QueueSettings,
    QueueSettingsUpdate,
    is_valid_queue_name,
    validate_queue_name,
)
from retsu.domain.state import QueueStats


@dataclass(frozen=True, slots=True, init=False)
class CreateQueueCommand:
    """A new queue: its name and the settings the request gives (absent or None: the
    default; rate limits as ``{"per_second", "burst"?}`` or ``RateLimit``)."""

    name: str
    settings: Mapping[str, Any]
    caller: Caller

    def __init__(self, name: str, *, caller: Caller | None = None, **settings: Any) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "settings", settings)
        object.__setattr__(self, "caller", caller or Caller())


@dataclass(frozen=True, slots=True, init=False)
class UpdateQueueCommand:
    """A settings change: only the settings the request gives (None removes a limit)."""

    queue_id: UUID
    changes: Mapping[str, Any]
    caller: Caller

    def __init__(self, queue_id: UUID, *, caller: Caller | None = None, **changes: Any) -> None:
        object.__setattr__(self, "queue_id", queue_id)
        object.__setattr__(self, "changes", changes)
        object.__setattr__(self, "caller", caller or Caller())


@dataclass(frozen=True, slots=True)
class QueueCommand:
    """An action on one queue: pause, resume, purge, delete."""

    queue_id: UUID
    caller: Caller = field(default_factory=Caller)


@dataclass(frozen=True, slots=True)
class ListQueuesQuery:
    limit: int = DEFAULT_LIST_LIMIT
    # An exact name; one that is not a valid name matches nothing.
    name: str | None = None

    def __post_init__(self) -> None:
        LIST_LIMIT.check(self.limit)


@dataclass(frozen=True, slots=True)
class QueueWithStats:
    queue: Queue
    stats: QueueStats


class QueueService:
    def __init__(
        self,
        queues: QueueRepository,
        state: QueueStateReader,
        details: QueueDetails,
        names: QueueNames,
        ids: IdGenerator,
        clock: Clock,
        signals: MessageSignals,
    ) -> None:
        self._queues = queues
        self._state = state
        self._details = details
        self._names = names
        self._ids = ids
        self._clock = clock
        self._signals = signals

    async def create(self, cmd: CreateQueueCommand) -> Queue:
        name = validate_queue_name(cmd.name)
        settings = QueueSettings.from_optional(**cmd.settings)
        now = self._clock.now()
        queue_id = self._ids.new_id()
        audit = AuditEntry.of_queue(
            AuditAction.QUEUE_CREATED,
            queue_id,
            cmd.caller,
            name=name,
            **settings.as_dict(),
        )
        queue = await self._queues.add_queue(
            Queue(
                id=queue_id,
                name=name,
                settings=settings,
                paused=False,
                created_at=now,
                updated_at=now,
            ),
            audit,
        )
        # A fresh queue may have a negative entry in the shared cache from a lookup a
        # moment ago: remembering it replaces that.
        await self._remember(queue)
        return queue

    async def update(self, cmd: UpdateQueueCommand) -> Queue:
        update = QueueSettingsUpdate.parse(cmd.changes).require_change()
        audit = AuditEntry.of_queue(
            AuditAction.QUEUE_UPDATED, cmd.queue_id, cmd.caller, changes=update.changes()
        )
        queue = await self._queues.update_queue(cmd.queue_id, update, audit)
        if queue is None:
            raise QueueNotFound(cmd.queue_id)
        await self._remember(queue)
        return queue

    async def pause(self, cmd: QueueCommand) -> Queue:
        """While paused, dequeue finds nothing; enqueue, acknowledge and visibility changes
        still work."""
        return await self._set_paused(cmd, True, AuditAction.QUEUE_PAUSED)

    async def resume(self, cmd: QueueCommand) -> Queue:
        return await self._set_paused(cmd, False, AuditAction.QUEUE_RESUMED)

    async def _set_paused(self, cmd: QueueCommand, paused: bool, action: AuditAction) -> Queue:
        audit = AuditEntry.of_queue(action, cmd.queue_id, cmd.caller)
        queue = await self._queues.set_paused(cmd.queue_id, paused, audit)
        if queue is None:
            raise QueueNotFound(cmd.queue_id)
        self._signals.announce(queue.id, queue_changed=True)
        await self._remember(queue)
        return queue

    async def purge(self, cmd: QueueCommand) -> int:
        """Remove every live message (dead letters stay); how many."""
        audit = AuditEntry.of_queue(AuditAction.QUEUE_PURGED, cmd.queue_id, cmd.caller)
        purged = await self._queues.purge_queue(cmd.queue_id, audit)
        if purged is None:
            raise QueueNotFound(cmd.queue_id)
        return purged

    async def delete(self, cmd: QueueCommand) -> None:
        """The queue goes with its messages, dead letters and idempotency keys; its name is
        free again at once (a new queue of that name gets a new id)."""
        audit = AuditEntry.of_queue(AuditAction.QUEUE_DELETED, cmd.queue_id, cmd.caller)
        if not await self._queues.delete_queue(cmd.queue_id, audit):
            raise QueueNotFound(cmd.queue_id)
        self._signals.announce(cmd.queue_id, queue_changed=True)
        await self._details.forget(cmd.queue_id)
        await self._names.forget(cmd.queue_id)

    async def _remember(self, queue: Queue) -> None:
        await self._details.remember(queue)
        await self._names.remember(queue)

    async def get(self, queue_id: UUID) -> QueueWithStats:
        """The queue from storage (never a cache: this is the operator's view) and its
        exact state, read at a cost that does not grow with the backlog."""
        queue = await self._queues.get_queue(queue_id)
        if queue is None:
            raise QueueNotFound(queue_id)
        priorities = await self._state.read_state(queue_id)
        if not priorities:  # deleted between the two reads
            raise QueueNotFound(queue_id)
        return QueueWithStats(queue, QueueStats.combine(priorities))

    async def list(
        self, query: ListQueuesQuery, after: QueuePosition | None = None
    ) -> Page[Queue, QueuePosition]:
        """Queues by name in byte order, a page after ``after``."""
        if query.name is not None and not is_valid_queue_name(query.name):
            return Page(items=[], next=None)  # no queue can have this name
        # One more than asked tells whether another page exists, so a next position never
        # leads to an empty page.
        queues = await self._queues.list_queues(limit=query.limit + 1, after=after, name=query.name)
        if len(queues) > query.limit:
            queues = queues[: query.limit]
            return Page(queues, QueuePosition(queues[-1].name))
        return Page(queues, None)
