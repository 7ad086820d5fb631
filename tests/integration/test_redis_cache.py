"""The shared queue-details cache against a real Redis, and the caches in real API
processes: write-through between processes, and a Redis outage.

Adapter tests use a key prefix of their own (``retsu-test:<hex>:``) and delete their
keys afterwards. API processes use the default prefix, but only ever touch the keys
of queues the test created (queue IDs are unique); the outage tests run a Redis
server of their own.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from uuid import UUID

import asyncpg
import httpx
import pytest
from dependency_injector import providers
from redis.asyncio import Redis

from retsu.adapters.cache.local import LocalQueueNames
from retsu.adapters.cache.metrics import LOAD_NOT_FOUND, LOAD_SUCCESS, QUEUE_DETAILS
from retsu.adapters.cache.passthrough import DetailsQueueNames, RepositoryQueueDetails
from retsu.adapters.cache.redis_client import create_redis_client
from retsu.adapters.cache.shared import (
    KEY_PREFIX,
    NEGATIVE_ENTRY,
    RedisQueueDetails,
    decode_entry,
)
from retsu.adapters.memory.clock import ManualClock
from retsu.application.messages import EnqueueCommand
from retsu.domain.errors import QueueNotFound
from retsu.domain.message import MessageToStore, NewMessage, Priority
from retsu.domain.queue import Queue, QueueSettings
from tests.support.containers import api_container
from tests.support.processes import RetsuProcess, free_port, retsu_env

pytestmark = pytest.mark.integration

FIVE_MINUTES_MS = 300_000
FIVE_SECONDS_MS = 5_000


# -- helpers --------------------------------------------------------------------------------


def a_queue(name: str = "orders", queue_id: UUID | None = None, **settings: int) -> Queue:
    now = datetime.now(UTC)
    return Queue(
        id=queue_id or uuid.uuid4(),
        name=name,
        settings=QueueSettings(**settings),
        paused=False,
        created_at=now,
        updated_at=now,
    )


class Storage:
    """The layer below the shared cache: queues in a dict, reads counted, optionally slow."""

    def __init__(self, *queues: Queue, delay: float = 0.0) -> None:
        self.queues = {q.id: q for q in queues}
        self.delay = delay
        self.reads = 0
        self.gate = asyncio.Event()
        self.gate.set()
        self.entered = asyncio.Event()

    async def get_queue(self, queue_id: UUID) -> Queue | None:
        self.reads += 1
        found = self.queues.get(queue_id)  # what the read sees; the answer comes later
        self.entered.set()
        await self.gate.wait()
        if self.delay:
            await asyncio.sleep(self.delay)
        return found

    async def enqueue(self, queue_id: UUID, messages: list[MessageToStore]) -> None:
        self.stored = getattr(self, "stored", 0) + len(messages)


class RecordingMetrics:
    def __init__(self) -> None:
        self.requests: list[tuple[str, bool]] = []
        self.loads: list[tuple[str, str]] = []

    def cache_request(self, cache_name: str, *, hit: bool) -> None:
        self.requests.append((cache_name, hit))

    def cache_loaded(self, cache_name: str, outcome: str, duration_seconds: float) -> None:
        self.loads.append((cache_name, outcome))


async def delete_prefix(redis: Redis, prefix: str) -> None:
    async for key in redis.scan_iter(match=f"{prefix}*", count=1000):
        await redis.delete(key)


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
async def prefix(redis: Redis) -> AsyncIterator[str]:
    value = f"retsu-test:{uuid.uuid4().hex}:"
    yield value
    await delete_prefix(redis, value)


@pytest.fixture
async def shared(redis_url: str) -> AsyncIterator[list[RedisQueueDetails]]:
    """Cache layers built by a test; closed at the end."""
    layers: list[RedisQueueDetails] = []
    yield layers
    for layer in layers:
        await layer.aclose()


def shared_cache(
    layers: list[RedisQueueDetails],
    redis_url: str,
    prefix: str,
    storage: Storage,
    metrics: RecordingMetrics | None = None,
    **options: float,
) -> RedisQueueDetails:
    client = create_redis_client(
        redis_url, connection_timeout_seconds=1.0, command_timeout_seconds=1.0
    )
    cache = RedisQueueDetails(
        client,
        RepositoryQueueDetails(storage),  # type: ignore[arg-type]
        key_prefix=prefix,
        metrics=metrics or RecordingMetrics(),
        **options,  # type: ignore[arg-type]
    )
    layers.append(cache)
    return cache


# -- the adapter over a real Redis ----------------------------------------------------


async def test_a_miss_loads_once_and_later_lookups_hit(
    redis_url: str, redis: Redis, prefix: str, shared: list[RedisQueueDetails]
) -> None:
    queue = a_queue()
    storage = Storage(queue)
    metrics = RecordingMetrics()
    cache = shared_cache(shared, redis_url, prefix, storage, metrics)

    assert await cache.details_of(queue.id) == queue
    for _ in range(5):
        assert await cache.details_of(queue.id) == queue
    assert storage.reads == 1
    assert metrics.requests == [(QUEUE_DETAILS, False)] + [(QUEUE_DETAILS, True)] * 5
    assert metrics.loads == [(QUEUE_DETAILS, LOAD_SUCCESS)]
    assert await redis.exists(cache.marker_key(queue.id)) == 0  # the marker was released
    assert cache.key(queue.id) == f"{prefix}queue:{{{queue.id}}}"


async def test_details_are_kept_for_five_minutes(
    redis_url: str, redis: Redis, prefix: str, shared: list[RedisQueueDetails]
) -> None:
    queue = a_queue()
    cache = shared_cache(shared, redis_url, prefix, Storage(queue))
    await cache.details_of(queue.id)
    ttl = await redis.pttl(cache.key(queue.id))
    assert FIVE_MINUTES_MS - 10_000 < ttl <= FIVE_MINUTES_MS

    await cache.remember(a_queue(queue_id=queue.id, visibility_timeout_seconds=9))
    ttl = await redis.pttl(cache.key(queue.id))
    assert FIVE_MINUTES_MS - 10_000 < ttl <= FIVE_MINUTES_MS


async def test_a_missing_queue_is_remembered_for_five_seconds(
    redis_url: str, redis: Redis, prefix: str, shared: list[RedisQueueDetails]
) -> None:
    storage = Storage()
    metrics = RecordingMetrics()
    cache = shared_cache(shared, redis_url, prefix, storage, metrics)
    missing = uuid.uuid4()
    for _ in range(3):
        with pytest.raises(QueueNotFound):
            await cache.details_of(missing)
    assert storage.reads == 1
    assert metrics.loads == [(QUEUE_DETAILS, LOAD_NOT_FOUND)]
    assert metrics.requests == [
        (QUEUE_DETAILS, False),
        (QUEUE_DETAILS, True),
        (QUEUE_DETAILS, True),
    ]
    assert await redis.get(cache.key(missing)) == NEGATIVE_ENTRY
    ttl = await redis.pttl(cache.key(missing))
    assert FIVE_SECONDS_MS - 2_000 < ttl <= FIVE_SECONDS_MS


async def test_remember_overwrites_a_negative_entry_and_old_details(
    redis_url: str, redis: Redis, prefix: str, shared: list[RedisQueueDetails]
) -> None:
    storage = Storage()
    cache = shared_cache(shared, redis_url, prefix, storage)
    queue = a_queue(visibility_timeout_seconds=30)
    with pytest.raises(QueueNotFound):
        await cache.details_of(queue.id)  # looked up a moment before it was created

    storage.queues[queue.id] = queue
    await cache.remember(queue)  # what CreateQueue does after the insert
    assert await cache.details_of(queue.id) == queue
    changed = a_queue(queue_id=queue.id, visibility_timeout_seconds=5)
    storage.queues[queue.id] = changed
    await cache.remember(changed)  # what UpdateQueue does after the update
    assert (await cache.details_of(queue.id)).settings.visibility_timeout_seconds == 5
    assert storage.reads == 1  # only the first (negative) lookup read storage

    del storage.queues[queue.id]
    await cache.forget(queue.id)  # what DeleteQueue does after the delete
    assert await redis.get(cache.key(queue.id)) == NEGATIVE_ENTRY
    assert FIVE_SECONDS_MS - 2_000 < await redis.pttl(cache.key(queue.id)) <= FIVE_SECONDS_MS
    with pytest.raises(QueueNotFound):
        await cache.details_of(queue.id)
    assert storage.reads == 1


async def test_a_load_racing_a_delete_cannot_bring_the_queue_back(
    redis_url: str, redis: Redis, prefix: str, shared: list[RedisQueueDetails]
) -> None:
    queue = a_queue()
    storage = Storage(queue)
    storage.gate.clear()
    cache = shared_cache(shared, redis_url, prefix, storage)
    lookup = asyncio.create_task(cache.details_of(queue.id))  # reads the row...
    await asyncio.wait_for(storage.entered.wait(), 5)
    del storage.queues[queue.id]
    other = shared_cache(shared, redis_url, prefix, storage)  # ...another process deletes
    await other.forget(queue.id)
    storage.gate.set()
    assert await lookup == queue  # that caller got what it read...
    assert await redis.get(cache.key(queue.id)) == NEGATIVE_ENTRY  # ...but it was not stored


async def test_concurrent_misses_in_one_process_read_storage_once(
    redis_url: str, prefix: str, shared: list[RedisQueueDetails]
) -> None:
    queue = a_queue()
    storage = Storage(queue, delay=0.05)
    cache = shared_cache(shared, redis_url, prefix, storage)
    results = await asyncio.gather(*(cache.details_of(queue.id) for _ in range(100)))
    assert results == [queue] * 100
    assert storage.reads == 1


async def test_the_loading_marker_lives_two_seconds_and_is_released(
    redis_url: str, redis: Redis, prefix: str, shared: list[RedisQueueDetails]
) -> None:
    queue = a_queue()
    storage = Storage(queue)
    storage.gate.clear()
    cache = shared_cache(shared, redis_url, prefix, storage)
    lookup = asyncio.create_task(cache.details_of(queue.id))
    await asyncio.wait_for(storage.entered.wait(), 5)
    marker_ttl = await redis.pttl(cache.marker_key(queue.id))
    assert 1_000 < marker_ttl <= 2_000
    storage.gate.set()
    assert await lookup == queue
    assert await redis.exists(cache.marker_key(queue.id)) == 0


async def test_a_waiter_takes_over_when_the_marker_holder_is_gone(
    redis_url: str, redis: Redis, prefix: str, shared: list[RedisQueueDetails]
) -> None:
    queue = a_queue()
    storage = Storage(queue)
    cache = shared_cache(shared, redis_url, prefix, storage)
    # Another process took the marker, then died without storing anything.
    await redis.set(cache.marker_key(queue.id), "someone-else", px=300)
    started = time.perf_counter()
    assert await cache.details_of(queue.id) == queue
    waited = time.perf_counter() - started
    assert 0.25 < waited < 2.0  # polled until the marker expired, then read storage
    assert storage.reads == 1
    assert decode_entry(queue.id, await redis.get(cache.key(queue.id))) == queue


async def test_a_waiter_gives_up_after_the_marker_lifetime(
    redis_url: str, redis: Redis, prefix: str, shared: list[RedisQueueDetails]
) -> None:
    queue = a_queue()
    storage = Storage(queue)
    cache = shared_cache(shared, redis_url, prefix, storage, marker_ttl_seconds=0.3)
    await redis.set(cache.marker_key(queue.id), "stuck")  # a marker that never expires
    started = time.perf_counter()
    assert await cache.details_of(queue.id) == queue
    assert 0.25 < time.perf_counter() - started < 2.0
    assert storage.reads == 1


async def test_a_store_never_overwrites_a_newer_write(
    redis_url: str, redis: Redis, prefix: str, shared: list[RedisQueueDetails]
) -> None:
    old = a_queue(visibility_timeout_seconds=30)
    storage = Storage(old)
    storage.gate.clear()
    cache = shared_cache(shared, redis_url, prefix, storage)
    lookup = asyncio.create_task(cache.details_of(old.id))  # reads the old row...
    await asyncio.wait_for(storage.entered.wait(), 5)
    new = a_queue(queue_id=old.id, visibility_timeout_seconds=5)
    await cache.remember(new)  # ...while an update commits and writes through
    storage.gate.set()
    assert await lookup == old  # that caller got what it read
    stored = decode_entry(old.id, await redis.get(cache.key(old.id)))
    assert stored is not None and stored.settings.visibility_timeout_seconds == 5


async def test_names_go_local_then_shared_then_storage(
    redis_url: str, redis: Redis, prefix: str, shared: list[RedisQueueDetails]
) -> None:
    queue = a_queue("billing")
    storage = Storage(queue)
    first = shared_cache(shared, redis_url, prefix, storage)
    names = LocalQueueNames(DetailsQueueNames(first), max_entries=10, max_capacity_bytes=10_000)
    assert await names.name_of(queue.id) == "billing"  # local miss, shared miss: storage
    assert storage.reads == 1
    assert await names.name_of(queue.id) == "billing"  # local hit
    other = shared_cache(shared, redis_url, prefix, storage)  # "another process"
    other_names = LocalQueueNames(
        DetailsQueueNames(other), max_entries=10, max_capacity_bytes=10_000
    )
    assert await other_names.name_of(queue.id) == "billing"  # local miss, shared hit
    assert storage.reads == 1


async def test_enqueue_never_reads_the_queue_on_a_warm_cache(
    redis_url: str, prefix: str, shared: list[RedisQueueDetails]
) -> None:
    queue = a_queue(default_message_ttl_seconds=60)
    storage = Storage(queue)
    cache = shared_cache(shared, redis_url, prefix, storage)
    # The message service as the API container wires it, over this storage and cache.
    container = api_container(clock=ManualClock(), metrics=RecordingEvents())
    container.storage.messages.override(providers.Object(storage))
    container.lookups.details.override(providers.Object(cache))
    enqueue = container.use_cases.messages().enqueue
    message = NewMessage(payload="x", priority=Priority.MEDIUM)
    for _ in range(50):
        await enqueue(EnqueueCommand(queue_id=queue.id, messages=[message]))
    assert storage.stored == 50
    assert storage.reads == 1  # the first, cold lookup; never again


class RecordingEvents:
    def enqueued(self, queue_name: str, priority: Priority, count: int = 1) -> None:
        return None

    def acknowledged(self, queue_name: str, count: int = 1) -> None:
        return None

    def dead_lettered(self, queue_name: str, count: int = 1) -> None:
        return None

    def redriven(self, queue_name: str, count: int = 1) -> None:
        return None


# -- the loading marker across two processes --------------------------------------------

_LOOKUP_PROCESS = r"""
import asyncio, json, sys, time, uuid
from datetime import UTC, datetime

from retsu.adapters.cache.redis_client import create_redis_client
from retsu.adapters.cache.shared import RedisQueueDetails
from retsu.domain.errors import QueueNotFound
from retsu.domain.queue import Queue, QueueSettings

url, prefix, queue_id, exists, load_seconds = sys.argv[1:6]


class SlowStorage:
    loads = 0

    async def details_of(self, qid):
        SlowStorage.loads += 1
        await asyncio.sleep(float(load_seconds))
        if exists != "yes":
            raise QueueNotFound(qid)
        at = datetime(2024, 1, 1, tzinfo=UTC)
        return Queue(id=qid, name="slow-queue", settings=QueueSettings(), paused=False,
                     created_at=at, updated_at=at)


async def main():
    client = create_redis_client(url, connection_timeout_seconds=2, command_timeout_seconds=2)
    details = RedisQueueDetails(client, SlowStorage(), key_prefix=prefix)
    await client.ping()  # connected before the start line
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    started = time.perf_counter()
    try:
        name = (await details.details_of(uuid.UUID(queue_id))).name
    except QueueNotFound:
        name = None
    seconds = time.perf_counter() - started
    print(json.dumps({"loads": SlowStorage.loads, "name": name, "seconds": seconds}), flush=True)
    await details.aclose()


asyncio.run(main())
"""


def race_two_processes(
    redis_url: str, prefix: str, queue_id: UUID, *, exists: bool, load_seconds: float
) -> list[dict[str, object]]:
    args = [redis_url, prefix, str(queue_id), "yes" if exists else "no", str(load_seconds)]
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", _LOOKUP_PROCESS, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        for process in processes:
            assert process.stdout is not None
            line = process.stdout.readline()
            assert line.strip() == "ready", line + (process.stderr.read() if process.stderr else "")
        for process in processes:  # the start line: both look up at (nearly) the same time
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        results = []
        for process in processes:
            out, err = process.communicate(timeout=30)
            assert process.returncode == 0, err
            results.append(json.loads(out.strip().splitlines()[-1]))
        return results
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()


@pytest.mark.parametrize("exists", [True, False], ids=["queue", "missing-queue"])
def test_across_two_processes_only_one_reads_storage(
    redis_url: str, prefix: str, exists: bool
) -> None:
    queue_id = uuid.uuid4()
    load_seconds = 0.5
    results = race_two_processes(
        redis_url, prefix, queue_id, exists=exists, load_seconds=load_seconds
    )
    assert sorted(r["loads"] for r in results) == [0, 1]
    expected = "slow-queue" if exists else None
    assert [r["name"] for r in results] == [expected, expected]
    waiter = next(r for r in results if r["loads"] == 0)
    # The waiter polled (every 10 ms) and finished about when the loader stored the result,
    # far sooner than the 2 s marker lifetime.
    assert float(waiter["seconds"]) < load_seconds + 1.0  # type: ignore[arg-type]


# -- real API processes ---------------------------------------------------------------


def metric(text: str, name: str, **labels: str) -> float:
    """Sum of a metric's samples whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        sample_labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
        if all(sample_labels.get(k) == v for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def start_api(
    database_url: str, redis_url: str, log_path: Path, **settings: str
) -> tuple[RetsuProcess, str]:
    port = free_port()
    env = retsu_env(
        database_url,
        http__port=str(port),
        cache__distributed__enabled="true",
        cache__distributed__url=redis_url,
        **settings,
    )
    process = RetsuProcess(["api"], env, log_path)
    base = f"http://127.0.0.1:{port}"
    try:
        process.wait_until_ready(f"{base}/health/ready")
    except BaseException:
        process.stop()
        raise
    return process, base


def plain_url(url: str) -> str:
    return re.sub(r"^postgresql\+\w+://", "postgresql://", url)


async def lifetime_and_lease(database_url: str, message_id: str) -> tuple[float, float | None]:
    connection = await asyncpg.connect(plain_url(database_url))
    try:
        row = await connection.fetchrow(
            "SELECT extract(epoch FROM expires_at - enqueued_at) AS lifetime,"
            " extract(epoch FROM available_after - last_delivered_at) AS lease"
            " FROM queue_message WHERE id = $1",
            uuid.UUID(message_id),
        )
    finally:
        await connection.close()
    assert row is not None
    lease = row["lease"]
    return float(row["lifetime"]), None if lease is None else float(lease)


@pytest.fixture
def two_apis(database_url: str, redis_url: str, tmp_path: Path) -> Iterator[tuple[str, str]]:
    first, first_url = start_api(database_url, redis_url, tmp_path / "a.log")
    try:
        second, second_url = start_api(database_url, redis_url, tmp_path / "b.log")
        try:
            yield first_url, second_url
        finally:
            assert second.stop() == 0, second.output()
    finally:
        assert first.stop() == 0, first.output()


async def test_an_update_through_one_api_process_is_seen_by_the_next_request_of_another(
    two_apis: tuple[str, str], database_url: str, redis: Redis
) -> None:
    a_url, b_url = two_apis
    async with (
        httpx.AsyncClient(base_url=a_url, timeout=10) as a,
        httpx.AsyncClient(base_url=b_url, timeout=10) as b,
    ):
        created = await a.post(
            "/v1/queues",
            json={
                "name": f"write-through-{uuid.uuid4().hex[:10]}",
                "default_message_ttl_seconds": 100,
                "visibility_timeout_seconds": 30,
            },
        )
        assert created.status_code == 201, created.text
        queue_id = created.json()["id"]
        key = f"{KEY_PREFIX}queue:{{{queue_id}}}"
        try:
            message = {"payload": "p", "priority": "HIGH"}
            first = await b.post(f"/v1/queues/{queue_id}/messages", json=message)
            assert first.status_code == 201, first.text
            assert (await lifetime_and_lease(database_url, first.json()["id"]))[0] == 100

            patched = await a.patch(
                f"/v1/queues/{queue_id}",
                json={"default_message_ttl_seconds": 60, "visibility_timeout_seconds": 7},
            )
            assert patched.status_code == 200, patched.text

            # The very next requests through the other process use the new settings.
            second = await b.post(f"/v1/queues/{queue_id}/messages", json=message)
            assert second.status_code == 201, second.text
            assert (await lifetime_and_lease(database_url, second.json()["id"]))[0] == 60
            taken = await b.post(f"/v1/queues/{queue_id}/messages/dequeue")
            assert taken.status_code == 200, taken.text
            lease = (await lifetime_and_lease(database_url, taken.json()["id"]))[1]
            assert lease == pytest.approx(7, abs=0.01)

            stored = decode_entry(uuid.UUID(queue_id), await redis.get(key))
            assert stored is not None and stored.settings.visibility_timeout_seconds == 7
            assert FIVE_MINUTES_MS - 10_000 < await redis.pttl(key) <= FIVE_MINUTES_MS

            # B never had to load these details: A's create and update wrote them through.
            b_metrics = (await b.get("/metrics")).text
            hits = metric(
                b_metrics, "cache_requests_total", cache_name="queue_details", outcome="hit"
            )
            # The first enqueue's name lookup (for the metrics; then the process's own name
            # cache answers). An enqueue without a delay reads no details: the storing
            # transaction reads the default lifetime itself (as the 60 above shows), and a
            # dequeue reads the queue row itself.
            assert hits >= 1
            loads = metric(
                b_metrics, "cache_load_duration_seconds_count", cache_name="queue_details"
            )
            assert loads == 0
        finally:
            await redis.delete(key, f"{key}:loading")


# -- what a delivery decision may never take from a cache ------------------------------------


async def _set_queue(database_url: str, queue_id: str, assignment: str) -> None:
    """Change a queue row behind the caches' back: what a write whose cache update failed
    (a Redis timeout after the commit) leaves behind, for up to five minutes."""
    connection = await asyncpg.connect(plain_url(database_url))
    try:
        await connection.execute(
            f"UPDATE queue SET {assignment} WHERE id = $1", uuid.UUID(queue_id)
        )
    finally:
        await connection.close()


async def test_a_pause_stops_deliveries_in_every_api_process_at_once(
    two_apis: tuple[str, str], database_url: str, redis: Redis
) -> None:
    a_url, b_url = two_apis
    async with (
        httpx.AsyncClient(base_url=a_url, timeout=10) as a,
        httpx.AsyncClient(base_url=b_url, timeout=10) as b,
    ):
        created = await a.post("/v1/queues", json={"name": f"gate-{uuid.uuid4().hex[:10]}"})
        queue_id = created.json()["id"]
        key = f"{KEY_PREFIX}queue:{{{queue_id}}}"
        try:
            for _ in range(4):
                sent = await a.post(
                    f"/v1/queues/{queue_id}/messages", json={"payload": "p", "priority": "LOW"}
                )
                assert sent.status_code == 201, sent.text
            # Both processes have the queue's details cached (unpaused).
            assert (await a.post(f"/v1/queues/{queue_id}/messages/dequeue")).status_code == 200
            assert (await b.post(f"/v1/queues/{queue_id}/messages/dequeue")).status_code == 200
            assert await redis.exists(key)

            await _set_queue(database_url, queue_id, "paused = true")

            # The shared cache still says "not paused"; no delivery may follow it.
            for client in (a, b):
                taken = await client.post(f"/v1/queues/{queue_id}/messages/dequeue")
                assert taken.status_code == 204, taken.text
                batch = await client.post(
                    f"/v1/queues/{queue_id}/messages/dequeue", json={"max_messages": 10}
                )
                assert batch.json() == {"messages": []}
            await _set_queue(database_url, queue_id, "paused = false")
            assert (await b.post(f"/v1/queues/{queue_id}/messages/dequeue")).status_code == 200
        finally:
            await redis.delete(key, f"{key}:loading")


async def test_a_lowered_attempts_limit_never_allows_one_more_delivery(
    two_apis: tuple[str, str], database_url: str, redis: Redis
) -> None:
    a_url, b_url = two_apis
    async with (
        httpx.AsyncClient(base_url=a_url, timeout=10) as a,
        httpx.AsyncClient(base_url=b_url, timeout=10) as b,
    ):
        created = await a.post(
            "/v1/queues",
            json={"name": f"limit-{uuid.uuid4().hex[:10]}", "max_delivery_attempts": 5},
        )
        queue_id = created.json()["id"]
        key = f"{KEY_PREFIX}queue:{{{queue_id}}}"
        messages = f"/v1/queues/{queue_id}/messages"
        try:
            sent = await a.post(messages, json={"payload": "retried", "priority": "LOW"})
            retried = sent.json()["id"]
            # Delivered twice: its lease ends each time.
            for attempt in (1, 2):
                taken = await b.post(f"{messages}/dequeue", json={"visibility_timeout_seconds": 1})
                assert taken.json()["delivery_attempts"] == attempt
                await asyncio.sleep(1.05)
            # A HIGH message wins the next claim: "retried" goes back to the ready order
            # (READY again, with 2 attempts used).
            await a.post(messages, json={"payload": "first", "priority": "HIGH"})
            first = await b.post(f"{messages}/dequeue")
            assert first.json()["payload"] == "first"

            # The limit drops to 2 behind the caches' back (their copy still says 5).
            await _set_queue(database_url, queue_id, "max_delivery_attempts = 2")

            for client in (a, b):
                taken = await client.post(f"{messages}/dequeue")
                assert taken.status_code == 204, taken.text
            dead = await a.get(f"/v1/queues/{queue_id}/dead-letters")
            [record] = dead.json()["items"]
            assert (record["id"], record["delivery_attempts"]) == (retried, 2)
            assert record["reason"] == "MAX_DELIVERY_ATTEMPTS_EXHAUSTED"
        finally:
            await redis.delete(key, f"{key}:loading")


# -- a Redis outage -----------------------------------------------------------------------


class RedisServer:
    """A redis-server of the test's own, on a port of its own, without persistence."""

    def __init__(self, port: int, log_path: Path) -> None:
        self.port = port
        self.url = f"redis://127.0.0.1:{port}/0"
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    "redis-server",
                    "--port",
                    str(self.port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            probe = subprocess.run(
                ["redis-cli", "-p", str(self.port), "ping"], capture_output=True, text=True
            )
            if probe.stdout.strip() == "PONG":
                return
            time.sleep(0.05)
        raise TimeoutError(f"redis-server on port {self.port} did not start")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)  # in case a test froze it
            self.process.terminate()
            self.process.wait(10)
        self.process = None

    def freeze(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(free_port(), tmp_path / "redis.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def timed(request: object) -> tuple[httpx.Response, float]:
    started = time.perf_counter()
    response = await request  # type: ignore[misc]
    return response, time.perf_counter() - started


async def work_for(
    client: httpx.AsyncClient, queue_id: str, seconds: float
) -> list[tuple[str, int, float]]:
    """Enqueue a delayed message, enqueue, dequeue, acknowledge in a loop; every request's
    (kind, status, duration). Only the delayed one reads the queue's details (its delay is
    checked against the queue's default lifetime): an enqueue without a delay looks up
    nothing but the queue's name (docs/performance.md)."""
    seen: list[tuple[str, int, float]] = []
    deadline = time.monotonic() + seconds
    messages = f"/v1/queues/{queue_id}/messages"
    while time.monotonic() < deadline:
        sent, took = await timed(
            client.post(messages, json={"payload": "d", "priority": "LOW", "delay_seconds": 3600})
        )
        seen.append(("enqueue", sent.status_code, took))
        sent, took = await timed(client.post(messages, json={"payload": "p", "priority": "LOW"}))
        seen.append(("enqueue", sent.status_code, took))
        got, took = await timed(client.post(f"/v1/queues/{queue_id}/messages/dequeue"))
        seen.append(("dequeue", got.status_code, took))
        if got.status_code == 200:
            body = got.json()
            acked, took = await timed(
                client.post(
                    f"/v1/queues/{queue_id}/messages/{body['id']}/acknowledge",
                    json={"receipt_handle": body["receipt_handle"]},
                )
            )
            seen.append(("acknowledge", acked.status_code, took))
    return seen


COMMAND_TIMEOUT_SECONDS = 0.5
EXPECTED_STATUS = {"enqueue": 201, "dequeue": 200, "acknowledge": 204}


def assert_all_served(seen: list[tuple[str, int, float]]) -> None:
    wrong = [(kind, status) for kind, status, _ in seen if status != EXPECTED_STATUS[kind]]
    assert not wrong, wrong[:5]


async def cache_counts(client: httpx.AsyncClient) -> tuple[float, float]:
    text = (await client.get("/metrics")).text
    return (
        metric(text, "cache_requests_total", cache_name="queue_details", outcome="hit"),
        metric(text, "cache_requests_total", cache_name="queue_details", outcome="miss"),
    )


async def wait_for_cache_hits(
    client: httpx.AsyncClient, queue_id: str, redis: Redis, key: str, within: float
) -> float:
    """Keep working until the queue's entry is back in Redis and hits rise; seconds taken."""
    started = time.monotonic()
    hits_before, _ = await cache_counts(client)
    while time.monotonic() - started < within:
        assert_all_served(await work_for(client, queue_id, 0.2))
        hits, _ = await cache_counts(client)
        if await redis.exists(key) and hits > hits_before + 2:
            return time.monotonic() - started
    raise AssertionError(f"the shared cache was not used again within {within} s")


@pytest.mark.parametrize("outage", ["stopped", "frozen"])
async def test_a_redis_outage_costs_no_errors_and_no_per_request_timeout(
    outage: str, own_redis: RedisServer, database_url: str, tmp_path: Path
) -> None:
    # Stopped: connections are refused at once. Frozen (SIGSTOP): connections are
    # accepted but nothing answers, so without the breaker every request would wait for
    # the command timeout; it is set to 500 ms here to make that unmistakable.
    process, base = start_api(
        database_url,
        own_redis.url,
        tmp_path / "api.log",
        cache__distributed__command_timeout_milliseconds=str(int(COMMAND_TIMEOUT_SECONDS * 1000)),
        cache__distributed__connection_timeout_milliseconds=str(
            int(COMMAND_TIMEOUT_SECONDS * 1000)
        ),
    )
    redis = Redis.from_url(own_redis.url)
    try:
        async with httpx.AsyncClient(base_url=base, timeout=10) as client:
            created = await client.post(
                "/v1/queues", json={"name": f"outage-{uuid.uuid4().hex[:10]}"}
            )
            assert created.status_code == 201, created.text
            queue_id = created.json()["id"]
            key = f"{KEY_PREFIX}queue:{{{queue_id}}}"
            assert_all_served(await work_for(client, queue_id, 0.3))
            hits_before, misses_before = await cache_counts(client)
            assert hits_before > 0 and await redis.exists(key)

            if outage == "stopped":
                own_redis.stop()
            else:
                own_redis.freeze()
            # 3.5 s: the first reconnect attempts (at 1 s and 3 s) fail in the background.
            seen = await work_for(client, queue_id, 3.5)
            assert_all_served(seen)
            hits_during, misses_during = await cache_counts(client)
            assert hits_during <= hits_before + 1  # Redis was not used...
            # ...PostgreSQL was, by every delayed enqueue (a dequeue reads the queue row
            # itself; an enqueue without a delay needs no details).
            enqueues = sum(1 for operation, _, _ in seen if operation == "enqueue") // 2
            assert misses_during >= misses_before + enqueues
            # Only the first request may pay for discovering the outage: none of the others
            # waited for a command timeout (500 ms), and nearly all stayed under 100 ms
            # (the margin is for a 2-core machine shared with other test runs).
            rest = sorted(took for _, _, took in seen[1:])
            figures = (
                f"Redis {outage}: {len(seen)} requests, first {seen[0][2] * 1000:.1f} ms, "
                f"then p50 {rest[len(rest) // 2] * 1000:.1f} ms, "
                f"p99 {rest[int(len(rest) * 0.99)] * 1000:.1f} ms, max {rest[-1] * 1000:.1f} ms"
            )
            print(figures)
            assert rest[-1] < COMMAND_TIMEOUT_SECONDS * 0.8, figures
            assert sum(took < 0.1 for took in rest) >= 0.97 * len(rest), figures

            if outage == "stopped":
                own_redis.start()
                await redis.aclose()
                redis = Redis.from_url(own_redis.url)
            else:
                own_redis.thaw()
            # The next reconnect attempt is at most 5 s away; then the cache is used again.
            recovered = await wait_for_cache_hits(client, queue_id, redis, key, within=15)
            print(f"Redis {outage}: the cache was used again {recovered:.2f} s after it returned")
    finally:
        await redis.aclose()
        assert process.stop() == 0, process.output()
