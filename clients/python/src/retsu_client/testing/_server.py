"""The fake server's HTTP side: routes, validation, auth and problem answers of SPEC §3,
served to httpx through a transport (no socket, no thread)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import os
import re
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

import httpx
import msgspec

from retsu_client.testing._state import (
    PRIORITIES,
    Caller,
    NewMessage,
    Problem,
    State,
)
from retsu_client.testing.clock import Clock, SystemClock

if TYPE_CHECKING:
    from retsu_client.aio import AsyncClient
    from retsu_client.client import Client

__all__ = ["FakeRetsu", "FakeToken", "FakeTransport"]

MAX_BODY = 1024 * 1024
FAKE_URL = "http://retsu.fake"
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_QUEUE_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9._-]{0,62}[a-z0-9])?$")
_VISIBLE = re.compile(r"^[\x21-\x7e]{1,128}$")
_DIGITS = re.compile(r"^[0-9]{1,9}$")
ACTIONS = (
    "queue.created",
    "queue.updated",
    "queue.paused",
    "queue.resumed",
    "queue.purged",
    "queue.deleted",
    "dead_letter.redriven",
    "dead_letter.deleted",
    "message.deleted",
)
SCOPES = frozenset({"messages", "read", "admin"})


@dataclass(frozen=True)
class FakeToken:
    """A bearer token the fake accepts: ``scopes`` ⊆ {messages, read, admin}."""

    name: str
    secret: str
    scopes: frozenset[str] | Sequence[str]


# --- request bodies (unknown fields and wrong types are `invalid_json`) ------------------


class _CreateQueue(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    visibility_timeout_seconds: int | None = None
    max_delivery_attempts: int | None = None
    default_message_ttl_seconds: int | None = None


class _UpdateQueue(msgspec.Struct, forbid_unknown_fields=True):
    visibility_timeout_seconds: int | None = None
    max_delivery_attempts: int | None = None
    default_message_ttl_seconds: int | None = None


class _Message(msgspec.Struct, forbid_unknown_fields=True):
    payload: str
    priority: str
    ttl_seconds: int | None = None
    delay_seconds: int | None = None


class _Batch(msgspec.Struct, forbid_unknown_fields=True):
    messages: list[_Message]


class _Dequeue(msgspec.Struct, forbid_unknown_fields=True):
    wait_seconds: int | None = None
    visibility_timeout_seconds: int | None = None
    max_messages: int | None = None


class _Ack(msgspec.Struct, forbid_unknown_fields=True):
    receipt_handle: str


class _AckEntry(msgspec.Struct, forbid_unknown_fields=True):
    id: uuid.UUID
    receipt_handle: str


class _AckBatch(msgspec.Struct, forbid_unknown_fields=True):
    messages: list[_AckEntry]


class _Visibility(msgspec.Struct, forbid_unknown_fields=True):
    receipt_handle: str
    visibility_timeout_seconds: int


class _Redrive(msgspec.Struct, forbid_unknown_fields=True):
    limit: int | None = None


# --- validation --------------------------------------------------------------------------


def _in_range(value: int | None, low: int, high: int, name: str, code: str) -> None:
    if value is not None and not low <= value <= high:
        raise Problem(400, code, f"{name} must be between {low} and {high}, got {value}.")


def _settings(body: _CreateQueue | _UpdateQueue) -> dict[str, int]:
    _in_range(
        body.visibility_timeout_seconds,
        1,
        21600,
        "visibility_timeout_seconds",
        "invalid_visibility_timeout",
    )
    _in_range(
        body.max_delivery_attempts, 1, 100, "max_delivery_attempts", "invalid_max_delivery_attempts"
    )
    _in_range(
        body.default_message_ttl_seconds,
        1,
        2592000,
        "default_message_ttl_seconds",
        "invalid_default_message_ttl",
    )
    fields = {
        "visibility_timeout_seconds": body.visibility_timeout_seconds,
        "max_delivery_attempts": body.max_delivery_attempts,
        "default_message_ttl_seconds": body.default_message_ttl_seconds,
    }
    return {key: value for key, value in fields.items() if value is not None}


def _new_message(body: _Message) -> NewMessage:
    if "\x00" in body.payload:
        raise Problem(
            400, "invalid_payload", "payload must not contain the NUL character (U+0000)."
        )
    if body.priority not in PRIORITIES:
        raise Problem(400, "invalid_priority", "priority must be one of HIGH, MEDIUM, LOW.")
    _in_range(body.ttl_seconds, 1, 2592000, "ttl_seconds", "invalid_ttl")
    _in_range(body.delay_seconds, 0, 86400, "delay_seconds", "invalid_delay")
    if body.ttl_seconds is not None and (body.delay_seconds or 0) >= body.ttl_seconds:
        raise Problem(
            400,
            "invalid_delay",
            f"delay_seconds ({body.delay_seconds}) must be shorter than the message lifetime "
            f"({body.ttl_seconds} s).",
        )
    return NewMessage(body.payload, PRIORITIES[body.priority], body.ttl_seconds, body.delay_seconds)


def _batch_size(size: int) -> None:
    if not 1 <= size <= 100:
        raise Problem(
            400, "invalid_batch_size", f"messages must hold 1 to 100 entries, got {size}."
        )


def _path_id(value: str, name: str) -> str:
    if not _UUID.match(value):
        raise Problem(400, "invalid_path", f"{name} in the path must be a UUID.")
    return value.lower()


def _public(item: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in item.items() if not key.startswith("_")}


# --- one request -------------------------------------------------------------------------


@dataclass
class _Context:
    request: httpx.Request
    body: bytes
    caller: Caller
    scopes: frozenset[str] | None  # None: auth off

    def param(self, name: str, code: str) -> str | None:
        values = self.request.url.params.get_list(name)
        if len(values) > 1:
            raise Problem(400, code, f"Give {name} at most once.")
        return values[0] if values else None

    def int_param(self, name: str, code: str, low: int, high: int, default: int) -> int:
        raw = self.param(name, code)
        if raw is None:
            return default
        if not _DIGITS.match(raw) or not low <= int(raw) <= high:
            raise Problem(400, code, f"{name} must be between {low} and {high}, got {raw!r}.")
        return int(raw)

    def json(self, type_: type[Any], *, optional: bool = False) -> Any:
        if optional and not self.body:
            return None
        content_type = self.request.headers.get("content-type", "")
        if content_type.split(";")[0].strip().lower() != "application/json":
            raise Problem(
                415, "unsupported_media_type", "The request body must be sent as application/json."
            )
        if len(self.body) > MAX_BODY:
            raise Problem(
                413,
                "payload_too_large",
                f"The request body is larger than the limit of {MAX_BODY} bytes (1 MiB).",
            )
        try:
            return msgspec.json.decode(self.body, type=type_)
        except (msgspec.DecodeError, msgspec.ValidationError) as error:
            raise Problem(
                400, "invalid_json", f"The request body does not fit this route: {error}."
            ) from None


class _Poll:
    """A long poll that found nothing yet: ``again()`` answers or keeps waiting."""

    def __init__(
        self, attempt: Callable[[bool], httpx.Response | None], wait: float, clock: Clock
    ) -> None:
        self._attempt = attempt
        self._real_deadline = time.monotonic() + wait
        self._fake_deadline = clock.now().timestamp() + wait
        self._clock = clock

    def again(self) -> httpx.Response | _Poll:
        final = (
            time.monotonic() >= self._real_deadline
            or self._clock.now().timestamp() >= self._fake_deadline
        )
        response = self._attempt(final)
        return response if response is not None else self


Result = httpx.Response | _Poll
Route = Callable[..., Result]


class FakeRetsu:
    """An in-memory Retsu server with the real one's rules (priorities, FIFO within a
    priority, visibility timeouts, attempts, dead-lettering by a later dequeue, idempotency
    keys, pause, purge, redrive, browsing, consumers, history, the audit log, auth scopes).

        fake = FakeRetsu(clock=ManualClock())
        with fake.client() as retsu:           # or Client(transport=fake.transport())
            retsu.create_queue("emails", visibility_timeout_seconds=30)
            ...
            fake.clock.advance(31)             # the lease ends without sleeping

    ``tokens`` turns auth on. ``history_interval_seconds`` is how often a history snapshot
    is taken (by the fake clock). The expired-message cleaner does not run by itself: call
    ``clean_expired()``.
    """

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        tokens: Iterable[FakeToken] | None = None,
        history_interval_seconds: int = 15,
        poll_interval: float = 0.005,
    ) -> None:
        self.clock: Any = clock or SystemClock()
        self.state = State(self.clock, history_interval_seconds)
        self.history_interval_seconds = history_interval_seconds
        self.poll_interval = poll_interval
        self._tokens = None if tokens is None else {token.secret: token for token in tokens}
        for token in self._tokens.values() if self._tokens else ():
            unknown = set(token.scopes) - SCOPES
            if unknown:
                raise ValueError(f"unknown scopes {sorted(unknown)} for token {token.name!r}")
        self._key = os.urandom(32)
        self._routes = self._route_table()

    # --- public helpers -----------------------------------------------------------------

    def transport(self) -> FakeTransport:
        """An httpx transport (sync and async) that serves this fake."""
        return FakeTransport(self)

    def client(self, **kwargs: Any) -> Client:
        from retsu_client.client import Client

        return Client(FAKE_URL, transport=self.transport(), **kwargs)

    def async_client(self, **kwargs: Any) -> AsyncClient:
        from retsu_client.aio import AsyncClient

        return AsyncClient(FAKE_URL, transport=self.transport(), **kwargs)

    def clean_expired(self) -> int:
        return self.state.clean_expired()

    # --- dispatch -----------------------------------------------------------------------

    def respond(self, request: httpx.Request, body: bytes) -> httpx.Response | _Tagged:
        request_id = request.headers.get("x-request-id", "")
        if not _VISIBLE.match(request_id):
            request_id = uuid.uuid4().hex
        try:
            result = self._dispatch(request, body, request_id)
        except Problem as problem:
            result = _problem(problem)
        if isinstance(result, httpx.Response):
            result.headers["x-request-id"] = request_id
            return result
        return _Tagged(result, request_id)

    def _dispatch(self, request: httpx.Request, body: bytes, request_id: str) -> Result:
        path = request.url.path
        actor, scopes = "anonymous", None
        if path.startswith("/v1") and self._tokens is not None:
            token = self._authenticate(request)
            actor, scopes = token.name, frozenset(token.scopes)
        for pattern, methods in self._routes:
            match = pattern.match(path)
            if match is None:
                continue
            handler = methods.get(request.method)
            if handler is None:
                allow = ", ".join([*methods, "OPTIONS"])
                raise Problem(
                    405,
                    "method_not_allowed",
                    f"Method {request.method} is not allowed on this route.",
                    {"allow": allow},
                )
            if scopes is not None:
                self._authorize(request.method, pattern.pattern, scopes)
            context = _Context(request, body, Caller(actor, request_id), scopes)
            return handler(context, **match.groupdict())
        raise Problem(404, "not_found", "No route matches this path.")

    def _authenticate(self, request: httpx.Request) -> FakeToken:
        header = request.headers.get("authorization", "")
        scheme, _, secret = header.partition(" ")
        if scheme.lower() != "bearer" or not secret:
            raise Problem(
                401,
                "unauthorized",
                "This route needs an 'authorization: Bearer <token>' header.",
                {"www-authenticate": 'Bearer realm="retsu"', "cache-control": "no-store"},
            )
        assert self._tokens is not None
        for known, token in self._tokens.items():
            if hmac.compare_digest(known.encode(), secret.strip().encode()):
                return token
        raise Problem(
            401,
            "unauthorized",
            "The bearer token is not valid.",
            {
                "www-authenticate": 'Bearer realm="retsu", error="invalid_token"',
                "cache-control": "no-store",
            },
        )

    @staticmethod
    def _authorize(method: str, pattern: str, scopes: frozenset[str]) -> None:
        if "admin" in scopes:
            return
        queue_read = pattern in (_QUEUES.pattern, _QUEUE.pattern) and method == "GET"
        message_route = method == "POST" and pattern in _MESSAGE_ROUTES
        if queue_read and scopes & {"messages", "read"}:
            return
        if message_route and "messages" in scopes:
            return
        if method == "GET" and "read" in scopes:
            return
        raise Problem(
            403,
            "forbidden",
            "This token lacks the scope this route needs.",
            {
                "www-authenticate": 'Bearer realm="retsu", error="insufficient_scope"',
                "cache-control": "no-store",
            },
        )

    def _route_table(self) -> list[tuple[re.Pattern[str], dict[str, Route]]]:
        return [
            (_QUEUES, {"GET": self._list_queues, "POST": self._create_queue}),
            (
                _QUEUE,
                {"GET": self._get_queue, "PATCH": self._update_queue, "DELETE": self._delete_queue},
            ),
            (_PAUSE, {"POST": lambda c, queue_id: self._pause(c, queue_id, True)}),
            (_RESUME, {"POST": lambda c, queue_id: self._pause(c, queue_id, False)}),
            (_PURGE, {"POST": self._purge}),
            (_MESSAGES, {"GET": self._browse, "POST": self._enqueue}),
            (_BATCH, {"POST": self._enqueue_batch}),
            (_DEQUEUE, {"POST": self._dequeue}),
            (_ACK_BATCH, {"POST": self._acknowledge_batch}),
            (_MESSAGE, {"GET": self._get_message, "DELETE": self._delete_message}),
            (_ACK, {"POST": self._acknowledge}),
            (_VISIBILITY_ROUTE, {"POST": self._visibility}),
            (_DEAD_LETTERS, {"GET": self._dead_letters}),
            (_REDRIVE_BULK, {"POST": self._redrive_many}),
            (_DEAD_LETTER, {"GET": self._dead_letter, "DELETE": self._delete_dead_letter}),
            (_REDRIVE, {"POST": self._redrive}),
            (_HISTORY, {"GET": self._history}),
            (_CONSUMERS, {"GET": self._consumers}),
            (_AUDIT, {"GET": self._audit}),
            (_LIVE, {"GET": lambda c: _json({"status": "ok"})}),
            (_READY, {"GET": lambda c: _json({"status": "ok"})}),
        ]

    # --- pagination ---------------------------------------------------------------------

    def _cursor(self, kind: str, scope: list[Any], position: Sequence[Any]) -> str:
        payload = msgspec.json.encode([1, kind, scope, list(position)])
        mac = hmac.new(self._key, payload, hashlib.sha256).digest()[:16]
        return base64.urlsafe_b64encode(payload + mac).rstrip(b"=").decode()

    def _open_cursor(self, cursor: str, kind: str, scope: list[Any]) -> tuple[Any, ...]:
        invalid = Problem(
            400,
            "invalid_cursor",
            "cursor is not a cursor this server issued for this list; start again without one.",
        )
        try:
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
            payload, mac = raw[:-16], raw[-16:]
            expected = hmac.new(self._key, payload, hashlib.sha256).digest()[:16]
            if not cursor or not hmac.compare_digest(mac, expected):
                raise invalid
            version, cursor_kind, cursor_scope, position = msgspec.json.decode(payload)
        except (ValueError, TypeError, msgspec.DecodeError):
            raise invalid from None
        if version != 1 or cursor_kind != kind or cursor_scope != scope:
            raise invalid
        return tuple(position)

    def _page(
        self,
        context: _Context,
        kind: str,
        scope: list[Any],
        items: list[dict[str, Any]],
        key: Callable[[dict[str, Any]], tuple[Any, ...]],
    ) -> httpx.Response:
        limit = context.int_param("limit", "invalid_limit", 1, 100, 50)
        cursor = context.param("cursor", "invalid_cursor")
        if cursor is not None:
            after = self._open_cursor(cursor, kind, scope)
            items = [item for item in items if key(item) > after]
        page = items[:limit]
        next_cursor = self._cursor(kind, scope, key(page[-1])) if len(items) > limit else None
        return _json({"items": [_public(item) for item in page], "next_cursor": next_cursor})

    # --- queues -------------------------------------------------------------------------

    def _create_queue(self, c: _Context) -> Result:
        body = c.json(_CreateQueue)
        if not _QUEUE_NAME.match(body.name):
            raise Problem(
                400,
                "invalid_queue_name",
                "name must be 1-64 characters of a-z, 0-9, '.', '_' or '-', starting and "
                "ending with a letter or digit.",
            )
        settings = {
            "visibility_timeout_seconds": 30,
            "max_delivery_attempts": 5,
            "default_message_ttl_seconds": 604800,
            **_settings(body),
        }
        return _json(self.state.create_queue(c.caller, body.name, settings), 201)

    def _list_queues(self, c: _Context) -> Result:
        name = c.param("name", "invalid_name")
        items = self.state.list_queues(name)
        return self._page(c, "q", [name], items, lambda item: (item["name"],))

    def _get_queue(self, c: _Context, queue_id: str) -> Result:
        return _json(self.state.get_queue(_path_id(queue_id, "queue_id")))

    def _update_queue(self, c: _Context, queue_id: str) -> Result:
        qid = _path_id(queue_id, "queue_id")
        changes = _settings(c.json(_UpdateQueue))
        if not changes:
            raise Problem(
                400,
                "empty_queue_update",
                "Give at least one of visibility_timeout_seconds, max_delivery_attempts, "
                "default_message_ttl_seconds.",
            )
        return _json(self.state.update_queue(c.caller, qid, changes))

    def _pause(self, c: _Context, queue_id: str, paused: bool) -> Result:
        return _json(self.state.set_paused(c.caller, _path_id(queue_id, "queue_id"), paused))

    def _purge(self, c: _Context, queue_id: str) -> Result:
        return _json({"purged": self.state.purge(c.caller, _path_id(queue_id, "queue_id"))})

    def _delete_queue(self, c: _Context, queue_id: str) -> Result:
        self.state.delete_queue(c.caller, _path_id(queue_id, "queue_id"))
        return httpx.Response(204)

    # --- messages -----------------------------------------------------------------------

    def _enqueue(self, c: _Context, queue_id: str) -> Result:
        qid = _path_id(queue_id, "queue_id")
        keys = c.request.headers.get_list("idempotency-key")
        if len(keys) > 1:
            raise Problem(
                400, "invalid_idempotency_key", "Send at most one Idempotency-Key header."
            )
        message = _new_message(c.json(_Message))
        if not keys:
            return _json({"id": self.state.enqueue(qid, message)}, 201)
        if not _VISIBLE.match(keys[0]):
            raise Problem(
                400,
                "invalid_idempotency_key",
                "Idempotency-Key must be 1 to 128 visible ASCII characters.",
            )
        message_id, replayed = self.state.enqueue_idempotent(qid, message, keys[0])
        if replayed:
            return _json({"id": message_id}, 200, {"idempotent-replayed": "true"})
        return _json({"id": message_id}, 201)

    def _enqueue_batch(self, c: _Context, queue_id: str) -> Result:
        qid = _path_id(queue_id, "queue_id")
        if "idempotency-key" in c.request.headers:
            raise Problem(
                400,
                "invalid_idempotency_key",
                "The batch route does not take an Idempotency-Key; send messages one by one "
                "to make them idempotent.",
            )
        body = c.json(_Batch)
        _batch_size(len(body.messages))
        messages = []
        for index, entry in enumerate(body.messages):
            try:
                messages.append(_new_message(entry))
            except Problem as problem:
                raise Problem(400, problem.code, f"messages[{index}]: {problem.detail}") from None
        return _json({"ids": self.state.enqueue_batch(qid, messages)}, 201)

    def _dequeue(self, c: _Context, queue_id: str) -> Result:
        qid = _path_id(queue_id, "queue_id")
        consumer = c.request.headers.get("retsu-consumer")
        if consumer is not None and not _VISIBLE.match(consumer):
            raise Problem(
                400, "invalid_consumer", "Retsu-Consumer must be 1 to 128 visible ASCII characters."
            )
        body = c.json(_Dequeue, optional=True) or _Dequeue()
        _in_range(body.wait_seconds, 0, 20, "wait_seconds", "invalid_wait_seconds")
        _in_range(
            body.visibility_timeout_seconds,
            1,
            21600,
            "visibility_timeout_seconds",
            "invalid_visibility_timeout",
        )
        _in_range(body.max_messages, 1, 100, "max_messages", "invalid_max_messages")
        many = body.max_messages is not None

        def attempt(seen: bool, final: bool) -> httpx.Response | None:
            delivered = self.state.dequeue(
                qid, body.max_messages or 1, body.visibility_timeout_seconds, consumer, seen
            )
            if not delivered and not final:
                return None
            if many:
                return _json({"messages": delivered})
            return _json(delivered[0]) if delivered else httpx.Response(204)

        first = attempt(True, not body.wait_seconds)
        if first is not None:
            return first

        def again(final: bool) -> httpx.Response | None:
            if not final and not self.state.deliverable(qid):
                return None
            return attempt(False, final)

        return _Poll(again, float(body.wait_seconds or 0), self.clock)

    def _acknowledge(self, c: _Context, queue_id: str, message_id: str) -> Result:
        qid = _path_id(queue_id, "queue_id")
        mid = _path_id(message_id, "message_id")
        body = c.json(_Ack)
        self.state.acknowledge(qid, [(mid, body.receipt_handle)])
        return httpx.Response(204)

    def _acknowledge_batch(self, c: _Context, queue_id: str) -> Result:
        qid = _path_id(queue_id, "queue_id")
        body = c.json(_AckBatch)
        _batch_size(len(body.messages))
        self.state.acknowledge(qid, [(str(e.id), e.receipt_handle) for e in body.messages])
        return httpx.Response(204)

    def _visibility(self, c: _Context, queue_id: str, message_id: str) -> Result:
        qid = _path_id(queue_id, "queue_id")
        mid = _path_id(message_id, "message_id")
        body = c.json(_Visibility)
        _in_range(
            body.visibility_timeout_seconds,
            0,
            21600,
            "visibility_timeout_seconds",
            "invalid_visibility_timeout",
        )
        self.state.change_visibility(qid, mid, body.receipt_handle, body.visibility_timeout_seconds)
        return httpx.Response(204)

    # --- browsing -----------------------------------------------------------------------

    def _browse(self, c: _Context, queue_id: str) -> Result:
        qid = _path_id(queue_id, "queue_id")
        state = c.param("state", "invalid_state")
        if state is not None and state not in ("ready", "in_flight", "delayed"):
            raise Problem(400, "invalid_state", "state must be one of ready, in_flight, delayed.")
        priority = c.param("priority", "invalid_priority")
        if priority is not None and priority not in PRIORITIES:
            raise Problem(400, "invalid_priority", "priority must be one of HIGH, MEDIUM, LOW.")
        c.int_param("limit", "invalid_limit", 1, 100, 50)
        items, key = self.state.browse(
            qid, state, None if priority is None else PRIORITIES[priority]
        )
        return self._page(c, "m", [qid, state, priority], items, key)

    def _get_message(self, c: _Context, queue_id: str, message_id: str) -> Result:
        qid = _path_id(queue_id, "queue_id")
        return _json(self.state.get_message(qid, _path_id(message_id, "message_id")))

    def _delete_message(self, c: _Context, queue_id: str, message_id: str) -> Result:
        qid = _path_id(queue_id, "queue_id")
        self.state.delete_message(c.caller, qid, _path_id(message_id, "message_id"))
        return httpx.Response(204)

    # --- dead letters -------------------------------------------------------------------

    def _dead_letters(self, c: _Context, queue_id: str) -> Result:
        qid = _path_id(queue_id, "queue_id")
        c.int_param("limit", "invalid_limit", 1, 100, 50)
        records = self.state.dead_letters(qid)
        items = [{**r.item(), "_key": (-r.dead_lettered_at.timestamp(), -r.order)} for r in records]
        return self._page(c, "d", [qid], items, lambda item: tuple(item["_key"]))

    def _dead_letter(self, c: _Context, queue_id: str, message_id: str) -> Result:
        qid = _path_id(queue_id, "queue_id")
        return _json(self.state.dead_letter(qid, _path_id(message_id, "message_id")).item())

    def _redrive(self, c: _Context, queue_id: str, message_id: str) -> Result:
        qid = _path_id(queue_id, "queue_id")
        new_id = self.state.redrive(c.caller, qid, _path_id(message_id, "message_id"))
        return _json({"id": new_id}, 201)

    def _redrive_many(self, c: _Context, queue_id: str) -> Result:
        qid = _path_id(queue_id, "queue_id")
        body = c.json(_Redrive, optional=True) or _Redrive()
        _in_range(body.limit, 1, 1000, "limit", "invalid_limit")
        redriven = self.state.redrive_many(c.caller, qid, body.limit or 100)
        return _json({"redriven": redriven})

    def _delete_dead_letter(self, c: _Context, queue_id: str, message_id: str) -> Result:
        qid = _path_id(queue_id, "queue_id")
        self.state.delete_dead_letter(c.caller, qid, _path_id(message_id, "message_id"))
        return httpx.Response(204)

    # --- audit log, consumers, history --------------------------------------------------

    def _audit(self, c: _Context) -> Result:
        queue_id = c.param("queue_id", "invalid_queue_id")
        if queue_id is not None and not _UUID.match(queue_id):
            raise Problem(400, "invalid_queue_id", "queue_id must be a UUID.")
        action = c.param("action", "invalid_action")
        if action is not None and action not in ACTIONS:
            raise Problem(400, "invalid_action", f"action must be one of {', '.join(ACTIONS)}.")
        c.int_param("limit", "invalid_limit", 1, 100, 50)
        qid = None if queue_id is None else queue_id.lower()
        entries = self.state.audit_log(qid, action)
        items = [{**e, "_key": (-e["at"].timestamp(), -e["_seq"])} for e in entries]
        return self._page(c, "a", [qid, action], items, lambda item: tuple(item["_key"]))

    def _consumers(self, c: _Context) -> Result:
        queue_id = c.param("queue_id", "invalid_queue_id")
        if queue_id is not None and not _UUID.match(queue_id):
            raise Problem(400, "invalid_queue_id", "queue_id must be a UUID.")
        health = c.param("health", "invalid_health")
        if health is not None and health not in ("healthy", "stale", "offline"):
            raise Problem(400, "invalid_health", "health must be one of healthy, stale, offline.")
        c.int_param("limit", "invalid_limit", 1, 100, 50)
        qid = None if queue_id is None else queue_id.lower()
        items = self.state.consumers(qid, health)
        keyed = [
            {**item, "_key": (-item["last_seen_at"].timestamp(), item["queue_id"], item["name"])}
            for item in items
        ]
        return self._page(c, "c", [qid, health], keyed, lambda item: tuple(item["_key"]))

    def _history(self, c: _Context, queue_id: str) -> Result:
        qid = _path_id(queue_id, "queue_id")
        minutes = c.int_param("minutes", "invalid_minutes", 1, 10080, 60)
        width, points = self.state.history(qid, minutes)
        return _json({"interval_seconds": width, "points": points})


class _Tagged:
    """A pending long poll plus the request id its answer must carry."""

    def __init__(self, poll: _Poll, request_id: str) -> None:
        self.poll, self.request_id = poll, request_id

    def again(self) -> httpx.Response | None:
        try:
            result = self.poll.again()
        except Problem as problem:  # e.g. the queue was deleted during the wait
            result = _problem(problem)
        if isinstance(result, httpx.Response):
            result.headers["x-request-id"] = self.request_id
            return result
        return None


class FakeTransport(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """Serves a ``FakeRetsu`` to ``httpx.Client`` and ``httpx.AsyncClient`` alike."""

    def __init__(self, fake: FakeRetsu) -> None:
        self.fake = fake

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        result = self.fake.respond(request, request.read())
        while isinstance(result, _Tagged):
            time.sleep(self.fake.poll_interval)
            result = result.again() or result
        return result

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        result = self.fake.respond(request, await request.aread())
        while isinstance(result, _Tagged):
            await asyncio.sleep(self.fake.poll_interval)
            result = result.again() or result
        return result


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(
        status,
        content=msgspec.json.encode(data),
        headers={"content-type": "application/json", **(headers or {})},
    )


def _problem(problem: Problem) -> httpx.Response:
    body = {
        "type": "about:blank",
        "title": HTTPStatus(problem.status).phrase,
        "status": problem.status,
        "detail": problem.detail,
        "code": problem.code,
    }
    return httpx.Response(
        problem.status,
        content=msgspec.json.encode(body),
        headers={"content-type": "application/problem+json", **problem.headers},
    )


_ID = r"[^/]+"
_QUEUES = re.compile(r"^/v1/queues$")
_QUEUE = re.compile(rf"^/v1/queues/(?P<queue_id>{_ID})$")
_PAUSE = re.compile(rf"^/v1/queues/(?P<queue_id>{_ID})/pause$")
_RESUME = re.compile(rf"^/v1/queues/(?P<queue_id>{_ID})/resume$")
_PURGE = re.compile(rf"^/v1/queues/(?P<queue_id>{_ID})/purge$")
_MESSAGES = re.compile(rf"^/v1/queues/(?P<queue_id>{_ID})/messages$")
_BATCH = re.compile(rf"^/v1/queues/(?P<queue_id>{_ID})/messages/batch$")
_DEQUEUE = re.compile(rf"^/v1/queues/(?P<queue_id>{_ID})/messages/dequeue$")
_ACK_BATCH = re.compile(rf"^/v1/queues/(?P<queue_id>{_ID})/messages/acknowledge$")
_MESSAGE = re.compile(rf"^/v1/queues/(?P<queue_id>{_ID})/messages/(?P<message_id>{_ID})$")
_ACK = re.compile(rf"^/v1/queues/(?P<queue_id>{_ID})/messages/(?P<message_id>{_ID})/acknowledge$")
_VISIBILITY_ROUTE = re.compile(
    rf"^/v1/queues/(?P<queue_id>{_ID})/messages/(?P<message_id>{_ID})/visibility$"
)
_DEAD_LETTERS = re.compile(rf"^/v1/queues/(?P<queue_id>{_ID})/dead-letters$")
_REDRIVE_BULK = re.compile(rf"^/v1/queues/(?P<queue_id>{_ID})/dead-letters/redrive$")
_DEAD_LETTER = re.compile(rf"^/v1/queues/(?P<queue_id>{_ID})/dead-letters/(?P<message_id>{_ID})$")
_REDRIVE = re.compile(
    rf"^/v1/queues/(?P<queue_id>{_ID})/dead-letters/(?P<message_id>{_ID})/redrive$"
)
_HISTORY = re.compile(rf"^/v1/queues/(?P<queue_id>{_ID})/history$")
_CONSUMERS = re.compile(r"^/v1/consumers$")
_AUDIT = re.compile(r"^/v1/audit-log$")
_LIVE = re.compile(r"^/health/live$")
_READY = re.compile(r"^/health/ready$")
_MESSAGE_ROUTES = frozenset(
    p.pattern for p in (_MESSAGES, _BATCH, _DEQUEUE, _ACK_BATCH, _ACK, _VISIBILITY_ROUTE)
)
