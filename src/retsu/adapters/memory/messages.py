"""Queue messages in memory (``MessageRepository``): the twin of ``adapters/postgres/messages.py``
and the hot functions of migration 0005."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import timedelta
from uuid import UUID

from retsu.adapters.memory.tables import (
    MemoryTables,
    State,
    StoredDeadLetter,
    StoredIdempotencyKey,
    StoredMessage,
)
from retsu.domain.errors import (
    IdempotencyKeyConflict,
    InvalidInput,
    QueueNotFound,
)
from retsu.domain.idempotency import IDEMPOTENCY_KEY_RETENTION_SECONDS, IdempotentEnqueued
from retsu.domain.message import (
    REASON_MAX_DELIVERY_ATTEMPTS_EXHAUSTED,
    DeadLetter,
    DeliveredMessage,
    DequeueResult,
    MessageToStore,
    Receipt,
)
from retsu.domain.receipt import parse_receipt_handle


class MessagesPart(MemoryTables):
    """Implements MessageRepository over the tables."""

    async def enqueue(self, queue_id: UUID, messages: Sequence[MessageToStore]) -> None:
        if queue_id not in self._queues:
            raise QueueNotFound(queue_id)
        now = self._clock.now()
        stored = self._messages[queue_id]
        if len({m.id for m in messages}) != len(messages) or any(m.id in stored for m in messages):
            # PostgreSQL refuses the whole batch on a primary-key violation; so do we.
            raise ValueError("a message with this id is already stored")
        default_ttl = self._queues[queue_id].settings.default_message_ttl_seconds
        lifetimes = [m.ttl_seconds if m.ttl_seconds is not None else default_ttl for m in messages]
        for index, (message, lifetime) in enumerate(zip(messages, lifetimes, strict=True)):
            if message.delay_seconds >= lifetime:  # as the storing function checks it
                raise InvalidInput(
                    f"messages[{index}]: delay_seconds must be shorter than the message lifetime.",
                    code="invalid_delay",
                )
        for message, lifetime in zip(messages, lifetimes, strict=True):
            stored[message.id] = StoredMessage(
                id=message.id,
                queue_id=queue_id,
                enqueue_order=next(self._order),
                payload=message.payload,
                priority=message.priority,
                state=State.READY,
                enqueued_at=now,
                expires_at=now + timedelta(seconds=lifetime),
                available_after=now + timedelta(seconds=message.delay_seconds),
                group=message.group,
                schedule_id=message.schedule_id,
            )
        self.totals[queue_id]["enqueued"] += len(messages)

    async def dequeue(
        self,
        queue_id: UUID,
        *,
        limit: int,
        visibility_timeout_seconds: int | None,
        dead_letter_batch_size: int,
    ) -> DequeueResult:
        stored = self._messages.get(queue_id)
        queue = self._queues.get(queue_id)
        if stored is None or queue is None:
            raise QueueNotFound(queue_id)
        if queue.paused:
            return DequeueResult(messages=[], paused=True)
        max_delivery_attempts = queue.settings.max_delivery_attempts
        if visibility_timeout_seconds is None:
            visibility_timeout_seconds = queue.settings.visibility_timeout_seconds
        now = self._clock.now()
        # Elapsed leases of unexpired messages, oldest lease end first, in two bounded
        # batches: exhausted ones go to dead-letter storage, retryable ones compete
        # with the ready messages (and go back to READY if they lose). READY messages a
        # lowered limit left with no attempts go to dead-letter storage too.
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
        stale = [
            m
            for m in stored.values()
            if m.state is State.READY
            and m.delivery_attempts >= max_delivery_attempts
            and m.expires_at > now
        ]
        dead_lettered = 0
        for message in exhausted[:dead_letter_batch_size] + stale[:dead_letter_batch_size]:
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
                    group=message.group,
                ),
                message.enqueue_order,
            )
            dead_lettered += 1
        self.totals[queue_id]["dead_lettered"] += dead_lettered
        for message in retryable[:dead_letter_batch_size]:
            message.state = State.READY
        candidates = sorted(
            (
                m
                for m in stored.values()
                if m.state is State.READY
                and m.available_after <= now
                and m.expires_at > now
                and m.delivery_attempts < max_delivery_attempts
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
                    group=message.group,
                )
            )
        self.totals[queue_id]["delivered"] += len(delivered)
        if delivered:
            return DequeueResult(messages=delivered, dead_lettered=dead_lettered)
        # Nothing to claim: when does a delay or a lease end next (a long-poll hint)?
        upcoming = [m.available_after for m in stored.values() if m.available_after > now]
        return DequeueResult(
            messages=[],
            dead_lettered=dead_lettered,
            next_available_in_seconds=(min(upcoming) - now).total_seconds() if upcoming else None,
        )

    async def enqueue_idempotent(
        self, queue_id: UUID, message: MessageToStore, key: str, fingerprint: bytes
    ) -> IdempotentEnqueued:
        if queue_id not in self._queues:
            raise QueueNotFound(queue_id)
        now = self._clock.now()
        known = self._idempotency_keys.get((queue_id, key))
        retention = timedelta(seconds=IDEMPOTENCY_KEY_RETENTION_SECONDS)
        if known is not None and known.created_at > now - retention:
            if known.fingerprint != fingerprint:
                raise IdempotencyKeyConflict()
            return IdempotentEnqueued(known.message_id, replayed=True)
        await self.enqueue(queue_id, [message])
        self._idempotency_keys[queue_id, key] = StoredIdempotencyKey(message.id, fingerprint, now)
        return IdempotentEnqueued(message.id, replayed=False)

    async def change_visibility(
        self, queue_id: UUID, receipt: Receipt, visibility_timeout_seconds: int
    ) -> bool:
        if queue_id not in self._messages:
            raise QueueNotFound(queue_id)
        message = self._messages[queue_id].get(receipt.message_id)
        handle = parse_receipt_handle(receipt.receipt_handle)
        now = self._clock.now()
        if (
            message is None
            or handle is None
            or message.state is not State.IN_FLIGHT
            or message.receipt_handle != handle
            or message.available_after <= now
        ):
            return False
        message.available_after = now + timedelta(seconds=visibility_timeout_seconds)
        return True

    async def acknowledge(self, queue_id: UUID, receipts: Sequence[Receipt]) -> int:
        stored = self._messages.get(queue_id)
        if stored is None:
            raise QueueNotFound(queue_id)
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
        self.totals[queue_id]["acknowledged"] += removed
        return removed
