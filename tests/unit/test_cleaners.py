"""The two cleaners on the in-memory repository: time moves with a fake clock."""

from __future__ import annotations

import uuid
from collections import Counter
from uuid import UUID

import pytest

from retsu.adapters.memory.clock import ManualClock
from retsu.adapters.memory.storage import MemoryStorage
from retsu.adapters.telemetry.metrics import Metrics
from retsu.application.batch_worker import BatchSchedule, BatchWorker
from retsu.application.clean_dead_letters import CleanDeadLetters
from retsu.application.clean_expired_messages import CleanExpiredMessages
from retsu.domain.audit import AuditAction, AuditEntry, Caller
from retsu.domain.maintenance import (
    IDEMPOTENCY_KEY_RETENTION_SECONDS,
    NEVER_DELIVERED,
    PREVIOUSLY_DELIVERED,
)
from retsu.domain.message import MessageToStore, Priority
from retsu.domain.queue import Queue, QueueSettings
from tests.support.doubles.sleeper import FakeSleeper

RETENTION = 3600


def audit() -> AuditEntry:
    return AuditEntry.of_queue(AuditAction.QUEUE_CREATED, uuid.uuid4(), Caller())


class RecordingMaintenanceEvents:
    def __init__(self) -> None:
        self.counts: Counter[tuple[str, ...]] = Counter()

    def expired(self, queue_name: str, delivery_history: str, count: int = 1) -> None:
        self.counts["expired", queue_name, delivery_history] += count

    def dead_letters_purged(self, queue_name: str, count: int = 1) -> None:
        self.counts["purged", queue_name] += count


class FakeIdempotencyKeys:
    """Keys with their age in seconds; removes the ones past the age asked for."""

    def __init__(self, ages: list[float]) -> None:
        self.ages = sorted(ages, reverse=True)
        self.calls: list[tuple[int, int]] = []

    async def delete_idempotency_keys_older_than(self, age_seconds: int, batch_size: int) -> int:
        self.calls.append((age_seconds, batch_size))
        doomed = [age for age in self.ages if age > age_seconds][:batch_size]
        for age in doomed:
            self.ages.remove(age)
        return len(doomed)


class World:
    def __init__(self) -> None:
        self.clock = ManualClock()
        self.repository = MemoryStorage(self.clock)
        self.events = RecordingMaintenanceEvents()
        self.clean_expired = CleanExpiredMessages(self.repository, self.events)
        self.clean_dead_letters = CleanDeadLetters(self.repository, self.events, RETENTION)

    async def queue(
        self, name: str = "orders", *, max_attempts: int = 5, visibility: int = 30
    ) -> Queue:
        return await self.repository.add_queue(
            Queue(
                id=uuid.uuid4(),
                name=name,
                settings=QueueSettings(
                    visibility_timeout_seconds=visibility, max_delivery_attempts=max_attempts
                ),
                paused=False,
                created_at=self.clock.now(),
                updated_at=self.clock.now(),
            ),
            audit(),
        )

    async def send(self, queue: Queue, *, ttl: int = 600, delay: int = 0, n: int = 1) -> list[UUID]:
        messages = [
            MessageToStore(
                id=uuid.uuid4(),
                payload="x",
                priority=Priority.MEDIUM,
                ttl_seconds=ttl,
                delay_seconds=delay,
            )
            for _ in range(n)
        ]
        await self.repository.enqueue(queue.id, messages)
        return [m.id for m in messages]

    async def receive(self, queue: Queue, *, visibility: int = 30, limit: int = 1) -> list[UUID]:
        result = await self.repository.dequeue(
            queue.id,
            limit=limit,
            visibility_timeout_seconds=visibility,
            dead_letter_batch_size=100,
        )
        return [m.id for m in result.messages]

    def later(self, seconds: float) -> None:
        self.clock.advance(seconds)


@pytest.fixture
def world() -> World:
    return World()


# -- expired-message cleaner ---------------------------------------------------


async def test_an_expired_ready_message_is_removed_at_once(world: World) -> None:
    queue = await world.queue()
    await world.send(queue, ttl=10)
    world.later(9.999)
    assert (await world.clean_expired(500)).removed == 0
    world.later(0.001)  # expires_at <= now: expired
    result = await world.clean_expired(500)
    assert (result.removed, result.full) == (1, False)
    assert world.repository.message_count(queue.id) == 0
    assert world.events.counts == {("expired", "orders", NEVER_DELIVERED): 1}


async def test_an_expired_in_flight_message_is_removed_only_after_its_lease_ends(
    world: World,
) -> None:
    queue = await world.queue()
    await world.send(queue, ttl=10)
    assert len(await world.receive(queue, visibility=30)) == 1
    world.later(15)  # lifetime over, lease still running: the consumer may still ack
    assert (await world.clean_expired(500)).removed == 0
    [state] = [s for s in await world.repository.read_state() if s.priority is Priority.MEDIUM]
    assert state.in_flight == 1  # counted in flight even though expired
    world.later(15)  # the lease ends now
    assert (await world.clean_expired(500)).removed == 1
    assert world.events.counts == {("expired", "orders", PREVIOUSLY_DELIVERED): 1}


async def test_expiry_wins_over_dead_lettering(world: World) -> None:
    queue = await world.queue(max_attempts=1)
    await world.send(queue, ttl=20)
    await world.receive(queue, visibility=30)  # the only attempt
    world.later(31)  # lease over, attempts used up, and expired
    result = await world.repository.dequeue(
        queue.id,
        limit=1,
        visibility_timeout_seconds=30,
        dead_letter_batch_size=100,
    )
    assert (result.messages, result.dead_lettered) == ([], 0)  # not the dequeue's to bury
    assert world.repository.dead_letters_of(queue.id) == []
    assert (await world.clean_expired(500)).removed == 1
    assert world.events.counts == {("expired", "orders", PREVIOUSLY_DELIVERED): 1}


async def test_an_unexpired_exhausted_message_is_dead_lettered_not_expired(world: World) -> None:
    queue = await world.queue(max_attempts=1)
    await world.send(queue, ttl=600)
    await world.receive(queue, visibility=30)
    world.later(31)
    assert (await world.clean_expired(500)).removed == 0
    result = await world.repository.dequeue(
        queue.id,
        limit=1,
        visibility_timeout_seconds=30,
        dead_letter_batch_size=100,
    )
    assert result.dead_lettered == 1


async def test_never_delivered_and_previously_delivered_are_counted_apart_per_queue(
    world: World,
) -> None:
    orders = await world.queue("orders")
    emails = await world.queue("emails")
    await world.send(orders, ttl=10, n=3)
    await world.receive(orders, visibility=5, limit=2)  # two of them delivered once
    await world.send(emails, ttl=10, n=2)
    world.later(10)
    assert (await world.clean_expired(500)).removed == 5
    assert world.events.counts == {
        ("expired", "orders", NEVER_DELIVERED): 1,
        ("expired", "orders", PREVIOUSLY_DELIVERED): 2,
        ("expired", "emails", NEVER_DELIVERED): 2,
    }


async def test_the_cleaner_counts_through_the_metrics_adapter() -> None:
    world = World()
    metrics = Metrics()
    clean = CleanExpiredMessages(world.repository, metrics)
    queue = await world.queue()
    await world.send(queue, ttl=10, n=2)
    await world.receive(queue, visibility=5)
    world.later(10)
    await clean(500)
    sample = metrics.registry.get_sample_value
    labels = {"queue_name": "orders"}
    assert sample("queue_messages_expired_total", {**labels, "delivery_history": NEVER_DELIVERED})
    assert sample(
        "queue_messages_expired_total", {**labels, "delivery_history": NEVER_DELIVERED}
    ) == sample(
        "queue_messages_expired_total", {**labels, "delivery_history": PREVIOUSLY_DELIVERED}
    )


async def test_expired_messages_go_in_bounded_batches_oldest_expiry_first(world: World) -> None:
    queue = await world.queue()
    late = await world.send(queue, ttl=50, n=5)
    await world.send(queue, ttl=10, n=20)
    world.later(60)
    first = await world.clean_expired(10)
    assert (first.removed, first.full) == (10, True)
    second = await world.clean_expired(10)
    assert (second.removed, second.full) == (10, True)
    # Only the five latest expiries are left.
    assert world.repository.message_count(queue.id) == 5
    assert {m.id for m in world.repository._messages[queue.id].values()} == set(late)
    third = await world.clean_expired(10)
    assert (third.removed, third.full) == (5, False)


async def test_delayed_and_live_messages_are_left_alone(world: World) -> None:
    queue = await world.queue()
    await world.send(queue, ttl=600, delay=300)
    await world.send(queue, ttl=600)
    await world.receive(queue, visibility=30)
    world.later(400)
    assert (await world.clean_expired(500)).removed == 0
    assert world.repository.message_count(queue.id) == 2


async def test_a_full_run_of_the_expired_cleaner_drains_then_rests(world: World) -> None:
    queue = await world.queue()
    await world.send(queue, ttl=10, n=25)
    world.later(10)
    sleeper = FakeSleeper(world.clock, stop_after=4)
    schedule = BatchSchedule(batch_size=10, interval_seconds=60, saturated_batch_delay_seconds=0.05)
    worker = BatchWorker("expired-message-cleaner", world.clean_expired, schedule, sleeper)
    await worker.run()
    assert sleeper.sleeps == [0.05, 0.05, 60, 60]
    assert worker.removed == 25
    assert world.events.counts == {("expired", "orders", NEVER_DELIVERED): 25}


# -- idempotency keys (second job of the expired-message cleaner) -----------------


async def test_the_expired_cleaner_forgets_idempotency_keys_older_than_24_hours(
    world: World,
) -> None:
    day = IDEMPOTENCY_KEY_RETENTION_SECONDS
    keys = FakeIdempotencyKeys([day + 1, day + 2, day, day - 1, 10])
    clean = CleanExpiredMessages(world.repository, world.events, idempotency_keys=keys)
    result = await clean(500)
    assert keys.calls == [(86_400, 500)]
    assert (result.removed, result.full) == (2, False)
    assert sorted(keys.ages) == [10, day - 1, day]  # exactly 24 h old is still remembered


async def test_a_full_batch_of_idempotency_keys_makes_the_batch_full(world: World) -> None:
    day = IDEMPOTENCY_KEY_RETENTION_SECONDS
    keys = FakeIdempotencyKeys([day + n for n in range(1, 16)])
    clean = CleanExpiredMessages(world.repository, world.events, idempotency_keys=keys)
    queue = await world.queue()
    await world.send(queue, ttl=10, n=2)
    world.later(10)
    first = await clean(10)
    assert (first.removed, first.full) == (12, True)  # 2 messages + a full batch of 10 keys
    second = await clean(10)
    assert (second.removed, second.full) == (5, False)
    assert keys.ages == []


async def test_the_memory_repository_forgets_keys_with_the_expired_cleaner(world: World) -> None:
    clean = CleanExpiredMessages(world.repository, world.events, idempotency_keys=world.repository)
    queue = await world.queue()

    async def send_with_key(key: str, payload: bytes) -> tuple[UUID, bool]:
        message = MessageToStore(uuid.uuid4(), "x", Priority.MEDIUM, 7 * 86_400, 0)
        result = await world.repository.enqueue_idempotent(queue.id, message, key, payload)
        return result.id, result.replayed

    first, _ = await send_with_key("k-1", b"one")
    world.later(3600)
    await send_with_key("k-2", b"two")
    world.later(IDEMPOTENCY_KEY_RETENTION_SECONDS - 3600)  # k-1 exactly 24 h old
    assert (await clean(500)).removed == 0
    world.later(0.5)
    assert (await clean(500)).removed == 1  # k-1 only
    # k-1 is forgotten: the same key with another message is a new message, no conflict.
    again, replayed = await send_with_key("k-1", b"something else")
    assert again != first and not replayed
    # k-2 is still remembered.
    assert (await send_with_key("k-2", b"two"))[1]
    world.later(3600)
    assert (await clean(1)).full  # batches are bounded too


# -- dead-letter cleaner -----------------------------------------------------------


async def dead_letter(world: World, queue: Queue, n: int = 1) -> None:
    await world.send(queue, ttl=10 * RETENTION, n=n)
    await world.receive(queue, visibility=1, limit=n)
    world.later(1)
    result = await world.repository.dequeue(
        queue.id,
        limit=1,
        visibility_timeout_seconds=30,
        dead_letter_batch_size=100,
    )
    assert result.dead_lettered == n


async def test_dead_letters_are_kept_for_exactly_the_retention(world: World) -> None:
    queue = await world.queue(max_attempts=1)
    await dead_letter(world, queue)
    [record] = world.repository.dead_letters_of(queue.id)
    assert world.clock.now() == record.dead_lettered_at
    world.later(RETENTION)  # exactly the retention old: kept
    assert (await world.clean_dead_letters(500)).removed == 0
    world.later(0.001)
    result = await world.clean_dead_letters(500)
    assert (result.removed, result.full) == (1, False)
    assert world.repository.dead_letters_of(queue.id) == []
    assert world.events.counts == {("purged", "orders"): 1}


async def test_dead_letters_are_purged_in_bounded_batches_per_queue(world: World) -> None:
    orders = await world.queue("orders", max_attempts=1)
    emails = await world.queue("emails", max_attempts=1)
    await dead_letter(world, orders, n=7)
    await dead_letter(world, emails, n=5)
    world.later(RETENTION + 1)
    await dead_letter(world, orders, n=1)  # young: stays
    first = await world.clean_dead_letters(10)
    assert (first.removed, first.full) == (10, True)
    second = await world.clean_dead_letters(10)
    assert (second.removed, second.full) == (2, False)
    assert world.events.counts == {("purged", "orders"): 7, ("purged", "emails"): 5}
    assert len(world.repository.dead_letters_of(orders.id)) == 1


async def test_the_dead_letter_retention_cannot_be_negative(world: World) -> None:
    with pytest.raises(ValueError):
        CleanDeadLetters(world.repository, world.events, -1)
