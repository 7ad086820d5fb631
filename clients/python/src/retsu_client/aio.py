"""``AsyncClient``: the asyncio client; the same methods as ``Client``, awaited."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, TypeVar

import httpx
import msgspec

from retsu_client import _calls as calls
from retsu_client._calls import (
    Call,
    MessageRef,
    Op,
    QueueNames,
    QueueRef,
    RateLimitArg,
    ScheduleRef,
)
from retsu_client._http import (
    as_timeout,
    build_request,
    default_headers,
    describe,
    env_token,
    env_url,
    limits,
    log,
    new_request_id,
    response_error,
)
from retsu_client.client import DEFAULT_RETRY, PAGE_SIZE, as_new_message
from retsu_client.errors import APIError, ConnectionFailed
from retsu_client.models import (
    UNSET,
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
    Schedule,
    ScheduleMessage,
    StoredMessage,
    UnsetType,
)
from retsu_client.retry import RetryPolicy, retry_exception, retry_status

__all__ = ["AsyncClient"]

T = TypeVar("T")


async def run_async(op: Op[T], send: Callable[[Call], Awaitable[httpx.Response]]) -> T:
    """Drive an operation: send what it yields, throw error answers back into it."""
    try:
        call = next(op)
        while True:
            try:
                response = await send(call)
            except APIError as error:
                call = op.throw(error)
            else:
                call = op.send(response)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


class AsyncClient:
    """An asyncio Retsu client. Use it as ``async with`` (or await ``aclose()``).

    ``base_url`` and ``token`` default to ``RETSU_URL`` / ``RETSU_TOKEN``. ``transport``
    replaces httpx's network transport (``retsu_client.testing.FakeRetsu().transport()``
    serves the server's app in process). ``consumer`` names this client on every dequeue
    (``Retsu-Consumer``). A queue is named by id or by name everywhere.
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        token: str | None = None,
        timeout: float | httpx.Timeout = 10.0,
        retry: RetryPolicy = DEFAULT_RETRY,
        transport: httpx.AsyncBaseTransport | None = None,
        consumer: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.base_url = env_url(base_url)
        self.retry = retry
        self.consumer = consumer
        self._timeout = as_timeout(timeout)
        self._names = QueueNames()
        self._sleep: Callable[[float], Awaitable[None]] = (
            asyncio.sleep
        )  # replaced by tests that check the waits
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=default_headers(env_token(token), headers),
            timeout=self._timeout,
            transport=transport,
            limits=limits(),
        )

    # --- plumbing -----------------------------------------------------------------------

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _run(self, op: Op[T]) -> T:
        return await run_async(op, self._send)

    async def _send(self, call: Call) -> httpx.Response:
        request_id = new_request_id()
        schedule = self.retry.schedule()
        while True:
            request = build_request(self._http, call, request_id, self._timeout)
            try:
                response = await self._http.send(request)
            except httpx.TransportError as error:
                delay = schedule.next_delay() if retry_exception(error, call.repeatable) else None
                if delay is None:
                    raise ConnectionFailed(
                        f"{describe(call)} to {self.base_url} failed: {error!r}",
                        request_id=request_id,
                    ) from error
                log.info("retrying %s in %.2fs after %r", describe(call), delay, error)
                await self._sleep(delay)
                continue
            if response.is_success:
                return response
            api_error = response_error(response, request_id)
            retry = retry_status(response.status_code, api_error.code, call.repeatable)
            delay = schedule.next_delay(api_error.retry_after) if retry else None
            if delay is None:
                raise api_error
            log.info("retrying %s in %.2fs after %s", describe(call), delay, api_error.code)
            await self._sleep(delay)

    @staticmethod
    async def _follow(fetch: Callable[[str | None], Awaitable[Page[T]]]) -> AsyncIterator[T]:
        cursor: str | None = None
        while True:
            page = await fetch(cursor)
            for item in page.items:
                yield item
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    # --- queues -------------------------------------------------------------------------

    async def queue_id(self, queue: QueueRef) -> str:
        """The id of a queue named by id or name (a name is looked up once, then cached)."""
        return await self._run(calls.resolve(self._names, queue))

    async def create_queue(
        self,
        name: str,
        *,
        visibility_timeout_seconds: int | None = None,
        max_delivery_attempts: int | None = None,
        default_message_ttl_seconds: int | None = None,
        group_max_in_flight: int | None = None,
        max_in_flight: int | None = None,
        rate_limit: RateLimitArg | None = None,
        group_rate_limit: RateLimitArg | None = None,
        completed_retention_seconds: int | None = None,
    ) -> Queue:
        """Create a queue; a setting not given takes the server's default. Flow control
        (SPEC §3.10): ``group_max_in_flight`` (1: each group an ordered lane),
        ``max_in_flight`` (active leases at most), ``rate_limit`` / ``group_rate_limit`` (a
        ``RateLimit``, or deliveries per second alone); history (§3.11):
        ``completed_retention_seconds`` keeps acknowledged messages with their result."""
        settings = {
            "visibility_timeout_seconds": visibility_timeout_seconds,
            "max_delivery_attempts": max_delivery_attempts,
            "default_message_ttl_seconds": default_message_ttl_seconds,
            "group_max_in_flight": group_max_in_flight,
            "max_in_flight": max_in_flight,
            "rate_limit": rate_limit,
            "group_rate_limit": group_rate_limit,
            "completed_retention_seconds": completed_retention_seconds,
        }
        return await self._run(calls.create_queue(self._names, name, settings))

    async def list_queues(
        self, *, name: str | None = None, limit: int | None = None, cursor: str | None = None
    ) -> Page[Queue]:
        return await self._run(calls.list_queues(limit, cursor, name))

    def iter_queues(
        self, *, name: str | None = None, page_size: int = PAGE_SIZE
    ) -> AsyncIterator[Queue]:
        """Every queue, by name, following the cursors."""
        return self._follow(lambda c: self.list_queues(name=name, limit=page_size, cursor=c))

    async def get_queue(self, queue: QueueRef) -> QueueDetails:
        return await self._run(calls.get_queue(self._names, queue))

    async def update_queue(
        self,
        queue: QueueRef,
        *,
        visibility_timeout_seconds: int | None = None,
        max_delivery_attempts: int | None = None,
        default_message_ttl_seconds: int | None = None,
        group_max_in_flight: int | None = None,
        max_in_flight: int | UnsetType | None = UNSET,
        rate_limit: RateLimitArg | UnsetType | None = UNSET,
        group_rate_limit: RateLimitArg | UnsetType | None = UNSET,
        completed_retention_seconds: int | None = None,
    ) -> Queue:
        """Change the settings given. ``max_in_flight``, ``rate_limit`` and
        ``group_rate_limit`` set to None remove that limit (left out: unchanged); for the
        other settings None means "unchanged". Nothing to change: ``EmptyQueueUpdate``."""
        changes = {
            "visibility_timeout_seconds": visibility_timeout_seconds,
            "max_delivery_attempts": max_delivery_attempts,
            "default_message_ttl_seconds": default_message_ttl_seconds,
            "group_max_in_flight": group_max_in_flight,
            "max_in_flight": max_in_flight,
            "rate_limit": rate_limit,
            "group_rate_limit": group_rate_limit,
            "completed_retention_seconds": completed_retention_seconds,
        }
        return await self._run(calls.update_queue(self._names, queue, changes))

    async def pause_queue(self, queue: QueueRef) -> Queue:
        return await self._run(calls.set_paused(self._names, queue, True))

    async def resume_queue(self, queue: QueueRef) -> Queue:
        return await self._run(calls.set_paused(self._names, queue, False))

    async def purge_queue(self, queue: QueueRef) -> int:
        """Remove every live message (not dead letters); returns how many."""
        return await self._run(calls.purge_queue(self._names, queue))

    async def delete_queue(self, queue: QueueRef) -> None:
        await self._run(calls.delete_queue(self._names, queue))

    # --- messages -----------------------------------------------------------------------

    async def enqueue(
        self,
        queue: QueueRef,
        payload: str,
        *,
        priority: Priority | str = Priority.MEDIUM,
        ttl_seconds: int | None = None,
        delay_seconds: int | None = None,
        group: str | None = None,
        idempotency_key: str | None = None,
        idempotent: bool = True,
    ) -> Enqueued:
        """Enqueue one message (``group``: its ordered, fairly served lane, SPEC §3.10). It
        carries an ``Idempotency-Key`` — ``idempotency_key``, else a fresh one per call
        unless ``idempotent=False`` — so retries never store it twice; without a key it is
        retried only when it provably never reached the server."""
        key = idempotency_key or (calls.new_idempotency_key() if idempotent else None)
        message = NewMessage(
            payload=payload,
            priority=priority,
            ttl_seconds=ttl_seconds,
            delay_seconds=delay_seconds,
            group=group,
        )
        return await self._run(calls.enqueue(self._names, queue, message, key))

    async def enqueue_json(
        self,
        queue: QueueRef,
        obj: Any,
        *,
        priority: Priority | str = Priority.MEDIUM,
        ttl_seconds: int | None = None,
        delay_seconds: int | None = None,
        group: str | None = None,
        idempotency_key: str | None = None,
        idempotent: bool = True,
    ) -> Enqueued:
        """Enqueue ``obj`` encoded as JSON (anything msgspec encodes: dicts, Structs, ...)."""
        return await self.enqueue(
            queue,
            msgspec.json.encode(obj).decode(),
            priority=priority,
            ttl_seconds=ttl_seconds,
            delay_seconds=delay_seconds,
            group=group,
            idempotency_key=idempotency_key,
            idempotent=idempotent,
        )

    async def enqueue_batch(
        self,
        queue: QueueRef,
        messages: Iterable[NewMessage | str],
        *,
        priority: Priority | str = Priority.MEDIUM,
        group: str | None = None,
    ) -> list[str]:
        """Enqueue 1–100 messages at once, all or nothing; returns their ids in order.
        Strings get ``priority`` and ``group``. The route takes no Idempotency-Key, so this
        is retried only when the request provably never reached the server."""
        batch = [as_new_message(message, priority, group) for message in messages]
        return await self._run(calls.enqueue_batch(self._names, queue, batch))

    async def dequeue(
        self,
        queue: QueueRef,
        *,
        wait_seconds: int | None = None,
        visibility_timeout_seconds: int | None = None,
        consumer: str | None = None,
    ) -> Message | None:
        """The next message (highest priority, then oldest), or None when nothing was
        deliverable within ``wait_seconds`` (0–20, long polling)."""
        return await self._run(
            calls.dequeue(
                self._names,
                queue,
                wait_seconds,
                visibility_timeout_seconds,
                consumer or self.consumer,
            )
        )

    async def dequeue_many(
        self,
        queue: QueueRef,
        max_messages: int = 10,
        *,
        wait_seconds: int | None = None,
        visibility_timeout_seconds: int | None = None,
        consumer: str | None = None,
    ) -> list[Message]:
        """Up to ``max_messages`` (1–100) messages; an empty list when none came in time."""
        return await self._run(
            calls.dequeue_many(
                self._names,
                queue,
                max_messages,
                wait_seconds,
                visibility_timeout_seconds,
                consumer or self.consumer,
            )
        )

    async def acknowledge(
        self,
        queue: QueueRef,
        message: MessageRef,
        receipt_handle: str | None = None,
        *,
        result: str | None = None,
    ) -> None:
        """Remove a delivered message (give the ``Message``, or its id and handle).
        ``result`` (at most 65,536 characters) is kept with it when the queue keeps
        completed messages (``completed_retention_seconds``), else ignored."""
        await self._run(calls.acknowledge(self._names, queue, message, receipt_handle, result))

    async def acknowledge_batch(
        self, queue: QueueRef, messages: Iterable[Message | tuple[str, str]]
    ) -> None:
        """Acknowledge 1–100 deliveries in one call (``Message`` values or (id, handle))."""
        await self._run(calls.acknowledge_batch(self._names, queue, messages))

    async def change_visibility(
        self,
        queue: QueueRef,
        message: MessageRef,
        visibility_timeout_seconds: int,
        *,
        receipt_handle: str | None = None,
        error: str | None = None,
    ) -> None:
        """End the lease that many seconds from now (0 releases the message at once).
        ``error`` (at most 4,096 characters) says why the message is given back: it is
        recorded on the current attempt. Raises ``StaleReceiptHandle`` when the handle is
        not the current delivery."""
        await self._run(
            calls.change_visibility(
                self._names, queue, message, visibility_timeout_seconds, receipt_handle, error
            )
        )

    async def release(
        self,
        queue: QueueRef,
        message: MessageRef,
        *,
        delay_seconds: int = 0,
        error: str | None = None,
        receipt_handle: str | None = None,
    ) -> None:
        """Give a delivered message back for a later attempt, after ``delay_seconds``
        (0: at once), saying why with ``error`` — ``change_visibility`` by another name."""
        await self.change_visibility(
            queue, message, delay_seconds, receipt_handle=receipt_handle, error=error
        )

    # --- browsing (operators) -----------------------------------------------------------

    async def list_messages(
        self,
        queue: QueueRef,
        *,
        state: MessageState | str | None = None,
        priority: Priority | str | None = None,
        group: str | None = None,
        match: Mapping[str, Any] | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Page[StoredMessage]:
        """Messages without claiming them: live ones (every state, or ``state``), or the
        completed ones a queue keeps (``state="completed"``); of one ``priority`` or
        ``group``, and whose JSON payload contains ``match`` (a dict). A page may come back
        short with a ``next_cursor``."""
        return await self._run(
            calls.list_messages(self._names, queue, state, priority, limit, cursor, group, match)
        )

    def iter_messages(
        self,
        queue: QueueRef,
        *,
        state: MessageState | str | None = None,
        priority: Priority | str | None = None,
        group: str | None = None,
        match: Mapping[str, Any] | None = None,
        page_size: int = PAGE_SIZE,
    ) -> AsyncIterator[StoredMessage]:
        """Every message ``list_messages`` would list, following the cursors."""
        return self._follow(
            lambda c: self.list_messages(
                queue,
                state=state,
                priority=priority,
                group=group,
                match=match,
                limit=page_size,
                cursor=c,
            )
        )

    async def get_message(self, queue: QueueRef, message: MessageRef) -> StoredMessage:
        return await self._run(calls.get_message(self._names, queue, message))

    async def delete_message(self, queue: QueueRef, message: MessageRef) -> None:
        await self._run(calls.delete_message(self._names, queue, message))

    async def delete_messages(
        self,
        queue: QueueRef,
        *,
        state: MessageState | str | None = None,
        priority: Priority | str | None = None,
        group: str | None = None,
        match: Mapping[str, Any] | None = None,
        limit: int | None = None,
        dry_run: bool = False,
    ) -> int:
        """Delete the live messages (of ``state``, else every live one) the filters admit,
        at most ``limit`` (1–100000, default 1000), skipping what a dequeue holds. Returns
        how many were deleted — or, with ``dry_run``, how many a real run would take now."""
        return await self._run(
            calls.delete_messages(self._names, queue, state, priority, group, match, limit, dry_run)
        )

    # --- groups (SPEC §3.10) ------------------------------------------------------------

    async def list_groups(
        self,
        queue: QueueRef,
        *,
        state: GroupState | str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Page[Group]:
        """The groups with a live message, the one whose head has waited longest first;
        ``state`` filters (ready, blocked, waiting)."""
        return await self._run(calls.list_groups(self._names, queue, state, limit, cursor))

    def iter_groups(
        self,
        queue: QueueRef,
        *,
        state: GroupState | str | None = None,
        page_size: int = PAGE_SIZE,
    ) -> AsyncIterator[Group]:
        """Every group ``list_groups`` would list, following the cursors."""
        return self._follow(
            lambda c: self.list_groups(queue, state=state, limit=page_size, cursor=c)
        )

    # --- dead letters -------------------------------------------------------------------

    async def list_dead_letters(
        self,
        queue: QueueRef,
        *,
        group: str | None = None,
        match: Mapping[str, Any] | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Page[DeadLetter]:
        """Dead letters, newest first; of one ``group``, whose JSON payload contains
        ``match`` (a dict)."""
        return await self._run(
            calls.list_dead_letters(self._names, queue, limit, cursor, group, match)
        )

    def iter_dead_letters(
        self,
        queue: QueueRef,
        *,
        group: str | None = None,
        match: Mapping[str, Any] | None = None,
        page_size: int = PAGE_SIZE,
    ) -> AsyncIterator[DeadLetter]:
        """Every dead letter of the queue (that the filters admit), newest first."""
        return self._follow(
            lambda c: self.list_dead_letters(
                queue, group=group, match=match, limit=page_size, cursor=c
            )
        )

    async def get_dead_letter(self, queue: QueueRef, message: MessageRef) -> DeadLetter:
        return await self._run(calls.get_dead_letter(self._names, queue, message))

    async def redrive_dead_letter(self, queue: QueueRef, message: MessageRef) -> str:
        """Put a dead letter back on its queue as a fresh message; returns the new id."""
        return await self._run(calls.redrive_dead_letter(self._names, queue, message))

    async def redrive_dead_letters(
        self,
        queue: QueueRef,
        *,
        limit: int | None = None,
        priority: Priority | str | None = None,
        group: str | None = None,
        match: Mapping[str, Any] | None = None,
        reason: str | None = None,
        dry_run: bool = False,
    ) -> int:
        """Redrive up to ``limit`` (1–1000, default 100) dead letters the filters admit,
        oldest first. Returns how many were redriven — or, with ``dry_run``, how many a real
        run would take now."""
        return await self._run(
            calls.redrive_dead_letters(
                self._names, queue, limit, priority, group, match, reason, dry_run
            )
        )

    async def delete_dead_letter(self, queue: QueueRef, message: MessageRef) -> None:
        await self._run(calls.delete_dead_letter(self._names, queue, message))

    async def delete_dead_letters(
        self,
        queue: QueueRef,
        *,
        priority: Priority | str | None = None,
        group: str | None = None,
        match: Mapping[str, Any] | None = None,
        reason: str | None = None,
        limit: int | None = None,
        dry_run: bool = False,
    ) -> int:
        """Delete up to ``limit`` (1–100000, default 1000) dead letters the filters admit,
        oldest first. Returns how many were deleted — or, with ``dry_run``, how many a real
        run would take now."""
        return await self._run(
            calls.delete_dead_letters(
                self._names, queue, priority, group, match, reason, limit, dry_run
            )
        )

    # --- audit log, consumers, history --------------------------------------------------

    async def list_audit_log(
        self,
        *,
        queue: QueueRef | None = None,
        action: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Page[AuditEntry]:
        return await self._run(calls.list_audit_log(self._names, queue, action, limit, cursor))

    def iter_audit_log(
        self,
        *,
        queue: QueueRef | None = None,
        action: str | None = None,
        page_size: int = PAGE_SIZE,
    ) -> AsyncIterator[AuditEntry]:
        """Every audit entry (newest first), optionally of one queue or action."""
        return self._follow(
            lambda c: self.list_audit_log(queue=queue, action=action, limit=page_size, cursor=c)
        )

    async def list_consumers(
        self,
        *,
        queue: QueueRef | None = None,
        health: ConsumerHealth | str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Page[Consumer]:
        return await self._run(calls.list_consumers(self._names, queue, health, limit, cursor))

    def iter_consumers(
        self,
        *,
        queue: QueueRef | None = None,
        health: ConsumerHealth | str | None = None,
        page_size: int = PAGE_SIZE,
    ) -> AsyncIterator[Consumer]:
        return self._follow(
            lambda c: self.list_consumers(queue=queue, health=health, limit=page_size, cursor=c)
        )

    async def queue_history(self, queue: QueueRef, *, minutes: int | None = None) -> History:
        """Depth and throughput snapshots of the last ``minutes`` (default 60), oldest first."""
        return await self._run(calls.queue_history(self._names, queue, minutes))

    # --- schedules (SPEC §3.12) ---------------------------------------------------------

    async def create_schedule(
        self,
        queue: QueueRef,
        name: str,
        message: ScheduleMessage | str,
        *,
        cron: str | None = None,
        every_seconds: int | None = None,
        timezone: str | None = None,
        priority: Priority | str = Priority.MEDIUM,
        paused: bool | None = None,
    ) -> Schedule:
        """A recurring message: exactly one of ``cron`` (five fields, read in ``timezone``,
        default UTC) and ``every_seconds`` (first due one interval from now). ``message``
        is a ``ScheduleMessage`` or a payload (with ``priority``)."""
        template = (
            message
            if isinstance(message, ScheduleMessage)
            else ScheduleMessage(payload=message, priority=Priority(priority))
        )
        return await self._run(
            calls.create_schedule(
                self._names, queue, name, template, cron, every_seconds, timezone, paused
            )
        )

    async def list_schedules(
        self, queue: QueueRef, *, limit: int | None = None, cursor: str | None = None
    ) -> Page[Schedule]:
        """A queue's schedules by name."""
        return await self._run(calls.list_schedules(self._names, queue, limit, cursor))

    def iter_schedules(
        self, queue: QueueRef, *, page_size: int = PAGE_SIZE
    ) -> AsyncIterator[Schedule]:
        """Every schedule of the queue, by name."""
        return self._follow(lambda c: self.list_schedules(queue, limit=page_size, cursor=c))

    async def get_schedule(self, queue: QueueRef, schedule: ScheduleRef) -> Schedule:
        return await self._run(calls.get_schedule(self._names, queue, schedule))

    async def update_schedule(
        self,
        queue: QueueRef,
        schedule: ScheduleRef,
        *,
        name: str | None = None,
        cron: str | None = None,
        every_seconds: int | None = None,
        timezone: str | None = None,
        message: ScheduleMessage | None = None,
    ) -> Schedule:
        """Change what is given; ``cron`` or ``every_seconds`` switches the schedule to that
        kind, and a new recurrence or time zone starts its due times afresh from now."""
        changes = {
            "name": name,
            "cron": cron,
            "every_seconds": every_seconds,
            "timezone": timezone,
            "message": message,
        }
        return await self._run(calls.update_schedule(self._names, queue, schedule, changes))

    async def pause_schedule(self, queue: QueueRef, schedule: ScheduleRef) -> Schedule:
        """Its due times are skipped until resumed (not caught up)."""
        return await self._run(calls.set_schedule_paused(self._names, queue, schedule, True))

    async def resume_schedule(self, queue: QueueRef, schedule: ScheduleRef) -> Schedule:
        """Its due times start afresh from now."""
        return await self._run(calls.set_schedule_paused(self._names, queue, schedule, False))

    async def delete_schedule(self, queue: QueueRef, schedule: ScheduleRef) -> None:
        """The messages it enqueued stay."""
        await self._run(calls.delete_schedule(self._names, queue, schedule))
