"""The shared cache when Redis fails: lookups fall back to storage, writes never fail,
and Redis is skipped until a background reconnect attempt succeeds. A fake Redis and
a fake clock: nobody sleeps."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import pytest
from dependency_injector import providers
from redis.exceptions import ConnectionError as RedisConnectionError

from retsu.adapters.cache.breaker import CircuitBreaker
from retsu.adapters.cache.closing import close_layers
from retsu.adapters.cache.local import LocalQueueNames
from retsu.adapters.cache.logs import describe_error
from retsu.adapters.cache.passthrough import DetailsQueueNames, RepositoryQueueDetails
from retsu.adapters.cache.shared import (
    NEGATIVE_ENTRY,
    RedisQueueDetails,
    decode_entry,
    encode_queue,
)
from retsu.adapters.memory.clock import ManualClock as MemoryClock
from retsu.application.queues import UpdateQueueCommand
from retsu.domain.errors import QueueNotFound
from retsu.domain.queue import Queue, QueueSettings, QueueSettingsUpdate
from retsu.entrypoints.containers import ApiContainer
from retsu.entrypoints.settings import build_settings
from tests.support.containers import api_container


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeRedis:
    """Just enough of redis.asyncio.Redis; ``down`` makes every command fail."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.down = False
        self.commands: list[str] = []

    def _command(self, name: str) -> None:
        self.commands.append(name)
        if self.down:
            raise RedisConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused.")

    async def get(self, key: str) -> bytes | None:
        self._command("GET")
        return self.data.get(key)

    async def mget(self, keys: list[str]) -> list[bytes | None]:
        self._command("MGET")
        return [self.data.get(k) for k in keys]

    async def set(self, key: str, value: Any, *, px: int | None = None, nx: bool = False) -> bool:
        self._command("SET")
        if nx and key in self.data:
            return False
        self.data[key] = value if isinstance(value, bytes) else str(value).encode()
        return True

    async def delete(self, *keys: str) -> int:
        self._command("DEL")
        return sum(self.data.pop(k, None) is not None for k in keys)

    async def ping(self) -> bool:
        self._command("PING")
        return True

    async def aclose(self) -> None:
        self.commands.append("CLOSE")

    def register_script(self, lua: str) -> Any:
        async def store(keys: list[str], args: list[Any]) -> int:
            self._command("EVALSHA")
            key, marker = keys
            value, _ttl, token = args
            self.data.setdefault(key, value)
            if token and self.data.get(marker) == str(token).encode():
                del self.data[marker]
            return 1

        async def release(keys: list[str], args: list[Any]) -> int:
            self._command("EVALSHA")
            if self.data.get(keys[0]) == str(args[0]).encode():
                del self.data[keys[0]]
                return 1
            return 0

        return store if "'NX'" in lua else release


class Repository:
    """Queue storage that counts reads; tolerant of the audit argument of writes."""

    def __init__(self) -> None:
        self.queues: dict[UUID, Queue] = {}
        self.reads = 0

    async def get_queue(self, queue_id: UUID) -> Queue | None:
        self.reads += 1
        return self.queues.get(queue_id)

    async def update_queue(
        self, queue_id: UUID, update: QueueSettingsUpdate, *_: object, **__: object
    ) -> Queue | None:
        queue = self.queues.get(queue_id)
        if queue is None:
            return None
        queue = Queue(
            id=queue.id,
            name=queue.name,
            settings=update.apply_to(queue.settings),
            paused=queue.paused,
            created_at=queue.created_at,
            updated_at=datetime.now(UTC),
        )
        self.queues[queue_id] = queue
        return queue


def a_queue(name: str = "orders", **settings: int) -> Queue:
    now = datetime.now(UTC)
    return Queue(
        id=uuid.uuid4(),
        name=name,
        settings=QueueSettings(**settings),
        paused=False,
        created_at=now,
        updated_at=now,
    )


class World:
    def __init__(self) -> None:
        self.clock = FakeMonotonic()
        self.redis = FakeRedis()
        self.repository = Repository()
        self.breaker = CircuitBreaker(clock=self.clock)
        self.details = RedisQueueDetails(
            self.redis,  # type: ignore[arg-type]
            RepositoryQueueDetails(self.repository),  # type: ignore[arg-type]
            breaker=self.breaker,
        )
        self.names = LocalQueueNames(
            DetailsQueueNames(self.details), max_entries=100, max_capacity_bytes=100_000
        )

    def add(self, queue: Queue) -> Queue:
        self.repository.queues[queue.id] = queue
        return queue

    async def settle(self) -> None:
        """Let the background reconnect attempt run."""
        for _ in range(5):
            await asyncio.sleep(0)


@pytest.fixture
def world() -> World:
    return World()


async def test_while_redis_is_down_lookups_read_storage_and_skip_redis(world: World) -> None:
    queue = world.add(a_queue())
    world.redis.down = True

    assert await world.details.details_of(queue.id) == queue  # GET fails: storage answers
    assert world.redis.commands == ["GET"]
    assert not world.breaker.closed

    for _ in range(10):  # no reconnect attempt due: Redis is not even tried
        assert (await world.details.details_of(queue.id)).name == "orders"
    assert world.redis.commands == ["GET"]
    assert world.repository.reads == 11

    world.clock.now = 1.0  # the first attempt, in the background; the request still skips
    assert (await world.details.details_of(queue.id)).name == "orders"
    await world.settle()
    assert world.redis.commands == ["GET", "PING"]
    assert world.breaker.next_attempt_in == pytest.approx(2.0)  # it failed: backing off

    world.redis.down = False
    world.clock.now = 3.0
    await world.details.details_of(queue.id)  # triggers the attempt, which succeeds
    await world.settle()
    assert world.breaker.closed
    reads = world.repository.reads
    await world.details.details_of(queue.id)  # miss: loaded under the marker and stored
    await world.details.details_of(queue.id)  # hit
    assert world.repository.reads == reads + 1


async def test_writes_while_redis_is_down_never_fail_and_are_undone_on_reconnect(
    world: World,
) -> None:
    queue = world.add(a_queue(visibility_timeout_seconds=30))
    await world.details.details_of(queue.id)  # cached in Redis with the old settings
    world.redis.down = True
    # The queue service as the API container wires it, over this test's storage and caches.
    container = api_container(clock=MemoryClock())
    container.storage.queues.override(providers.Object(world.repository))
    container.lookups.details.override(providers.Object(world.details))
    container.lookups.names.override(providers.Object(world.names))
    update = container.use_cases.queues().update

    updated = await update(UpdateQueueCommand(queue_id=queue.id, visibility_timeout_seconds=5))

    assert updated.settings.visibility_timeout_seconds == 5  # committed, and answered
    assert world.details.pending_invalidations == {queue.id}
    world.redis.down = False  # Redis comes back with the pre-outage entry still in it
    world.clock.now = 1.0
    await world.details.details_of(queue.id)
    await world.settle()
    assert world.breaker.closed
    assert world.details.key(queue.id) not in world.redis.data  # the stale entry is gone
    assert world.details.pending_invalidations == frozenset()
    details = await world.details.details_of(queue.id)
    assert details.settings.visibility_timeout_seconds == 5


async def test_a_failed_write_through_opens_the_breaker_but_not_the_write(world: World) -> None:
    queue = world.add(a_queue())
    world.redis.down = True
    await world.details.remember(queue)
    await world.details.forget(uuid.uuid4())
    assert not world.breaker.closed
    assert len(world.details.pending_invalidations) == 2


async def test_a_negative_entry_answers_not_found_without_storage(world: World) -> None:
    missing = uuid.uuid4()
    for _ in range(3):
        with pytest.raises(QueueNotFound):
            await world.details.details_of(missing)
    assert world.repository.reads == 1
    assert world.redis.data[world.details.key(missing)] == NEGATIVE_ENTRY


async def test_an_unreadable_entry_is_replaced(world: World) -> None:
    queue = world.add(a_queue())
    world.redis.data[world.details.key(queue.id)] = b"\x93garbage"
    assert await world.details.details_of(queue.id) == queue
    assert decode_entry(queue.id, world.redis.data[world.details.key(queue.id)]) == queue


def test_entries_round_trip_compactly() -> None:
    queue = a_queue("a-rather-long-queue-name.v2", max_delivery_attempts=7)
    raw = encode_queue(queue)
    assert decode_entry(queue.id, raw) == queue
    assert len(raw) < 60
    assert decode_entry(queue.id, NEGATIVE_ENTRY) is None


def test_logged_errors_carry_no_url_password() -> None:
    error = RedisConnectionError("cannot reach redis://user:s3cret@cache:6379/0 (refused)")
    text = describe_error(error)
    assert "s3cret" not in text
    assert text.startswith("ConnectionError: ")


async def test_closing_stops_the_reconnect_attempt_and_closes_the_client(world: World) -> None:
    world.redis.down = True
    await world.details.details_of(world.add(a_queue()).id)
    await close_layers(world.details, world.names, world.details)
    assert world.redis.commands.count("CLOSE") == 1


@pytest.mark.parametrize(
    ("distributed", "in_memory", "details", "names"),
    [
        (True, True, "RedisQueueDetails", "LocalQueueNames"),
        (True, False, "RedisQueueDetails", "DetailsQueueNames"),
        (False, True, "RepositoryQueueDetails", "LocalQueueNames"),
        (False, False, "RepositoryQueueDetails", "DetailsQueueNames"),
    ],
)
async def test_either_layer_can_be_switched_off(
    distributed: bool, in_memory: bool, details: str, names: str
) -> None:
    settings = build_settings(
        {
            "database": {"url": "postgresql://retsu@127.0.0.1:5432/retsu"},
            "cache": {
                "distributed": {"enabled": distributed},
                "in_memory": {
                    "enabled": in_memory,
                    "regions": {"queue_names": {"max_entries": 7, "max_capacity_bytes": 9999}},
                },
            },
        }
    )
    container = ApiContainer(settings=settings)
    try:
        lookups = container.lookups
        assert type(lookups.details()).__name__ == details
        assert type(lookups.names()).__name__ == names
        assert container.use_cases.messages()._details is lookups.details()
        if in_memory:
            assert lookups.names().cache.max_entries == 7
            assert lookups.names().cache.max_bytes == 9999
    finally:
        await container.lookups.close()
