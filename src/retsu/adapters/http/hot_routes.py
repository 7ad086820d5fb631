"""The three hot message routes, answered without Litestar's per-request machinery.

A single enqueue, a dequeue and an acknowledgement are most of a queue's traffic. Through
Litestar each costs ~45 µs of the API's CPU around its use case — routing, the kwargs and
signature models, dependency resolution, the ``Response`` objects, the exception
middleware (``python -m bench.http_edge``; docs/performance.md, "The hot routes") — an
eighth of what a single enqueue costs the API process in all.

``HotRoutes`` stands in front of the Litestar app, inside the auth, request-id, tracing and
metrics layers (``app.create_app``), and answers a request itself only when it has the
shape nearly every request of these routes has:

* ``POST /v1/queues/{queue_id}/messages`` without an ``Idempotency-Key``,
  ``POST …/messages/dequeue``, ``POST …/messages/{message_id}/acknowledge``;
* ids in the canonical 36-character form, no query string, no root path;
* a body of at most 1 MiB, sent as ``application/json`` (the dequeue's may be empty), that
  the route's own strict decoder accepts (``request_rules.StrictBody``) and whose fields the
  route's own translation accepts (``routes.messages``: ``enqueue_command`` …);
* no header the route reads sent twice, and the token's scopes (when auth is on) among the
  route's.

Anything else — another route or method, a refused field, a repeated header, a body too
large or cut short by a disconnect — goes to Litestar untouched, its body replayed as it
arrived, and is answered there exactly as before: every refusal keeps its one
implementation, and nothing has happened yet when a request is handed over. Once the use
case runs, its errors are answered by the app's own exception handlers (``problems.py``),
never by running it twice.

The answers are byte for byte Litestar's (``tests/unit/http/test_hot_routes.py`` sends
each request both ways and compares status, headers and body).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import replace
from typing import Any, Final
from uuid import UUID

import msgspec
from litestar.enums import ScopeType
from litestar.exceptions.http_exceptions import RequestEntityTooLarge
from litestar.types import ASGIApp, ExceptionHandlersMap, Receive, ReceiveMessage, Scope, Send

from retsu.adapters.http.auth import CONSUMER, SCOPES_SCOPE_KEY
from retsu.adapters.http.departure import departure_of
from retsu.adapters.http.dto import AcknowledgeBody, DequeueBody, IdOut, MessageBody
from retsu.adapters.http.request_rules import (
    UUID_TEXT,
    ClientDisconnected,
    JsonRequest,
    RequestProblem,
    StrictBody,
    is_json_media_type,
    read_body,
)
from retsu.adapters.http.routes.messages import (
    MESSAGES,
    acknowledge_command,
    dequeue_answer,
    dequeue_options,
    enqueue_command,
)
from retsu.application.messages import (
    AcknowledgeCommand,
    DequeueCommand,
    EnqueueCommand,
    MessageService,
)
from retsu.domain.consumer import parse_consumer_name
from retsu.domain.errors import InvalidInput

__all__ = ["HotRoutes"]

# /v1/queues/{queue_id}/messages, then nothing, /dequeue or /{message_id}/acknowledge.
_ROUTE: Final = re.compile(
    rf"/v1/queues/({UUID_TEXT.pattern})/messages"
    rf"(?:(/dequeue)|/({UUID_TEXT.pattern})/acknowledge)?"
)
_ENQUEUE_TEMPLATE: Final = MESSAGES.replace(":str}", "}")
_DEQUEUE_TEMPLATE: Final = _ENQUEUE_TEMPLATE + "/dequeue"
_ACKNOWLEDGE_TEMPLATE: Final = _ENQUEUE_TEMPLATE + "/{message_id}/acknowledge"

_CONTENT_TYPE: Final = b"content-type"
_CONTENT_LENGTH: Final = b"content-length"
_IDEMPOTENCY_KEY: Final = b"idempotency-key"
_CONSUMER: Final = b"retsu-consumer"
_HOST: Final = b"host"
# A Host header of other characters goes to Litestar, whose router refuses it (400,
# "Invalid host header", since 2.x); the set is its own (litestar/_asgi/utils.py).
_PLAIN_HOST: Final = re.compile(rb"[0-9A-Za-z!$&'()*+,;=\-._~:\[\]@%]*")
_JSON: Final = (b"content-type", b"application/json")

_ENQUEUE_BODY: Final = StrictBody(MessageBody)
_DEQUEUE_BODY: Final = StrictBody(DequeueBody)
_ACKNOWLEDGE_BODY: Final = StrictBody(AcknowledgeBody)
_encode = msgspec.json.Encoder().encode

_Answer = tuple[int, bytes | None]


class _HandOver(Exception):
    """The request is not of the common shape: Litestar answers it."""


# A request handed to Litestar, nothing having happened yet: not of the common shape, a
# refused field or header, a body too large, or a client that left before sending it all.
_HANDED_OVER = (_HandOver, RequestProblem, InvalidInput, RequestEntityTooLarge, ClientDisconnected)


class _Request:
    """What one request's headers say, read in one pass."""

    __slots__ = (
        "consumer",
        "consumers",
        "content_type",
        "idempotent",
        "length",
        "plain_host",
        "types",
    )

    def __init__(self, scope: Scope) -> None:
        self.content_type: bytes | None = None
        self.types = 0
        self.length: bytes | None = None
        self.idempotent = False
        self.consumer: bytes | None = None
        self.consumers = 0
        self.plain_host = True
        for name, value in scope["headers"]:
            if name == _CONTENT_TYPE:
                self.content_type = value
                self.types += 1
            elif name == _CONTENT_LENGTH:
                self.length = value
            elif name == _IDEMPOTENCY_KEY:
                self.idempotent = True
            elif name == _CONSUMER:
                self.consumer = value
                self.consumers += 1
            elif name == _HOST:
                self.plain_host &= _PLAIN_HOST.fullmatch(value) is not None

    @property
    def json(self) -> bool:
        return (
            self.types == 1
            and self.content_type is not None
            and is_json_media_type(self.content_type)
        )


class HotRoutes:
    """ASGI: the hot routes of the common shape, everything else to ``app`` (Litestar's
    handler). ``messages``: the provider of the app's ``MessageService``; ``handlers``: the
    app's exception handlers."""

    def __init__(
        self,
        app: ASGIApp,
        messages: Callable[[], object],
        handlers: ExceptionHandlersMap,
    ) -> None:
        self.app = app
        self._provide = messages
        self._service: MessageService | None = None
        self._handlers: Mapping[Any, Any] = handlers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != ScopeType.HTTP
            or scope["method"] != "POST"
            or scope["query_string"]
            or scope.get("root_path")
        ):
            await self.app(scope, receive, send)
            return
        route = _ROUTE.fullmatch(scope["path"])
        held: frozenset[str] | None = scope.get(SCOPES_SCOPE_KEY)  # type: ignore[assignment]
        if route is None or (held is not None and CONSUMER.isdisjoint(held)):
            await self.app(scope, receive, send)
            return
        request = _Request(scope)
        queue_id, dequeue, message_id = route.groups()
        if message_id is not None:
            template = _ACKNOWLEDGE_TEMPLATE
            take = request.json
        elif dequeue is not None:
            template = _DEQUEUE_TEMPLATE
            take = request.consumers <= 1
        else:
            template = _ENQUEUE_TEMPLATE
            take = request.json and not request.idempotent
        if not take or not request.plain_host:
            await self.app(scope, receive, send)
            return
        arrived: list[ReceiveMessage] = []
        try:
            body = await read_body(receive, request.length, arrived)
            if message_id is not None:
                work = self._acknowledge(queue_id, message_id, body)
            elif dequeue is not None:
                work = self._dequeue(queue_id, request, body, receive)
            else:
                work = self._enqueue(queue_id, body)
        except _HANDED_OVER:
            # Nothing has happened yet: Litestar answers, from the body as it arrived.
            await self.app(scope, _replaying(arrived, receive), send)
            return
        # What Litestar's router records, for the metrics and the request's span.
        scope["path_template"] = template
        try:
            status, answer = await work
        except Exception as error:  # answered as Litestar would (problems.py)
            await self._problem(scope, receive, send, error)
            return
        headers = [] if answer is None else [_JSON, (_CONTENT_LENGTH, b"%d" % len(answer))]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": answer or b"", "more_body": False})

    @property
    def _messages(self) -> MessageService:
        service = self._service
        if service is None:
            service = self._service = self._provide()  # type: ignore[assignment]
        return service  # type: ignore[return-value]

    # Each route: its request checked and translated here (a refusal hands it over), then
    # a coroutine that runs the use case and answers (status, JSON body or None).

    def _enqueue(self, queue_id: str, body: bytes) -> Coroutine[Any, Any, _Answer]:
        return self._enqueued(enqueue_command(UUID(queue_id), _ENQUEUE_BODY.decode(body)))

    async def _enqueued(self, command: EnqueueCommand) -> _Answer:
        ids = await self._messages.enqueue(command)
        return 201, _encode(IdOut(id=ids[0]))

    def _dequeue(
        self, queue_id: str, request: _Request, body: bytes, receive: Receive
    ) -> Coroutine[Any, Any, _Answer]:
        if body and not request.json:
            raise _HandOver
        options = dequeue_options(_DEQUEUE_BODY.decode(body) if body else None)
        name = request.consumer
        consumer = None if name is None else parse_consumer_name(name.decode("latin-1"))
        command = DequeueCommand(queue_id=UUID(queue_id), options=options, consumer=consumer)
        return self._dequeued(command, receive)

    async def _dequeued(self, command: DequeueCommand, receive: Receive) -> _Answer:
        # The same watch as the Litestar route (departure.py): a client that goes away stops
        # a long poll, and what was claimed for it is given back.
        async with departure_of(receive) as gone:
            delivered = await self._messages.dequeue(replace(command, client_gone=gone))
        if not delivered and gone.is_set():
            raise ClientDisconnected  # 499, a DEBUG line: nobody reads this answer
        answer = dequeue_answer(command.options, delivered)
        return (204, None) if answer is None else (200, _encode(answer))

    def _acknowledge(
        self, queue_id: str, message_id: str, body: bytes
    ) -> Coroutine[Any, Any, _Answer]:
        return self._acknowledged(
            acknowledge_command(UUID(queue_id), UUID(message_id), _ACKNOWLEDGE_BODY.decode(body))
        )

    async def _acknowledged(self, command: AcknowledgeCommand) -> _Answer:
        await self._messages.acknowledge(command)
        return 204, None

    async def _problem(self, scope: Scope, receive: Receive, send: Send, error: Exception) -> None:
        """The answer the app's exception handlers give ``error`` (by its nearest type)."""
        handler = next(
            self._handlers[kind] for kind in type(error).__mro__ if kind in self._handlers
        )
        request = JsonRequest(scope, receive, send)
        response = handler(request, error)
        await response.to_asgi_response(None, request)(scope, receive, send)


def _replaying(arrived: list[ReceiveMessage], receive: Receive) -> Receive:
    """``receive`` as it was before the body was read: what arrived first, then the rest."""
    pending = list(arrived)

    async def replay() -> ReceiveMessage:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay
