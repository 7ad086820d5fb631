"""The in-memory tables every memory port reads and writes.

``MemoryTables`` holds what PostgreSQL's tables hold (queues, messages, dead letters,
idempotency keys, the audit log, consumers, history snapshots and the cumulative counts
the rollup keeps) and the clock that stands in for ``now()``. Each port's module is a
mixin over these tables (``queues.py`` beside ``adapters/postgres/queues.py``, and so on);
``storage.MemoryStorage`` puts them together into one object that serves every port.

No method awaits in the middle of a change, so each one is atomic on the event loop just
as each PostgreSQL method is one transaction.
"""

from __future__ import annotations

import enum
import itertools
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from retsu.adapters.ids import uuid7
from retsu.application.ports import Clock
from retsu.domain.audit import AuditEntry, AuditRecord
from retsu.domain.consumer import ConsumerRecord
from retsu.domain.history import HistoryPoint, Throughput
from retsu.domain.message import DeadLetter, Priority
from retsu.domain.pagination import DeadLetterPosition
from retsu.domain.queue import Queue
from retsu.domain.schedule import Schedule


class State(enum.IntEnum):
    """The physical states of migration 0005 (a delayed message is READY here, its
    ``available_after`` in the future: the memory store has no index to keep it out of)."""

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
    group: str | None = None
    schedule_id: UUID | None = None


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


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One history row: the point, and the cumulative counts it was taken at."""

    point: HistoryPoint
    totals: Throughput


def age(now: datetime, moments: list[datetime]) -> float:
    return (now - min(moments)).total_seconds() if moments else 0.0


class MemoryTables:
    """The tables, the clock, and what several ports share (the audit row)."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._queues: dict[UUID, Queue] = {}
        self._messages: dict[UUID, dict[UUID, StoredMessage]] = {}
        self._dead_letters: dict[UUID, dict[UUID, StoredDeadLetter]] = {}
        self._idempotency_keys: dict[tuple[UUID, str], StoredIdempotencyKey] = {}
        # Each audit record with the queue it concerns (the queue_id filter).
        self._audit: list[tuple[AuditRecord, UUID | None]] = []
        self._order = itertools.count(1)
        # The rollup's cumulative counts (enqueued, delivered, acknowledged, ...).
        self.totals: defaultdict[UUID, Counter[str]] = defaultdict(Counter)
        self._consumers: dict[tuple[UUID, str], ConsumerRecord] = {}
        self._history: defaultdict[UUID, list[Snapshot]] = defaultdict(list)
        # Schedules by id (SPEC §3.12; ``schedules.py``).
        self._schedules: dict[UUID, Schedule] = {}

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

    def _forget_queue(self, queue_id: UUID) -> None:
        """What the foreign keys' ON DELETE CASCADE does when a queue goes."""
        self._messages.pop(queue_id, None)
        self._dead_letters.pop(queue_id, None)
        for key in [k for k in self._idempotency_keys if k[0] == queue_id]:
            del self._idempotency_keys[key]
        self.totals.pop(queue_id, None)
        self._history.pop(queue_id, None)
        for key in [k for k in self._consumers if k[0] == queue_id]:
            del self._consumers[key]
        for schedule_id in [k for k, s in self._schedules.items() if s.queue_id == queue_id]:
            del self._schedules[schedule_id]

    # -- inspection helpers (tests and the client's testing helper) ----------------

    def dead_letters_of(self, queue_id: UUID) -> list[DeadLetter]:
        """Newest first, as the API lists them."""
        records = self._dead_letters.get(queue_id, {}).values()
        ordered = sorted(records, key=lambda r: (r.record.dead_lettered_at, r.enqueue_order))
        return [r.record for r in reversed(ordered)]

    def message_count(self, queue_id: UUID) -> int:
        return len(self._messages.get(queue_id, {}))

    def idempotency_key_count(self, queue_id: UUID) -> int:
        return sum(1 for key in self._idempotency_keys if key[0] == queue_id)
