"""Database telemetry as typed decorators: time (and trace) every operation of a port.

Each class below implements one storage port and delegates every method to the port it
wraps, through ``Instrumentation.wrap``: the call records
``db_operation_duration_seconds{operation,outcome}`` and, when tracing is on, runs inside
a CLIENT span named after the operation (``db.system=postgresql``, ``db.operation.name``),
a child of the current span (the HTTP request's, for the API). Neither the domain nor the
use cases know about it: the per-role containers wrap the storage ports with it.

``operation`` label values are the port's method names (``acquire_leadership`` and
``release_leadership`` for the collector's lock), so the set is fixed by the code and
small. Outcome is ``success`` when the method returns *or* raises a domain error that is
an answer of the database (``RetsuError``: "that name is taken"), and ``error`` for
anything else: the database unreachable (``Unavailable``), any other database or network
failure, a timeout, a cancellation.

``Instrumentation.pool_acquired`` measures ``db_pool_acquire_duration_seconds`` (see
``retsu.adapters.postgres.engine.create_engine``'s ``on_pool_acquire``).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, ParamSpec, Protocol, TypeVar
from uuid import UUID

from retsu.adapters.telemetry.metrics import Metrics
from retsu.application.ports import (
    AuditLog,
    ConsumerMaintenance,
    ConsumerStore,
    DeadLetterRepository,
    HistoryMaintenance,
    LeaderSession,
    Leadership,
    Maintenance,
    MessageBrowser,
    MessageRepository,
    QueueHistoryReader,
    QueueRepository,
    QueueStateReader,
)
from retsu.domain.audit import AuditAction, AuditEntry, AuditRecord
from retsu.domain.browsing import BrowseState, MessageBatch, MessagePosition, StoredMessage
from retsu.domain.consumer import ConsumerPosition, ConsumerRecord, ConsumerSighting, SeenBetween
from retsu.domain.cursor import AuditPosition, DeadLetterPosition, QueuePosition
from retsu.domain.errors import RetsuError, Unavailable
from retsu.domain.history import HistoryPoint
from retsu.domain.idempotency import IdempotentEnqueued
from retsu.domain.maintenance import ExpiredMessages, PurgedDeadLetters
from retsu.domain.message import DeadLetter, DequeueResult, MessageToStore, Priority, Receipt
from retsu.domain.queue import Queue, QueueSettingsUpdate
from retsu.domain.state import PriorityState

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

__all__ = [
    "Instrumentation",
    "InstrumentedAuditLog",
    "InstrumentedConsumers",
    "InstrumentedDeadLetters",
    "InstrumentedHistory",
    "InstrumentedLeaderSession",
    "InstrumentedLeadership",
    "InstrumentedMaintenance",
    "InstrumentedMessageBrowser",
    "InstrumentedMessages",
    "InstrumentedQueueState",
    "InstrumentedQueues",
]

P = ParamSpec("P")
R = TypeVar("R")


class Instrumentation:
    """What the decorators record into: the process's metrics and, when tracing is on,
    its tracer. One per process."""

    def __init__(
        self, metrics: Metrics, tracer: Tracer | None = None, *, db_system: str = "postgresql"
    ) -> None:
        self.metrics = metrics
        self.tracer = tracer
        self.db_system = db_system

    def wrap(self, operation: str, method: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        """``method`` timed (and traced) as ``operation``.

        Both outcome series of an operation appear at its first call (so ``rate()`` of
        the error series is 0, not absent), never for operations a process does not run.
        """
        metrics = self.metrics
        observers: tuple[Callable[[float], None], Callable[[float], None]] | None = None

        def observe(outcome: int, seconds: float) -> None:  # outcome: 0 success, 1 error
            nonlocal observers
            if observers is None:
                observers = metrics.db_operation_observers(operation)
            observers[outcome](seconds)

        clock = time.perf_counter
        tracer = self.tracer

        if tracer is None:

            @functools.wraps(method)
            async def timed(*args: P.args, **kwargs: P.kwargs) -> R:
                start = clock()
                try:
                    result = await method(*args, **kwargs)
                except Unavailable:
                    observe(1, clock() - start)
                    raise
                except RetsuError:
                    observe(0, clock() - start)
                    raise
                except BaseException:
                    observe(1, clock() - start)
                    raise
                observe(0, clock() - start)
                return result

            return timed

        from opentelemetry.trace import SpanKind, Status, StatusCode

        error_status = Status(StatusCode.ERROR)
        attributes = {
            "db.system": self.db_system,  # semantic conventions before 1.26
            "db.system.name": self.db_system,
            "db.operation.name": operation,
        }

        @functools.wraps(method)
        async def traced(*args: P.args, **kwargs: P.kwargs) -> R:
            with tracer.start_as_current_span(
                operation,
                kind=SpanKind.CLIENT,
                attributes=attributes,
                record_exception=False,
                set_status_on_exception=False,
            ) as span:
                start = clock()
                try:
                    result = await method(*args, **kwargs)
                except RetsuError as error:
                    if not isinstance(error, Unavailable):
                        observe(0, clock() - start)
                        span.set_attribute("retsu.domain_error", type(error).__name__)
                        raise
                    observe(1, clock() - start)
                    span.set_attribute("error.type", type(error).__qualname__)
                    span.set_status(error_status)
                    raise
                except BaseException as error:
                    observe(1, clock() - start)
                    span.set_attribute("error.type", type(error).__qualname__)
                    if isinstance(error, Exception):
                        span.record_exception(error)
                    span.set_status(error_status)
                    raise
                observe(0, clock() - start)
                return result

        return traced

    def pool_acquired(self, duration_seconds: float) -> None:
        """The ``on_pool_acquire`` callback of the PostgreSQL engine."""
        self.metrics.db_pool_acquired(duration_seconds)


class InstrumentedQueues:
    """QueueRepository, measured."""

    def __init__(self, queues: QueueRepository, instrumentation: Instrumentation) -> None:
        wrap = instrumentation.wrap
        self._add_queue = wrap("add_queue", queues.add_queue)
        self._get_queue = wrap("get_queue", queues.get_queue)
        self._update_queue = wrap("update_queue", queues.update_queue)
        self._set_paused = wrap("set_paused", queues.set_paused)
        self._list_queues = wrap("list_queues", queues.list_queues)
        self._purge_queue = wrap("purge_queue", queues.purge_queue)
        self._delete_queue = wrap("delete_queue", queues.delete_queue)

    async def add_queue(self, queue: Queue, audit: AuditEntry) -> Queue:
        return await self._add_queue(queue, audit)

    async def get_queue(self, queue_id: UUID) -> Queue | None:
        return await self._get_queue(queue_id)

    async def update_queue(
        self, queue_id: UUID, update: QueueSettingsUpdate, audit: AuditEntry
    ) -> Queue | None:
        return await self._update_queue(queue_id, update, audit)

    async def set_paused(self, queue_id: UUID, paused: bool, audit: AuditEntry) -> Queue | None:
        return await self._set_paused(queue_id, paused, audit)

    async def list_queues(
        self, *, limit: int, after: QueuePosition | None, name: str | None
    ) -> list[Queue]:
        return await self._list_queues(limit=limit, after=after, name=name)

    async def purge_queue(self, queue_id: UUID, audit: AuditEntry) -> int | None:
        return await self._purge_queue(queue_id, audit)

    async def delete_queue(self, queue_id: UUID, audit: AuditEntry) -> bool:
        return await self._delete_queue(queue_id, audit)


class InstrumentedQueueState:
    """QueueStateReader, measured."""

    def __init__(self, state: QueueStateReader, instrumentation: Instrumentation) -> None:
        self._read_state = instrumentation.wrap("read_state", state.read_state)

    async def read_state(self, queue_id: UUID) -> list[PriorityState]:
        return await self._read_state(queue_id)


class InstrumentedMessages:
    """MessageRepository, measured."""

    def __init__(self, messages: MessageRepository, instrumentation: Instrumentation) -> None:
        wrap = instrumentation.wrap
        self._enqueue = wrap("enqueue", messages.enqueue)
        self._dequeue = wrap("dequeue", messages.dequeue)
        self._acknowledge = wrap("acknowledge", messages.acknowledge)
        self._enqueue_idempotent = wrap("enqueue_idempotent", messages.enqueue_idempotent)
        self._change_visibility = wrap("change_visibility", messages.change_visibility)

    async def enqueue(self, queue_id: UUID, messages: Sequence[MessageToStore]) -> None:
        await self._enqueue(queue_id, messages)

    async def dequeue(
        self,
        queue_id: UUID,
        *,
        limit: int,
        visibility_timeout_seconds: int | None,
        dead_letter_batch_size: int,
    ) -> DequeueResult:
        return await self._dequeue(
            queue_id,
            limit=limit,
            visibility_timeout_seconds=visibility_timeout_seconds,
            dead_letter_batch_size=dead_letter_batch_size,
        )

    async def acknowledge(self, queue_id: UUID, receipts: Sequence[Receipt]) -> int:
        return await self._acknowledge(queue_id, receipts)

    async def enqueue_idempotent(
        self, queue_id: UUID, message: MessageToStore, key: str, fingerprint: bytes
    ) -> IdempotentEnqueued:
        return await self._enqueue_idempotent(queue_id, message, key, fingerprint)

    async def change_visibility(
        self, queue_id: UUID, receipt: Receipt, visibility_timeout_seconds: int
    ) -> bool:
        return await self._change_visibility(queue_id, receipt, visibility_timeout_seconds)


class InstrumentedMessageBrowser:
    """MessageBrowser, measured (``list_messages``, ``get_message``, ``delete_message``)."""

    def __init__(self, browser: MessageBrowser, instrumentation: Instrumentation) -> None:
        wrap = instrumentation.wrap
        self._list_messages = wrap("list_messages", browser.list_messages)
        self._get_message = wrap("get_message", browser.get_message)
        self._delete_message = wrap("delete_message", browser.delete_message)

    async def list_messages(
        self,
        queue_id: UUID,
        *,
        state: BrowseState | None,
        priority: Priority | None,
        limit: int,
        after: MessagePosition | None,
    ) -> MessageBatch:
        return await self._list_messages(
            queue_id, state=state, priority=priority, limit=limit, after=after
        )

    async def get_message(self, queue_id: UUID, message_id: UUID) -> StoredMessage | None:
        return await self._get_message(queue_id, message_id)

    async def delete_message(self, queue_id: UUID, message_id: UUID, audit: AuditEntry) -> bool:
        return await self._delete_message(queue_id, message_id, audit)


class InstrumentedDeadLetters:
    """DeadLetterRepository, measured."""

    def __init__(
        self, dead_letters: DeadLetterRepository, instrumentation: Instrumentation
    ) -> None:
        wrap = instrumentation.wrap
        self._list_dead_letters = wrap("list_dead_letters", dead_letters.list_dead_letters)
        self._get_dead_letter = wrap("get_dead_letter", dead_letters.get_dead_letter)
        self._redrive_dead_letter = wrap("redrive_dead_letter", dead_letters.redrive_dead_letter)
        self._redrive_dead_letters = wrap("redrive_dead_letters", dead_letters.redrive_dead_letters)
        self._delete_dead_letter = wrap("delete_dead_letter", dead_letters.delete_dead_letter)

    async def list_dead_letters(
        self, queue_id: UUID, *, limit: int, after: DeadLetterPosition | None
    ) -> list[tuple[DeadLetter, DeadLetterPosition]]:
        return await self._list_dead_letters(queue_id, limit=limit, after=after)

    async def get_dead_letter(self, queue_id: UUID, message_id: UUID) -> DeadLetter | None:
        return await self._get_dead_letter(queue_id, message_id)

    async def redrive_dead_letter(
        self, queue_id: UUID, message_id: UUID, new_id: UUID, audit: AuditEntry
    ) -> bool:
        return await self._redrive_dead_letter(queue_id, message_id, new_id, audit)

    async def redrive_dead_letters(
        self, queue_id: UUID, new_ids: Sequence[UUID], audit: AuditEntry
    ) -> int:
        return await self._redrive_dead_letters(queue_id, new_ids, audit)

    async def delete_dead_letter(self, queue_id: UUID, message_id: UUID, audit: AuditEntry) -> bool:
        return await self._delete_dead_letter(queue_id, message_id, audit)


class InstrumentedAuditLog:
    """AuditLog, measured."""

    def __init__(self, audit_log: AuditLog, instrumentation: Instrumentation) -> None:
        self._list_audit_records = instrumentation.wrap(
            "list_audit_records", audit_log.list_audit_records
        )

    async def list_audit_records(
        self,
        *,
        limit: int,
        after: AuditPosition | None,
        queue_id: UUID | None,
        action: AuditAction | None,
    ) -> list[AuditRecord]:
        return await self._list_audit_records(
            limit=limit, after=after, queue_id=queue_id, action=action
        )


class InstrumentedMaintenance:
    """MessageMaintenance and IdempotencyKeyMaintenance (the cleaners' batches), measured."""

    def __init__(self, maintenance: Maintenance, instrumentation: Instrumentation) -> None:
        wrap = instrumentation.wrap
        self._delete_expired_messages = wrap(
            "delete_expired_messages", maintenance.delete_expired_messages
        )
        self._delete_dead_letters_older_than = wrap(
            "delete_dead_letters_older_than", maintenance.delete_dead_letters_older_than
        )
        self._delete_idempotency_keys_older_than = wrap(
            "delete_idempotency_keys_older_than", maintenance.delete_idempotency_keys_older_than
        )

    async def delete_expired_messages(self, batch_size: int) -> list[ExpiredMessages]:
        return await self._delete_expired_messages(batch_size)

    async def delete_dead_letters_older_than(
        self, retention_seconds: int, batch_size: int
    ) -> list[PurgedDeadLetters]:
        return await self._delete_dead_letters_older_than(retention_seconds, batch_size)

    async def delete_idempotency_keys_older_than(self, age_seconds: int, batch_size: int) -> int:
        return await self._delete_idempotency_keys_older_than(age_seconds, batch_size)


class InstrumentedLeaderSession:
    """The leader's session, measured: ``read_state`` and ``release`` (as
    ``release_leadership``)."""

    def __init__(self, session: LeaderSession, instrumentation: Instrumentation) -> None:
        self._read_state = instrumentation.wrap("read_state", session.read_state)
        self._record_history = instrumentation.wrap("record_history", session.record_history)
        self._release = instrumentation.wrap("release_leadership", session.release)

    async def read_state(self) -> list[PriorityState]:
        return await self._read_state()

    async def record_history(self, state: Sequence[PriorityState]) -> None:
        await self._record_history(state)

    async def release(self) -> None:
        await self._release()


class InstrumentedLeadership:
    """The collector's ``Leadership`` port, measured: ``try_acquire`` as
    ``acquire_leadership``, and the session it hands out."""

    def __init__(self, leadership: Leadership, instrumentation: Instrumentation) -> None:
        self._instrumentation = instrumentation
        self._try_acquire = instrumentation.wrap("acquire_leadership", leadership.try_acquire)

    async def try_acquire(self) -> LeaderSession | None:
        session = await self._try_acquire()
        if session is None:
            return None
        return InstrumentedLeaderSession(session, self._instrumentation)


# -- consumers (SPEC §3.7) and queue history (SPEC §3.8) --------------------------------


class _Consumers(ConsumerStore, ConsumerMaintenance, Protocol):
    """One storage object serves both consumer ports."""


class _History(QueueHistoryReader, HistoryMaintenance, Protocol):
    """One storage object serves both history ports."""


class InstrumentedConsumers:
    """ConsumerStore and ConsumerMaintenance, measured."""

    def __init__(self, consumers: _Consumers, instrumentation: Instrumentation) -> None:
        wrap = instrumentation.wrap
        self._record_consumers = wrap("record_consumers", consumers.record_consumers)
        self._list_consumers = wrap("list_consumers", consumers.list_consumers)
        self._delete_consumers_not_seen_for = wrap(
            "delete_consumers_not_seen_for", consumers.delete_consumers_not_seen_for
        )

    async def record_consumers(self, sightings: Sequence[ConsumerSighting]) -> None:
        await self._record_consumers(sightings)

    async def list_consumers(
        self,
        *,
        limit: int,
        after: ConsumerPosition | None,
        queue_id: UUID | None,
        seen: SeenBetween,
    ) -> list[ConsumerRecord]:
        return await self._list_consumers(limit=limit, after=after, queue_id=queue_id, seen=seen)

    async def delete_consumers_not_seen_for(self, age_seconds: int, batch_size: int) -> int:
        return await self._delete_consumers_not_seen_for(age_seconds, batch_size)


class InstrumentedHistory:
    """QueueHistoryReader and HistoryMaintenance, measured."""

    def __init__(self, history: _History, instrumentation: Instrumentation) -> None:
        wrap = instrumentation.wrap
        self._read_history = wrap("read_history", history.read_history)
        self._delete_history_older_than = wrap(
            "delete_history_older_than", history.delete_history_older_than
        )

    async def read_history(
        self, queue_id: UUID, *, since: datetime, bucket_seconds: int
    ) -> list[HistoryPoint]:
        return await self._read_history(queue_id, since=since, bucket_seconds=bucket_seconds)

    async def delete_history_older_than(self, age_seconds: int, batch_size: int) -> int:
        return await self._delete_history_older_than(age_seconds, batch_size)
