"""Consumers (SPEC §3.7) on the memory adapters: the coalescing tracker, what a dequeue
reports, the listing with health, its filters and cursors. Time moves with a fake clock."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest
from dependency_injector import providers

from retsu.adapters.http.cursors import Cursors
from retsu.adapters.memory.clock import ManualClock
from retsu.adapters.memory.secrets import RandomServerSecrets
from retsu.adapters.memory.storage import MemoryStorage
from retsu.adapters.telemetry.metrics import Metrics
from retsu.application.messages import DequeueCommand, MessageService
from retsu.application.track_consumers import ConsumerTracker
from retsu.domain.consumer import (
    ConsumerHealth,
    ConsumerSighting,
    SeenBetween,
    parse_consumer_name,
)
from retsu.domain.dequeue import DequeueOptions
from retsu.domain.errors import InvalidInput, QueueNotFound
from tests.contract.repository_contract import created, message, new_queue
from tests.support.containers import api_container
from tests.support.lists import ListConsumersQuery, consumers_lister, seal_cursor


class CountingStore:
    """A ConsumerStore that records each write and can be made to fail."""

    def __init__(self, inner: MemoryStorage) -> None:
        self.inner = inner
        self.writes: list[list[ConsumerSighting]] = []
        self.failing = False

    async def record_consumers(self, sightings: Sequence[ConsumerSighting]) -> None:
        if self.failing:
            raise ConnectionError("database down")
        self.writes.append(list(sightings))
        await self.inner.record_consumers(sightings)

    async def list_consumers(self, **kwargs: Any) -> Any:
        return await self.inner.list_consumers(**kwargs)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def repository(clock: ManualClock) -> MemoryStorage:
    return MemoryStorage(clock)


@pytest.fixture
def store(repository: MemoryStorage) -> CountingStore:
    return CountingStore(repository)


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


@pytest.fixture
def tracker(store: CountingStore, clock: ManualClock, metrics: Metrics) -> ConsumerTracker:
    return ConsumerTracker(store, clock, metrics, max_entries=3)


async def _queue(repository: MemoryStorage) -> UUID:
    queue = new_queue()
    await repository.add_queue(queue, created(queue))
    return queue.id


def _metric(metrics: Metrics, line_start: str) -> float:
    for line in metrics.render()[0].decode().splitlines():
        if line.startswith(line_start + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{line_start} not exported")


# -- the name rule and health -------------------------------------------------------------


@pytest.mark.parametrize("name", ["w", "host:42:ab-CD_x", "!" * 128, "~"])
def test_consumer_names_are_1_to_128_visible_ascii_characters(name: str) -> None:
    assert parse_consumer_name(name) == name


@pytest.mark.parametrize("name", ["", "has space", "x" * 129, "tab\t", "caf\xe9", "\x7f"])
def test_other_consumer_names_are_invalid_consumer(name: str) -> None:
    with pytest.raises(InvalidInput) as error:
        parse_consumer_name(name)
    assert error.value.code == "invalid_consumer"


@pytest.mark.parametrize(
    ("age", "health"),
    [
        (0, ConsumerHealth.HEALTHY),
        (30, ConsumerHealth.HEALTHY),
        (30.001, ConsumerHealth.STALE),
        (300, ConsumerHealth.STALE),
        (300.001, ConsumerHealth.OFFLINE),
        (86400, ConsumerHealth.OFFLINE),
    ],
)
def test_health_is_judged_by_the_last_sighting(age: float, health: ConsumerHealth) -> None:
    now = ManualClock().now()
    assert ConsumerHealth.of(now - timedelta(seconds=age), now) is health
    # The storage filter agrees with the judgement, at the boundaries too.
    for other in ConsumerHealth:
        holds = SeenBetween.of(other, now).holds(now - timedelta(seconds=age))
        assert holds is (other is health), (age, other)


# -- the tracker --------------------------------------------------------------------------


async def test_many_sightings_become_one_write(
    tracker: ConsumerTracker, store: CountingStore, repository: MemoryStorage, clock: ManualClock
) -> None:
    queue_id = await _queue(repository)
    start = clock.now()
    for _ in range(1000):
        tracker.seen(queue_id, "w1", deliveries=1)
        clock.advance(0.001)
    tracker.seen(queue_id, "w2")
    assert store.writes == []  # nothing written per dequeue

    assert await tracker.flush() == 2

    assert len(store.writes) == 1
    by_name = {s.name: s for s in store.writes[0]}
    assert by_name["w1"].deliveries == 1000
    assert by_name["w1"].first_seen_at == start
    assert by_name["w1"].last_seen_at == start + timedelta(seconds=0.999)
    assert await tracker.flush() == 0  # nothing pending: no write at all
    assert len(store.writes) == 1


async def test_a_failed_write_keeps_the_counts_for_the_next_one(
    tracker: ConsumerTracker,
    store: CountingStore,
    repository: MemoryStorage,
    clock: ManualClock,
    metrics: Metrics,
) -> None:
    queue_id = await _queue(repository)
    first = clock.now()
    tracker.seen(queue_id, "w1", deliveries=2)
    store.failing = True
    with pytest.raises(ConnectionError):
        await tracker.flush()
    clock.advance(5)
    tracker.seen(queue_id, "w1", deliveries=3)  # seen meanwhile: merged with the kept one
    store.failing = False

    await tracker.flush()

    (record,) = await repository.list_consumers(
        limit=10, after=None, queue_id=queue_id, seen=SeenBetween()
    )
    assert (record.first_seen_at, record.last_seen_at, record.deliveries) == (
        first,
        first + timedelta(seconds=5),
        5,
    )
    assert _metric(metrics, 'consumer_sighting_flushes_total{outcome="failure"}') == 1
    assert _metric(metrics, 'consumer_sighting_flushes_total{outcome="success"}') == 1


async def test_the_tracker_is_bounded_and_counts_what_it_drops(
    tracker: ConsumerTracker, repository: MemoryStorage, metrics: Metrics
) -> None:
    queue_id = await _queue(repository)
    for i in range(5):
        tracker.seen(queue_id, f"w{i}")
    tracker.seen(queue_id, "w0", deliveries=1)  # held already: still updated

    assert tracker.pending == 3
    assert tracker.dropped == 2
    assert _metric(metrics, "consumer_sightings_dropped_total") == 2
    await tracker.flush()
    names = await repository.list_consumers(
        limit=10, after=None, queue_id=queue_id, seen=SeenBetween()
    )
    assert sorted(c.name for c in names) == ["w0", "w1", "w2"]


async def test_the_timer_writes_every_interval_and_stop_writes_the_rest(
    store: CountingStore, repository: MemoryStorage, clock: ManualClock
) -> None:
    queue_id = await _queue(repository)
    tracker = ConsumerTracker(store, clock, flush_interval_seconds=0.01)
    await tracker.start()
    tracker.seen(queue_id, "w1")
    for _ in range(200):
        if store.writes:
            break
        await asyncio.sleep(0.01)
    assert [s.name for s in store.writes[0]] == ["w1"]
    tracker.seen(queue_id, "w2")
    store.failing = True
    await asyncio.sleep(0.05)  # failures are retried, never raised out of the timer
    store.failing = False
    await tracker.stop()
    assert "w2" in [s.name for w in store.writes for s in w]
    assert tracker.pending == 0


# -- what a dequeue reports ------------------------------------------------------------------


def _messages(
    repository: MemoryStorage, tracker: ConsumerTracker, monotonic: Any = None
) -> MessageService:
    """The API container's message service over ``repository``, reporting to ``tracker``."""
    container = api_container(clock=repository._clock, storage=repository)  # type: ignore[arg-type]
    container.use_cases.consumer_tracker.override(providers.Object(tracker))
    if monotonic is not None:
        container.core.monotonic.override(providers.Object(monotonic))
    return container.use_cases.messages()


def _dequeue(repository: MemoryStorage, tracker: ConsumerTracker) -> Any:
    return _messages(repository, tracker).dequeue


async def test_a_named_dequeue_is_seen_with_its_deliveries_empty_ones_too(
    tracker: ConsumerTracker, repository: MemoryStorage, clock: ManualClock
) -> None:
    queue_id = await _queue(repository)
    await repository.enqueue(queue_id, [message("a"), message("b"), message("c")])
    dequeue = _dequeue(repository, tracker)
    options = DequeueOptions(max_messages=2)

    await dequeue(DequeueCommand(queue_id, options, consumer="w1"))
    clock.advance(10)
    await dequeue(DequeueCommand(queue_id, options, consumer="w1"))
    clock.advance(10)
    assert await dequeue(DequeueCommand(queue_id, options, consumer="w1")) == []
    await dequeue(DequeueCommand(queue_id, options))  # anonymous: not tracked
    await tracker.flush()

    (record,) = await repository.list_consumers(
        limit=10, after=None, queue_id=queue_id, seen=SeenBetween()
    )
    assert record.deliveries == 3
    assert record.last_seen_at - record.first_seen_at == timedelta(seconds=20)


async def test_a_long_poll_is_seen_at_its_start_and_at_its_end(
    tracker: ConsumerTracker, repository: MemoryStorage, clock: ManualClock
) -> None:
    queue_id = await _queue(repository)
    # The poll's clock: the deadline at 1; 0.02 left after the first claim (a short real
    # wait, during which the test moves the fake clock); then past the deadline.
    ticks = iter([0.0, 0.98, 2.0, 3.0, 4.0])
    dequeue = _messages(repository, tracker, lambda: next(ticks)).dequeue
    started = clock.now()

    async def poll() -> list[Any]:
        return await dequeue(
            DequeueCommand(queue_id, DequeueOptions(wait_seconds=1), consumer="poller")
        )

    task = asyncio.create_task(poll())
    await asyncio.sleep(0)  # the first claim: seen at the start
    await tracker.flush()
    (record,) = await repository.list_consumers(
        limit=10, after=None, queue_id=queue_id, seen=SeenBetween()
    )
    assert record.last_seen_at == started
    clock.advance(20)
    assert await task == []
    await tracker.flush()
    (record,) = await repository.list_consumers(
        limit=10, after=None, queue_id=queue_id, seen=SeenBetween()
    )
    assert record.last_seen_at == started + timedelta(seconds=20)
    assert record.deliveries == 0


async def test_a_dequeue_of_a_missing_queue_is_not_seen(
    tracker: ConsumerTracker, repository: MemoryStorage
) -> None:
    missing = new_queue().id
    with pytest.raises(QueueNotFound):
        await _dequeue(repository, tracker)(DequeueCommand(missing, consumer="w1"))
    assert tracker.pending == 0


# -- the list ---------------------------------------------------------------------------------


@pytest.fixture
def secrets() -> RandomServerSecrets:
    return RandomServerSecrets()


ListConsumers = Any


@pytest.fixture
def list_consumers(
    repository: MemoryStorage, secrets: RandomServerSecrets, clock: ManualClock
) -> ListConsumers:
    container = api_container(clock=clock, storage=repository, secrets=secrets)
    return consumers_lister(container.use_cases.activity(), Cursors(secrets))


async def _seen_ago(
    repository: MemoryStorage, clock: ManualClock, queue_id: UUID, name: str, seconds: float
) -> None:
    moment = clock.now() - timedelta(seconds=seconds)
    await repository.record_consumers([ConsumerSighting(queue_id, name, moment, moment, 1)])


async def test_consumers_are_listed_with_their_health_most_recent_first(
    list_consumers: ListConsumers, repository: MemoryStorage, clock: ManualClock
) -> None:
    queue_id = await _queue(repository)
    for name, age in [("offline", 600), ("healthy", 1), ("stale", 60)]:
        await _seen_ago(repository, clock, queue_id, name, age)

    page = await list_consumers(ListConsumersQuery())

    assert [(v.record.name, v.health) for v in page.items] == [
        ("healthy", ConsumerHealth.HEALTHY),
        ("stale", ConsumerHealth.STALE),
        ("offline", ConsumerHealth.OFFLINE),
    ]
    assert page.next_cursor is None
    for health in ConsumerHealth:
        only = await list_consumers(ListConsumersQuery(health=health.value))
        assert [v.record.name for v in only.items] == [health.value]


async def test_pages_of_a_health_filter_are_full_and_complete(
    list_consumers: ListConsumers, repository: MemoryStorage, clock: ManualClock
) -> None:
    queue_id = await _queue(repository)
    for i in range(7):  # alternately healthy and offline
        await _seen_ago(repository, clock, queue_id, f"c{i}", i if i % 2 == 0 else 1000 + i)
    seen: list[str] = []
    cursor = None
    while True:
        page = await list_consumers(ListConsumersQuery(limit=2, cursor=cursor, health="healthy"))
        assert len(page.items) == 2 or page.next_cursor is None
        seen += [v.record.name for v in page.items]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == ["c0", "c2", "c4", "c6"]


async def test_an_unknown_queue_lists_nothing(
    list_consumers: ListConsumers, repository: MemoryStorage, clock: ManualClock
) -> None:
    await _seen_ago(repository, clock, await _queue(repository), "w", 1)
    page = await list_consumers(ListConsumersQuery(queue_id=new_queue().id))
    assert page.items == []


@pytest.mark.parametrize(
    ("query", "code"),
    [
        (ListConsumersQuery(health="sleepy"), "invalid_health"),
        (ListConsumersQuery(health="HEALTHY"), "invalid_health"),
        (ListConsumersQuery(limit=0), "invalid_limit"),
        (ListConsumersQuery(limit=101), "invalid_limit"),
        (ListConsumersQuery(cursor="garbage"), "invalid_cursor"),
    ],
)
async def test_bad_list_queries_are_refused_with_their_code(
    list_consumers: ListConsumers, query: ListConsumersQuery, code: str
) -> None:
    with pytest.raises(InvalidInput) as error:
        await list_consumers(query)
    assert error.value.code == code


async def test_a_cursor_of_another_filter_or_list_is_invalid(
    list_consumers: ListConsumers,
    repository: MemoryStorage,
    clock: ManualClock,
    secrets: RandomServerSecrets,
) -> None:
    queue_id = await _queue(repository)
    for i in range(3):
        await _seen_ago(repository, clock, queue_id, f"c{i}", i)
    cursor = (await list_consumers(ListConsumersQuery(limit=1))).next_cursor
    assert cursor is not None
    with pytest.raises(InvalidInput) as error:
        await list_consumers(ListConsumersQuery(limit=1, cursor=cursor, health="stale"))
    assert error.value.code == "invalid_cursor"
    key = await secrets.cursor_signing_key()
    for position in ([1, "not-a-uuid", "x"], [1, str(queue_id)], ["1", str(queue_id), "x"]):
        forged = seal_cursor(key, "c", [None, None], position)
        with pytest.raises(InvalidInput):
            await list_consumers(ListConsumersQuery(cursor=forged))
