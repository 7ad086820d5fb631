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
    "AuditEntry",
    "Consumer",
    "ConsumerHealth",
    "DeadLetter",
    "Enqueued",
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
    "Schedule",
    "ScheduleMessage",
    "StoredMessage",
]

T = TypeVar("T")


class Priority(enum.StrEnum):
    """Delivery order: every HIGH message before any MEDIUM, every MEDIUM before any LOW."""

    HIGH = "HIGH"
    MEDIUM = "MEDIUM"
    LOW = "LOW"


class MessageState(enum.StrEnum):
    """Where a live message is, by the counting rules of SPEC §3.2."""

    READY = "ready"
    IN_FLIGHT = "in_flight"
    DELAYED = "delayed"


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


class Queue(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    name: str
    visibility_timeout_seconds: int
    max_delivery_attempts: int
    default_message_ttl_seconds: int
    paused: bool


class QueueStats(msgspec.Struct, frozen=True, kw_only=True):
    ready: int
    in_flight: int
    delayed: int
    dead_letters: int
    oldest_ready_age_seconds: float


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


class Message(_Payload, msgspec.Struct, frozen=True, kw_only=True):
    """One delivery of a message: acknowledge it with its ``receipt_handle``."""

    id: str
    payload: str
    priority: Priority
    receipt_handle: str
    delivery_attempts: int
    enqueued_at: datetime


class StoredMessage(_Payload, msgspec.Struct, frozen=True, kw_only=True):
    """A live message as an operator sees it (browsing never claims; no receipt handle)."""

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


class DeadLetter(_Payload, msgspec.Struct, frozen=True, kw_only=True):
    id: str
    payload: str
    priority: Priority
    delivery_attempts: int
    enqueued_at: datetime
    last_delivered_at: datetime | None
    dead_lettered_at: datetime
    reason: str


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
