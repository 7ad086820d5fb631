"""An in-memory repository with exactly the PostgreSQL adapter's rules.

Time comes from an injected clock, so tests move time instead of sleeping. No
method awaits in the middle of a change, so each one is atomic on the event loop
just as each PostgreSQL method is one transaction.
"""

from __future__ import annotations

import enum
import itertools
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from uuid import UUID

from retsu.application.ports import Clock
from retsu.domain.errors import QueueAlreadyExists, QueueNotFound
from retsu.domain.maintenance import (
    NEVER_DELIVERED,
    PREVIOUSLY_DELIVERED,
    ExpiredMessages,
    PurgedDeadLetters,
)
from retsu.domain.message import (
    REASON_MAX_DELIVERY_ATTEMPTS_EXHAUSTED,
    DeadLetter,
    DeliveredMessage,
    DequeueResult,
    MessageToStore,
    Priority,
    Receipt,
)
from retsu.domain.queue import Queue, QueueSettingsUpdate
from retsu.domain.receipt import parse_receipt_handle
from retsu.domain.state import PriorityState


class State(enum.IntEnum):
    READY = 1
    IN_FLIGHT = 2


@dataclass(slots=True)
class StoredMessage:
    id: UUID
    queue_id: UUID
    enqueue_order: int
    payload: str
    priority: Priority
    state: State
    enqueued_at: datetime
    expires_at: datetime
    available_after: datetime
    delivery_attempts: int = 0
    receipt_handle: UUID | None = None
    last_delivered_at: datetime | None = None


@dataclass(slots=True)
class StoredDeadLetter:
    record: DeadLetter
    enqueue_order: int


def _age(now: datetime, moments: list[datetime]) -> float:
    return (now - min(moments)).total_seconds() if moments else 0.0


class InMemoryRepository:
    """Implements QueueRepository and MessageRepository."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._queues: dict[UUID, Queue] = {}
        self._messages: dict[UUID, dict[UUID, StoredMessage]] = {}
        self._dead_letters: dict[UUID, dict[UUID, StoredDeadLetter]] = {}
        self._order = itertools.count(1)

    # -- queues ---------------------------------------------------------------

    async def add_queue(self, queue: Queue) -> Queue:
        if any(q.name == queue.name for q in self._queues.values()):
            raise QueueAlreadyExists(queue.name)
        now = self._clock.now()
        stored = replace(queue, created_at=now, updated_at=now)
        self._queues[queue.id] = stored
        self._messages[queue.id] = {}
        self._dead_letters[queue.id] = {}
        return stored

    async def get_queue(self, queue_id: UUID) -> Queue | None:
        return self._queues.get(queue_id)

    async def update_queue(self, queue_id: UUID, update: QueueSettingsUpdate) -> Queue | None:
        queue = self._queues.get(queue_id)
        if queue is None:
            return None
        queue = replace(
            queue, settings=update.apply_to(queue.settings), updated_at=self._clock.now()
        )
        self._queues[queue_id] = queue
        return queue

    # -- messages -------------------------------------------------------------

    async def enqueue(self, queue_id: UUID, messages: Sequence[MessageToStore]) -> None:
        if queue_id not in self._queues:
            raise QueueNotFound(queue_id)
        now = self._clock.now()
        stored = self._messages[queue_id]
        if len({m.id for m in messages}) != len(messages) or any(m.id in stored for m in messages):
            # PostgreSQL refuses the whole batch on a primary-key violation; so do we.
            raise ValueError("a message with this id is already stored")
        for message in messages:
            stored[message.id] = StoredMessage(
                id=message.id,
                queue_id=queue_id,
                enqueue_order=next(self._order),
                payload=message.payload,
                priority=message.priority,
                state=State.READY,
                enqueued_at=now,
                expires_at=now + timedelta(seconds=message.ttl_seconds),
                available_after=now + timedelta(seconds=message.delay_seconds),
            )

    async def dequeue(
        self,
        queue_id: UUID,
        *,
        limit: int,
        visibility_timeout_seconds: int,
        max_delivery_attempts: int,
        dead_letter_batch_size: int,
    ) -> DequeueResult:
        stored = self._messages.get(queue_id)
        if stored is None:
            raise QueueNotFound(queue_id)
        now = self._clock.now()
        # Elapsed leases of unexpired messages, oldest lease end first, in two bounded
        # batches: exhausted ones go to dead-letter storage, retryable ones compete
        # with the ready messages (and go back to READY if they lose).
        elapsed = sorted(
            (
                m
                for m in stored.values()
                if m.state is State.IN_FLIGHT and m.available_after <= now and m.expires_at > now
            ),
            key=lambda m: (m.available_after, m.enqueue_order),
        )
        exhausted = [m for m in elapsed if m.delivery_attempts >= max_delivery_attempts]
        retryable = [m for m in elapsed if m.delivery_attempts < max_delivery_attempts]
        dead_lettered = 0
        for message in exhausted[:dead_letter_batch_size]:
            del stored[message.id]
            self._dead_letters[queue_id][message.id] = StoredDeadLetter(
                DeadLetter(
                    id=message.id,
                    queue_id=queue_id,
                    payload=message.payload,
                    priority=message.priority,
                    delivery_attempts=message.delivery_attempts,
                    enqueued_at=message.enqueued_at,
                    last_delivered_at=message.last_delivered_at,
                    dead_lettered_at=now,
                    reason=REASON_MAX_DELIVERY_ATTEMPTS_EXHAUSTED,
                ),
                message.enqueue_order,
            )
            dead_lettered += 1
        for message in retryable[:dead_letter_batch_size]:
            message.state = State.READY
        candidates = sorted(
            (
                m
                for m in stored.values()
                if m.state is State.READY and m.available_after <= now and m.expires_at > now
            ),
            key=lambda m: (-m.priority, m.enqueue_order),
        )[:limit]
        lease_end = now + timedelta(seconds=visibility_timeout_seconds)
        delivered = []
        for message in candidates:
            message.state = State.IN_FLIGHT
            message.delivery_attempts += 1
            message.receipt_handle = uuid.uuid4()
            message.available_after = lease_end
            message.last_delivered_at = now
            delivered.append(
                DeliveredMessage(
                    id=message.id,
                    payload=message.payload,
                    priority=message.priority,
                    receipt_handle=str(message.receipt_handle),
                    delivery_attempts=message.delivery_attempts,
                    enqueued_at=message.enqueued_at,
                )
            )
        return DequeueResult(messages=delivered, dead_lettered=dead_lettered)

    async def acknowledge(self, queue_id: UUID, receipts: Sequence[Receipt]) -> int:
        stored = self._messages.get(queue_id)
        if stored is None:
            return 0
        now = self._clock.now()
        removed = 0
        for receipt in receipts:
            message = stored.get(receipt.message_id)
            handle = parse_receipt_handle(receipt.receipt_handle)
            if (
                message is not None
                and handle is not None
                and message.state is State.IN_FLIGHT
                and message.receipt_handle == handle
                and message.available_after > now
            ):
                del stored[message.id]
                removed += 1
        return removed

    # -- maintenance (the cleaners) -------------------------------------------

    async def delete_expired_messages(self, batch_size: int) -> list[ExpiredMessages]:
        now = self._clock.now()
        doomed = sorted(
            (
                m
                for stored in self._messages.values()
                for m in stored.values()
                if m.expires_at <= now and (m.state is State.READY or m.available_after <= now)
            ),
            key=lambda m: (m.expires_at, m.id),
        )[:batch_size]
        counts: Counter[tuple[str, str]] = Counter()
        for message in doomed:
            del self._messages[message.queue_id][message.id]
            history = PREVIOUSLY_DELIVERED if message.delivery_attempts else NEVER_DELIVERED
            counts[self._queues[message.queue_id].name, history] += 1
        return [ExpiredMessages(name, history, n) for (name, history), n in counts.items()]

    async def delete_dead_letters_older_than(
        self, retention_seconds: int, batch_size: int
    ) -> list[PurgedDeadLetters]:
        cutoff = self._clock.now() - timedelta(seconds=retention_seconds)
        doomed = sorted(
            (
                stored
                for records in self._dead_letters.values()
                for stored in records.values()
                if stored.record.dead_lettered_at < cutoff
            ),
            key=lambda stored: (stored.record.dead_lettered_at, stored.record.id),
        )[:batch_size]
        counts: Counter[str] = Counter()
        for stored in doomed:
            del self._dead_letters[stored.record.queue_id][stored.record.id]
            counts[self._queues[stored.record.queue_id].name] += 1
        return [PurgedDeadLetters(name, n) for name, n in counts.items()]

    # -- queue state (same counting rules as the PostgreSQL state reader) -------

    async def read_state(self, queue_id: UUID | None = None) -> list[PriorityState]:
        now = self._clock.now()
        queues = sorted(
            (q for q in self._queues.values() if queue_id is None or q.id == queue_id),
            key=lambda q: q.name.encode(),
        )
        states = []
        for queue in queues:
            messages = list(self._messages[queue.id].values())
            dead = list(self._dead_letters[queue.id].values())
            for priority in sorted(Priority, reverse=True):
                ready_ages, in_flight_ages = [], []
                delayed = 0
                for m in messages:
                    if m.priority is not priority:
                        continue
                    lease_active = m.state is State.IN_FLIGHT and m.available_after > now
                    unexpired = m.expires_at > now
                    if lease_active:
                        in_flight_ages.append(m.enqueued_at)
                    elif m.state is State.IN_FLIGHT:
                        if unexpired and m.delivery_attempts < queue.settings.max_delivery_attempts:
                            ready_ages.append(m.enqueued_at)
                    elif not unexpired:
                        continue
                    elif m.available_after > now:
                        delayed += 1
                    else:
                        ready_ages.append(m.enqueued_at)
                states.append(
                    PriorityState(
                        queue_id=queue.id,
                        queue_name=queue.name,
                        priority=priority,
                        ready=len(ready_ages),
                        in_flight=len(in_flight_ages),
                        delayed=delayed,
                        dead_letters=sum(1 for d in dead if d.record.priority is priority),
                        oldest_ready_age_seconds=_age(now, ready_ages),
                        oldest_in_flight_age_seconds=_age(now, in_flight_ages),
                    )
                )
        return states

    # -- inspection helpers for tests -----------------------------------------

    def dead_letters_of(self, queue_id: UUID) -> list[DeadLetter]:
        """Newest first, as the API lists them."""
        records = self._dead_letters.get(queue_id, {}).values()
        ordered = sorted(records, key=lambda r: (r.record.dead_lettered_at, r.enqueue_order))
        return [r.record for r in reversed(ordered)]

    def message_count(self, queue_id: UUID) -> int:
        return len(self._messages.get(queue_id, {}))
