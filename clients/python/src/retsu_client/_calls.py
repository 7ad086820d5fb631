"""Every API call, written once for both clients ("sans I/O").

An operation is a generator: it yields the ``Call`` (method, path, body, headers) it needs
sent, receives the ``httpx.Response`` back, and returns the typed result. ``Client`` and
``AsyncClient`` only differ in how they send; error answers are thrown into the generator,
so an operation can react to them (a queue named by a cached name that was deleted and
created again is looked up once more).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import msgspec

from retsu_client.errors import QueueNotFound, UnexpectedResponse
from retsu_client.models import (
    AuditEntry,
    Consumer,
    ConsumerHealth,
    DeadLetter,
    Enqueued,
    Group,
    GroupState,
    History,
    Message,
    MessageState,
    NewMessage,
    Page,
    Priority,
    Queue,
    QueueDetails,
    RateLimit,
    Schedule,
    ScheduleMessage,
    StoredMessage,
    UnsetType,
)

T = TypeVar("T")
QueueRef = str | uuid.UUID | Queue
"""A queue: its id (str or UUID), its name, or a ``Queue`` value."""
MessageRef = str | uuid.UUID | Message | StoredMessage | DeadLetter
"""A message id, or a value that carries one."""
ScheduleRef = str | uuid.UUID | Schedule
"""A schedule: its id, or a ``Schedule`` value."""

CONSUMER_HEADER = "retsu-consumer"
IDEMPOTENCY_HEADER = "idempotency-key"


@dataclass(frozen=True, slots=True)
class Call:
    """One HTTP request an operation needs."""

    method: str
    path: str
    params: Mapping[str, str] | None = None
    body: bytes | None = None
    headers: Mapping[str, str] | None = None
    repeatable: bool = True
    """Sending it twice cannot do anything twice (see ``retry``)."""
    wait: float = 0.0
    """Seconds the server may hold the request before answering (long poll)."""


Op = Generator[Call, httpx.Response, T]


def decode(response: httpx.Response, type_: type[T]) -> T:
    try:
        return msgspec.json.decode(response.content, type=type_)
    except (msgspec.DecodeError, msgspec.ValidationError) as error:
        raise UnexpectedResponse(
            f"{response.request.method} {response.request.url.path} answered "
            f"{response.status_code} with a body this client cannot read: {error}",
            status=response.status_code,
            request_id=response.headers.get("x-request-id"),
        ) from error


def _json(value: object) -> bytes:
    return msgspec.json.encode(value)


def _drop_none(**fields: Any) -> dict[str, Any]:
    return {key: value for key, value in fields.items() if value is not None}


def _params(**fields: Any) -> dict[str, str] | None:
    params = {key: str(value) for key, value in fields.items() if value is not None}
    return params or None


def _match(match: Mapping[str, Any] | None) -> str | None:
    """``match=`` as the API takes it: the JSON object as text (httpx URL-encodes it). It is
    sent as given: whether it is a JSON object is the server's to say (``invalid_match``)."""
    return None if match is None else msgspec.json.encode(match).decode()


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _filter(dry_run: bool, **fields: Any) -> dict[str, Any]:
    """A bulk action's body (SPEC §3.11): the filters given, and ``dry_run`` when asked
    for (enums encode as their values)."""
    return _drop_none(**fields, dry_run=True if dry_run else None)


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return len(text) == 36


def message_id(message: MessageRef) -> str:
    if isinstance(message, (Message, StoredMessage, DeadLetter)):
        return message.id
    return str(message)


class QueueNames:
    """Queue name → id, resolved once per client (names never change; a deleted and
    re-created queue is noticed by its ``queue_not_found`` and looked up again)."""

    def __init__(self) -> None:
        self._ids: dict[str, str] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> str | None:
        with self._lock:
            return self._ids.get(name)

    def put(self, name: str, queue_id: str) -> None:
        with self._lock:
            self._ids[name] = queue_id

    def forget(self, name: str) -> None:
        with self._lock:
            self._ids.pop(name, None)

    def forget_id(self, queue_id: str) -> None:
        with self._lock:
            for name in [name for name, qid in self._ids.items() if qid == queue_id]:
                del self._ids[name]


def _lookup(names: QueueNames, name: str) -> Op[str]:
    response = yield Call("GET", "/v1/queues", params={"name": name})
    page = decode(response, Page[Queue])
    if not page.items:
        raise QueueNotFound(
            f"No queue is named {name!r}.",
            status=404,
            request_id=response.headers.get("x-request-id"),
        )
    names.put(name, page.items[0].id)
    return page.items[0].id


def resolve(names: QueueNames, queue: QueueRef) -> Op[str]:
    """The id of ``queue``: an id is used as is; a name costs one lookup, then is cached.
    A string shaped like a UUID is taken as an id."""
    if isinstance(queue, Queue):
        return queue.id
    if isinstance(queue, uuid.UUID):
        return str(queue)
    if _is_uuid(queue):
        return queue.lower()
    cached = names.get(queue)
    if cached is not None:
        return cached
    return (yield from _lookup(names, queue))


def on_queue(names: QueueNames, queue: QueueRef, build: Callable[[str], Op[T]]) -> Op[T]:
    """Run ``build(queue_id)`` for a queue named by id or name. If a cached name answers
    ``queue_not_found``, the name is looked up once more (the queue may have been deleted
    and created again); ``queue_not_found`` means nothing was done, so this is safe."""
    by_cached_name = isinstance(queue, str) and not _is_uuid(queue) and names.get(queue)
    queue_id = yield from resolve(names, queue)
    try:
        return (yield from build(queue_id))
    except QueueNotFound:
        if not by_cached_name:
            raise
        assert isinstance(queue, str)
        names.forget(queue)
        fresh = yield from _lookup(names, queue)
        if fresh == queue_id:
            raise
        return (yield from build(fresh))


# --- queues ------------------------------------------------------------------------------


RateLimitArg = RateLimit | float
"""A token bucket: a ``RateLimit``, or its ``per_second`` alone (the default burst)."""


def _rate(limit: RateLimitArg | None) -> RateLimit | None:
    if limit is None or isinstance(limit, RateLimit):
        return limit
    return RateLimit(per_second=float(limit))


def create_queue(names: QueueNames, name: str, settings: Mapping[str, Any]) -> Op[Queue]:
    """``settings``: None for a setting is "the default" (the server's)."""
    body = _drop_none(
        name=name,
        **{
            key: _rate(value) if key.endswith("rate_limit") else value
            for key, value in settings.items()
        },
    )
    # Not repeatable: a retry after the first attempt landed would answer 409.
    response = yield Call("POST", "/v1/queues", body=_json(body), repeatable=False)
    queue = decode(response, Queue)
    names.put(queue.name, queue.id)
    return queue


def list_queues(limit: int | None, cursor: str | None, name: str | None) -> Op[Page[Queue]]:
    response = yield Call(
        "GET", "/v1/queues", params=_params(limit=limit, cursor=cursor, name=name)
    )
    return decode(response, Page[Queue])


def get_queue(names: QueueNames, queue: QueueRef) -> Op[QueueDetails]:
    def build(qid: str) -> Op[QueueDetails]:
        response = yield Call("GET", f"/v1/queues/{qid}")
        return decode(response, QueueDetails)

    return (yield from on_queue(names, queue, build))


# In an update, None for these removes the limit (SPEC §3.2); UNSET leaves it as it is.
REMOVABLE = frozenset({"max_in_flight", "rate_limit", "group_rate_limit"})


def update_queue(
    names: QueueNames,
    queue: QueueRef,
    changes: Mapping[str, Any],
) -> Op[Queue]:
    """``changes``: UNSET (or None, for a setting that cannot be removed) leaves a setting as
    it is; None for ``max_in_flight``, ``rate_limit`` or ``group_rate_limit`` removes it."""
    fields: dict[str, Any] = {}
    for key, value in changes.items():
        if isinstance(value, UnsetType) or (value is None and key not in REMOVABLE):
            continue
        fields[key] = _rate(value) if key.endswith("rate_limit") else value
    body = _json(fields)

    def build(qid: str) -> Op[Queue]:
        response = yield Call("PATCH", f"/v1/queues/{qid}", body=body)
        return decode(response, Queue)

    return (yield from on_queue(names, queue, build))


def set_paused(names: QueueNames, queue: QueueRef, paused: bool) -> Op[Queue]:
    action = "pause" if paused else "resume"

    def build(qid: str) -> Op[Queue]:
        response = yield Call("POST", f"/v1/queues/{qid}/{action}")
        return decode(response, Queue)

    return (yield from on_queue(names, queue, build))


class _Purged(msgspec.Struct):
    purged: int


def purge_queue(names: QueueNames, queue: QueueRef) -> Op[int]:
    def build(qid: str) -> Op[int]:
        # Not repeatable: a second purge would remove messages enqueued in between.
        response = yield Call("POST", f"/v1/queues/{qid}/purge", repeatable=False)
        return decode(response, _Purged).purged

    return (yield from on_queue(names, queue, build))


def delete_queue(names: QueueNames, queue: QueueRef) -> Op[None]:
    def build(qid: str) -> Op[None]:
        yield Call("DELETE", f"/v1/queues/{qid}", repeatable=False)
        names.forget_id(qid)

    yield from on_queue(names, queue, build)


# --- messages ----------------------------------------------------------------------------


class _MessageBody(msgspec.Struct, omit_defaults=True):
    payload: str
    priority: str
    ttl_seconds: int | None = None
    delay_seconds: int | None = None
    group: str | None = None


def _body(message: NewMessage) -> _MessageBody:
    return _MessageBody(
        payload=message.payload,
        priority=str(message.priority),
        ttl_seconds=message.ttl_seconds,
        delay_seconds=message.delay_seconds,
        group=message.group,
    )


class _Id(msgspec.Struct):
    id: str


class _Ids(msgspec.Struct):
    ids: list[str]


def new_idempotency_key() -> str:
    return uuid.uuid4().hex


def enqueue(
    names: QueueNames,
    queue: QueueRef,
    message: NewMessage,
    idempotency_key: str | None,
) -> Op[Enqueued]:
    body = _json(_body(message))
    headers = {IDEMPOTENCY_HEADER: idempotency_key} if idempotency_key is not None else None

    def build(qid: str) -> Op[Enqueued]:
        # With a key the server stores the message once however often it is sent; without
        # one a retry after the request may have arrived could store it twice.
        response = yield Call(
            "POST",
            f"/v1/queues/{qid}/messages",
            body=body,
            headers=headers,
            repeatable=idempotency_key is not None,
        )
        replayed = response.headers.get("idempotent-replayed", "").lower() == "true"
        return Enqueued(id=decode(response, _Id).id, replayed=replayed)

    return (yield from on_queue(names, queue, build))


def enqueue_batch(
    names: QueueNames, queue: QueueRef, messages: Iterable[NewMessage]
) -> Op[list[str]]:
    body = _json({"messages": [_body(message) for message in messages]})

    def build(qid: str) -> Op[list[str]]:
        # The batch route takes no Idempotency-Key: retried only when it was never sent.
        response = yield Call(
            "POST", f"/v1/queues/{qid}/messages/batch", body=body, repeatable=False
        )
        return decode(response, _Ids).ids

    return (yield from on_queue(names, queue, build))


class _Messages(msgspec.Struct):
    messages: list[Message]


def _dequeue_call(
    qid: str,
    wait_seconds: int | None,
    visibility_timeout_seconds: int | None,
    max_messages: int | None,
    consumer: str | None,
) -> Call:
    fields = _drop_none(
        wait_seconds=wait_seconds,
        visibility_timeout_seconds=visibility_timeout_seconds,
        max_messages=max_messages,
    )
    return Call(
        "POST",
        f"/v1/queues/{qid}/messages/dequeue",
        body=_json(fields) if fields else None,
        headers={CONSUMER_HEADER: consumer} if consumer else None,
        wait=float(wait_seconds or 0),
    )


def dequeue(
    names: QueueNames,
    queue: QueueRef,
    wait_seconds: int | None,
    visibility_timeout_seconds: int | None,
    consumer: str | None,
) -> Op[Message | None]:
    def build(qid: str) -> Op[Message | None]:
        response = yield _dequeue_call(
            qid, wait_seconds, visibility_timeout_seconds, None, consumer
        )
        if response.status_code == 204:
            return None
        return decode(response, Message)

    return (yield from on_queue(names, queue, build))


def dequeue_many(
    names: QueueNames,
    queue: QueueRef,
    max_messages: int,
    wait_seconds: int | None,
    visibility_timeout_seconds: int | None,
    consumer: str | None,
) -> Op[list[Message]]:
    def build(qid: str) -> Op[list[Message]]:
        response = yield _dequeue_call(
            qid, wait_seconds, visibility_timeout_seconds, max_messages, consumer
        )
        return decode(response, _Messages).messages

    return (yield from on_queue(names, queue, build))


def _receipt(message: MessageRef, receipt_handle: str | None) -> tuple[str, str]:
    if receipt_handle is None:
        if not isinstance(message, Message):
            raise TypeError("give a receipt_handle, or the Message a dequeue returned")
        receipt_handle = message.receipt_handle
    return message_id(message), receipt_handle


def acknowledge(
    names: QueueNames,
    queue: QueueRef,
    message: MessageRef,
    receipt_handle: str | None,
    result: str | None = None,
) -> Op[None]:
    mid, handle = _receipt(message, receipt_handle)
    body = _json(_drop_none(receipt_handle=handle, result=result))

    def build(qid: str) -> Op[None]:
        yield Call("POST", f"/v1/queues/{qid}/messages/{mid}/acknowledge", body=body)

    yield from on_queue(names, queue, build)


def acknowledge_batch(
    names: QueueNames, queue: QueueRef, messages: Iterable[Message | tuple[str, str]]
) -> Op[None]:
    entries = []
    for entry in messages:
        if isinstance(entry, Message):
            entries.append({"id": entry.id, "receipt_handle": entry.receipt_handle})
        else:
            entries.append({"id": str(entry[0]), "receipt_handle": entry[1]})
    body = _json({"messages": entries})

    def build(qid: str) -> Op[None]:
        yield Call("POST", f"/v1/queues/{qid}/messages/acknowledge", body=body)

    yield from on_queue(names, queue, build)


def change_visibility(
    names: QueueNames,
    queue: QueueRef,
    message: MessageRef,
    visibility_timeout_seconds: int,
    receipt_handle: str | None,
    error: str | None = None,
) -> Op[None]:
    mid, handle = _receipt(message, receipt_handle)
    body = _json(
        _drop_none(
            receipt_handle=handle,
            visibility_timeout_seconds=visibility_timeout_seconds,
            error=error,
        )
    )

    def build(qid: str) -> Op[None]:
        # Repeatable: sending it again sets the same lease end (or, after a release that
        # landed, answers stale_receipt_handle — nothing happens twice either way).
        yield Call("POST", f"/v1/queues/{qid}/messages/{mid}/visibility", body=body)

    yield from on_queue(names, queue, build)


# --- browsing (operators) ----------------------------------------------------------------


def list_messages(
    names: QueueNames,
    queue: QueueRef,
    state: MessageState | str | None,
    priority: Priority | str | None,
    limit: int | None,
    cursor: str | None,
    group: str | None = None,
    match: Mapping[str, Any] | None = None,
) -> Op[Page[StoredMessage]]:
    params = _params(
        state=None if state is None else str(state),
        priority=None if priority is None else str(priority),
        group=group,
        match=_match(match),
        limit=limit,
        cursor=cursor,
    )

    def build(qid: str) -> Op[Page[StoredMessage]]:
        response = yield Call("GET", f"/v1/queues/{qid}/messages", params=params)
        return decode(response, Page[StoredMessage])

    return (yield from on_queue(names, queue, build))


def get_message(names: QueueNames, queue: QueueRef, message: MessageRef) -> Op[StoredMessage]:
    mid = message_id(message)

    def build(qid: str) -> Op[StoredMessage]:
        response = yield Call("GET", f"/v1/queues/{qid}/messages/{mid}")
        return decode(response, StoredMessage)

    return (yield from on_queue(names, queue, build))


def delete_message(names: QueueNames, queue: QueueRef, message: MessageRef) -> Op[None]:
    mid = message_id(message)

    def build(qid: str) -> Op[None]:
        yield Call("DELETE", f"/v1/queues/{qid}/messages/{mid}", repeatable=False)

    yield from on_queue(names, queue, build)


class _Bulk(msgspec.Struct):
    """A bulk action's answer: ``matched`` for a dry run, else what it did."""

    matched: int | None = None
    deleted: int | None = None
    redriven: int | None = None

    def count(self) -> int:
        for value in (self.matched, self.deleted, self.redriven):
            if value is not None:
                return value
        raise ValueError("no count")


def _bulk(names: QueueNames, queue: QueueRef, path: str, body: dict[str, Any]) -> Op[int]:
    encoded = _json(body)
    dry_run = bool(body.get("dry_run"))

    def build(qid: str) -> Op[int]:
        # A real run is not repeatable: sent again, it would take what matches by then.
        response = yield Call("POST", f"/v1/queues/{qid}/{path}", body=encoded, repeatable=dry_run)
        answer = decode(response, _Bulk)
        try:
            return answer.count()
        except ValueError:
            raise UnexpectedResponse(
                f"POST {path} answered without a count: {response.text[:200]}",
                status=response.status_code,
                request_id=response.headers.get("x-request-id"),
            ) from None

    return (yield from on_queue(names, queue, build))


def delete_messages(
    names: QueueNames,
    queue: QueueRef,
    state: MessageState | str | None,
    priority: Priority | str | None,
    group: str | None,
    match: Mapping[str, Any] | None,
    limit: int | None,
    dry_run: bool,
) -> Op[int]:
    body = _filter(
        state=state,
        priority=priority,
        group=group,
        match=match,
        limit=limit,
        dry_run=dry_run,
    )
    return (yield from _bulk(names, queue, "messages/delete", body))


# --- groups (SPEC §3.10) -----------------------------------------------------------------


def list_groups(
    names: QueueNames,
    queue: QueueRef,
    state: GroupState | str | None,
    limit: int | None,
    cursor: str | None,
) -> Op[Page[Group]]:
    params = _params(state=_text(state), limit=limit, cursor=cursor)

    def build(qid: str) -> Op[Page[Group]]:
        response = yield Call("GET", f"/v1/queues/{qid}/groups", params=params)
        return decode(response, Page[Group])

    return (yield from on_queue(names, queue, build))


# --- dead letters ------------------------------------------------------------------------


def list_dead_letters(
    names: QueueNames,
    queue: QueueRef,
    limit: int | None,
    cursor: str | None,
    group: str | None = None,
    match: Mapping[str, Any] | None = None,
) -> Op[Page[DeadLetter]]:
    params = _params(group=group, match=_match(match), limit=limit, cursor=cursor)

    def build(qid: str) -> Op[Page[DeadLetter]]:
        response = yield Call("GET", f"/v1/queues/{qid}/dead-letters", params=params)
        return decode(response, Page[DeadLetter])

    return (yield from on_queue(names, queue, build))


def get_dead_letter(names: QueueNames, queue: QueueRef, message: MessageRef) -> Op[DeadLetter]:
    mid = message_id(message)

    def build(qid: str) -> Op[DeadLetter]:
        response = yield Call("GET", f"/v1/queues/{qid}/dead-letters/{mid}")
        return decode(response, DeadLetter)

    return (yield from on_queue(names, queue, build))


def redrive_dead_letter(names: QueueNames, queue: QueueRef, message: MessageRef) -> Op[str]:
    mid = message_id(message)

    def build(qid: str) -> Op[str]:
        response = yield Call(
            "POST", f"/v1/queues/{qid}/dead-letters/{mid}/redrive", repeatable=False
        )
        return decode(response, _Id).id

    return (yield from on_queue(names, queue, build))


def redrive_dead_letters(
    names: QueueNames,
    queue: QueueRef,
    limit: int | None,
    priority: Priority | str | None = None,
    group: str | None = None,
    match: Mapping[str, Any] | None = None,
    reason: str | None = None,
    dry_run: bool = False,
) -> Op[int]:
    body = _filter(
        priority=priority,
        group=group,
        match=match,
        reason=reason,
        limit=limit,
        dry_run=dry_run,
    )
    return (yield from _bulk(names, queue, "dead-letters/redrive", body))


def delete_dead_letters(
    names: QueueNames,
    queue: QueueRef,
    priority: Priority | str | None,
    group: str | None,
    match: Mapping[str, Any] | None,
    reason: str | None,
    limit: int | None,
    dry_run: bool,
) -> Op[int]:
    body = _filter(
        priority=priority,
        group=group,
        match=match,
        reason=reason,
        limit=limit,
        dry_run=dry_run,
    )
    return (yield from _bulk(names, queue, "dead-letters/delete", body))


def delete_dead_letter(names: QueueNames, queue: QueueRef, message: MessageRef) -> Op[None]:
    mid = message_id(message)

    def build(qid: str) -> Op[None]:
        yield Call("DELETE", f"/v1/queues/{qid}/dead-letters/{mid}", repeatable=False)

    yield from on_queue(names, queue, build)


# --- audit log, consumers, history -------------------------------------------------------


def list_audit_log(
    names: QueueNames,
    queue: QueueRef | None,
    action: str | None,
    limit: int | None,
    cursor: str | None,
) -> Op[Page[AuditEntry]]:
    # The audit trail outlives its queue, so only a name needs a (live) lookup.
    queue_id = None if queue is None else (yield from resolve(names, queue))
    params = _params(queue_id=queue_id, action=action, limit=limit, cursor=cursor)
    response = yield Call("GET", "/v1/audit-log", params=params)
    return decode(response, Page[AuditEntry])


def list_consumers(
    names: QueueNames,
    queue: QueueRef | None,
    health: ConsumerHealth | str | None,
    limit: int | None,
    cursor: str | None,
) -> Op[Page[Consumer]]:
    queue_id = None if queue is None else (yield from resolve(names, queue))
    params = _params(
        queue_id=queue_id,
        health=None if health is None else str(health),
        limit=limit,
        cursor=cursor,
    )
    response = yield Call("GET", "/v1/consumers", params=params)
    return decode(response, Page[Consumer])


def queue_history(names: QueueNames, queue: QueueRef, minutes: int | None) -> Op[History]:
    params = _params(minutes=minutes)

    def build(qid: str) -> Op[History]:
        response = yield Call("GET", f"/v1/queues/{qid}/history", params=params)
        return decode(response, History)

    return (yield from on_queue(names, queue, build))


# --- schedules (SPEC §3.12) --------------------------------------------------------------


def schedule_id(schedule: ScheduleRef) -> str:
    return schedule.id if isinstance(schedule, Schedule) else str(schedule)


def create_schedule(
    names: QueueNames,
    queue: QueueRef,
    name: str,
    message: ScheduleMessage,
    cron: str | None,
    every_seconds: int | None,
    timezone: str | None,
    paused: bool | None,
) -> Op[Schedule]:
    body = _json(
        _drop_none(
            name=name,
            cron=cron,
            every_seconds=every_seconds,
            timezone=timezone,
            message=message,
            paused=paused,
        )
    )

    def build(qid: str) -> Op[Schedule]:
        # Not repeatable: a retry after the first attempt landed would answer 409.
        response = yield Call("POST", f"/v1/queues/{qid}/schedules", body=body, repeatable=False)
        return decode(response, Schedule)

    return (yield from on_queue(names, queue, build))


def list_schedules(
    names: QueueNames, queue: QueueRef, limit: int | None, cursor: str | None
) -> Op[Page[Schedule]]:
    params = _params(limit=limit, cursor=cursor)

    def build(qid: str) -> Op[Page[Schedule]]:
        response = yield Call("GET", f"/v1/queues/{qid}/schedules", params=params)
        return decode(response, Page[Schedule])

    return (yield from on_queue(names, queue, build))


def get_schedule(names: QueueNames, queue: QueueRef, schedule: ScheduleRef) -> Op[Schedule]:
    sid = schedule_id(schedule)

    def build(qid: str) -> Op[Schedule]:
        response = yield Call("GET", f"/v1/queues/{qid}/schedules/{sid}")
        return decode(response, Schedule)

    return (yield from on_queue(names, queue, build))


def update_schedule(
    names: QueueNames, queue: QueueRef, schedule: ScheduleRef, changes: dict[str, Any]
) -> Op[Schedule]:
    sid = schedule_id(schedule)
    body = _json(_drop_none(**changes))

    def build(qid: str) -> Op[Schedule]:
        # Repeatable: the same change again leaves the same schedule (a new recurrence
        # restarts its due times from the later moment, as a later PATCH would).
        response = yield Call("PATCH", f"/v1/queues/{qid}/schedules/{sid}", body=body)
        return decode(response, Schedule)

    return (yield from on_queue(names, queue, build))


def set_schedule_paused(
    names: QueueNames, queue: QueueRef, schedule: ScheduleRef, paused: bool
) -> Op[Schedule]:
    sid = schedule_id(schedule)
    action = "pause" if paused else "resume"

    def build(qid: str) -> Op[Schedule]:
        response = yield Call("POST", f"/v1/queues/{qid}/schedules/{sid}/{action}")
        return decode(response, Schedule)

    return (yield from on_queue(names, queue, build))


def delete_schedule(names: QueueNames, queue: QueueRef, schedule: ScheduleRef) -> Op[None]:
    sid = schedule_id(schedule)

    def build(qid: str) -> Op[None]:
        yield Call("DELETE", f"/v1/queues/{qid}/schedules/{sid}", repeatable=False)

    yield from on_queue(names, queue, build)
