"""Long-poll announcements as typed decorators of the storage ports.

After a committed change that can make a message deliverable, the queue is announced,
so polls waiting on it (in this process, and through NOTIFY in the others) claim again
at once instead of at their next one-second re-check. Each decorator implements its
port and delegates every method; only the methods below announce, and only when the
change happened:

* ``enqueue`` always, ``enqueue_idempotent`` unless it was a replay;
* ``change_visibility`` when it released the lease now (timeout 0) — a lease shortened
  to a later moment is noticed by the waiters' re-check;
* ``redrive_dead_letter`` / ``redrive_dead_letters`` when something moved.

Queue changes (a resume, a pause, a delete) are announced by PostgreSQL itself
(migration 0004's trigger), so there is no decorator for the queue port here.
"""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from retsu.adapters.signals import Announcer
from retsu.application.ports import DeadLetterRepository, MessageRepository
from retsu.domain.audit import AuditEntry
from retsu.domain.cursor import DeadLetterPosition
from retsu.domain.idempotency import IdempotentEnqueued
from retsu.domain.message import DeadLetter, DequeueResult, MessageToStore, Receipt


class AnnouncingMessages:
    """MessageRepository that announces the queue after an enqueue or a released lease."""

    def __init__(self, messages: MessageRepository, announcer: Announcer) -> None:
        self._messages = messages
        self._announcer = announcer

    async def enqueue(self, queue_id: UUID, messages: Sequence[MessageToStore]) -> None:
        await self._messages.enqueue(queue_id, messages)
        self._announcer.announce(queue_id)

    async def dequeue(
        self,
        queue_id: UUID,
        *,
        limit: int,
        visibility_timeout_seconds: int | None,
        dead_letter_batch_size: int,
    ) -> DequeueResult:
        return await self._messages.dequeue(
            queue_id,
            limit=limit,
            visibility_timeout_seconds=visibility_timeout_seconds,
            dead_letter_batch_size=dead_letter_batch_size,
        )

    async def acknowledge(self, queue_id: UUID, receipts: Sequence[Receipt]) -> int:
        return await self._messages.acknowledge(queue_id, receipts)

    async def enqueue_idempotent(
        self, queue_id: UUID, message: MessageToStore, key: str, fingerprint: bytes
    ) -> IdempotentEnqueued:
        result = await self._messages.enqueue_idempotent(queue_id, message, key, fingerprint)
        if not result.replayed:
            self._announcer.announce(queue_id)
        return result

    async def change_visibility(
        self, queue_id: UUID, receipt: Receipt, visibility_timeout_seconds: int
    ) -> bool:
        changed = await self._messages.change_visibility(
            queue_id, receipt, visibility_timeout_seconds
        )
        if changed and visibility_timeout_seconds == 0:
            self._announcer.announce(queue_id)
        return changed


class AnnouncingDeadLetters:
    """DeadLetterRepository that announces the queue after a redrive moved something."""

    def __init__(self, dead_letters: DeadLetterRepository, announcer: Announcer) -> None:
        self._dead_letters = dead_letters
        self._announcer = announcer

    async def list_dead_letters(
        self, queue_id: UUID, *, limit: int, after: DeadLetterPosition | None
    ) -> list[tuple[DeadLetter, DeadLetterPosition]]:
        return await self._dead_letters.list_dead_letters(queue_id, limit=limit, after=after)

    async def get_dead_letter(self, queue_id: UUID, message_id: UUID) -> DeadLetter | None:
        return await self._dead_letters.get_dead_letter(queue_id, message_id)

    async def redrive_dead_letter(
        self, queue_id: UUID, message_id: UUID, new_id: UUID, audit: AuditEntry
    ) -> bool:
        moved = await self._dead_letters.redrive_dead_letter(queue_id, message_id, new_id, audit)
        if moved:
            self._announcer.announce(queue_id)
        return moved

    async def redrive_dead_letters(
        self, queue_id: UUID, new_ids: Sequence[UUID], audit: AuditEntry
    ) -> int:
        moved = await self._dead_letters.redrive_dead_letters(queue_id, new_ids, audit)
        if moved:
            self._announcer.announce(queue_id)
        return moved

    async def delete_dead_letter(self, queue_id: UUID, message_id: UUID, audit: AuditEntry) -> bool:
        return await self._dead_letters.delete_dead_letter(queue_id, message_id, audit)
