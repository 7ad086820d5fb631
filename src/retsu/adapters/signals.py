"""In-process message signals: long-poll waiters by queue id, woken by a signal.

``InProcessMessageSignals`` is the fan-out every process uses: a dict from queue id to
the watches of the long polls currently waiting on that queue. A signal marks each of
them (no I/O, no per-waiter database work); a marked watch's next wait returns at once,
so a signal that arrives while the poll is busy claiming is never lost.

A watch that actually waits (its poll found nothing; most polls are answered by their
first claim and never do) is reported to the hub once, and again when it ends
(``_waiting_started`` / ``_waiting_ended``): no-ops here, where the PostgreSQL signals
keep the database's ``queue_waiter`` rows (migration 0013) from them.

It implements MessageSignals on its own (one process, nothing to tell anyone else), and
is the core of the PostgreSQL adapter's signals, where LISTEN feeds it and this
process's announcements also go out as NOTIFY to the other API processes. It lives at
the root of the adapters because both the PostgreSQL adapter and the in-memory wiring
of the tests build on it; it does no I/O of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
from uuid import UUID


class InProcessWatch:
    """One long poll's registration for one queue (use as a context manager)."""

    __slots__ = (
        "_hub",
        "_queue_changed",
        "_queue_changed_seen",
        "_queue_id",
        "_signalled",
        "_waited",
        "_waiter",
    )

    def __init__(self, hub: InProcessMessageSignals, queue_id: UUID) -> None:
        self._hub = hub
        self._queue_id = queue_id
        self._signalled = False
        self._queue_changed = False
        self._queue_changed_seen = False
        self._waited = False  # reported to the hub as waiting (once, until it ends)
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
            if not self._waited:
                self._waited = True
                self._hub._waiting_started(self._queue_id)
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

    # -- the life cycle (the PostgreSQL signals have a connection to open and close) --

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        self.close()

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
        if watch._waited:
            watch._waited = False
            self._waiting_ended(watch.queue_id)

    def _waiting_started(self, queue_id: UUID) -> None:
        """A long poll on ``queue_id`` is about to wait for the first time."""

    def _waiting_ended(self, queue_id: UUID) -> None:
        """A long poll on ``queue_id`` that had waited has ended."""

    async def _sleep_until(self, woken: asyncio.Future[None], seconds: float) -> None:
        """Return when ``woken`` completes or after ``seconds``."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await woken
