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
from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

from retsu.adapters.ids import uuid7
from retsu.application.ports import Clock
from retsu.domain.attempts import Attempt
from retsu.domain.audit import AuditEntry, AuditRecord
from retsu.domain.browsing import BrowseState
from retsu.domain.consumer import ConsumerRecord
from retsu.domain.history import HistoryPoint, Throughput
from retsu.domain.message import DeadLetter, Priority
from retsu.domain.pagination import DeadLetterPosition
from retsu.domain.queue import Queue
from retsu.domain.schedule import Schedule


class State(enum.IntEnum):
    """The physical states of migration 0009 (an ungrouped message inside its first delay
    is READY here, its ``available_after`` in the future: the memory store has no index to
    keep it out of). Grouped messages take the lane states exactly as in PostgreSQL."""

    READY = 1
    IN_FLIGHT = 2
    DELAYED = 3  # a group's head inside its delay
    WAITING = 4  # a grouped message behind its group's head
    WAITING_DELAYED = 5  # the same, its own delay still running
    COMPLETED = 6  # acknowledged and kept (SPEC §3.11)
    THROTTLED = 7  # a group's head parked until its group's next token


# The physical states a lane counts as its pending head.
PENDING = frozenset({State.READY, State.DELAYED, State.THROTTLED})


@dataclass(slots=True)
class StoredGroup:
    """One lane (``queue_group``): its members by physical state, the key of its last
    delivery (fair service) and its token bucket (``tokens`` None: full)."""

    leased: int = 0
    pending: int = 0
    waiting: int = 0
    waiting_delayed: int = 0
    head_key: int = 0
    last_delivery_key: int = 0
    last_delivered_at: datetime | None = None
    tokens: float | None = None
    tokens_at: datetime | None = None

    @property
    def live(self) -> int:
        return self.leased + self.pending + self.waiting + self.waiting_delayed


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
    # The claim order key of a group's head (None: its enqueue order).
    wait_key: int | None = None
    attempts: list[Attempt] = field(default_factory=list)
    completed_at: datetime | None = None
    result: str | None = None

    @property
    def key(self) -> int:
        return self.enqueue_order if self.wait_key is None else self.wait_key


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


def logical(message: StoredMessage, max_attempts: int, now: datetime) -> BrowseState | None:
    """A message's logical state (SPEC §3.2, §3.11), as ``retsu_message_state`` decides it:
    waiting and parked grouped messages are ready; None: in no state."""
    state = message.state
    if state is State.COMPLETED:
        return BrowseState.COMPLETED
    if state is State.IN_FLIGHT and message.available_after > now:
        return BrowseState.IN_FLIGHT
    if (
        state in (State.READY, State.DELAYED, State.WAITING_DELAYED)
        and message.available_after > now
    ):
        return BrowseState.DELAYED
    if message.expires_at <= now or message.delivery_attempts >= max_attempts:
        return None
    return BrowseState.READY


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
        # Lanes by (queue, group), and each rate-limited queue's bucket (tokens, at).
        self._groups: dict[tuple[UUID, str], StoredGroup] = {}
        self._buckets: dict[UUID, tuple[float, datetime]] = {}
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
        self._buckets.pop(queue_id, None)
        for key in [k for k in self._groups if k[0] == queue_id]:
            del self._groups[key]
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
