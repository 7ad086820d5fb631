"""Message routes: enqueue (one, idempotently, or a batch), dequeue, acknowledge (one or a
batch), visibility changes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from litestar import Request, Response, post
from litestar.handlers import HTTPRouteHandler
from litestar.params import FromPath

from retsu.adapters.http.body import parse_path_id, read_json, read_optional_json
from retsu.adapters.http.dto import (
    ACKNOWLEDGE,
    BATCH_ACKNOWLEDGE,
    BATCH_ENQUEUE,
    DEQUEUE,
    MESSAGE,
    VISIBILITY,
    IdOut,
    IdsOut,
    MessageBody,
    MessagesOut,
    json_response,
    message_out,
    no_content,
)
from retsu.adapters.http.problems import RequestProblem
from retsu.adapters.http.services import ApiServices
from retsu.application.acknowledge import AcknowledgeCommand
from retsu.application.change_visibility import ChangeVisibilityCommand
from retsu.application.dequeue import DequeueCommand
from retsu.application.enqueue import EnqueueCommand
from retsu.application.enqueue_idempotent import EnqueueIdempotentCommand
from retsu.domain.dequeue import DequeueOptions
from retsu.domain.errors import InvalidInput
from retsu.domain.message import NewMessage, Receipt

MAX_BATCH_SIZE = 100
_DEFAULT_DEQUEUE = DequeueOptions()
IDEMPOTENCY_KEY_HEADER = b"idempotency-key"
_REPLAYED = {"idempotent-replayed": "true"}


def _idempotency_key(request: Request[Any, Any, Any]) -> str | None:
    """The Idempotency-Key header as sent (None when absent). Sent twice, it is refused:
    which of the two would count is anybody's guess."""
    values = [value for name, value in request.scope["headers"] if name == IDEMPOTENCY_KEY_HEADER]
    if not values:
        return None
    if len(values) > 1:
        raise RequestProblem(
            400, "invalid_idempotency_key", "Send at most one Idempotency-Key header."
        )
    # Latin-1 maps every byte to one character, so a non-ASCII byte stays visible to
    # the domain's check (and is refused there).
    return values[0].decode("latin-1")


def _check_batch_size(size: int) -> None:
    if not 1 <= size <= MAX_BATCH_SIZE:
        raise RequestProblem(
            400,
            "invalid_batch_size",
            f"messages must hold 1 to {MAX_BATCH_SIZE} entries, got {size}.",
        )


def _new_message(body: MessageBody) -> NewMessage:
    return NewMessage.parse(body.payload, body.priority, body.ttl_seconds, body.delay_seconds)


def _indexed(index: int, error: InvalidInput) -> InvalidInput:
    return InvalidInput(f"messages[{index}]: {error.detail}", code=error.code)


def _new_messages(bodies: Sequence[MessageBody]) -> list[NewMessage]:
    messages = []
    for index, body in enumerate(bodies):
        try:
            messages.append(_new_message(body))
        except InvalidInput as error:
            raise _indexed(index, error) from None
    return messages


def message_routes(services: ApiServices) -> list[HTTPRouteHandler]:
    enqueue = services.enqueue
    enqueue_idempotent = services.enqueue_idempotent
    dequeue = services.dequeue
    acknowledge = services.acknowledge
    change_visibility = services.change_visibility

    @post("/v1/queues/{queue_id:str}/messages")
    async def enqueue_one(
        request: Request[Any, Any, Any], queue_id: FromPath[str]
    ) -> Response[bytes]:
        qid = parse_path_id(queue_id, "queue_id")
        key = _idempotency_key(request)
        message = _new_message(await read_json(request, MESSAGE))
        if key is None:
            ids = await enqueue(EnqueueCommand(queue_id=qid, messages=(message,)))
            return json_response(IdOut(id=ids[0]), 201)
        result = await enqueue_idempotent(
            EnqueueIdempotentCommand(queue_id=qid, message=message, idempotency_key=key)
        )
        if result.replayed:
            return json_response(IdOut(id=result.id), 200, _REPLAYED)
        return json_response(IdOut(id=result.id), 201)

    @post("/v1/queues/{queue_id:str}/messages/batch")
    async def enqueue_batch(
        request: Request[Any, Any, Any], queue_id: FromPath[str]
    ) -> Response[bytes]:
        qid = parse_path_id(queue_id, "queue_id")
        if _idempotency_key(request) is not None:
            raise RequestProblem(
                400,
                "invalid_idempotency_key",
                "The batch route does not take an Idempotency-Key; send messages one by one "
                "to make them idempotent.",
            )
        body = await read_json(request, BATCH_ENQUEUE)
        _check_batch_size(len(body.messages))
        messages = _new_messages(body.messages)
        ids = await enqueue(EnqueueCommand(queue_id=qid, messages=messages, batch=True))
        return json_response(IdsOut(ids=ids), 201)

    @post("/v1/queues/{queue_id:str}/messages/dequeue")
    async def dequeue_messages(
        request: Request[Any, Any, Any], queue_id: FromPath[str]
    ) -> Response[bytes]:
        qid = parse_path_id(queue_id, "queue_id")
        body = await read_optional_json(request, DEQUEUE)
        if body is None:
            options = _DEFAULT_DEQUEUE
        else:
            options = DequeueOptions(
                wait_seconds=0 if body.wait_seconds is None else body.wait_seconds,
                visibility_timeout_seconds=body.visibility_timeout_seconds,
                max_messages=body.max_messages,
            )
        delivered = await dequeue(DequeueCommand(queue_id=qid, options=options))
        if options.max_messages is None:
            if not delivered:
                return no_content()
            return json_response(message_out(delivered[0]))
        return json_response(MessagesOut(messages=[message_out(m) for m in delivered]))

    @post("/v1/queues/{queue_id:str}/messages/{message_id:str}/acknowledge")
    async def acknowledge_one(
        request: Request[Any, Any, Any], queue_id: FromPath[str], message_id: FromPath[str]
    ) -> Response[bytes]:
        qid = parse_path_id(queue_id, "queue_id")
        mid = parse_path_id(message_id, "message_id")
        body = await read_json(request, ACKNOWLEDGE)
        await acknowledge(
            AcknowledgeCommand(queue_id=qid, receipts=(Receipt(mid, body.receipt_handle),))
        )
        return no_content()

    @post("/v1/queues/{queue_id:str}/messages/acknowledge")
    async def acknowledge_batch(
        request: Request[Any, Any, Any], queue_id: FromPath[str]
    ) -> Response[bytes]:
        qid = parse_path_id(queue_id, "queue_id")
        body = await read_json(request, BATCH_ACKNOWLEDGE)
        _check_batch_size(len(body.messages))
        await acknowledge(
            AcknowledgeCommand(
                queue_id=qid,
                receipts=[Receipt(r.id, r.receipt_handle) for r in body.messages],
            )
        )
        return no_content()

    @post("/v1/queues/{queue_id:str}/messages/{message_id:str}/visibility")
    async def visibility(
        request: Request[Any, Any, Any], queue_id: FromPath[str], message_id: FromPath[str]
    ) -> Response[bytes]:
        qid = parse_path_id(queue_id, "queue_id")
        mid = parse_path_id(message_id, "message_id")
        body = await read_json(request, VISIBILITY)
        await change_visibility(
            ChangeVisibilityCommand(
                queue_id=qid,
                receipt=Receipt(mid, body.receipt_handle),
                visibility_timeout_seconds=body.visibility_timeout_seconds,
            )
        )
        return no_content()

    return [
        enqueue_one,
        enqueue_batch,
        dequeue_messages,
        acknowledge_one,
        acknowledge_batch,
        visibility,
    ]
