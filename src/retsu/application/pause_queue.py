"""Use cases: pause and resume a queue.

While paused, dequeue finds nothing (it reads ``paused`` through the details cache,
which is why the changed queue is remembered in both caches right after the write);
enqueue, acknowledge and visibility changes still work.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from uuid import UUID

from retsu.application.ports import QueueDetails, QueueNames, QueueRepository
from retsu.domain.audit import AuditAction, AuditEntry, Caller
from retsu.domain.errors import QueueNotFound
from retsu.domain.queue import Queue


@dataclass(frozen=True, slots=True)
class PauseQueueCommand:
    """Pause or resume one queue."""

    queue_id: UUID
    caller: Caller = field(default_factory=Caller)


class _SetPaused:
    _paused: bool
    _action: AuditAction

    def __init__(self, queues: QueueRepository, details: QueueDetails, names: QueueNames) -> None:
        self._queues = queues
        self._details = details
        self._names = names

    async def __call__(self, cmd: PauseQueueCommand) -> Queue:
        audit = AuditEntry.of_queue(self._action, cmd.queue_id, cmd.caller)
        queue = await self._queues.set_paused(cmd.queue_id, self._paused, audit)
        if queue is None:
            raise QueueNotFound(cmd.queue_id)
        # Database, then the shared cache, then the local one (as for an update).
        await self._details.remember(queue)
        await self._names.remember(queue)
        return queue


class PauseQueue(_SetPaused):
    _paused = True
    _action = AuditAction.QUEUE_PAUSED


class ResumeQueue(_SetPaused):
    _paused = False
    _action = AuditAction.QUEUE_RESUMED
