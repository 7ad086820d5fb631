"""Message routes: enqueue (one, idempotently, or a batch), dequeue, acknowledge (one or a
batch), visibility changes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from litestar import Request, Response, post
from litestar.params import JSONBody

from retsu.adapters.http.auth import CONSUMER
from retsu.adapters.http.departure import client_departure
from retsu.adapters.http.dependencies import Messages
from retsu.adapters.http.dto import (
    MAX_BATCH_SIZE,
    AcknowledgeBody,
    BatchAcknowledgeBody,
    BatchEnqueueBody,
    DequeueBody,
    IdOut,
    IdsOut,
    MessageBody,
    MessageOut,
    MessagesOut,
    VisibilityBody,
    message_out,
)
from retsu.adapters.http.params import (
    CONSUMER as CONSUMER_HEADER,
)
from retsu.adapters.http.params import (
    IDEMPOTENCY_KEY,
    QUEUE,
    MessageId,
    QueueId,
    consumer_of,
    idempotency_key_of,
)
from retsu.adapters.http.request_rules import ClientDisconnected, RequestProblem
from retsu.application.messages import (
    AcknowledgeCommand,
    ChangeVisibilityCommand,
    DequeueCommand,
    EnqueueCommand,
    EnqueueIdempotentCommand,
)
from retsu.domain.dequeue import MAX_MESSAGES, WAIT_SECONDS, DequeueOptions
from retsu.domain.errors import IdempotencyKeyConflict, InvalidInput, StaleReceiptHandle
from retsu.domain.message import (
    MESSAGE_DELAY,
    MESSAGE_TTL,
    VISIBILITY_CHANGE,
    DeliveredMessage,
    NewMessage,
    Receipt,
)
from retsu.domain.queue import VISIBILITY_TIMEOUT

MESSAGES = QUEUE + "/messages"
_DEFAULT_DEQUEUE = DequeueOptions()
_NO_CONTENT: Response[Any] = Response(None, status_code=204)
_REPLAYED = {"idempotent-replayed": "true"}
_MESSAGE_CODES = (
    "invalid_payload",
    "invalid_priority",
    MESSAGE_TTL,
    MESSAGE_DELAY,
    "invalid_group",
)


def _check_batch_size(size: int) -> None:
    if not 1 <= size <= MAX_BATCH_SIZE:
        raise RequestProblem(
            400,
            "invalid_batch_size",
            f"messages must hold 1 to {MAX_BATCH_SIZE} entries, got {size}.",
        )


def _new_message(body: MessageBody) -> NewMessage:
    return NewMessage.parse(
        body.payload, body.priority, body.ttl_seconds, body.delay_seconds, body.group
    )


# The translations below are the routes' own, shared by the Litestar handlers and by the
# hot path in front of them (adapters/http/hot_routes.py), so each is written once.


def enqueue_command(queue_id: UUID, body: MessageBody) -> EnqueueCommand:
    """One message without an Idempotency-Key (``InvalidInput`` when a field is refused)."""
    return EnqueueCommand(queue_id=queue_id, messages=(_new_message(body),))


def dequeue_options(data: DequeueBody | None) -> DequeueOptions:
    """The dequeue's options from its optional body (``InvalidInput`` out of range)."""
    if data is None:
        return _DEFAULT_DEQUEUE
    return DequeueOptions(
        wait_seconds=0 if data.wait_seconds is None else data.wait_seconds,
        visibility_timeout_seconds=data.visibility_timeout_seconds,
        max_messages=data.max_messages,
    )


def dequeue_answer(
    options: DequeueOptions, delivered: Sequence[DeliveredMessage]
) -> MessageOut | MessagesOut | None:
    """What a dequeue answers: the list when ``max_messages`` was given, else the one
    message, or None (``204``) when there is none."""
    if options.max_messages is not None:
        return MessagesOut(messages=[message_out(m) for m in delivered])
    if not delivered:
        return None
    return message_out(delivered[0])


def acknowledge_command(
    queue_id: UUID, message_id: UUID, data: AcknowledgeBody
) -> AcknowledgeCommand:
    return AcknowledgeCommand(
        queue_id=queue_id, receipts=(Receipt(message_id, data.receipt_handle, data.result),)
    )


def _new_messages(bodies: Sequence[MessageBody]) -> list[NewMessage]:
    messages = []
    for index, body in enumerate(bodies):
        try:
            messages.append(_new_message(body))
        except InvalidInput as error:
            raise InvalidInput(f"messages[{index}]: {error.detail}", code=error.code) from None
    return messages


@post(
    MESSAGES,
    summary="Enqueue a message",
    description="`invalid_delay` also when the delay is not shorter than the lifetime.",
    response_description="The new message's id.",
    errors=(*_MESSAGE_CODES, "invalid_idempotency_key", IdempotencyKeyConflict),
    replies={
        200: (
            IdOut,
            "A repeat of an earlier request with the same Idempotency-Key and message: "
            "the original id, with `idempotent-replayed: true`.",
        )
    },
    reply_headers={200: {"idempotent-replayed": "`true`: this answers a repeat."}},
    request_headers=(IDEMPOTENCY_KEY,),
    scopes=CONSUMER,
)
async def enqueue_message(
    queue_id: QueueId,
    data: JSONBody[MessageBody],
    messages: Messages,
    request: Request[Any, Any, Any],
) -> Response[IdOut]:
    idempotency_key = idempotency_key_of(request)
    if idempotency_key is None:
        ids = await messages.enqueue(enqueue_command(queue_id, data))
        return Response(IdOut(id=ids[0]), status_code=201)
    result = await messages.enqueue_idempotent(
        EnqueueIdempotentCommand(
            queue_id=queue_id, message=_new_message(data), idempotency_key=idempotency_key
        )
    )
    if result.replayed:
        return Response(IdOut(id=result.id), status_code=200, headers=_REPLAYED)
    return Response(IdOut(id=result.id), status_code=201)


@post(
    MESSAGES + "/batch",
    summary="Enqueue 1–100 messages at once",
    description="All or nothing: one invalid entry rejects the batch with its index in "
    "`detail`. The Idempotency-Key header is not accepted here "
    "(`400 invalid_idempotency_key`): send messages one by one to make them idempotent.",
    response_description="The new ids, in request order.",
    errors=("invalid_batch_size", *_MESSAGE_CODES, "invalid_idempotency_key"),
    scopes=CONSUMER,
)
async def enqueue_batch(
    queue_id: QueueId,
    data: JSONBody[BatchEnqueueBody],
    messages: Messages,
    request: Request[Any, Any, Any],
) -> IdsOut:
    if idempotency_key_of(request) is not None:
        raise RequestProblem(
            400,
            "invalid_idempotency_key",
            "The batch route does not take an Idempotency-Key; send messages one by one "
            "to make them idempotent.",
        )
    _check_batch_size(len(data.messages))
    ids = await messages.enqueue(
        EnqueueCommand(queue_id=queue_id, messages=_new_messages(data.messages), batch=True)
    )
    return IdsOut(ids=ids)


@post(
    MESSAGES + "/dequeue",
    status_code=200,
    summary="Take the next message(s)",
    description="Highest priority first, FIFO within a priority. The body is optional "
    "(no body, or an empty one, takes the defaults).",
    response_description='Without `max_messages`: one message; with it: `{"messages": [...]}` '
    "(possibly empty).",
    errors=(WAIT_SECONDS, VISIBILITY_TIMEOUT, MAX_MESSAGES, "invalid_consumer"),
    replies={204: (None, "Without `max_messages`: nothing deliverable within `wait_seconds`.")},
    request_headers=(CONSUMER_HEADER,),
    scopes=CONSUMER,
)
async def dequeue_messages(
    queue_id: QueueId,
    messages: Messages,
    request: Request[Any, Any, Any],
    data: JSONBody[DequeueBody | None] = None,
) -> Response[MessageOut | MessagesOut]:
    consumer = consumer_of(request)
    options = dequeue_options(data)
    # A client that goes away stops a long poll, and what was claimed for it is given back
    # (SPEC §3.1; what cannot be told: departure.py).
    async with client_departure(request) as gone:
        delivered = await messages.dequeue(
            DequeueCommand(queue_id=queue_id, options=options, consumer=consumer, client_gone=gone)
        )
    if not delivered and gone.is_set():
        raise ClientDisconnected  # 499, a DEBUG line: nobody reads this answer
    answer = dequeue_answer(options, delivered)
    return _NO_CONTENT if answer is None else Response(answer)


@post(
    MESSAGES + "/{message_id:str}/acknowledge",
    status_code=204,
    summary="Acknowledge a message",
    description="`result` is kept with the message when its queue keeps completed messages "
    "(`completed_retention_seconds` > 0; SPEC §3.11), else dropped.",
    response_description="Done — also when already removed, stale or timed out (idempotent).",
    errors=("invalid_result",),
    scopes=CONSUMER,
)
async def acknowledge_message(
    queue_id: QueueId,
    message_id: MessageId,
    data: JSONBody[AcknowledgeBody],
    messages: Messages,
) -> None:
    await messages.acknowledge(acknowledge_command(queue_id, message_id, data))


@post(
    MESSAGES + "/acknowledge",
    status_code=204,
    summary="Acknowledge 1–100 messages",
    response_description="Done, with the single acknowledge's rule per entry.",
    errors=("invalid_batch_size",),
    scopes=CONSUMER,
)
async def acknowledge_messages(
    queue_id: QueueId,
    data: JSONBody[BatchAcknowledgeBody],
    messages: Messages,
) -> None:
    _check_batch_size(len(data.messages))
    await messages.acknowledge(
        AcknowledgeCommand(
            queue_id=queue_id, receipts=[Receipt(r.id, r.receipt_handle) for r in data.messages]
        )
    )


@post(
    MESSAGES + "/{message_id:str}/visibility",
    status_code=204,
    summary="Change a delivery's visibility timeout",
    description="`error` says why the consumer gives the message back; it is recorded on the "
    "current attempt (SPEC §3.11).",
    response_description="The lease now ends that many seconds from now (0 = release now).",
    errors=(VISIBILITY_CHANGE, "invalid_error", StaleReceiptHandle),
    scopes=CONSUMER,
)
async def change_message_visibility(
    queue_id: QueueId,
    message_id: MessageId,
    data: JSONBody[VisibilityBody],
    messages: Messages,
) -> None:
    await messages.change_visibility(
        ChangeVisibilityCommand(
            queue_id=queue_id,
            receipt=Receipt(message_id, data.receipt_handle),
            visibility_timeout_seconds=data.visibility_timeout_seconds,
            error=data.error,
        )
    )


ROUTES = [
    enqueue_message,
    enqueue_batch,
    dequeue_messages,
    acknowledge_message,
    acknowledge_messages,
    change_message_visibility,
]
