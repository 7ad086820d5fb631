"""msgspec shapes of request and response bodies.

Request Structs forbid unknown fields; optional fields default to ``None`` so that
an explicit ``null`` means "absent". Integer fields are plain ``int`` (msgspec
refuses bools and floats for them); their ranges are the domain's business.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import msgspec
from litestar import Response

from retsu.domain.audit import AuditRecord
from retsu.domain.message import DeadLetter, DeliveredMessage, Priority
from retsu.domain.queue import Queue
from retsu.domain.state import QueueStats

# -- requests ---------------------------------------------------------------------


class CreateQueueBody(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    visibility_timeout_seconds: int | None = None
    max_delivery_attempts: int | None = None
    default_message_ttl_seconds: int | None = None


class UpdateQueueBody(msgspec.Struct, forbid_unknown_fields=True):
    visibility_timeout_seconds: int | None = None
    max_delivery_attempts: int | None = None
    default_message_ttl_seconds: int | None = None


class MessageBody(msgspec.Struct, forbid_unknown_fields=True):
    payload: str
    priority: str
    ttl_seconds: int | None = None
    delay_seconds: int | None = None


class BatchEnqueueBody(msgspec.Struct, forbid_unknown_fields=True):
    messages: list[MessageBody]


class DequeueBody(msgspec.Struct, forbid_unknown_fields=True):
    wait_seconds: int | None = None
    visibility_timeout_seconds: int | None = None
    max_messages: int | None = None


class AcknowledgeBody(msgspec.Struct, forbid_unknown_fields=True):
    receipt_handle: str


class ReceiptBody(msgspec.Struct, forbid_unknown_fields=True):
    id: UUID
    receipt_handle: str


class BatchAcknowledgeBody(msgspec.Struct, forbid_unknown_fields=True):
    messages: list[ReceiptBody]


class VisibilityBody(msgspec.Struct, forbid_unknown_fields=True):
    receipt_handle: str
    visibility_timeout_seconds: int


class RedriveBody(msgspec.Struct, forbid_unknown_fields=True):
    limit: int | None = None


CREATE_QUEUE = msgspec.json.Decoder(CreateQueueBody)
UPDATE_QUEUE = msgspec.json.Decoder(UpdateQueueBody)
MESSAGE = msgspec.json.Decoder(MessageBody)
BATCH_ENQUEUE = msgspec.json.Decoder(BatchEnqueueBody)
DEQUEUE = msgspec.json.Decoder(DequeueBody)
ACKNOWLEDGE = msgspec.json.Decoder(AcknowledgeBody)
BATCH_ACKNOWLEDGE = msgspec.json.Decoder(BatchAcknowledgeBody)
VISIBILITY = msgspec.json.Decoder(VisibilityBody)
REDRIVE = msgspec.json.Decoder(RedriveBody)

# -- responses ----------------------------------------------------------------------


class QueueOut(msgspec.Struct, gc=False):
    id: UUID
    name: str
    visibility_timeout_seconds: int
    max_delivery_attempts: int
    default_message_ttl_seconds: int
    paused: bool


class StatsOut(msgspec.Struct, gc=False):
    ready: int
    in_flight: int
    delayed: int
    dead_letters: int
    oldest_ready_age_seconds: float


class QueueWithStatsOut(msgspec.Struct, gc=False):
    id: UUID
    name: str
    visibility_timeout_seconds: int
    max_delivery_attempts: int
    default_message_ttl_seconds: int
    paused: bool
    stats: StatsOut


class QueuesOut(msgspec.Struct):
    items: list[QueueOut]
    next_cursor: str | None


class PurgedOut(msgspec.Struct, gc=False):
    purged: int


class DeadLetterOut(msgspec.Struct, gc=False):
    id: UUID
    payload: str
    priority: str
    delivery_attempts: int
    enqueued_at: datetime
    last_delivered_at: datetime | None
    dead_lettered_at: datetime
    reason: str


class DeadLettersOut(msgspec.Struct):
    items: list[DeadLetterOut]
    next_cursor: str | None


class RedrivenOut(msgspec.Struct, gc=False):
    redriven: int


class AuditRecordOut(msgspec.Struct):
    id: UUID
    at: datetime
    actor: str
    action: str
    target_type: str
    target_id: str
    request_id: str | None
    details: dict[str, Any]


class AuditLogOut(msgspec.Struct):
    items: list[AuditRecordOut]
    next_cursor: str | None


class IdOut(msgspec.Struct, gc=False):
    id: UUID


class IdsOut(msgspec.Struct):
    ids: list[UUID]


class MessageOut(msgspec.Struct, gc=False):
    id: UUID
    payload: str
    priority: str
    receipt_handle: str
    delivery_attempts: int
    enqueued_at: datetime


class MessagesOut(msgspec.Struct):
    messages: list[MessageOut]


class StatusOut(msgspec.Struct, gc=False):
    status: str


_PRIORITY_NAMES = {p: p.name for p in Priority}


def queue_out(queue: Queue) -> QueueOut:
    settings = queue.settings
    return QueueOut(
        id=queue.id,
        name=queue.name,
        visibility_timeout_seconds=settings.visibility_timeout_seconds,
        max_delivery_attempts=settings.max_delivery_attempts,
        default_message_ttl_seconds=settings.default_message_ttl_seconds,
        paused=queue.paused,
    )


def _utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo is UTC else moment.astimezone(UTC)


def queue_with_stats_out(queue: Queue, stats: QueueStats) -> QueueWithStatsOut:
    settings = queue.settings
    return QueueWithStatsOut(
        id=queue.id,
        name=queue.name,
        visibility_timeout_seconds=settings.visibility_timeout_seconds,
        max_delivery_attempts=settings.max_delivery_attempts,
        default_message_ttl_seconds=settings.default_message_ttl_seconds,
        paused=queue.paused,
        stats=StatsOut(
            ready=stats.ready,
            in_flight=stats.in_flight,
            delayed=stats.delayed,
            dead_letters=stats.dead_letters,
            # Milliseconds are plenty for an age; fewer digits on the wire.
            oldest_ready_age_seconds=round(stats.oldest_ready_age_seconds, 3),
        ),
    )


def dead_letter_out(record: DeadLetter) -> DeadLetterOut:
    return DeadLetterOut(
        id=record.id,
        payload=record.payload,
        priority=_PRIORITY_NAMES[record.priority],
        delivery_attempts=record.delivery_attempts,
        enqueued_at=_utc(record.enqueued_at),
        last_delivered_at=(
            None if record.last_delivered_at is None else _utc(record.last_delivered_at)
        ),
        dead_lettered_at=_utc(record.dead_lettered_at),
        reason=record.reason,
    )


def audit_record_out(record: AuditRecord) -> AuditRecordOut:
    return AuditRecordOut(
        id=record.id,
        at=_utc(record.at),
        actor=record.actor,
        action=record.action,
        target_type=record.target_type,
        target_id=record.target_id,
        request_id=record.request_id,
        details=record.details,
    )


def message_out(message: DeliveredMessage) -> MessageOut:
    return MessageOut(
        id=message.id,
        payload=message.payload,
        priority=_PRIORITY_NAMES[message.priority],
        receipt_handle=message.receipt_handle,
        delivery_attempts=message.delivery_attempts,
        enqueued_at=_utc(message.enqueued_at),
    )


# -- encoding ------------------------------------------------------------------------

_encoder = msgspec.json.Encoder()
JSON_MEDIA_TYPE = "application/json"


def json_response(
    body: msgspec.Struct, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response[bytes]:
    return Response(
        content=_encoder.encode(body),
        status_code=status,
        media_type=JSON_MEDIA_TYPE,
        headers=dict(headers) if headers else None,
    )


def no_content() -> Response[bytes]:
    return Response(content=b"", status_code=204)
