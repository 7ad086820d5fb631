"""What the API answers, as typed values (msgspec Structs; timestamps are aware datetimes).

Fields the server adds later are ignored when decoding, so an older client keeps working
against a newer server. Ids and receipt handles are kept as the strings the server sent
(lower-case UUIDs, opaque handles): they are passed back verbatim.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any, Generic, TypeVar

import msgspec

__all__ = [
    "UNSET",
    "Attempt",
    "AttemptOutcome",
    "AuditEntry",
    "Consumer",
    "ConsumerHealth",
    "DeadLetter",
    "Enqueued",
    "Group",
    "GroupState",
    "History",
    "HistoryPoint",
    "Message",
    "MessageState",
    "NewMessage",
    "Page",
    "Priority",
    "Queue",
    "QueueDetails",
    "QueueStats",
    "RateLimit",
    "Schedule",
    "ScheduleMessage",
    "StoredMessage",
    "UnsetType",
]

T = TypeVar("T")

UNSET = msgspec.UNSET
"""A setting not given (``update_queue``): distinct from None, which removes a limit."""
UnsetType = msgspec.UnsetType


class Priority(enum.StrEnum):
    """Delivery order: every HIGH message before any MEDIUM, every MEDIUM before any LOW."""

    HIGH = "HIGH"
    MEDIUM = "MEDIUM"
    LOW = "LOW"


class MessageState(enum.StrEnum):
    """Where a live message is, by the counting rules of SPEC §3.2 — or ``completed``: an
    acknowledged message a queue with ``completed_retention_seconds`` keeps (§3.11)."""

    READY = "ready"
    IN_FLIGHT = "in_flight"
    DELAYED = "delayed"
    COMPLETED = "completed"


class AttemptOutcome(enum.StrEnum):
    """How one delivery ended (SPEC §3.11)."""

    IN_FLIGHT = "in_flight"
    """Not yet: its lease is active."""
    ACKNOWLEDGED = "acknowledged"
    RELEASED = "released"
    """A visibility change to 0 gave it back."""
    LEASE_EXPIRED = "lease_expired"
    """Its lease ended before anything else happened."""
    DELETED = "deleted"
    """An operator removed it while leased."""


class GroupState(enum.StrEnum):
    """Where a group's lane is (SPEC §3.10)."""

    READY = "ready"
    """Its head is deliverable now."""
    BLOCKED = "blocked"
    """At its in-flight limit."""
    WAITING = "waiting"
    """Its head is delayed (or waits for the group's next token)."""


class ConsumerHealth(enum.StrEnum):
    """Seen within 30 s, within 5 min, or longer ago."""

    HEALTHY = "healthy"
    STALE = "stale"
    OFFLINE = "offline"


class _Payload:
    """Mixin for values that carry a text payload: ``json()`` decodes it."""

    __slots__ = ()
    payload: str

    def json(self, type: Any = Any) -> Any:
        """The payload decoded as JSON (optionally into ``type``, e.g. a Struct)."""
        return msgspec.json.decode(self.payload, type=type)


class RateLimit(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A token bucket (SPEC §3.10): over any window of ``t`` seconds at most
    ``burst + per_second * t`` deliveries. ``burst`` given as None takes the server's
    default, ``max(1, ceil(per_second))``; the server always answers it."""

    per_second: float
    burst: int | None = None


class Queue(msgspec.Struct, frozen=True, kw_only=True):
    """A queue and its settings. Flow control and history (SPEC §3.10, §3.11):
    ``group_max_in_flight`` (1: each group is an ordered lane), ``max_in_flight`` (None: no
    cap), ``rate_limit`` and ``group_rate_limit`` (None: none), and
    ``completed_retention_seconds`` (0: an acknowledged message is gone at once)."""

    id: str
    name: str
    visibility_timeout_seconds: int
    max_delivery_attempts: int
    default_message_ttl_seconds: int
    paused: bool
    group_max_in_flight: int = 1
    max_in_flight: int | None = None
    rate_limit: RateLimit | None = None
    group_rate_limit: RateLimit | None = None
    completed_retention_seconds: int = 0


class QueueStats(msgspec.Struct, frozen=True, kw_only=True):
    ready: int
    in_flight: int
    delayed: int
    dead_letters: int
    oldest_ready_age_seconds: float
    groups: int = 0
    """Groups with a live message."""
    completed: int = 0
    """Completed messages kept right now (not live: in none of the other counts)."""


class QueueDetails(Queue, frozen=True, kw_only=True):
    """A queue with its exact counts at the time of the request."""

    stats: QueueStats


class Enqueued(msgspec.Struct, frozen=True, kw_only=True):
    """The id of an enqueued message; ``replayed`` when an Idempotency-Key matched an
    earlier enqueue (nothing new was stored)."""

    id: str
    replayed: bool = False


class NewMessage(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One entry of a batch enqueue (the body of a single enqueue, too)."""

    payload: str
    priority: Priority | str = Priority.MEDIUM
    ttl_seconds: int | None = None
    delay_seconds: int | None = None
    group: str | None = None
    """Its group: an ordered, fairly served lane of its queue (SPEC §3.10)."""


class Message(_Payload, msgspec.Struct, frozen=True, kw_only=True):
    """One delivery of a message: acknowledge it with its ``receipt_handle``."""

    id: str
    payload: str
    priority: Priority
    receipt_handle: str
    delivery_attempts: int
    enqueued_at: datetime
    group: str | None = None


class Attempt(msgspec.Struct, frozen=True, kw_only=True):
    """One delivery of a message (SPEC §3.11): who had it (``consumer``, the dequeue's
    ``Retsu-Consumer``), when, how it ended, and the last ``error`` a visibility change
    gave it. ``ended_at`` is None while in flight."""

    number: int
    delivered_at: datetime
    consumer: str | None
    ended_at: datetime | None
    outcome: AttemptOutcome
    error: str | None


class StoredMessage(_Payload, msgspec.Struct, frozen=True, kw_only=True):
    """A message as an operator sees it (browsing never claims; no receipt handle): a live
    one, or a completed one (``state`` completed, with ``completed_at`` and ``result``).
    ``attempts`` are its deliveries, oldest first (at most the latest 100)."""

    id: str
    payload: str
    priority: Priority
    state: MessageState
    delivery_attempts: int
    enqueued_at: datetime
    expires_at: datetime
    available_at: datetime
    last_delivered_at: datetime | None = None
    redriven_from: str | None = None
    group: str | None = None
    schedule_id: str | None = None
    """The schedule that enqueued this message (SPEC §3.12), else None."""
    attempts: list[Attempt] = msgspec.field(default_factory=list)
    completed_at: datetime | None = None
    result: str | None = None
    """The acknowledge's ``result`` of a completed message, else None."""


class DeadLetter(_Payload, msgspec.Struct, frozen=True, kw_only=True):
    """A message moved out of its queue; ``reason`` says why, ``attempts`` what happened
    to each delivery and ``last_error`` the latest error a consumer gave."""

    id: str
    payload: str
    priority: Priority
    delivery_attempts: int
    enqueued_at: datetime
    last_delivered_at: datetime | None
    dead_lettered_at: datetime
    reason: str
    group: str | None = None
    attempts: list[Attempt] = msgspec.field(default_factory=list)
    last_error: str | None = None


class Group(msgspec.Struct, frozen=True, kw_only=True):
    """A group of a queue with a live message (SPEC §3.10): its counts, its head (the
    oldest live message, delivered before anything behind it) and its state."""

    group: str
    ready: int
    in_flight: int
    delayed: int
    head_id: str
    head_delivery_attempts: int
    head_enqueued_at: datetime
    last_delivered_at: datetime | None
    state: GroupState


class AuditEntry(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    at: datetime
    actor: str
    action: str
    target_type: str
    target_id: str
    request_id: str
    details: dict[str, Any]


class Consumer(msgspec.Struct, frozen=True, kw_only=True):
    queue_id: str
    queue_name: str
    name: str
    first_seen_at: datetime
    last_seen_at: datetime
    deliveries: int
    health: ConsumerHealth


class HistoryPoint(msgspec.Struct, frozen=True, kw_only=True):
    at: datetime
    ready: int
    in_flight: int
    delayed: int
    dead_letters: int
    enqueued: int
    delivered: int
    acknowledged: int
    dead_lettered: int
    expired: int


class History(msgspec.Struct, frozen=True, kw_only=True):
    interval_seconds: int
    points: list[HistoryPoint]


class Page(msgspec.Struct, Generic[T], frozen=True, kw_only=True):
    """One page of a list; pass ``next_cursor`` back for the next one (None: last page)."""

    items: list[T]
    next_cursor: str | None


class ScheduleMessage(msgspec.Struct, frozen=True, kw_only=True):
    """What a schedule enqueues at each due time (no delay: the schedule says when)."""

    payload: str
    priority: Priority = Priority.MEDIUM
    ttl_seconds: int | None = None
    group: str | None = None


class Schedule(msgspec.Struct, frozen=True, kw_only=True):
    """A recurring message (SPEC §3.12): exactly one of ``cron`` (read in ``timezone``) and
    ``every_seconds``. ``next_run_at`` is None while paused; ``last_run_at`` is when its
    message was last enqueued."""

    id: str
    queue_id: str
    name: str
    cron: str | None
    every_seconds: int | None
    timezone: str
    message: ScheduleMessage
    paused: bool
    next_run_at: datetime | None
    last_run_at: datetime | None
    created_at: datetime
