"""In-process message signals: long-poll waiters by queue id, woken by a signal.

``InProcessMessageSignals`` is the fan-out every implementation shares: a dict from
queue id to the watches of the long polls currently waiting on that queue. A signal
marks each of them (no I/O, no per-waiter database work); a marked watch's next wait
returns at once, so a signal that arrives while the poll is busy claiming is never
lost. It serves the memory-backed app, and the PostgreSQL adapter builds on it
(LISTEN feeds it; announcements also go out as NOTIFY to the other processes).

``SignallingRepository`` wraps a repository and, after each committed change that can
make a message deliverable (enqueue, redrive, a lease released…), announces the
queue. Over the in-memory repository it announces queue changes too (resume, delete),
which PostgreSQL announces with a trigger (migration 0004).

``FakeMessageSignals`` is the same with virtual time for unit tests: a wait that is
not signalled ends only when the test moves a ``FakeClock`` past its timeout with
``advance()`` — nobody sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol
from uuid import UUID

from retsu.adapters.memory.clock import FakeClock


class InProcessWatch:
    """One long poll's registration for one queue (use as a context manager)."""

    __slots__ = (
        "_hub",
        "_queue_changed",
        "_queue_changed_seen",
        "_queue_id",
        "_signalled",
        "_waiter",
    )

    def __init__(self, hub: InProcessMessageSignals, queue_id: UUID) -> None:
        self._hub = hub
        self._queue_id = queue_id
        self._signalled = False
        self._queue_changed = False
        self._queue_changed_seen = False
        self._waiter: asyncio.Future[None] | None = None

    @property
    def queue_id(self) -> UUID:
        return self._queue_id

    def __enter__(self) -> InProcessWatch:
        self._hub._register(self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._hub._unregister(self)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.cancel()

    @property
    def queue_changed(self) -> bool:
        return self._queue_changed_seen

    def signal(self, *, queue_changed: bool = False) -> None:
        self._signalled = True
        self._queue_changed = self._queue_changed or queue_changed
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def wait(self, seconds: float) -> bool:
        if not self._signalled and not self._hub.closed and seconds > 0:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._hub._sleep_until(self._waiter, seconds)
            finally:
                self._waiter = None
        woken = self._signalled or self._hub.closed
        self._queue_changed_seen = self._queue_changed
        self._signalled = self._queue_changed = False
        return woken


class InProcessMessageSignals:
    """Implements MessageSignals within one process (and is the PostgreSQL adapter's core)."""

    def __init__(self) -> None:
        self._watches: dict[UUID, set[InProcessWatch]] = {}
        self._closed = False

    # -- the port ------------------------------------------------------------------

    def watch(self, queue_id: UUID) -> InProcessWatch:
        return InProcessWatch(self, queue_id)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._closed = True
        self.signal_all()

    # -- signalling ----------------------------------------------------------------

    def announce(self, queue_id: UUID, *, queue_changed: bool = False) -> None:
        """A change this process committed may have made a message of ``queue_id``
        deliverable (or changed the queue itself): wake its waiters (here, the
        process's own)."""
        self.signal(queue_id, queue_changed=queue_changed)

    def signal(self, queue_id: UUID, *, queue_changed: bool = False) -> None:
        """Wake every long poll waiting on ``queue_id`` in this process."""
        for watch in self._watches.get(queue_id, ()):
            watch.signal(queue_changed=queue_changed)

    def signal_all(self) -> None:
        """Wake every long poll (a signal may have been missed, or shutdown began)."""
        for watches in self._watches.values():
            for watch in watches:
                watch.signal()

    @property
    def waiting(self) -> int:
        """How many long polls are registered right now."""
        return sum(len(watches) for watches in self._watches.values())

    # -- internals -----------------------------------------------------------------

    def _register(self, watch: InProcessWatch) -> None:
        self._watches.setdefault(watch.queue_id, set()).add(watch)

    def _unregister(self, watch: InProcessWatch) -> None:
        watches = self._watches.get(watch.queue_id)
        if watches is not None:
            watches.discard(watch)
            if not watches:
                del self._watches[watch.queue_id]

    async def _sleep_until(self, woken: asyncio.Future[None], seconds: float) -> None:
        """Return when ``woken`` completes or after ``seconds``."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await woken


class FakeMessageSignals(InProcessMessageSignals):
    """Virtual time: an unsignalled wait ends when ``advance()`` moves the clock past it."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock
        # Every timeout asked for, in order (a test can assert a poll never waited).
        self.waits: list[float] = []
        self._timers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._sequence = itertools.count()

    def monotonic(self) -> float:
        """The fake clock as a monotonic time source (for the Dequeue use case)."""
        return self.clock.now().timestamp()

    async def _sleep_until(self, woken: asyncio.Future[None], seconds: float) -> None:
        self.waits.append(seconds)
        timer = asyncio.get_running_loop().create_future()
        heapq.heappush(self._timers, (self.monotonic() + seconds, next(self._sequence), timer))
        try:
            await asyncio.wait((woken, timer), return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()

    async def settle(self) -> None:
        """Let every runnable task run until it waits again (no real time passes)."""
        for _ in range(50):
            await asyncio.sleep(0)

    async def advance(self, seconds: float) -> None:
        """Move virtual time forward, ending each wait whose timeout falls within it, in
        order, and letting the woken polls run before time moves on."""
        await self.settle()
        target = self.monotonic() + seconds
        while True:
            while self._timers and self._timers[0][2].done():
                heapq.heappop(self._timers)
            if not self._timers or self._timers[0][0] > target:
                break
            deadline, _, timer = heapq.heappop(self._timers)
            if deadline > self.monotonic():
                self.clock.advance(deadline - self.monotonic())
            timer.set_result(None)
            await self.settle()
        if target > self.monotonic():
            self.clock.advance(target - self.monotonic())
        await self.settle()


def _any(args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> bool:
    return True


def _released(args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> bool:
    """change_visibility(queue_id, receipt, visibility_timeout_seconds) ended a lease now."""
    seconds = kwargs.get("visibility_timeout_seconds", args[-1] if args else None)
    return bool(result) and seconds == 0


def _not_replayed(args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> bool:
    return not getattr(result, "replayed", False)


def _did_something(args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> bool:
    return bool(result)


Predicate = Callable[[tuple[Any, ...], dict[str, Any], Any], bool]

# Repository methods (first argument: the queue id) after which a message of that queue
# may have become deliverable, and when (given the arguments after the queue id and the
# result) that is so. A lease shortened to a later moment is not announced: waiters
# notice it at their next re-check.
MESSAGE_EVENTS: dict[str, Predicate] = {
    "enqueue": _any,
    "enqueue_idempotent": _not_replayed,
    "redrive_dead_letter": _did_something,
    "redrive_dead_letters": _did_something,
    "change_visibility": _released,
}
# Queue changes waiters must see at once: a resume (and a pause, so they re-read the
# queue) and a delete (404 at once). PostgreSQL announces these with a trigger
# (migration 0004), so the PostgreSQL wiring leaves them out.
QUEUE_EVENTS: dict[str, Predicate] = {
    "set_paused": _did_something,
    "delete_queue": _did_something,
}


class Announcer(Protocol):
    def announce(self, queue_id: UUID, *, queue_changed: bool = False) -> None: ...


class SignallingRepository:
    """Wraps a repository: every attribute is forwarded; after a successful call of one of
    ``events`` that changed something, the queue is announced (waiters wake)."""

    def __init__(
        self,
        repository: Any,
        announcer: Announcer,
        events: Mapping[str, Predicate] | None = None,
    ) -> None:
        self._repository = repository
        self._announcer = announcer
        self._events = dict(events if events is not None else {**MESSAGE_EVENTS, **QUEUE_EVENTS})

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._repository, name)
        predicate = self._events.get(name)
        if predicate is None:
            return attribute
        wrapped = self._announcing(attribute, predicate, queue_changed=name in QUEUE_EVENTS)
        setattr(self, name, wrapped)  # found directly from now on
        return wrapped

    def _announcing(
        self, method: Callable[..., Awaitable[Any]], predicate: Predicate, *, queue_changed: bool
    ) -> Callable[..., Awaitable[Any]]:
        announcer = self._announcer

        async def call(queue_id: UUID, *args: Any, **kwargs: Any) -> Any:
            result = await method(queue_id, *args, **kwargs)
            if predicate(args, kwargs, result):
                announcer.announce(queue_id, queue_changed=queue_changed)
            return result

        return call
