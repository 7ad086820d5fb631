"""Ports: what the use cases need from the outside world, as Protocols.

Adapters (memory, postgres, redis, telemetry) implement these; use cases never
import an adapter.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID

from retsu.domain.audit import AuditAction, AuditEntry, AuditRecord
from retsu.domain.browsing import BrowseState, MessageBatch, MessagePosition, StoredMessage
from retsu.domain.consumer import ConsumerPosition, ConsumerRecord, ConsumerSighting, SeenBetween
from retsu.domain.database_health import DatabaseHealth
from retsu.domain.groups import GroupPosition, GroupState, GroupSummary
from retsu.domain.history import HistoryPoint
from retsu.domain.idempotency import IdempotentEnqueued
from retsu.domain.maintenance import ExpiredMessages, PurgedDeadLetters
from retsu.domain.message import (
    Acknowledged,
    DeadLetter,
    DequeueResult,
    MessageToStore,
    Priority,
    Receipt,
)
from retsu.domain.pagination import AuditPosition, DeadLetterPosition, Found, QueuePosition
from retsu.domain.queue import Queue, QueueSettingsUpdate
from retsu.domain.schedule import (
    DueSchedules,
    NewSchedule,
    Schedule,
    SchedulePosition,
    ScheduleUpdate,
)
from retsu.domain.search import EVERYTHING, Search
from retsu.domain.state import PriorityState, StateSnapshot


class Clock(Protocol):
    def now(self) -> datetime: ...


class IdGenerator(Protocol):
    def new_id(self) -> UUID: ...

    def new_ids(self, count: int) -> list[UUID]:
        """Ids for the messages of one request, increasing. An implementation may make
        them share bits that storage uses to keep one batch together."""
        ...


class QueueRepository(Protocol):
    """Queue metadata, stored durably.

    Every operator change writes its ``AuditEntry`` in the same transaction; a change
    that does not happen (unknown queue, taken name) writes none.
    """

    async def add_queue(self, queue: Queue, audit: AuditEntry) -> Queue:
        """Store a new queue; returns it with storage-stamped times.

        Raises QueueAlreadyExists when the name is taken.
        """
        ...

    async def get_queue(self, queue_id: UUID) -> Queue | None: ...

    async def update_queue(
        self, queue_id: UUID, update: QueueSettingsUpdate, audit: AuditEntry
    ) -> Queue | None:
        """Apply a settings change atomically; None when the queue does not exist."""
        ...

    async def set_paused(self, queue_id: UUID, paused: bool, audit: AuditEntry) -> Queue | None:
        """Pause or resume; None when the queue does not exist."""
        ...

    async def list_queues(
        self, *, limit: int, after: QueuePosition | None, name: str | None
    ) -> list[Queue]:
        """Up to ``limit`` queues by name in byte order, after ``after``; ``name`` filters
        to that exact name."""
        ...

    async def purge_queue(self, queue_id: UUID, audit: AuditEntry) -> int | None:
        """Delete every live message (not dead letters); how many, or None when the queue
        does not exist. The audit row's details get ``purged``: the count."""
        ...

    async def delete_queue(self, queue_id: UUID, audit: AuditEntry) -> bool:
        """Delete the queue with its messages, dead letters, idempotency keys and state
        counters; False when it does not exist. The audit row's details get ``name``,
        ``messages`` and ``dead_letters`` (what went with it)."""
        ...


class QueueStateReader(Protocol):
    async def read_state(self, queue_id: UUID) -> list[PriorityState]:
        """Exact state of one queue per priority (SPEC §3.2 counting rules), at a cost
        independent of the backlog; empty when the queue does not exist."""
        ...

    async def read_states(self, queue_ids: Sequence[UUID]) -> list[PriorityState]:
        """``read_state`` of several queues in one read (a page of the console's overview),
        in the order given; queues that do not exist are left out."""
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
        visibility_timeout_seconds: int | None,
        dead_letter_batch_size: int,
        consumer: str | None = None,
    ) -> DequeueResult:
        """Move up to ``dead_letter_batch_size`` exhausted messages to dead-letter storage,
        then claim up to ``limit`` deliverable messages: highest priority first, then the
        one that waited longest (FIFO without groups; a group's next message waits from
        its group's last delivery, and a group is an ordered lane of at most
        ``group_max_in_flight`` leases — SPEC §3.10), within the queue's ``max_in_flight``
        and rate limits; never one that is expired, delayed or leased. Each delivery is
        recorded as an attempt of ``consumer`` (SPEC §3.11).

        The queue's own stored settings decide, read in the same transaction (never a
        cached copy): its attempts limit (a message with no attempts left is never
        delivered again, even after the limit was lowered), its visibility timeout when
        ``visibility_timeout_seconds`` is None, and whether it is paused (then nothing is
        claimed or moved, and the result says ``paused``). Raises QueueNotFound.
        """
        ...

    async def acknowledge(self, queue_id: UUID, receipts: Sequence[Receipt]) -> Acknowledged:
        """Delete each message whose current, unexpired delivery matches its receipt — or,
        when the queue keeps completed messages, keep it as completed with the receipt's
        result. A stale receipt changes nothing. Raises QueueNotFound."""
        ...

    async def enqueue_idempotent(
        self, queue_id: UUID, message: MessageToStore, key: str, fingerprint: bytes
    ) -> IdempotentEnqueued:
        """Insert ``message`` unless ``key`` was used in this queue within the last 24 h.

        The key and the message are stored in one transaction, so of concurrent requests
        with one key exactly one stores its message; the others (and later repeats) get
        that message's id with ``replayed=True``. Raises IdempotencyKeyConflict when the
        key stands for a message with another fingerprint, QueueNotFound when the queue
        is gone.
        """
        ...

    async def change_visibility(
        self,
        queue_id: UUID,
        receipt: Receipt,
        visibility_timeout_seconds: int,
        error: str | None = None,
    ) -> bool:
        """End the lease ``visibility_timeout_seconds`` from now (0: at once, the attempt
        closing as released) if the receipt is the message's current, unexpired delivery;
        False (nothing changed) otherwise. The delivery attempt still counts; ``error`` is
        recorded on it."""
        ...

    async def unclaim(self, queue_id: UUID, receipts: Sequence[Receipt]) -> int:
        """Take back deliveries that never reached their consumer (SPEC §3.1): each current
        delivery's lease ends now and its attempt is not counted. How many."""
        ...


class MessageBrowser(Protocol):
    """Looking at a queue's live messages without claiming them, and an operator's delete
    (SPEC §3.6). States follow the §3.2 counting rules (``retsu.domain.browsing``)."""

    async def list_messages(
        self,
        queue_id: UUID,
        *,
        state: BrowseState | None,
        priority: Priority | None,
        limit: int,
        after: MessagePosition | None,
        group: str | None = None,
        match: dict[str, Any] | None = None,
    ) -> MessageBatch:
        """Up to ``limit`` messages after ``after``, in the order of ``state``'s list (every
        live message when None; completed ones only when asked), of ``priority``, of
        ``group`` and whose JSON payload contains ``match`` only when given; never changes
        a message. Examines at most ``BROWSE_SCAN_BUDGET`` stored rows: when that ends the
        walk first, the batch says where to resume. Raises QueueNotFound."""
        ...

    async def get_message(self, queue_id: UUID, message_id: UUID) -> StoredMessage | None:
        """The live (or completed) message, or None when it is in no state. Raises
        QueueNotFound."""
        ...

    async def delete_message(self, queue_id: UUID, message_id: UUID, audit: AuditEntry) -> bool:
        """Remove a live (or completed) message in any state, with its audit row, in one
        transaction; False when there is none. Raises QueueNotFound."""
        ...

    async def list_groups(
        self,
        queue_id: UUID,
        *,
        state: GroupState | None,
        limit: int,
        after: GroupPosition | None,
    ) -> Found[GroupSummary, GroupPosition]:
        """Up to ``limit`` groups with a live message after ``after`` (of ``state`` when
        given), the longest-waiting first (``domain/groups.py``). With a state, examines
        at most ``BROWSE_SCAN_BUDGET`` groups: when that ends the walk first, the result
        says where to resume. Raises QueueNotFound."""
        ...

    async def count_messages(
        self, queue_id: UUID, *, state: BrowseState | None, search: Search, limit: int
    ) -> int:
        """How many messages in ``state`` (any live one when None) ``search`` admits, at
        most ``limit`` (a bulk action's dry run). Raises QueueNotFound."""
        ...

    async def delete_messages(
        self,
        queue_id: UUID,
        *,
        state: BrowseState | None,
        search: Search,
        limit: int,
        audit: AuditEntry,
    ) -> int:
        """Delete up to ``limit`` of those messages — live ones in enqueue order, completed
        ones oldest completion first — in bounded batches, never one a dequeue holds, every
        count kept exact; how many. One audit row, its details given ``deleted``: the
        count (SPEC §3.11). Raises QueueNotFound."""
        ...


class DeadLetterRepository(Protocol):
    """Dead-letter records of one queue. Listing is newest first, by (dead_lettered_at,
    enqueue_order) descending; bulk redrive takes the exact reverse, oldest first."""

    async def list_dead_letters(
        self,
        queue_id: UUID,
        *,
        limit: int,
        after: DeadLetterPosition | None,
        search: Search = EVERYTHING,
    ) -> Found[DeadLetter, DeadLetterPosition]:
        """Up to ``limit`` records after ``after`` that ``search`` admits, newest first.
        With a search, examines at most ``BROWSE_SCAN_BUDGET`` records: when that ends the
        walk first, the result says where to resume."""
        ...

    async def get_dead_letter(self, queue_id: UUID, message_id: UUID) -> DeadLetter | None: ...

    async def redrive_dead_letter(
        self, queue_id: UUID, message_id: UUID, new_id: UUID, audit: AuditEntry
    ) -> bool:
        """Move one record back as a fresh message ``new_id`` (attempts 0, the queue's
        default lifetime, same priority) and remove it, in one transaction; False when
        there is no such record."""
        ...

    async def redrive_dead_letters(
        self,
        queue_id: UUID,
        new_ids: Sequence[UUID],
        audit: AuditEntry,
        search: Search = EVERYTHING,
    ) -> int:
        """Redrive up to ``len(new_ids)`` records ``search`` admits, oldest first, giving
        them the new ids in that order, skipping any another action holds; how many moved.
        The audit row's details get ``redriven``: the count, and ``new_message_ids``: each
        record's id → the id of the message made from it."""
        ...

    async def delete_dead_letter(self, queue_id: UUID, message_id: UUID, audit: AuditEntry) -> bool:
        """False when there is no such record."""
        ...

    async def count_dead_letters(self, queue_id: UUID, search: Search, limit: int) -> int:
        """How many records ``search`` admits, at most ``limit`` (a bulk action's dry run)."""
        ...

    async def delete_dead_letters(
        self, queue_id: UUID, search: Search, limit: int, audit: AuditEntry
    ) -> int:
        """Delete up to ``limit`` records ``search`` admits, oldest first, in bounded
        batches, skipping any another action holds; how many. One audit row, its details
        given ``deleted``: the count (SPEC §3.11)."""
        ...


class AuditLog(Protocol):
    async def list_audit_records(
        self,
        *,
        limit: int,
        after: AuditPosition | None,
        queue_id: UUID | None,
        action: AuditAction | None,
    ) -> list[AuditRecord]:
        """Newest first, by (at, id) descending."""
        ...


class ServerSecrets(Protocol):
    """Secrets made once by ``retsu migrate`` and shared by every API process (the HTTP
    adapter signs cursors and console sessions with them)."""

    async def cursor_signing_key(self) -> bytes:
        """The key that signs pagination cursors (and, derived, console sessions)."""
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

    def redriven(self, queue_name: str, count: int = 1) -> None: ...

    def throttled(self, queue_name: str, reason: str) -> None:
        """A dequeue got fewer messages than it could have because of a limit (SPEC §3.10:
        ``max_in_flight``, ``rate_limit``, ``group_rate_limit``)."""
        ...


class MessageMaintenance(Protocol):
    """Bulk removals done by the background cleaners, one bounded batch per call."""

    async def delete_expired_messages(self, batch_size: int) -> list[ExpiredMessages]:
        """Delete up to ``batch_size`` messages past their lifetime (an in-flight one only
        once its lease has also ended), oldest expiry first; counts per queue."""
        ...

    async def delete_dead_letters_older_than(
        self, retention_seconds: int, batch_size: int
    ) -> list[PurgedDeadLetters]: ...

    async def delete_completed_messages(self, batch_size: int) -> int:
        """Delete up to ``batch_size`` completed messages kept longer than their queue's
        ``completed_retention_seconds`` (SPEC §3.11), oldest completion first; how many."""
        ...


class IdempotencyKeyMaintenance(Protocol):
    """Forgetting remembered Idempotency-Keys (the expired-message cleaner's second job)."""

    async def delete_idempotency_keys_older_than(self, age_seconds: int, batch_size: int) -> int:
        """Delete up to ``batch_size`` keys created more than ``age_seconds`` ago, oldest
        first; returns how many were deleted."""
        ...


class Maintenance(MessageMaintenance, IdempotencyKeyMaintenance, Protocol):
    """Everything the cleaners remove: one storage object serves both of their ports."""


class MaintenanceEvents(Protocol):
    def expired(self, queue_name: str, delivery_history: str, count: int = 1) -> None: ...

    def dead_letters_purged(self, queue_name: str, count: int = 1) -> None: ...


class Sleeper(Protocol):
    """Waits that end early when the worker is asked to stop."""

    async def sleep(self, seconds: float) -> None: ...

    @property
    def stopping(self) -> bool: ...


class LeadershipLost(Exception):
    """The database session that held leadership is gone (killed, or the database
    restarted), and the lock went with it. Not a failed refresh: the collector stops
    exporting state and competes for leadership again at its retry interval."""


class LeaderSession(Protocol):
    """Leadership held through one database session; every state read goes through it."""

    async def read_state(self) -> list[PriorityState]:
        """Every queue's state, read on the session that holds the lock. Raises
        LeadershipLost when that session itself broke; any other exception is a refresh
        that failed on a live session."""
        ...

    async def record_history(self, state: Sequence[PriorityState]) -> None:
        """Store one history snapshot per queue of ``state`` (what ``read_state`` just
        returned; SPEC §3.8), in one transaction on the leader's session: its depth, and
        the interval counts since the queue's previous snapshot taken from the cumulative
        counters at this moment. Queues deleted meanwhile are left out. Raises like
        ``read_state``."""
        ...

    async def release(self) -> None:
        """End leadership: close the session (never hand it back to a pool)."""
        ...


class Leadership(Protocol):
    async def try_acquire(self) -> LeaderSession | None:
        """Leadership if nobody holds it, else None at once (never waits). Raises
        DatabaseUnavailable when the database cannot be reached."""
        ...


class StateSnapshots(Protocol):
    """Where the leader publishes what it read; /metrics reads from here."""

    def leadership_acquired(self) -> None: ...

    def leadership_released(self) -> None:
        """Stop exporting state: another replica may be leading by now."""
        ...

    def publish(self, snapshot: StateSnapshot) -> None: ...

    def publish_database_health(self, health: DatabaseHealth | None) -> None:
        """The leader's latest database health read (SPEC §10); None: the last read failed,
        export nothing rather than an old value."""
        ...

    def collection_finished(self, outcome: str, duration_seconds: float) -> None: ...


class DatabaseHealthReader(Protocol):
    """What holds back vacuum in the database (SPEC §10, ``domain/database_health.py``)."""

    async def read_database_health(self) -> DatabaseHealth:
        """One consistent read: the oldest open transaction of this database, what holds
        back its xmin horizon (sessions of this database, prepared transactions, replication
        slots; oldest xmin first, at most ``HOLDER_LIMIT``; the reader's own session left
        out), and the dead rows and last autovacuum of each of Retsu's tables."""
        ...


class SignalWatch(Protocol):
    """One long poll's subscription to the signals of one queue (a context manager:
    registered on enter, so a signal that arrives before the first wait is kept)."""

    def __enter__(self) -> SignalWatch: ...

    def __exit__(self, *exc_info: object) -> None: ...

    async def wait(self, seconds: float) -> bool:
        """Return True as soon as the queue was signalled since the watch began or the
        previous wait returned (or once shutdown begins), False after ``seconds``."""
        ...

    @property
    def queue_changed(self) -> bool:
        """Whether the last wait returned for a change of the queue itself (resumed,
        paused, deleted), not only for a message."""
        ...


class ClientGone(Protocol):
    """Set once the client of a request has gone and can no longer receive its answer (an
    HTTP client that closed its connection; ``adapters/http/departure.py``). A dequeue
    whose client has gone keeps nothing it claimed (SPEC §3.1). ``asyncio.Event`` fits."""

    def is_set(self) -> bool: ...

    async def wait(self) -> object:
        """Return once the client has gone (never, while it stays)."""
        ...


class MessageSignals(Protocol):
    """Hints that a queue may have a deliverable message (a message arrived, a lease was
    released, the queue was resumed…). Only hints: a waiting dequeue always asks the
    repository, and asks again at least once a second even when nothing is signalled."""

    def announce(self, queue_id: UUID, *, queue_changed: bool = False) -> None:
        """Told by a use case after a committed change that may have made a message of
        ``queue_id`` deliverable (an enqueue, a redrive, a released lease) or, with
        ``queue_changed``, changed the queue itself (paused, resumed, deleted): wakes the
        polls waiting on it, in every API process. Never raises, never waits."""
        ...

    def watch(self, queue_id: UUID) -> SignalWatch: ...

    @property
    def closed(self) -> bool:
        """True once shutdown began: waits return at once, waiting polls answer empty."""
        ...

    def close(self) -> None:
        """Wake every waiter and make every later wait return at once (shutdown)."""
        ...


# -- consumers (SPEC §3.7) and queue history (SPEC §3.8) --------------------------------


class ConsumerStore(Protocol):
    """What API processes saw of named consumers, written coalesced."""

    async def record_consumers(self, sightings: Sequence[ConsumerSighting]) -> None:
        """Merge every sighting in one statement: the earliest first_seen_at, the latest
        last_seen_at, deliveries added. Sightings of queues that are gone are dropped."""
        ...

    async def count_consumers(self, *, seen: SeenBetween) -> dict[UUID, int]:
        """How many consumers each queue has whose last_seen_at is within ``seen`` (queues
        with none are left out), in one read."""
        ...

    async def list_consumers(
        self,
        *,
        limit: int,
        after: ConsumerPosition | None,
        queue_id: UUID | None,
        seen: SeenBetween,
    ) -> list[ConsumerRecord]:
        """Up to ``limit`` consumers whose last_seen_at is within ``seen``, most recently
        seen first (last_seen_at descending, then queue id and name), after ``after``."""
        ...


class ConsumerMaintenance(Protocol):
    async def delete_consumers_not_seen_for(self, age_seconds: int, batch_size: int) -> int:
        """Delete up to ``batch_size`` consumers last seen more than ``age_seconds`` ago;
        how many."""
        ...


class QueueHistoryReader(Protocol):
    async def read_history(
        self, queue_id: UUID, *, since: datetime, bucket_seconds: int
    ) -> list[HistoryPoint]:
        """The queue's snapshots taken at or after ``since``, oldest first, summed into
        epoch-aligned buckets of ``bucket_seconds`` (``domain.history.downsample``)."""
        ...

    async def read_histories(
        self, queue_ids: Sequence[UUID], *, since: datetime, bucket_seconds: int
    ) -> dict[UUID, list[HistoryPoint]]:
        """``read_history`` of several queues in one read; a queue with no snapshot in the
        window maps to an empty list."""
        ...


class HistoryMaintenance(Protocol):
    async def delete_history_older_than(self, age_seconds: int, batch_size: int) -> int:
        """Delete up to ``batch_size`` snapshots taken more than ``age_seconds`` ago."""
        ...


class ConsumerEvents(Protocol):
    """What the consumer tracker reports about itself (metrics)."""

    def consumer_sightings_dropped(self, count: int = 1) -> None:
        """Sightings not kept: the tracker was full (new consumers beyond its bound)."""
        ...

    def consumer_flush_finished(self, outcome: str, entries: int) -> None: ...


# -- schedules (SPEC §3.12) ---------------------------------------------------------------


class ScheduleRepository(Protocol):
    """A queue's schedules. Every change writes its ``AuditEntry`` in the same transaction;
    times (``created_at``, ``next_run_at``) come from storage's clock, due times from the
    schedule's recurrence (``retsu.domain.schedule``)."""

    async def add_schedule(self, schedule: NewSchedule, audit: AuditEntry) -> Schedule:
        """Store a new schedule, its first due time one interval (or the cron's next match)
        after now, none when paused. Raises QueueNotFound, ScheduleAlreadyExists."""
        ...

    async def get_schedule(self, queue_id: UUID, schedule_id: UUID) -> Schedule | None: ...

    async def list_schedules(
        self, queue_id: UUID, *, limit: int, after: SchedulePosition | None
    ) -> list[Schedule]:
        """Up to ``limit`` of the queue's schedules by name in byte order, after ``after``."""
        ...

    async def update_schedule(
        self, queue_id: UUID, schedule_id: UUID, update: ScheduleUpdate, audit: AuditEntry
    ) -> Schedule | None:
        """Apply ``update`` (``ScheduleUpdate.apply_to`` at storage's now); None when there
        is no such schedule. Raises ScheduleAlreadyExists for a taken name."""
        ...

    async def set_schedule_paused(
        self, queue_id: UUID, schedule_id: UUID, paused: bool, audit: AuditEntry
    ) -> Schedule | None:
        """Pause (no due time) or resume (due times afresh from now); None when there is no
        such schedule."""
        ...

    async def delete_schedule(self, queue_id: UUID, schedule_id: UUID, audit: AuditEntry) -> bool:
        """False when there is no such schedule. Messages it enqueued stay."""
        ...


class ScheduleRunner(Protocol):
    """What the scheduler asks storage: run one due schedule, exactly once per due time."""

    async def run_due_schedule(self) -> DueSchedules:
        """In one transaction: claim the unpaused schedule whose due time passed longest ago
        that no other runner holds (never waiting for one), enqueue its message (id
        ``scheduled_message_id``, ``schedule_id`` set; into a paused queue too), and advance
        it: ``last_run_at`` = now, ``next_run_at`` = its first due time after now (the due
        times in between are skipped and counted). A runner that dies at any moment commits
        nothing, so the due time stays for the next. With nothing due: no run, and the
        seconds until the earliest due time (None without any active schedule)."""
        ...


class ScheduleEvents(Protocol):
    """What the scheduler reports (metrics): each run, and the due times it skipped."""

    def schedule_ran(self, queue_name: str, outcome: str, lag_seconds: float) -> None:
        """``outcome``: ``enqueued``, or ``duplicate`` (the due time's message was stored
        already); ``lag_seconds``: from the due time to the enqueue."""
        ...

    def schedule_missed(self, queue_name: str, count: int) -> None:
        """Due times skipped because they passed while nothing ran."""
        ...
