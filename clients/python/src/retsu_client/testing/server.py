"""The server in process: ``retsu dev``'s own containers (the API and the workers on one
core and one storage) over the memory adapter and the fake's clock, its Litestar app
served on an event loop of its own.

Nothing here restates a queue rule: every request goes through the server's app
(``retsu.entrypoints.containers.DevContainer``), whose use cases run on
``MemoryStorage``. What the fake adds is only *when* the server's background work runs,
so that a test sees it at once and in step with a clock it moves:

- before each request, the consumer sightings the API keeps in memory are written (the
  server writes them every 5 s), and the state-metrics collector's refresh runs when
  ``history_interval_seconds`` of the fake's clock have passed since the last one (its
  leadership is the memory adapter's);
- the expired-message cleaner runs when the test calls ``clean_expired()``;
- with a clock other than the system's, a long poll's wait counts the seconds the clock
  is moved as well as real ones, and a move of the clock wakes the waiting polls (as a
  signal would), so a poll ends, or claims what the move made deliverable, at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Coroutine, Mapping
from datetime import datetime, timedelta
from typing import Any, TypeVar

import httpx
from dependency_injector import providers
from litestar import Litestar
from retsu.adapters.system import SystemClock
from retsu.application.clean_expired_messages import CleanExpiredMessages
from retsu.application.ports import Clock, LeaderSession
from retsu.entrypoints.containers import (
    ApiContainer,
    DevContainer,
    WorkerContainer,
    memory_storage,
)
from retsu.entrypoints.settings import build_settings

__all__ = ["InProcessServer"]

T = TypeVar("T")

# How often a moved clock is looked for (the old fake polled every 5 ms).
CLOCK_WATCH_SECONDS = 0.005
STARTUP_TIMEOUT_SECONDS = 30.0


class _PollTime:
    """The time source of long-poll deadlines (``CoreContainer.monotonic``) on a clock a
    test moves: real seconds plus the seconds the clock was moved since the start."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._start = clock.now()

    def __call__(self) -> float:
        return time.monotonic() + (self._clock.now() - self._start).total_seconds()


class InProcessServer:
    """The server's app on a daemon thread's event loop, from construction to ``close()``.

    ``settings`` is a nested mapping shaped like the server's YAML file; the storage, the
    clock and (for a moved clock) the long polls' time source are overridden in the
    production containers — nothing else is wired here.
    """

    def __init__(self, clock: Clock, settings: Mapping[str, Any]) -> None:
        self.clock = clock
        self.settings = build_settings(settings)
        # `retsu dev`'s wiring: the workers' core and storage are the API's.
        container = DevContainer(settings=self.settings)
        self.api: ApiContainer = container.api.container
        self.workers: WorkerContainer = container.workers.container
        self.api.core.clock.override(providers.Object(clock))
        self._moved_clock = not isinstance(clock, SystemClock)
        if self._moved_clock:
            self.api.core.monotonic.override(providers.Object(_PollTime(clock)))
        self.api.storage.override(memory_storage(clock))
        self._app: Litestar = self.api.app()
        # Litestar types its ASGI events as TypedDicts, httpx as plain mappings: the same.
        self._asgi = httpx.ASGITransport(app=self._app)  # type: ignore[arg-type]
        interval = self.settings.worker.queue.state_metrics_collector.collection_interval_seconds
        self._history_interval = timedelta(seconds=interval)
        self._next_snapshot: datetime = clock.now()
        self._leader: LeaderSession | None = None
        self._stop: asyncio.Event | None = None
        self._watch: asyncio.Task[None] | None = None

        # The app's own loop: it serves sync clients (whose thread blocks on a request) and
        # async ones on any loop alike, and its lifespan stays on one task throughout.
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="retsu-fake", daemon=True
        )
        self._thread.start()
        self.closed = False
        started: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._life = asyncio.run_coroutine_threadsafe(self._live(started), self._loop)
        try:
            started.result(STARTUP_TIMEOUT_SECONDS)
        except BaseException:
            self.closed = True
            self._stop_loop()
            raise

    # --- called from any thread ---------------------------------------------------------

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        if self.closed:
            coroutine.close()
            raise RuntimeError("this FakeRetsu is closed")
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self.submit(coroutine).result()

    def close(self) -> None:
        """Shut the app down (its lifespan: waiting long polls answer, the last consumer
        sightings are written) and end the thread. Idempotent."""
        if self.closed:
            return
        self.closed = True
        stop = self._stop
        if stop is not None:
            self._loop.call_soon_threadsafe(stop.set)
        if threading.current_thread() is self._thread:
            # The garbage collector finalizing the fake on its own loop: waiting here would
            # wait for ourselves, so the loop stops once the lifespan has ended.
            self._life.add_done_callback(lambda _: self._loop.call_soon_threadsafe(self._loop.stop))
            return
        try:
            self._life.result(STARTUP_TIMEOUT_SECONDS)
        finally:
            self._stop_loop()

    # --- on the app's loop --------------------------------------------------------------

    async def respond(self, request: httpx.Request) -> httpx.Response:
        """One request through the server's app (its body already read)."""
        await self._run_timers()
        response = await self._asgi.handle_async_request(request)
        content = await response.aread()
        # A stream that sync and async clients can both read.
        return httpx.Response(response.status_code, headers=response.headers, content=content)

    async def clean_expired(self) -> int:
        """The expired-message cleaner's batches until one is not full: rows removed."""
        clean: CleanExpiredMessages = self.workers.clean_expired_messages()
        batch_size = self.settings.worker.queue.expired_message_cleaner.batch_size
        removed = 0
        while True:
            result = await clean(batch_size)
            removed += result.removed
            if not result.full:
                return removed

    async def _run_timers(self) -> None:
        """The background work of the server that is due by the fake's clock."""
        await self.api.use_cases.consumer_tracker().flush()
        now = self.clock.now()
        if self._leader is not None and now >= self._next_snapshot:
            self._next_snapshot = now + self._history_interval
            await self.workers.state_metrics_collector().refresh(self._leader)

    async def _live(self, started: concurrent.futures.Future[None]) -> None:
        self._stop = asyncio.Event()
        try:
            async with self._app.lifespan():
                # The collector's leadership on the memory adapter, as its run loop takes it.
                self._leader = await self.workers.storage.leadership().try_acquire()
                self.workers.state_snapshots().leadership_acquired()
                if self._moved_clock:
                    self._watch = asyncio.create_task(self._watch_clock())
                started.set_result(None)
                await self._stop.wait()
                if self._watch is not None:
                    self._watch.cancel()
        except BaseException as error:
            if not started.done():
                started.set_exception(error)
            raise

    async def _watch_clock(self) -> None:
        """Wake the waiting long polls whenever the test moves the clock: a lease, a delay
        or the poll's own deadline may have ended."""
        signals = self.api.storage.message_signals()
        seen = self.clock.now()
        while True:
            await asyncio.sleep(CLOCK_WATCH_SECONDS)
            now = self.clock.now()
            if now != seen:
                seen = now
                signals.signal_all()

    def _stop_loop(self) -> None:
        async def cancel_the_rest() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(cancel_the_rest(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
