"""The storage ports in memory, wired like production, for tests that override storage.

``MemoryStorageContainer`` has ``StorageContainer``'s provider names (one per port,
plus ``message_signals``, ``readiness``, ``secrets``), so a test swaps the whole
PostgreSQL storage of a role container for it::

    container = WorkerContainer(settings=settings)
    memory = MemoryStorageContainer(
        database=MemoryStorage(clock), instrumentation=container.core.instrumentation
    )
    container.storage.override(memory)

Overriding a container provider with a container replaces its providers by name, so
this container has no provider of its own beyond those names: the repository every
port uses is its ``database``. Every port is that repository behind the same telemetry
decorators as in
production, and the message and dead-letter ports behind the same announcing ones; the
queue port announces queue changes as PostgreSQL's trigger (migration 0004) does. One
port alone is swapped with ``container.storage.messages.override(providers.Object(x))``.

``AnnouncingMemoryRepository`` is the same announcements on one object that serves
every port, for tests that hand one repository to every use case.
"""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from dependency_injector import containers, providers

from retsu.adapters.announcing import AnnouncingDeadLetters, AnnouncingMessages
from retsu.adapters.memory.clock import ManualClock
from retsu.adapters.memory.leadership import InMemoryLeadership, InMemoryLock
from retsu.adapters.memory.secrets import RandomServerSecrets
from retsu.adapters.memory.storage import MemoryStorage
from retsu.adapters.signals import Announcer, InProcessMessageSignals
from retsu.adapters.telemetry.instrumented import (
    Instrumentation,
    InstrumentedAuditLog,
    InstrumentedConsumers,
    InstrumentedDeadLetters,
    InstrumentedHistory,
    InstrumentedLeadership,
    InstrumentedMaintenance,
    InstrumentedMessageBrowser,
    InstrumentedMessages,
    InstrumentedQueues,
    InstrumentedQueueState,
)
from retsu.adapters.telemetry.metrics import Metrics
from retsu.application.ports import Clock, QueueRepository
from retsu.domain.audit import AuditEntry
from retsu.domain.cursor import QueuePosition
from retsu.domain.idempotency import IdempotentEnqueued
from retsu.domain.message import MessageToStore, Receipt
from retsu.domain.queue import Queue, QueueSettingsUpdate


class AnnouncingQueues:
    """QueueRepository announcing a resume, a pause or a delete as a change of the queue
    itself: what PostgreSQL's trigger does for the real storage."""

    def __init__(self, queues: QueueRepository, announcer: Announcer) -> None:
        self._queues = queues
        self._announcer = announcer

    async def add_queue(self, queue: Queue, audit: AuditEntry) -> Queue:
        return await self._queues.add_queue(queue, audit)

    async def get_queue(self, queue_id: UUID) -> Queue | None:
        return await self._queues.get_queue(queue_id)

    async def update_queue(
        self, queue_id: UUID, update: QueueSettingsUpdate, audit: AuditEntry
    ) -> Queue | None:
        return await self._queues.update_queue(queue_id, update, audit)

    async def set_paused(self, queue_id: UUID, paused: bool, audit: AuditEntry) -> Queue | None:
        queue = await self._queues.set_paused(queue_id, paused, audit)
        if queue is not None:
            self._announcer.announce(queue_id, queue_changed=True)
        return queue

    async def list_queues(
        self, *, limit: int, after: QueuePosition | None, name: str | None
    ) -> list[Queue]:
        return await self._queues.list_queues(limit=limit, after=after, name=name)

    async def purge_queue(self, queue_id: UUID, audit: AuditEntry) -> int | None:
        return await self._queues.purge_queue(queue_id, audit)

    async def delete_queue(self, queue_id: UUID, audit: AuditEntry) -> bool:
        deleted = await self._queues.delete_queue(queue_id, audit)
        if deleted:
            self._announcer.announce(queue_id, queue_changed=True)
        return deleted


class AnnouncingMemoryRepository(MemoryStorage):
    """One in-memory repository for every port, announcing what production announces:
    the message rules of ``retsu.adapters.announcing`` and the trigger's queue changes."""

    def __init__(self, clock: Clock, announcer: Announcer) -> None:
        super().__init__(clock)
        self.announcer = announcer

    async def enqueue(self, queue_id: UUID, messages: Sequence[MessageToStore]) -> None:
        await super().enqueue(queue_id, messages)
        self.announcer.announce(queue_id)

    async def enqueue_idempotent(
        self, queue_id: UUID, message: MessageToStore, key: str, fingerprint: bytes
    ) -> IdempotentEnqueued:
        # The base class stores through self.enqueue, which announced already.
        return await super().enqueue_idempotent(queue_id, message, key, fingerprint)

    async def change_visibility(
        self, queue_id: UUID, receipt: Receipt, visibility_timeout_seconds: int
    ) -> bool:
        changed = await super().change_visibility(queue_id, receipt, visibility_timeout_seconds)
        if changed and visibility_timeout_seconds == 0:
            self.announcer.announce(queue_id)
        return changed

    async def redrive_dead_letter(
        self, queue_id: UUID, message_id: UUID, new_id: UUID, audit: AuditEntry
    ) -> bool:
        moved = await super().redrive_dead_letter(queue_id, message_id, new_id, audit)
        if moved:
            self.announcer.announce(queue_id)
        return moved

    async def redrive_dead_letters(
        self, queue_id: UUID, new_ids: Sequence[UUID], audit: AuditEntry
    ) -> int:
        moved = await super().redrive_dead_letters(queue_id, new_ids, audit)
        if moved:
            self.announcer.announce(queue_id)
        return moved

    async def set_paused(self, queue_id: UUID, paused: bool, audit: AuditEntry) -> Queue | None:
        queue = await super().set_paused(queue_id, paused, audit)
        if queue is not None:
            self.announcer.announce(queue_id, queue_changed=True)
        return queue

    async def delete_queue(self, queue_id: UUID, audit: AuditEntry) -> bool:
        deleted = await super().delete_queue(queue_id, audit)
        if deleted:
            self.announcer.announce(queue_id, queue_changed=True)
        return deleted


class LocalMessageSignals(InProcessMessageSignals):
    """The in-process fan-out with the PostgreSQL signals' life cycle (nothing to start)."""

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        self.close()


async def _ready() -> None:
    return None


class MemoryStorageContainer(containers.DeclarativeContainer):
    """``StorageContainer``'s provider names over one ``MemoryStorage``."""

    instrumentation: providers.Dependency[Instrumentation] = providers.Dependency(
        instance_of=Instrumentation,
        default=providers.Singleton(Instrumentation, providers.Singleton(Metrics)),
    )
    # The store behind every port (StorageContainer's ``database`` is PostgreSQL's).
    database: providers.Dependency[MemoryStorage] = providers.Dependency(
        instance_of=MemoryStorage,
        default=providers.Singleton(MemoryStorage, providers.Singleton(ManualClock)),
    )
    message_signals = providers.Singleton(LocalMessageSignals)

    queues = providers.Singleton(
        InstrumentedQueues,
        providers.Singleton(AnnouncingQueues, database, message_signals),
        instrumentation,
    )
    queue_state = providers.Singleton(InstrumentedQueueState, database, instrumentation)
    messages = providers.Singleton(
        AnnouncingMessages,
        providers.Singleton(InstrumentedMessages, database, instrumentation),
        message_signals,
    )
    dead_letters = providers.Singleton(
        AnnouncingDeadLetters,
        providers.Singleton(InstrumentedDeadLetters, database, instrumentation),
        message_signals,
    )
    audit_log = providers.Singleton(InstrumentedAuditLog, database, instrumentation)
    message_browser = providers.Singleton(InstrumentedMessageBrowser, database, instrumentation)
    maintenance = providers.Singleton(InstrumentedMaintenance, database, instrumentation)
    leadership = providers.Singleton(
        InstrumentedLeadership,
        providers.Singleton(InMemoryLeadership, providers.Singleton(InMemoryLock), database),
        instrumentation,
    )
    consumers = providers.Singleton(InstrumentedConsumers, database, instrumentation)
    history = providers.Singleton(InstrumentedHistory, database, instrumentation)
    readiness = providers.Callable(_ready)
    secrets = providers.Singleton(RandomServerSecrets)
