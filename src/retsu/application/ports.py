"""Ports: what the use cases need from the outside world, as Protocols.

Adapters (memory, postgres, redis, telemetry) implement these; use cases never
import an adapter.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol
from uuid import UUID

from retsu.domain.maintenance import ExpiredMessages, PurgedDeadLetters
from retsu.domain.message import DequeueResult, MessageToStore, Priority, Receipt
from retsu.domain.queue import Queue, QueueSettingsUpdate
from retsu.domain.state import PriorityState, StateSnapshot


class Clock(Protocol):
    def now(self) -> datetime: ...


class IdGenerator(Protocol):
    def new_id(self) -> UUID: ...


class QueueRepository(Protocol):
    """Queue metadata, stored durably."""

    async def add_queue(self, queue: Queue) -> Queue:
        """Store a new queue; returns it with storage-stamped times.

        Raises QueueAlreadyExists when the name is taken.
        """
        ...

    async def get_queue(self, queue_id: UUID) -> Queue | None: ...

    async def update_queue(self, queue_id: UUID, update: QueueSettingsUpdate) -> Queue | None:
        """Apply a settings change atomically; None when the queue does not exist."""
        ...


class MessageRepository(Protocol):
    """Queue messages. Every method is one transaction."""

    async def enqueue(self, queue_id: UUID, messages: Sequence[MessageToStore]) -> None:
        """Insert all or none. Raises QueueNotFound if the queue is gone."""
        ...

    async def dequeue(
        self,
        queue_id: UUID,
        *,
        limit: int,
        visibility_timeout_seconds: int,
        max_delivery_attempts: int,
        dead_letter_batch_size: int,
    ) -> DequeueResult:
        """Move up to ``dead_letter_batch_size`` exhausted messages to dead-letter storage,
        then claim up to ``limit`` deliverable messages: highest priority first, FIFO
        within a priority, never one that is expired, delayed or leased.
        """
        ...

    async def acknowledge(self, queue_id: UUID, receipts: Sequence[Receipt]) -> int:
        """Delete each message whose current, unexpired delivery matches its receipt.

        Returns how many were deleted; a stale receipt deletes nothing.
        """
        ...


class QueueNames(Protocol):
    """Queue ID → immutable name (for metric labels and existence checks)."""

    async def name_of(self, queue_id: UUID) -> str:
        """Raises QueueNotFound."""
        ...

    async def remember(self, queue: Queue) -> None: ...

    async def forget(self, queue_id: UUID) -> None: ...


class QueueDetails(Protocol):
    """Queue ID → full queue (settings, paused)."""

    async def details_of(self, queue_id: UUID) -> Queue:
        """Raises QueueNotFound."""
        ...

    async def remember(self, queue: Queue) -> None: ...

    async def forget(self, queue_id: UUID) -> None: ...


class QueueEvents(Protocol):
    """Counters of what happened to messages, recorded by the operation itself."""

    def enqueued(self, queue_name: str, priority: Priority, count: int = 1) -> None: ...

    def acknowledged(self, queue_name: str, count: int = 1) -> None: ...

    def dead_lettered(self, queue_name: str, count: int = 1) -> None: ...


class MessageMaintenance(Protocol):
    """Bulk removals done by the background cleaners, one bounded batch per call."""

    async def delete_expired_messages(self, batch_size: int) -> list[ExpiredMessages]:
        """Delete up to ``batch_size`` messages past their lifetime (an in-flight one only
        once its lease has also ended), oldest expiry first; counts per queue."""
        ...

    async def delete_dead_letters_older_than(
        self, retention_seconds: int, batch_size: int
    ) -> list[PurgedDeadLetters]: ...


class MaintenanceEvents(Protocol):
    def expired(self, queue_name: str, delivery_history: str, count: int = 1) -> None: ...

    def dead_letters_purged(self, queue_name: str, count: int = 1) -> None: ...


class Sleeper(Protocol):
    """Waits that end early when the worker is asked to stop."""

    async def sleep(self, seconds: float) -> None: ...

    @property
    def stopping(self) -> bool: ...


class LeaderSession(Protocol):
    """Leadership held through one database session; every state read goes through it."""

    async def read_state(self) -> list[PriorityState]: ...

    async def release(self) -> None:
        """End leadership: close the session (never hand it back to a pool)."""
        ...


class Leadership(Protocol):
    async def try_acquire(self) -> LeaderSession | None:
        """Leadership if nobody holds it, else None at once (never waits)."""
        ...


class StateSnapshots(Protocol):
    """Where the leader publishes what it read; /metrics reads from here."""

    def leadership_acquired(self) -> None: ...

    def publish(self, snapshot: StateSnapshot) -> None: ...

    def collection_finished(self, outcome: str, duration_seconds: float) -> None: ...
