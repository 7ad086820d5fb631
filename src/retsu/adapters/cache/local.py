"""The local, per-process cache (SPEC §4): queue ID → immutable queue name.

``LocalCache`` is a bounded LRU map (by entry count and by an estimated byte
size) with single-flight loading: concurrent misses for one key share one load,
run as its own task so a caller that gives up (a cancelled request) does not
cancel the load for the others. A failed load fails every waiter and caches
nothing. Entries need no TTL because queue names never change; a deleted queue
is dropped with ``forget`` (which also stops an in-flight load from storing).

``LocalQueueNames`` puts it in front of another ``QueueNames`` (the shared
cache, then PostgreSQL).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar
from uuid import UUID

from retsu.adapters.cache.metrics import (
    LOAD_ERROR,
    LOAD_NOT_FOUND,
    LOAD_SUCCESS,
    NO_CACHE_METRICS,
    QUEUE_NAMES,
    CacheMetrics,
)
from retsu.application.ports import QueueNames
from retsu.domain.errors import NotFound
from retsu.domain.queue import Queue

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

# What one entry costs beyond its key and value bytes: the OrderedDict node and
# the UUID and str objects' headers (measured with sys.getsizeof on CPython 3.11,
# rounded up). The estimate only has to be stable and roughly right.
ENTRY_OVERHEAD_BYTES = 200


def queue_name_weight(queue_id: UUID, name: str) -> int:
    """Estimated bytes of one queue-name entry: 16 key bytes, the UTF-8 name, overhead."""
    return 16 + len(name.encode()) + ENTRY_OVERHEAD_BYTES


class SingleFlight(Generic[K, V]):
    """Concurrent calls for one key share one run of the load.

    The load runs as its own task; every caller awaits it through ``asyncio.shield``,
    so a caller that is cancelled (a client that went away) leaves the load running
    for the others. Its exception, if any, reaches every caller.
    """

    def __init__(self) -> None:
        self._tasks: dict[K, asyncio.Task[V]] = {}

    def __len__(self) -> int:
        return len(self._tasks)

    def current(self, key: K) -> asyncio.Task[V] | None:
        return self._tasks.get(key)

    def detach(self, key: K) -> None:
        """Later calls start a new load; the one in flight finishes for its own callers."""
        self._tasks.pop(key, None)

    async def run(self, key: K, load: Callable[[], Awaitable[V]]) -> V:
        task = self._tasks.get(key)
        if task is None:
            task = asyncio.ensure_future(self._run(key, load))
            self._tasks[key] = task
        return await asyncio.shield(task)

    async def _run(self, key: K, load: Callable[[], Awaitable[V]]) -> V:
        try:
            return await load()
        finally:
            if self._tasks.get(key) is asyncio.current_task():
                del self._tasks[key]


class LocalCache(Generic[K, V]):
    """A bounded LRU map with single-flight loads. Not thread-safe: one event loop."""

    def __init__(
        self,
        *,
        max_entries: int,
        max_bytes: int,
        weigh: Callable[[K, V], int],
    ) -> None:
        if max_entries < 1 or max_bytes < 1:
            raise ValueError("max_entries and max_bytes must be at least 1")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._weigh = weigh
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._flights: SingleFlight[K, V] = SingleFlight()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    @property
    def size_bytes(self) -> int:
        """The estimated bytes of every entry held."""
        return self._bytes

    def get(self, key: K) -> V | None:
        """The cached value (now the most recently used), or None."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def put(self, key: K, value: V) -> None:
        """Store (or replace) a value, evicting least recently used entries to fit.

        A value that alone exceeds ``max_bytes`` is not stored.
        """
        weight = self._weigh(key, value)
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= old[1]
        if weight > self.max_bytes:
            return
        self._entries[key] = (value, weight)
        self._bytes += weight
        while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
            _, (_, evicted) = self._entries.popitem(last=False)
            self._bytes -= evicted

    def discard(self, key: K) -> None:
        """Drop the entry, and keep a load already in flight from storing its result."""
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= old[1]
        self._flights.detach(key)

    def loads_in_flight(self) -> int:
        return len(self._flights)

    async def get_or_load(self, key: K, load: Callable[[K], Awaitable[V]]) -> V:
        """The cached value, or one shared load's result (stored when it succeeds)."""
        value = self.get(key)
        if value is not None:
            return value
        return await self.load(key, load)

    async def load(self, key: K, load: Callable[[K], Awaitable[V]]) -> V:
        """Join the load in flight for ``key``, or start one. Does not look at the cache."""
        return await self._flights.run(key, lambda: self._load_and_store(key, load))

    async def _load_and_store(self, key: K, load: Callable[[K], Awaitable[V]]) -> V:
        value = await load(key)
        # Only if nobody discarded the key meanwhile (a deleted queue).
        if self._flights.current(key) is asyncio.current_task():
            self.put(key, value)
        return value


class LocalQueueNames:
    """``QueueNames`` with a local LRU in front of ``inner`` (shared cache → PostgreSQL)."""

    def __init__(
        self,
        inner: QueueNames,
        *,
        max_entries: int,
        max_capacity_bytes: int,
        metrics: CacheMetrics = NO_CACHE_METRICS,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._inner = inner
        self._metrics = metrics
        self._timer = timer
        self.cache: LocalCache[UUID, str] = LocalCache(
            max_entries=max_entries, max_bytes=max_capacity_bytes, weigh=queue_name_weight
        )

    async def name_of(self, queue_id: UUID) -> str:
        name = self.cache.get(queue_id)
        if name is not None:
            self._metrics.cache_request(QUEUE_NAMES, hit=True)
            return name
        self._metrics.cache_request(QUEUE_NAMES, hit=False)
        return await self.cache.load(queue_id, self._load)

    async def _load(self, queue_id: UUID) -> str:
        started = self._timer()
        outcome = LOAD_ERROR
        try:
            name = await self._inner.name_of(queue_id)
            outcome = LOAD_SUCCESS
            return name
        except NotFound:
            outcome = LOAD_NOT_FOUND
            raise
        finally:
            self._metrics.cache_loaded(QUEUE_NAMES, outcome, self._timer() - started)

    async def remember(self, queue: Queue) -> None:
        # The shared layer is written by the QueueDetails side; here only the local one.
        await self._inner.remember(queue)
        self.cache.put(queue.id, queue.name)

    async def forget(self, queue_id: UUID) -> None:
        await self._inner.forget(queue_id)
        self.cache.discard(queue_id)
