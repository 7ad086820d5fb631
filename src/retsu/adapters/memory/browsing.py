"""Browsing messages without claiming them (``MessageBrowser``, SPEC §3.6): the twin of
``adapters/postgres/browsing.py``."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from retsu.adapters.memory.tables import (
    MemoryTables,
    State,
    StoredMessage,
)
from retsu.domain.audit import AuditEntry
from retsu.domain.browsing import (
    BrowseState,
    MessageBatch,
    MessagePosition,
    logical_state,
)
from retsu.domain.browsing import (
    StoredMessage as BrowsedMessage,
)
from retsu.domain.errors import (
    QueueNotFound,
)
from retsu.domain.message import (
    Priority,
)
from retsu.domain.queue import Queue


class BrowsingPart(MemoryTables):
    """Implements MessageBrowser over the tables."""

    # No scan budget here: the in-memory store has no index walk to bound, so a page is
    # never cut short (the PostgreSQL adapter's budget is tested against PostgreSQL).

    def _browsed(
        self, message: StoredMessage, queue: Queue, now: datetime
    ) -> BrowsedMessage | None:
        state = logical_state(
            leased=message.state is State.IN_FLIGHT,
            available_after=message.available_after,
            expires_at=message.expires_at,
            delivery_attempts=message.delivery_attempts,
            max_delivery_attempts=queue.settings.max_delivery_attempts,
            now=now,
        )
        if state is None:
            return None
        return BrowsedMessage(
            id=message.id,
            payload=message.payload,
            priority=message.priority,
            state=state,
            delivery_attempts=message.delivery_attempts,
            enqueued_at=message.enqueued_at,
            expires_at=message.expires_at,
            available_at=message.available_after,
            last_delivered_at=message.last_delivered_at,
            redriven_from=message.redriven_from,
            group=message.group,
            schedule_id=message.schedule_id,
            enqueue_order=message.enqueue_order,
        )

    @staticmethod
    def _browse_key(
        state: BrowseState | None, priority: int, at: datetime, order: int
    ) -> tuple[object, ...]:
        if state is None:
            return (order,)
        if state is BrowseState.READY:
            return (-priority, order)
        return (at, order)

    async def list_messages(
        self,
        queue_id: UUID,
        *,
        state: BrowseState | None,
        priority: Priority | None,
        limit: int,
        after: MessagePosition | None,
    ) -> MessageBatch:
        queue = self._queues.get(queue_id)
        if queue is None:
            raise QueueNotFound(queue_id)
        now = self._clock.now()
        boundary = None
        if after is not None:
            boundary = self._browse_key(
                state,
                int(after.priority or 0),
                after.at or now,
                after.enqueue_order,
            )
        found = []
        for message in self._messages[queue_id].values():
            browsed = self._browsed(message, queue, now)
            if browsed is None or (state is not None and browsed.state is not state):
                continue
            if priority is not None and message.priority is not priority:
                continue
            key = self._browse_key(
                state, int(message.priority), message.available_after, message.enqueue_order
            )
            if boundary is None or key > boundary:
                found.append((key, browsed))
        found.sort(key=lambda pair: pair[0])
        return MessageBatch([browsed for _, browsed in found[:limit]])

    async def get_message(self, queue_id: UUID, message_id: UUID) -> BrowsedMessage | None:
        queue = self._queues.get(queue_id)
        if queue is None:
            raise QueueNotFound(queue_id)
        message = self._messages[queue_id].get(message_id)
        return None if message is None else self._browsed(message, queue, self._clock.now())

    async def delete_message(self, queue_id: UUID, message_id: UUID, audit: AuditEntry) -> bool:
        if await self.get_message(queue_id, message_id) is None:  # raises QueueNotFound
            return False
        del self._messages[queue_id][message_id]
        self._write_audit(audit)
        return True
