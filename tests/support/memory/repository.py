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

from retsu.adapters.ids import uuid7
from retsu.application.ports import Clock
from retsu.domain.audit import AuditAction, AuditEntry, AuditRecord
from retsu.domain.browsing import (
    BrowseState,
    MessageBatch,
    MessagePosition,
    logical_state,
)
from retsu.domain.browsing import (
    StoredMessage as BrowsedMessage,
)
from retsu.domain.cursor import AuditPosition, DeadLetterPosition, QueuePosition
from retsu.domain.errors import (
    IdempotencyKeyConflict,
    InvalidInput,
    QueueAlreadyExists,
    QueueNotFound,
)
from retsu.domain.idempotency import IDEMPOTENCY_KEY_RETENTION_SECONDS, IdempotentEnqueued
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
from tests.support.memory.observed import ConsumersAndHistory


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
    redriven_from: UUID | None = None


@dataclass(slots=True)
class StoredDeadLetter:
    record: DeadLetter
    enqueue_order: int

    @property
    def position(self) -> DeadLetterPosition:
        return DeadLetterPosition(self.record.dead_lettered_at, self.enqueue_order)


@dataclass(frozen=True, slots=True)
class StoredIdempotencyKey:
    message_id: UUID
    fingerprint: bytes
    created_at: datetime


def _age(now: datetime, moments: list[datetime]) -> float:
    return (now - min(moments)).total_seconds() if moments else 0.0


class InMemoryRepository(ConsumersAndHistory):
    """Implements QueueRepository, MessageRepository, DeadLetterRepository, AuditLog and
    QueueStateReader; the consumer and history ports come from ``ConsumersAndHistory``
    (which keeps the cumulative counts in ``totals``)."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._queues: dict[UUID, Queue] = {}
        self._messages: dict[UUID, dict[UUID, StoredMessage]] = {}
        self._dead_letters: dict[UUID, dict[UUID, StoredDeadLetter]] = {}
        self._idempotency_keys: dict[tuple[UUID, str], StoredIdempotencyKey] = {}
        # Each audit record with the queue it concerns (the queue_id filter).
        self._audit: list[tuple[AuditRecord, UUID | None]] = []
        self._order = itertools.count(1)
        self._init_observed()

    def _write_audit(self, entry: AuditEntry) -> None:
        record = AuditRecord(
            id=uuid7(),
            at=self._clock.now(),
            actor=entry.caller.actor,
            action=entry.action.value,
            target_type=entry.target_type,
            target_id=entry.target_id,
            request_id=entry.caller.request_id,
            details=dict(entry.details),
        )
        self._audit.append((record, entry.queue_id))

    # -- queues ---------------------------------------------------------------

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
        queue = replace(
            queue, settings=update.apply_to(queue.settings), updated_at=self._clock.now()
        )
        self._queues[queue_id] = queue
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
        purged = len(stored)
        stored.clear()
        self._write_audit(audit.with_details(purged=purged))
        return purged

    async def delete_queue(self, queue_id: UUID, audit: AuditEntry) -> bool:
        queue = self._queues.pop(queue_id, None)
        if queue is None:
            return False
        messages = len(self._messages.pop(queue_id))
        dead_letters = len(self._dead_letters.pop(queue_id))
        for key in [k for k in self._idempotency_keys if k[0] == queue_id]:
            del self._idempotency_keys[key]
        self._forget_observed(queue_id)
        self._write_audit(
            audit.with_details(name=queue.name, messages=messages, dead_letters=dead_letters)
        )
        return True

    # -- messages -------------------------------------------------------------

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

    # -- browsing (SPEC §3.6) ------------------------------------------------------
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

    # -- dead letters -----------------------------------------------------------

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

    # -- audit log ----------------------------------------------------------------

    async def list_audit_records(
        self,
        *,
        limit: int,
        after: AuditPosition | None,
        queue_id: UUID | None,
        action: AuditAction | None,
    ) -> list[AuditRecord]:
        chosen = sorted(
            (
                r
                for r, about in self._audit
                if (queue_id is None or about == queue_id)
                and (action is None or r.action == action.value)
                and (after is None or (r.at, r.id) < (after.at, after.id))
            ),
            key=lambda r: (r.at, r.id),
            reverse=True,
        )
        return chosen[:limit]

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
            self.totals[message.queue_id]["expired"] += 1
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

    async def delete_idempotency_keys_older_than(self, age_seconds: int, batch_size: int) -> int:
        cutoff = self._clock.now() - timedelta(seconds=age_seconds)
        doomed = sorted(
            (k for k, stored in self._idempotency_keys.items() if stored.created_at < cutoff),
            key=lambda k: self._idempotency_keys[k].created_at,
        )[:batch_size]
        for k in doomed:
            del self._idempotency_keys[k]
        return len(doomed)

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
                    elif m.delivery_attempts < queue.settings.max_delivery_attempts:
                        ready_ages.append(m.enqueued_at)
                    # else: READY with no attempts left under a lowered limit: in none,
                    # until a dequeue moves it to dead letters.
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

    def idempotency_key_count(self, queue_id: UUID) -> int:
        return sum(1 for key in self._idempotency_keys if key[0] == queue_id)
