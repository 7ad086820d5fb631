"""Dead letters in memory (``DeadLetterRepository``): the twin of
``adapters/postgres/dead_letters.py``."""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from retsu.adapters.memory.messages import MessagesPart
from retsu.adapters.memory.tables import (
    StoredDeadLetter,
)
from retsu.domain.audit import AuditEntry
from retsu.domain.message import (
    DeadLetter,
    MessageToStore,
)
from retsu.domain.pagination import DeadLetterPosition, Found
from retsu.domain.queue import Queue
from retsu.domain.search import EVERYTHING, Search


class DeadLettersPart(MessagesPart):
    """Implements DeadLetterRepository over the tables."""

    def _dead_letters_newest_first(self, queue_id: UUID) -> list[StoredDeadLetter]:
        records = self._dead_letters.get(queue_id, {}).values()
        return sorted(
            records, key=lambda r: (r.record.dead_lettered_at, r.enqueue_order), reverse=True
        )

    def _searched(self, queue_id: UUID, search: Search) -> list[StoredDeadLetter]:
        """The records ``search`` admits, newest first."""
        return [
            r
            for r in self._dead_letters_newest_first(queue_id)
            if search.admits(
                priority=r.record.priority,
                group=r.record.group,
                payload=r.record.payload,
                reason=r.record.reason,
            )
        ]

    async def list_dead_letters(
        self,
        queue_id: UUID,
        *,
        limit: int,
        after: DeadLetterPosition | None,
        search: Search = EVERYTHING,
    ) -> Found[DeadLetter, DeadLetterPosition]:
        # No scan budget here (nothing to bound in memory): a page is never cut short.
        records = self._searched(queue_id, search)
        if after is not None:
            boundary = (after.dead_lettered_at, after.enqueue_order)
            records = [
                r for r in records if (r.record.dead_lettered_at, r.enqueue_order) < boundary
            ]
        return Found([(r.record, r.position) for r in records[:limit]])

    async def get_dead_letter(self, queue_id: UUID, message_id: UUID) -> DeadLetter | None:
        stored = self._dead_letters.get(queue_id, {}).get(message_id)
        return None if stored is None else stored.record

    def _redrive(self, queue: Queue, stored: StoredDeadLetter, new_id: UUID) -> None:
        """Back onto its queue as a fresh message (attempts 0, the queue's default lifetime,
        its priority and group), through the same path as an enqueue."""
        del self._dead_letters[queue.id][stored.record.id]
        record = stored.record
        self._store(
            queue,
            [MessageToStore(new_id, record.payload, record.priority, None, 0, record.group)],
            redriven_from=[record.id],
        )

    async def redrive_dead_letter(
        self, queue_id: UUID, message_id: UUID, new_id: UUID, audit: AuditEntry
    ) -> bool:
        queue = self._queues.get(queue_id)
        stored = self._dead_letters.get(queue_id, {}).get(message_id)
        if queue is None or stored is None:
            return False
        self._redrive(queue, stored, new_id)
        self._write_audit(audit)
        return True

    async def redrive_dead_letters(
        self,
        queue_id: UUID,
        new_ids: Sequence[UUID],
        audit: AuditEntry,
        search: Search = EVERYTHING,
    ) -> int:
        queue = self._queues.get(queue_id)
        if queue is None:
            return 0
        oldest_first = list(reversed(self._searched(queue_id, search)))
        moved = list(zip(oldest_first, new_ids, strict=False))
        for stored, new_id in moved:
            self._redrive(queue, stored, new_id)
        self._write_audit(
            audit.with_details(
                redriven=len(moved),
                new_message_ids={str(stored.record.id): str(new_id) for stored, new_id in moved},
            )
        )
        return len(moved)

    async def delete_dead_letter(self, queue_id: UUID, message_id: UUID, audit: AuditEntry) -> bool:
        records = self._dead_letters.get(queue_id, {})
        if message_id not in records:
            return False
        del records[message_id]
        self._write_audit(audit)
        return True

    async def count_dead_letters(self, queue_id: UUID, search: Search, limit: int) -> int:
        return min(len(self._searched(queue_id, search)), limit)

    async def delete_dead_letters(
        self, queue_id: UUID, search: Search, limit: int, audit: AuditEntry
    ) -> int:
        doomed = list(reversed(self._searched(queue_id, search)))[:limit]
        for stored in doomed:
            del self._dead_letters[queue_id][stored.record.id]
        self._write_audit(audit.with_details(deleted=len(doomed)))
        return len(doomed)
