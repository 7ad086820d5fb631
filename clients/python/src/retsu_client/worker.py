"""``Worker``: consume a queue with a handler function (SPEC §9).

Dequeues run as tasks of their own, in batches, kept in flight while handlers run so a
handler slot never waits for a round trip it could have overlapped: a fetch is sent as soon
as there is room for it (up to ``prefetch`` messages held: running, waiting, or asked for),
and while the queue has a backlog (the last answer was full) a second one may be in flight
beside it, neither long-polling. ``concurrency`` handlers run at a time (``async def``
handlers on the event loop, plain functions in threads), one task keeps every held
message's lease alive (extends it at half the visibility timeout, up to ``max_extension``
seconds in all), and one task acknowledges finished messages in batch calls, never holding
up a dequeue. A failed handler's message is released for a later attempt with exponential
backoff; ``RetryLater(seconds)`` picks the delay.

What happened is recorded on the message's attempts (SPEC §3.11): a release carries the
exception as ``error`` (``"<ExceptionType>: <message>"``, cut to 4,096 characters). A
handler's return value is the acknowledge's ``result`` while the queue keeps completed
messages (``completed_retention_seconds`` > 0, read at the start and every 30 s; otherwise
the server would discard it): a ``str`` as is, anything else encoded as JSON; ``None`` (or
a value that is not JSON-serialisable, or longer than 65,536 characters: logged, never
truncated — half a JSON document is not one) sends none. Acknowledgements without a result
stay batched; one with a result is a call of its own (the batch route takes none).

How far to fetch ahead, by default, follows the handlers (averages of the handler time and
of the dequeue round trip): the worker holds up to ``2 × concurrency × round trip / handler
time`` messages beyond the running ones (at most 200, two full batches, and about 32 M
characters of payloads), so the next batch is there before a slot frees; handlers slower
than half a round trip per slot get nothing ahead, so a slow worker never keeps messages
waiting that another consumer could take. ``prefetch=N`` fixes the number held instead.

Stopping (``stop()``, SIGTERM or SIGINT under ``serve()``): no new dequeue (a dequeue
already sent is let answer — a long poll only for a moment — and what it brings is released
at once); prefetched messages no handler started are released at once (visibility 0); running
handlers get ``shutdown_grace`` seconds to finish (a second signal cuts that short); what is
still running then is released too; the pending acknowledgements are sent; ``serve()``
returns 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import logging
import math
import os
import queue as threading_queue
import random
import signal
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from retsu_client._calls import QueueRef
from retsu_client.aio import AsyncClient
from retsu_client.errors import (
    Forbidden,
    InvalidRequest,
    NotFound,
    RetsuError,
    StaleReceiptHandle,
    Unauthorized,
)
from retsu_client.models import Message

if TYPE_CHECKING:
    from retsu_client.metrics import WorkerMetrics

__all__ = [
    "Handler",
    "RetryLater",
    "Worker",
    "default_consumer_name",
    "error_text",
    "release_delay",
]

Handler = Callable[[Message], Awaitable[object]] | Callable[[Message], object]

log = logging.getLogger("retsu_client.worker")

MAX_BATCH = 100  # the API's limit for one dequeue and one batch acknowledge
MAX_VISIBILITY = 21600
# Dequeues in flight at once while the queue has a backlog (a full batch came back): the
# second overlaps the first's round trip (measured: +49 % with a no-op handler, 8 paired
# drains of 10,000 at concurrency 10). While it has none, one long poll.
MAX_FETCHES = 2
# The default (adaptive) prefetch holds at most this many beyond the running handlers
# (room for MAX_FETCHES full batches) ...
MAX_AHEAD = MAX_FETCHES * MAX_BATCH
# ... and payloads of at most about this many characters in all (1 MiB payloads: 32 ahead).
MAX_AHEAD_CHARS = 32 * 1024 * 1024
# How long a long poll already sent may still answer once the worker stops (what it brings
# is released at once); after that it is abandoned. A dequeue that does not long-poll
# answers at once and is always waited for (within the shutdown grace).
STOP_FETCH_WAIT = 0.5
# Releases sent at once when the worker stops (one call per message: the API has no batch).
RELEASE_CONCURRENCY = 16
# Weight of the newest sample in the handler-time and round-trip averages.
EWMA_WEIGHT = 0.2
# Errors a retry will not fix: the worker stops (and `run()` raises) instead of looping.
_FATAL = (Unauthorized, Forbidden, NotFound, InvalidRequest)
# The API's bounds (SPEC §3.3): a release's `error`, an acknowledge's `result`.
ERROR_MAX_LENGTH = 4096
RESULT_MAX_LENGTH = 65536
# How often the queue's settings are read again (whether it keeps results).
SETTINGS_REFRESH = 30.0
# Acknowledges with a result sent at once (one call each: the batch route takes none).
RESULT_ACK_CONCURRENCY = 16


class RetryLater(Exception):
    """Raise from a handler to have the message delivered again after ``seconds``."""

    def __init__(self, seconds: float, reason: str = "") -> None:
        super().__init__(reason or f"retry in {seconds} s")
        if seconds < 0:
            raise ValueError("seconds must not be negative")
        self.seconds = seconds


def default_consumer_name() -> str:
    """``host:pid:suffix`` — unique per process, readable in ``retsuctl consumers``."""
    return f"{socket.gethostname()[:80]}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def release_delay(attempt: int, base: float, cap: float) -> int:
    """Visibility for a failed attempt: ``min(base * 2**(attempt-1), cap)``, whole seconds."""
    seconds = min(base * 2 ** max(attempt - 1, 0), cap)
    return _visibility(seconds)


def _visibility(seconds: float) -> int:
    return max(0, min(MAX_VISIBILITY, math.ceil(seconds)))


def error_text(error: BaseException) -> str:
    """What a release tells the server about a failure: ``"<ExceptionType>: <message>"``
    (the type alone when the message is empty), cut to the API's 4,096 characters."""
    name = type(error).__name__
    detail = str(error)
    text = f"{name}: {detail}" if detail else name
    if len(text) > ERROR_MAX_LENGTH:
        text = text[: ERROR_MAX_LENGTH - 1] + "…"
    return text


@dataclass(eq=False)
class _Held:
    """A message this worker holds a lease on."""

    message: Message
    received_at: float
    renew_at: float
    started: bool = False
    finished: bool = False  # the handler returned (acknowledge or release pending)
    lost: bool = False  # the lease is no longer ours
    abandoned: bool = False  # released at shutdown while its handler still ran
    capped: bool = False  # reached max_extension: no more extensions
    extending: bool = False
    result: str | None = None  # the handler's return value, sent with its acknowledge


@dataclass
class _Threads:
    """Daemon threads for plain (blocking) handlers: a handler still running after the
    shutdown grace must not keep the process alive (executor threads would be joined)."""

    size: int
    name: str
    _jobs: threading_queue.SimpleQueue[Any] = field(default_factory=threading_queue.SimpleQueue)
    _threads: list[threading.Thread] = field(default_factory=list)

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            context, fn, arg, loop, future = job
            try:
                result = context.run(fn, arg)
            except BaseException as error:
                outcome: tuple[Any, Any] = (future.set_exception, error)
            else:
                outcome = (future.set_result, result)
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits
                loop.call_soon_threadsafe(_settle, future, *outcome)

    async def run(self, fn: Callable[[Message], object], arg: Message) -> object:
        if not self._threads:
            for index in range(self.size):
                thread = threading.Thread(
                    target=self._work, name=f"{self.name}-{index}", daemon=True
                )
                thread.start()
                self._threads.append(thread)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[object] = loop.create_future()
        self._jobs.put((contextvars.copy_context(), fn, arg, loop, future))
        return await future

    def close(self) -> None:
        for _ in self._threads:
            self._jobs.put(None)


def _settle(future: asyncio.Future[object], setter: Callable[[Any], None], value: Any) -> None:
    if not future.done():
        setter(value)


def _is_async(handler: Handler) -> bool:
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        getattr(handler, "__call__", None)  # noqa: B004 - an object with async __call__
    )


class Worker:
    """Consume ``queue`` with ``handler`` (one argument: the ``Message``).

    * ``concurrency`` — handlers running at once.
    * ``prefetch`` — messages held at most (running + waiting + asked for); one dequeue asks
      for up to 100. Default: adaptive — up to ``concurrency + 200``, fetching ahead only as
      far as the handlers' speed warrants (see the module's docstring). Given: fixed, at
      least ``concurrency``, and that many are held whenever the queue has them.
    * ``wait_seconds`` — long-poll duration of each dequeue (0–20).
    * ``visibility_timeout`` — lease asked for on dequeue (default: the queue's own).
    * ``max_extension`` — a message's lease is extended while its handler runs (and while
      it waits in the prefetch buffer), at half the visibility timeout, for at most this
      many seconds after it was received; after that the lease is left to end.
    * ``retry_base``, ``retry_cap`` — a handler exception releases the message with
      visibility ``min(retry_base * 2**(attempt-1), retry_cap)`` seconds, and its type and
      message as the attempt's ``error``.
    * A handler's return value is sent as the acknowledge's ``result`` when the queue keeps
      completed messages (see the module's docstring); return nothing to send none.
    * ``shutdown_grace`` — seconds running handlers (and dequeues already sent) get to
      finish on stop.
    * ``ack_interval`` — how long finished messages are collected into one batch
      acknowledge (seconds; one call carries at most 100).
    * ``consumer_name`` — sent as ``Retsu-Consumer``; default ``host:pid:random``.
    * ``metrics`` — a ``retsu_client.metrics.WorkerMetrics`` (needs prometheus-client).
    """

    def __init__(
        self,
        client: AsyncClient,
        queue: QueueRef,
        handler: Handler,
        *,
        concurrency: int = 1,
        prefetch: int | None = None,
        wait_seconds: int = 20,
        visibility_timeout: int | None = None,
        max_extension: float = 3600.0,
        retry_base: float = 1.0,
        retry_cap: float = 300.0,
        shutdown_grace: float = 30.0,
        ack_interval: float = 0.01,
        consumer_name: str | None = None,
        metrics: WorkerMetrics | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if prefetch is not None and prefetch < 1:
            raise ValueError("prefetch must be at least 1")
        if not 0 <= wait_seconds <= 20:
            raise ValueError("wait_seconds must be 0-20")
        if visibility_timeout is not None and not 1 <= visibility_timeout <= MAX_VISIBILITY:
            raise ValueError(f"visibility_timeout must be 1-{MAX_VISIBILITY}")
        self.client = client
        self.queue = queue
        self.handler = handler
        self.concurrency = concurrency
        self.adaptive = prefetch is None
        self.prefetch = concurrency + MAX_AHEAD if prefetch is None else max(concurrency, prefetch)
        self.wait_seconds = wait_seconds
        self.visibility_timeout = visibility_timeout
        self.max_extension = max_extension
        self.retry_base = retry_base
        self.retry_cap = retry_cap
        self.shutdown_grace = shutdown_grace
        self.ack_interval = ack_interval
        self.consumer_name = consumer_name or default_consumer_name()
        self.metrics = metrics
        self.log = logger or log
        self._is_async = _is_async(handler)
        self._threads = _Threads(concurrency, "retsu-handler")
        self._held: dict[str, _Held] = {}  # by receipt handle
        self._active = 0  # held and not finished (running or waiting)
        self._requested = 0  # asked for by the dequeues in flight
        self._fetches: dict[asyncio.Task[None], int] = {}  # dequeues in flight: their wait
        self._backlog = False  # the last dequeue came back full: more are waiting
        self._failures = 0  # dequeues failed in a row
        self._retry_at = 0.0  # after a failure, no dequeue before this (monotonic)
        self._handler_seconds = 0.0  # average handler time (0: none finished yet)
        self._round_trip = 0.0  # average dequeue round trip (0: none measured yet)
        self._payload_size = 0.0  # average payload length (characters) of received messages
        self._busy: set[asyncio.Task[None]] = set()  # handler slots running a handler
        self._extensions: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = asyncio.Event()
        self._force = asyncio.Event()
        self._fatal: BaseException | None = None
        self._queue_id = ""
        self._queue_name = str(queue)
        self._lease = 0
        self._keep_results = False  # the queue keeps completed messages (and results)

    # --- control ------------------------------------------------------------------------

    def stop(self) -> None:
        """Begin a graceful stop; called again, skip the rest of the grace period.
        Safe to call from another thread or a signal handler."""
        loop = self._loop
        if loop is not None and not _in_loop(loop):
            loop.call_soon_threadsafe(self.stop)
            return
        if self._stopping.is_set():
            self._force.set()
        self._stopping.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    async def run(self) -> None:
        """Consume until ``stop()``; then shut down gracefully and return. Raises the error
        that stopped it, if one did (unknown queue, refused token, ...)."""
        self._loop = asyncio.get_running_loop()
        details = await self.client.get_queue(self.queue)
        self._queue_id, self._queue_name = details.id, details.name
        self._lease = self.visibility_timeout or details.visibility_timeout_seconds
        self._keep_results = details.completed_retention_seconds > 0
        self._ready: asyncio.Queue[_Held] = asyncio.Queue()
        self._acks: asyncio.Queue[_Held | None] = asyncio.Queue()
        self._capacity = asyncio.Event()
        self.log.info(
            "worker started",
            extra=self._fields(
                concurrency=self.concurrency,
                prefetch=f"adaptive, up to {self.prefetch}" if self.adaptive else self.prefetch,
                visibility_timeout=self._lease,
            ),
        )
        fetcher = asyncio.create_task(self._fetch_loop(), name="retsu-fetch")
        slots = [
            asyncio.create_task(self._slot_loop(), name=f"retsu-slot-{index}")
            for index in range(self.concurrency)
        ]
        extender = asyncio.create_task(self._extend_loop(), name="retsu-extend")
        acker = asyncio.create_task(self._ack_loop(), name="retsu-ack")
        settings = asyncio.create_task(self._settings_loop(), name="retsu-settings")
        try:
            await self._stopping.wait()
        finally:
            settings.cancel()
            await asyncio.gather(settings, return_exceptions=True)
            await self._shutdown(fetcher, slots, extender, acker)
        if self._fatal is not None:
            raise self._fatal

    async def run_until_signalled(self) -> None:
        """``run()`` with SIGTERM and SIGINT wired to ``stop()``."""
        loop = asyncio.get_running_loop()
        installed = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, self._on_signal, sig)
                installed.append(sig)
        try:
            await self.run()
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)

    def _on_signal(self, sig: signal.Signals) -> None:
        again = " again: skipping the rest of the grace period" if self.stopping else ""
        self.log.warning(f"received {sig.name}{again}", extra=self._fields(signal=sig.name))
        self.stop()

    # --- fetching -----------------------------------------------------------------------

    def _ahead(self) -> int:
        """Messages to hold beyond the running handlers (adaptive prefetch): as many as the
        handlers finish in two dequeue round trips, so the next batch is there before the
        buffer runs dry; none while either average is unknown or the handlers are slower
        than half a round trip per slot."""
        if not self.adaptive:
            return self.prefetch - self.concurrency
        if self._handler_seconds <= 0 or self._round_trip <= 0:
            return 0
        ahead = 2 * self.concurrency * self._round_trip / self._handler_seconds
        if self._payload_size > 0:  # large payloads: bound the memory held ahead too
            ahead = min(ahead, MAX_AHEAD_CHARS / self._payload_size)
        return min(MAX_AHEAD, int(ahead))

    def _want(self) -> int:
        """How many messages the next dequeue asks for now (0: none now)."""
        in_flight = len(self._fetches)
        if in_flight >= (MAX_FETCHES if self._backlog and not self._failures else 1):
            return 0
        limit = self.concurrency + self._ahead()
        free = limit - self._active - self._requested
        if free <= 0:
            return 0
        if in_flight and free < min(MAX_BATCH, (limit + 1) // 2):
            # One is on its way already: a second one only when it can be a real batch
            # (each request costs the API about as much as a message in a batch of 50).
            return 0
        return min(MAX_BATCH, free)

    async def _fetch_loop(self) -> None:
        while not self.stopping:
            pause = self._retry_at - time.monotonic()
            if pause > 0:
                await asyncio.sleep(pause)  # a dequeue failed: back off
                continue
            want = self._want()
            if want == 0:
                self._capacity.clear()
                await self._capacity.wait()  # set by _wake_fetcher
                continue
            # While the queue has a backlog (the last answer was full) a dequeue does not
            # long-poll: it is answered at once either way, and a stop can then wait for
            # it instead of abandoning messages it claimed. Otherwise one long poll.
            wait = 0 if self._backlog else self.wait_seconds
            task = asyncio.create_task(self._fetch(want, wait), name="retsu-dequeue")
            self._requested += want
            self._fetches[task] = wait
            task.add_done_callback(self._fetch_done)

    def _fetch_done(self, task: asyncio.Task[None]) -> None:
        self._fetches.pop(task, None)
        self._wake_fetcher()

    async def _fetch(self, want: int, wait: int) -> None:
        # Leases are timed from when the request was sent: the server started them
        # later than that, so under load (a slow answer) the renewal is early, never late.
        sent = time.monotonic()
        try:
            messages = await self.client.dequeue_many(
                self._queue_id,
                want,
                wait_seconds=wait,
                visibility_timeout_seconds=self._lease,
                consumer=self.consumer_name,
            )
        except _FATAL as error:
            self._requested -= want
            self.log.error(
                f"dequeue refused, stopping: {error}", extra=self._fields(code=error.code)
            )
            self._fatal = error
            self.stop()
            return
        except RetsuError as error:
            self._requested -= want
            self._failures += 1
            delay = min(30.0, 0.5 * 2 ** (self._failures - 1)) * random.uniform(0.5, 1.0)
            self._retry_at = time.monotonic() + delay  # the fetch loop waits until then
            self.log.warning(
                f"dequeue failed, retrying in {delay:.1f}s: {error}",
                extra=self._fields(retry_in=delay),
            )
            return
        except Exception as error:  # a bug, not a passing failure: stop rather than spin
            self._requested -= want
            self.log.error(f"dequeue failed unexpectedly, stopping: {error!r}", exc_info=True)
            self._fatal = error
            self.stop()
            return
        except BaseException:  # cancelled by the shutdown
            self._requested -= want
            raise
        self._requested -= want
        self._failures = 0
        count = len(messages)
        self._backlog = count == want
        if self._backlog:
            # A full answer did not wait for messages: its time is the round trip.
            took = time.monotonic() - sent
            average = self._round_trip
            self._round_trip = took if not average else average + (took - average) * EWMA_WEIGHT
        if count:
            size = sum(len(message.payload) for message in messages) / count
            average = self._payload_size
            self._payload_size = size if not average else average + (size - average) * EWMA_WEIGHT
        renew_at = sent + self._lease / 2
        held_by_handle = self._held
        ready = self._ready
        for message in messages:
            held = _Held(message, received_at=sent, renew_at=renew_at)
            held_by_handle[message.receipt_handle] = held
            ready.put_nowait(held)
        self._active += count
        if self.metrics is not None and count:
            self.metrics.received(self._queue_name, count)

    # --- handling -----------------------------------------------------------------------

    async def _slot_loop(self) -> None:
        """One of ``concurrency`` long-lived tasks, each running one handler at a time (a task
        per message cost about 20 µs more per message, measured with bench_worker.py)."""
        me = asyncio.current_task()
        assert me is not None
        while not self.stopping:
            held = await self._ready.get()
            held.started = True
            self._busy.add(me)
            try:
                await self._handle(held)
            finally:
                self._busy.discard(me)

    def _wake_fetcher(self) -> None:
        # Only when a dequeue is due: waking it for every finished message costs a loop
        # iteration each for nothing.
        if self._want() > 0:
            self._capacity.set()

    async def _handle(self, held: _Held) -> None:
        message = held.message
        if self.metrics is not None:
            self.metrics.started(self._queue_name)
        started = time.perf_counter()
        delay: int | None = None
        error: str | None = None
        try:
            if self._is_async:
                value = await self.handler(message)  # type: ignore[misc]
            else:
                value = await self._threads.run(self.handler, message)
        except asyncio.CancelledError:
            outcome = "released_on_shutdown"  # cancelled after the grace period
        except RetryLater as retry:
            outcome, delay = "retry_later", _visibility(retry.seconds)
            error = error_text(retry)
        except Exception as failure:
            outcome = "failed"
            delay = release_delay(message.delivery_attempts, self.retry_base, self.retry_cap)
            error = error_text(failure)
            self.log.warning(
                f"handler failed: {failure!r}; released for {delay}s",
                exc_info=True,
                extra=self._message_fields(message, outcome=outcome, retry_in=delay),
            )
        else:
            outcome = "acknowledged"
            if value is not None and self._keep_results:
                held.result = self._result_text(value, message)
        duration = time.perf_counter() - started
        average = self._handler_seconds
        self._handler_seconds = (
            duration if not average else average + (duration - average) * EWMA_WEIGHT
        )
        if self.metrics is not None:
            self.metrics.finished(self._queue_name, duration)
        self._finish(held)
        if held.abandoned or outcome == "released_on_shutdown":
            return  # the shutdown released it already; this result counts for nothing
        if self.log.isEnabledFor(logging.DEBUG):
            self.log.debug(
                "handled",
                extra=self._message_fields(
                    message, outcome=outcome, duration_seconds=round(duration, 6)
                ),
            )
        if held.lost:
            self._forget(held)  # its handle is stale: an acknowledge would do nothing
        elif outcome == "acknowledged":
            self._acks.put_nowait(held)
        else:
            assert delay is not None
            await self._release(held, delay, outcome, error)

    def _result_text(self, value: object, message: Message) -> str | None:
        """A handler's return value as the acknowledge's ``result``, or None (logged) when
        it cannot be one. Never truncated: a cut JSON document is not JSON any more."""
        if isinstance(value, str):
            text = value
        else:
            try:
                text = msgspec.json.encode(value).decode()
            except (TypeError, ValueError, msgspec.EncodeError) as failure:
                self.log.warning(
                    f"handler returned a value that is not JSON-serialisable ({failure}); "
                    "acknowledged without a result",
                    extra=self._message_fields(message, result_type=type(value).__name__),
                )
                return None
        if len(text) > RESULT_MAX_LENGTH:
            self.log.warning(
                f"handler result of {len(text)} characters is over the API's "
                f"{RESULT_MAX_LENGTH}; acknowledged without a result",
                extra=self._message_fields(message, result_length=len(text)),
            )
            return None
        return text

    def _finish(self, held: _Held) -> None:
        if not held.finished:
            held.finished = True
            self._active -= 1
            self._wake_fetcher()

    def _forget(self, held: _Held) -> None:
        self._held.pop(held.message.receipt_handle, None)

    async def _release(
        self, held: _Held, seconds: int, outcome: str, error: str | None = None
    ) -> None:
        self._finish(held)
        self._forget(held)
        if held.lost:
            return  # counted when it was lost
        try:
            await self.client.change_visibility(
                self._queue_id,
                held.message,
                seconds,
                receipt_handle=held.message.receipt_handle,
                error=error,
            )
        except StaleReceiptHandle:
            self._lost(held, "release")
            return
        except RetsuError as error:
            self.log.error(
                f"release failed: {error}; the lease ends on its own",
                extra=self._fields(message_id=held.message.id),
            )
        self._count(outcome)

    # --- leases -------------------------------------------------------------------------

    async def _extend_loop(self) -> None:
        # Wakes at the earliest renewal due (at least every 0.25 s, to see new messages):
        # with a 1 s lease the half-way renewal leaves 0.5 s, too little to also lose to
        # a coarse timer.
        while True:
            now = time.monotonic()
            upcoming = []
            for held in list(self._held.values()):
                if held.lost or held.capped or held.extending:
                    continue
                if now >= held.renew_at:
                    held.extending = True
                    task = asyncio.create_task(self._extend(held, now))
                    self._extensions.add(task)  # a task nobody references may be collected
                    task.add_done_callback(self._extensions.discard)
                else:
                    upcoming.append(held.renew_at)
            delay = min(upcoming) - now if upcoming else 0.25
            await asyncio.sleep(min(max(delay, 0.005), 0.25))

    async def _extend(self, held: _Held, now: float) -> None:
        try:
            remaining = self.max_extension - (now - held.received_at)
            seconds = min(self._lease, math.floor(remaining))
            if seconds < 1:
                held.capped = True
                self.log.warning(
                    f"message held for max_extension ({self.max_extension:.0f}s): its lease "
                    "is left to end and it will be delivered again",
                    extra=self._fields(message_id=held.message.id),
                )
                return
            sent = time.monotonic()
            await self.client.change_visibility(
                self._queue_id,
                held.message,
                seconds,
                receipt_handle=held.message.receipt_handle,
            )
            held.renew_at = sent + seconds / 2
            if seconds < self._lease:
                held.capped = True
        except StaleReceiptHandle:
            if held.message.receipt_handle in self._held:
                self._lost(held, "extension")
        except RetsuError as error:
            self.log.warning(
                f"lease extension failed: {error}; retrying",
                extra=self._fields(message_id=held.message.id),
            )
        finally:
            held.extending = False

    def _lost(self, held: _Held, during: str) -> None:
        if held.lost:
            return
        held.lost = True
        self._count("lease_lost")
        self.log.warning(
            f"lease lost ({during}): another consumer may get this message",
            extra=self._fields(message_id=held.message.id),
        )

    # --- acknowledging ------------------------------------------------------------------

    async def _ack_loop(self) -> None:
        closing = False
        while not closing:
            first = await self._acks.get()
            if first is None:
                return
            if self.ack_interval > 0 and self._acks.qsize() < MAX_BATCH - 1:
                await asyncio.sleep(self.ack_interval)
            batch = [first]
            while len(batch) < MAX_BATCH and not self._acks.empty():
                item = self._acks.get_nowait()
                if item is None:
                    closing = True
                    break
                batch.append(item)
            await self._flush(batch)

    async def _flush(self, batch: list[_Held]) -> None:
        plain = [held for held in batch if held.result is None]
        with_result = [held for held in batch if held.result is not None]
        if not with_result:
            await self._flush_plain(plain)  # the common case: one batch call, nothing else
            return
        gate = asyncio.Semaphore(RESULT_ACK_CONCURRENCY)

        async def one(held: _Held) -> None:
            async with gate:
                await self._flush_with_result(held)

        work = [one(held) for held in with_result]
        if plain:
            work.append(self._flush_plain(plain))
        await asyncio.gather(*work)

    async def _flush_plain(self, batch: list[_Held]) -> None:
        try:
            await self.client.acknowledge_batch(self._queue_id, [held.message for held in batch])
        except RetsuError as error:
            self.log.error(
                f"acknowledge of {len(batch)} messages failed: {error}; "
                "they will be delivered again",
                extra=self._fields(count=len(batch)),
            )
            self._count("ack_failed", len(batch))
        else:
            self._count("acknowledged", len(batch))
        finally:
            for held in batch:
                self._forget(held)

    async def _flush_with_result(self, held: _Held) -> None:
        """The single acknowledge route: the only one that takes a ``result``."""
        message = held.message
        try:
            await self.client.acknowledge(
                self._queue_id, message, message.receipt_handle, result=held.result
            )
        except RetsuError as error:
            self.log.error(
                f"acknowledge failed: {error}; the message will be delivered again",
                extra=self._fields(message_id=message.id),
            )
            self._count("ack_failed")
        else:
            self._count("acknowledged")
        finally:
            self._forget(held)

    async def _settings_loop(self) -> None:
        """Reads the queue again now and then: whether it keeps results may change while
        the worker runs. A failure changes nothing (the dequeues report real trouble)."""
        while True:
            await asyncio.sleep(SETTINGS_REFRESH)
            try:
                details = await self.client.get_queue(self._queue_id)
            except RetsuError as error:
                self.log.debug(f"reading the queue's settings failed: {error}")
                continue
            self._keep_results = details.completed_retention_seconds > 0

    # --- shutdown -----------------------------------------------------------------------

    async def _shutdown(
        self,
        fetcher: asyncio.Task[None],
        slots: list[asyncio.Task[None]],
        extender: asyncio.Task[None],
        acker: asyncio.Task[None],
    ) -> None:
        self.log.info("worker stopping", extra=self._fields(running=len(self._busy)))
        deadline = time.monotonic() + self.shutdown_grace  # for everything still running
        fetcher.cancel()
        await asyncio.gather(fetcher, return_exceptions=True)
        idle = [slot for slot in slots if slot not in self._busy]
        for slot in idle:
            slot.cancel()  # waiting for a message that will not come
        await asyncio.gather(*idle, return_exceptions=True)
        await self._settle_fetches(deadline)
        unstarted = []
        while not self._ready.empty():
            unstarted.append(self._ready.get_nowait())
        await self._release_all(unstarted)
        running: set[asyncio.Task[Any]] = set(self._busy)
        if running:
            force: asyncio.Task[Any] = asyncio.create_task(self._force.wait())
            pending = running
            while pending and not force.done():
                timeout = deadline - time.monotonic()
                if timeout <= 0:
                    break
                _, pending = await asyncio.wait(
                    pending | {force}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                pending.discard(force)
            force.cancel()
            late = [held for held in self._held.values() if held.started and not held.finished]
            for held in late:
                held.abandoned = True
            if late:
                self.log.warning(
                    f"{len(late)} handler(s) still running after the grace period: released",
                    extra=self._fields(count=len(late)),
                )
            await self._release_all(late)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        self._acks.put_nowait(None)
        await asyncio.gather(acker, return_exceptions=True)
        extender.cancel()
        await asyncio.gather(extender, *self._extensions, return_exceptions=True)
        self._threads.close()
        self.log.info("worker stopped", extra=self._fields())

    async def _settle_fetches(self, deadline: float) -> None:
        """Let the dequeues already sent answer, so what they claimed is released at once
        rather than left leased: one that does not long-poll answers at once and is waited
        for (up to ``deadline``); a long poll — of an empty queue, as far as the worker knows
        — gets a moment, then is abandoned."""
        if not self._fetches:
            return
        polls = {task for task, wait in self._fetches.items() if wait}
        prompt = set(self._fetches) - polls
        unanswered: set[asyncio.Task[None]] = set()
        if polls:
            timeout = min(STOP_FETCH_WAIT, max(0.0, deadline - time.monotonic()))
            unanswered |= (await asyncio.wait(polls, timeout=timeout))[1]
        if prompt:
            timeout = max(0.0, deadline - time.monotonic())
            unanswered |= (await asyncio.wait(prompt, timeout=timeout))[1]
        for task in unanswered:
            task.cancel()
        await asyncio.gather(*unanswered, return_exceptions=True)

    async def _release_all(self, held: list[_Held]) -> None:
        """Release messages at shutdown (visibility 0), a few requests at a time: a full
        prefetch buffer is up to 200 calls, which must not open a connection each."""
        gate = asyncio.Semaphore(RELEASE_CONCURRENCY)

        async def release(one: _Held) -> None:
            async with gate:
                await self._release(one, 0, "released_on_shutdown")

        await asyncio.gather(*(release(one) for one in held))

    # --- observability ------------------------------------------------------------------

    def _fields(self, **extra: Any) -> dict[str, Any]:
        return {"queue": self._queue_name, "consumer": self.consumer_name, **extra}

    def _message_fields(self, message: Message, **extra: Any) -> dict[str, Any]:
        return self._fields(
            message_id=message.id, delivery_attempts=message.delivery_attempts, **extra
        )

    def _count(self, outcome: str, count: int = 1) -> None:
        if self.metrics is not None:
            self.metrics.outcome(self._queue_name, outcome, count)


def _in_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False
