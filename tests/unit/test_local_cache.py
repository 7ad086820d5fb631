"""The local queue-name cache: LRU by entries and by bytes, single-flight loads."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from uuid import UUID

import pytest

from retsu.adapters.cache.local import (
    ENTRY_OVERHEAD_BYTES,
    LocalCache,
    LocalQueueNames,
    SingleFlight,
    queue_name_weight,
)
from retsu.adapters.cache.metrics import LOAD_ERROR, LOAD_NOT_FOUND, LOAD_SUCCESS, QUEUE_NAMES
from retsu.domain.errors import QueueNotFound
from retsu.domain.queue import Queue, QueueSettings


class RecordingMetrics:
    def __init__(self) -> None:
        self.requests: list[tuple[str, bool]] = []
        self.loads: list[tuple[str, str]] = []

    def cache_request(self, cache_name: str, *, hit: bool) -> None:
        self.requests.append((cache_name, hit))

    def cache_loaded(self, cache_name: str, outcome: str, duration_seconds: float) -> None:
        assert duration_seconds >= 0
        self.loads.append((cache_name, outcome))


class SlowNames:
    """A ``QueueNames`` below the cache whose loads wait for a gate and are counted."""

    def __init__(self, names: dict[UUID, str]) -> None:
        self.names = names
        self.loads = 0
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail_with: Exception | None = None

    async def name_of(self, queue_id: UUID) -> str:
        self.loads += 1
        await self.gate.wait()
        if self.fail_with is not None:
            raise self.fail_with
        try:
            return self.names[queue_id]
        except KeyError:
            raise QueueNotFound(queue_id) from None

    async def remember(self, queue: Queue) -> None:
        return None

    async def forget(self, queue_id: UUID) -> None:
        return None


def a_queue(name: str) -> Queue:
    now = datetime.now(UTC)
    return Queue(
        id=uuid.uuid4(),
        name=name,
        settings=QueueSettings(),
        paused=False,
        created_at=now,
        updated_at=now,
    )


def cache_of(max_entries: int = 100, max_bytes: int = 1 << 20) -> LocalCache[str, str]:
    return LocalCache(
        max_entries=max_entries, max_bytes=max_bytes, weigh=lambda k, v: len(k) + len(v)
    )


# -- LRU ----------------------------------------------------------------------------


def test_the_least_recently_used_entry_goes_first_when_entries_are_full() -> None:
    cache = cache_of(max_entries=3)
    for key in "abc":
        cache.put(key, key.upper())
    assert cache.get("a") == "A"  # a is now the most recently used
    cache.put("d", "D")
    assert "b" not in cache
    assert [k for k in "acd" if k in cache] == ["a", "c", "d"]
    assert len(cache) == 3


def test_entries_are_evicted_to_stay_within_the_byte_budget() -> None:
    cache = cache_of(max_entries=100, max_bytes=10)  # each entry below weighs 4
    cache.put("k1", "v1")
    cache.put("k2", "v2")
    assert cache.size_bytes == 8
    cache.get("k1")
    cache.put("k3", "v3")  # 12 > 10: the least recently used (k2) goes
    assert "k2" not in cache
    assert "k1" in cache and "k3" in cache
    assert cache.size_bytes == 8
    cache.put("k1", "a much longer value")  # alone over budget: not kept at all
    assert "k1" not in cache
    assert cache.size_bytes == 4


def test_replacing_an_entry_updates_the_byte_count() -> None:
    cache = cache_of()
    cache.put("k", "v")
    cache.put("k", "vvv")
    assert cache.size_bytes == 4
    assert len(cache) == 1


def test_a_queue_name_entry_is_estimated_as_key_name_and_overhead() -> None:
    queue_id = uuid.uuid4()
    assert queue_name_weight(queue_id, "orders") == 16 + 6 + ENTRY_OVERHEAD_BYTES
    assert queue_name_weight(queue_id, "é") == 16 + 2 + ENTRY_OVERHEAD_BYTES


async def test_local_queue_names_obey_the_configured_byte_budget() -> None:
    queues = [a_queue(f"queue-{i:03d}") for i in range(10)]
    below = SlowNames({q.id: q.name for q in queues})
    per_entry = queue_name_weight(queues[0].id, queues[0].name)
    names = LocalQueueNames(below, max_entries=1000, max_capacity_bytes=3 * per_entry)
    for queue in queues:
        assert await names.name_of(queue.id) == queue.name
    assert len(names.cache) == 3
    assert names.cache.size_bytes == 3 * per_entry
    assert [q.id in names.cache for q in queues[-3:]] == [True, True, True]


# -- single flight ----------------------------------------------------------------------


async def test_concurrent_misses_for_one_queue_share_one_load() -> None:
    queue = a_queue("orders")
    below = SlowNames({queue.id: queue.name})
    below.gate.clear()
    metrics = RecordingMetrics()
    names = LocalQueueNames(below, max_entries=10, max_capacity_bytes=10_000, metrics=metrics)

    lookups = [asyncio.create_task(names.name_of(queue.id)) for _ in range(100)]
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert names.cache.loads_in_flight() == 1
    below.gate.set()
    assert await asyncio.gather(*lookups) == ["orders"] * 100
    assert below.loads == 1
    assert metrics.requests.count((QUEUE_NAMES, False)) == 100
    assert metrics.loads == [(QUEUE_NAMES, LOAD_SUCCESS)]

    assert await names.name_of(queue.id) == "orders"
    assert below.loads == 1
    assert metrics.requests[-1] == (QUEUE_NAMES, True)


async def test_a_failed_load_fails_every_waiter_and_caches_nothing() -> None:
    queue = a_queue("orders")
    below = SlowNames({queue.id: queue.name})
    below.gate.clear()
    below.fail_with = ConnectionError("database down")
    metrics = RecordingMetrics()
    names = LocalQueueNames(below, max_entries=10, max_capacity_bytes=10_000, metrics=metrics)

    lookups = [asyncio.create_task(names.name_of(queue.id)) for _ in range(20)]
    await asyncio.sleep(0)
    below.gate.set()
    results = await asyncio.gather(*lookups, return_exceptions=True)
    assert all(isinstance(r, ConnectionError) for r in results)
    assert below.loads == 1
    assert queue.id not in names.cache
    assert names.cache.loads_in_flight() == 0
    assert metrics.loads == [(QUEUE_NAMES, LOAD_ERROR)]

    below.fail_with = None  # the next lookup loads again, and succeeds
    assert await names.name_of(queue.id) == "orders"
    assert below.loads == 2


async def test_an_unknown_queue_is_not_found_for_every_waiter_and_not_remembered() -> None:
    below = SlowNames({})
    metrics = RecordingMetrics()
    names = LocalQueueNames(below, max_entries=10, max_capacity_bytes=10_000, metrics=metrics)
    missing = uuid.uuid4()
    results = await asyncio.gather(
        *(names.name_of(missing) for _ in range(5)), return_exceptions=True
    )
    assert all(isinstance(r, QueueNotFound) for r in results)
    assert below.loads == 1
    assert metrics.loads == [(QUEUE_NAMES, LOAD_NOT_FOUND)]
    with pytest.raises(QueueNotFound):
        await names.name_of(missing)
    assert below.loads == 2  # no negative entries in the local cache


async def test_a_cancelled_waiter_does_not_cancel_the_shared_load() -> None:
    queue = a_queue("orders")
    below = SlowNames({queue.id: queue.name})
    below.gate.clear()
    names = LocalQueueNames(below, max_entries=10, max_capacity_bytes=10_000)
    first = asyncio.create_task(names.name_of(queue.id))
    second = asyncio.create_task(names.name_of(queue.id))
    await asyncio.sleep(0)
    first.cancel()
    await asyncio.sleep(0)
    below.gate.set()
    assert await second == "orders"
    assert first.cancelled()
    assert below.loads == 1
    assert queue.id in names.cache


async def test_single_flight_runs_again_once_a_load_finished() -> None:
    flights: SingleFlight[str, int] = SingleFlight()
    runs = 0

    async def load() -> int:
        nonlocal runs
        runs += 1
        return runs

    assert await flights.run("k", load) == 1
    assert await flights.run("k", load) == 2
    assert len(flights) == 0


# -- remember and forget ------------------------------------------------------------------


async def test_remember_puts_the_name_without_a_load() -> None:
    queue = a_queue("orders")
    below = SlowNames({})
    names = LocalQueueNames(below, max_entries=10, max_capacity_bytes=10_000)
    await names.remember(queue)
    assert await names.name_of(queue.id) == "orders"
    assert below.loads == 0


async def test_forget_drops_the_name() -> None:
    queue = a_queue("orders")
    below = SlowNames({queue.id: queue.name})
    names = LocalQueueNames(below, max_entries=10, max_capacity_bytes=10_000)
    assert await names.name_of(queue.id) == "orders"
    del below.names[queue.id]  # the queue is deleted...
    await names.forget(queue.id)  # ...and forgotten
    assert queue.id not in names.cache
    assert names.cache.size_bytes == 0
    with pytest.raises(QueueNotFound):
        await names.name_of(queue.id)


async def test_forget_during_a_load_keeps_its_result_out_of_the_cache() -> None:
    queue = a_queue("orders")
    below = SlowNames({queue.id: queue.name})
    below.gate.clear()
    names = LocalQueueNames(below, max_entries=10, max_capacity_bytes=10_000)
    lookup = asyncio.create_task(names.name_of(queue.id))
    await asyncio.sleep(0)
    await names.forget(queue.id)  # deleted while the name was being read
    below.gate.set()
    assert await lookup == "orders"  # that caller still gets its answer...
    assert queue.id not in names.cache  # ...but it is not kept
