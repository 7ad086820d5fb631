"""Dead letters in memory (``DeadLetterRepository``): the twin of
``adapters/postgres/dead_letters.py``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from uuid import UUID

from retsu.adapters.memory.tables import (
    MemoryTables,
    State,
    StoredDeadLetter,
    StoredMessage,
)
from retsu.domain.audit import AuditEntry
from retsu.domain.message import (
    DeadLetter,
)
from retsu.domain.pagination import DeadLetterPosition
from retsu.domain.queue import Queue


class DeadLettersPart(MemoryTables):
    """Implements DeadLetterRepository over the tables."""

    def _dead_letters_newest_first(self, queue_id: UUID) -> list[StoredDeadLetter]:
        records = self._dead_letters.get(queue_id, {}).values()
        return sorted(
            records, key=lambda r: (r.record.dead_lettered_at, r.enqueue_order), reverse=True
        )

    async def list_dead_letters(
        self, queue_id: UUID, *, limit: int, after: DeadLetterPosition | None
    ) -> list[tuple[DeadLetter, DeadLetterPosition]]:
        records = self._dead_letters_newest_first(queue_id)
        if after is not None:
            boundary = (after.dead_lettered_at, after.enqueue_order)
            records = [
                r for r in records if (r.record.dead_lettered_at, r.enqueue_order) < boundary
            ]
        return [(r.record, r.position) for r in records[:limit]]

    async def get_dead_letter(self, queue_id: UUID, message_id: UUID) -> DeadLetter | None:
        stored = self._dead_letters.get(queue_id, {}).get(message_id)
        return None if stored is None else stored.record

    def _redrive(self, queue: Queue, stored: StoredDeadLetter, new_id: UUID) -> None:
        del self._dead_letters[queue.id][stored.record.id]
        now = self._clock.now()
        self._messages[queue.id][new_id] = StoredMessage(
            id=new_id,
            queue_id=queue.id,
            enqueue_order=next(self._order),
            payload=stored.record.payload,
            priority=stored.record.priority,
            state=State.READY,
            enqueued_at=now,
            expires_at=now + timedelta(seconds=queue.settings.default_message_ttl_seconds),
            available_after=now,
            redriven_from=stored.record.id,
            group=stored.record.group,
        )
        self.totals[queue.id]["enqueued"] += 1

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
        self, queue_id: UUID, new_ids: Sequence[UUID], audit: AuditEntry
    ) -> int:
        queue = self._queues.get(queue_id)
        if queue is None:
            return 0
        oldest_first = list(reversed(self._dead_letters_newest_first(queue_id)))
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
