"""msgspec shapes of request and response bodies.

Request Structs forbid unknown fields; optional fields default to ``None`` so that
an explicit ``null`` means "absent". Integer fields are plain ``int`` (msgspec
refuses bools and floats for them); their ranges are the domain's business.
"""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import UUID

import msgspec
from litestar import Response

from retsu.domain.message import DeliveredMessage, Priority
from retsu.domain.queue import Queue

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


CREATE_QUEUE = msgspec.json.Decoder(CreateQueueBody)
UPDATE_QUEUE = msgspec.json.Decoder(UpdateQueueBody)
MESSAGE = msgspec.json.Decoder(MessageBody)
BATCH_ENQUEUE = msgspec.json.Decoder(BatchEnqueueBody)
DEQUEUE = msgspec.json.Decoder(DequeueBody)
ACKNOWLEDGE = msgspec.json.Decoder(AcknowledgeBody)
BATCH_ACKNOWLEDGE = msgspec.json.Decoder(BatchAcknowledgeBody)

# -- responses ----------------------------------------------------------------------


class QueueOut(msgspec.Struct, gc=False):
    id: UUID
    name: str
    visibility_timeout_seconds: int
    max_delivery_attempts: int
    default_message_ttl_seconds: int
    paused: bool


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


def json_response(body: msgspec.Struct, status: int = 200) -> Response[bytes]:
    return Response(content=_encoder.encode(body), status_code=status, media_type=JSON_MEDIA_TYPE)


def no_content() -> Response[bytes]:
    return Response(content=b"", status_code=204)
