"""Queue metadata in memory (``QueueRepository``): the twin of ``adapters/postgres/queues.py``."""

from __future__ import annotations

from dataclasses import replace
from uuid import UUID

from retsu.adapters.memory.lanes import LanesPart
from retsu.adapters.memory.tables import (
    State,
)
from retsu.domain.audit import AuditEntry
from retsu.domain.errors import (
    QueueAlreadyExists,
)
from retsu.domain.pagination import QueuePosition
from retsu.domain.queue import KEEP, Queue, QueueSettingsUpdate


class QueuesPart(LanesPart):
    """Implements QueueRepository over the tables."""

    async def add_queue(self, queue: Queue, audit: AuditEntry) -> Queue:
        if any(q.name == queue.name for q in self._queues.values()):
            raise QueueAlreadyExists(queue.name)
        now = self._clock.now()
        stored = replace(queue, created_at=now, updated_at=now)
        self._queues[queue.id] = stored
        self._messages[queue.id] = {}
        self._dead_letters[queue.id] = {}
        self._write_audit(audit)
        return stored

    async def get_queue(self, queue_id: UUID) -> Queue | None:
        return self._queues.get(queue_id)

    async def update_queue(
        self, queue_id: UUID, update: QueueSettingsUpdate, audit: AuditEntry
    ) -> Queue | None:
        queue = self._queues.get(queue_id)
        if queue is None:
            return None
        now = self._clock.now()
        queue = replace(queue, settings=update.apply_to(queue.settings), updated_at=now)
        self._queues[queue_id] = queue
        # As the PostgreSQL twin: a new or changed bucket starts full; a raised
        # group_max_in_flight gives each lane with room its next message now.
        if update.rate_limit is not KEEP:
            self._buckets.pop(queue_id, None)
        if update.group_rate_limit is not KEEP:
            for message in self._messages[queue_id].values():
                if message.state is State.THROTTLED and message.available_after > now:
                    message.available_after = now
            for (owner, _), lane in self._groups.items():
                if owner == queue_id:
                    lane.tokens = lane.tokens_at = None
        if update.group_max_in_flight is not KEEP:
            for (owner, group), lane in sorted(self._groups.items()):
                if owner == queue_id:
                    self._promote(queue, group, lane, now)
        self._write_audit(audit)
        return queue

    async def set_paused(self, queue_id: UUID, paused: bool, audit: AuditEntry) -> Queue | None:
        queue = self._queues.get(queue_id)
        if queue is None:
            return None
        queue = replace(queue, paused=paused, updated_at=self._clock.now())
        self._queues[queue_id] = queue
        self._write_audit(audit)
        return queue

    async def list_queues(
        self, *, limit: int, after: QueuePosition | None, name: str | None
    ) -> list[Queue]:
        # Byte order of the UTF-8 name, as PostgreSQL's COLLATE "C".
        after_key = None if after is None else after.name.encode()
        chosen = sorted(
            (
                q
                for q in self._queues.values()
                if (name is None or q.name == name)
                and (after_key is None or q.name.encode() > after_key)
            ),
            key=lambda q: q.name.encode(),
        )
        return chosen[:limit]

    async def purge_queue(self, queue_id: UUID, audit: AuditEntry) -> int | None:
        stored = self._messages.get(queue_id)
        if stored is None:
            return None
        # Every live message; completed ones are not live and stay (SPEC §3.11).
        doomed = [m for m in stored.values() if m.state is not State.COMPLETED]
        changes = []
        for message in doomed:
            del stored[message.id]
            change = self._lane_state_change(message)
            if change is not None:
                changes.append(change)
        self._lanes_changed(self._queues[queue_id], changes)
        self._write_audit(audit.with_details(purged=len(doomed)))
        return len(doomed)

    async def delete_queue(self, queue_id: UUID, audit: AuditEntry) -> bool:
        queue = self._queues.pop(queue_id, None)
        if queue is None:
            return False
        messages = len(self._messages[queue_id])
        dead_letters = len(self._dead_letters[queue_id])
        self._forget_queue(queue_id)
        self._write_audit(
            audit.with_details(name=queue.name, messages=messages, dead_letters=dead_letters)
        )
        return True
