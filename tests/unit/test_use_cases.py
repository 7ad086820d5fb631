"""Every use case on the in-memory adapters: time moves with a fake clock, nobody sleeps."""

from __future__ import annotations

import dataclasses
import uuid
from uuid import UUID

import pytest
from dependency_injector import providers

from retsu.adapters.memory.clock import ManualClock
from retsu.adapters.memory.storage import MemoryStorage
from retsu.application.messages import AcknowledgeCommand, DequeueCommand, EnqueueCommand
from retsu.application.ports import QueueDetails
from retsu.application.queues import CreateQueueCommand, UpdateQueueCommand
from retsu.domain.dequeue import DequeueOptions
from retsu.domain.errors import InvalidInput, QueueAlreadyExists, QueueNotFound
from retsu.domain.message import (
    DEAD_LETTER_BATCH_SIZE,
    REASON_MAX_DELIVERY_ATTEMPTS_EXHAUSTED,
    DeliveredMessage,
    NewMessage,
    Priority,
    Receipt,
)
from retsu.domain.queue import Queue, QueueSettings
from tests.support.containers import api_container
from tests.support.doubles.events import RecordingQueueEvents


class World:
    """The use cases as the API container wires them, on the memory twin, plus a few
    helpers that read like the domain."""

    def __init__(self) -> None:
        self.clock = ManualClock()
        self.repository = MemoryStorage(self.clock)
        self.events = RecordingQueueEvents()
        self.container = container = api_container(
            clock=self.clock, storage=self.repository, metrics=self.events
        )
        queues, messages = container.use_cases.queues(), container.use_cases.messages()
        self.create_queue = queues.create
        self.update_queue = queues.update
        self.enqueue = messages.enqueue
        self.dequeue = messages.dequeue
        self.acknowledge = messages.acknowledge

    async def queue(self, name: str = "orders", **settings: int) -> Queue:
        return await self.create_queue(CreateQueueCommand(name=name, **settings))

    async def send(
        self,
        queue: Queue,
        payload: str = "x",
        priority: str = "MEDIUM",
        ttl_seconds: int | None = None,
        delay_seconds: int | None = None,
    ) -> UUID:
        message = NewMessage.parse(payload, priority, ttl_seconds, delay_seconds)
        (message_id,) = await self.enqueue(EnqueueCommand(queue.id, [message]))
        return message_id

    async def receive(
        self, queue: Queue, *, max_messages: int | None = None, visibility: int | None = None
    ) -> list[DeliveredMessage]:
        options = DequeueOptions(max_messages=max_messages, visibility_timeout_seconds=visibility)
        return await self.dequeue(DequeueCommand(queue.id, options))

    async def receive_one(self, queue: Queue, *, visibility: int | None = None) -> DeliveredMessage:
        delivered = await self.receive(queue, visibility=visibility)
        assert len(delivered) == 1, delivered
        return delivered[0]

    async def ack(self, queue: Queue, *deliveries: DeliveredMessage) -> int:
        receipts = [Receipt(d.id, d.receipt_handle) for d in deliveries]
        return await self.acknowledge(AcknowledgeCommand(queue.id, receipts))

    def pause(self, queue: Queue) -> None:
        # No pause use case yet: replace the stored queue in the memory repository.
        stored = self.repository._queues[queue.id]
        self.repository._queues[queue.id] = dataclasses.replace(stored, paused=True)

    def dead_letters(self, queue: Queue) -> list:
        return self.repository.dead_letters_of(queue.id)

    def stored(self, queue: Queue) -> int:
        return self.repository.message_count(queue.id)


@pytest.fixture
def world() -> World:
    return World()


# -- create -------------------------------------------------------------------


async def test_a_new_queue_takes_the_default_settings_and_is_not_paused(world: World) -> None:
    queue = await world.queue("orders")
    assert queue.name == "orders"
    assert queue.settings == QueueSettings(
        visibility_timeout_seconds=30, max_delivery_attempts=5, default_message_ttl_seconds=604_800
    )
    assert queue.paused is False
    assert queue.id.version == 7
    assert queue.created_at == queue.updated_at == world.clock.now()
    assert await world.repository.get_queue(queue.id) == queue


async def test_a_new_queue_keeps_the_settings_it_was_given(world: World) -> None:
    queue = await world.queue(
        "orders",
        visibility_timeout_seconds=5,
        max_delivery_attempts=2,
        default_message_ttl_seconds=60,
    )
    assert queue.settings == QueueSettings(5, 2, 60)


async def test_a_second_queue_with_the_same_name_is_queue_already_exists(world: World) -> None:
    first = await world.queue("orders")
    with pytest.raises(QueueAlreadyExists) as raised:
        await world.queue("orders", max_delivery_attempts=1)
    assert raised.value.code == "queue_already_exists"
    assert (await world.repository.get_queue(first.id)) == first


async def test_an_invalid_name_or_setting_creates_nothing(world: World) -> None:
    with pytest.raises(InvalidInput) as raised:
        await world.queue("Orders")
    assert raised.value.code == "invalid_queue_name"
    with pytest.raises(InvalidInput) as raised:
        await world.queue("orders", max_delivery_attempts=0)
    assert raised.value.code == "invalid_max_delivery_attempts"
    assert world.repository._queues == {}


# -- update -------------------------------------------------------------------


async def test_an_update_changes_only_the_given_settings(world: World) -> None:
    queue = await world.queue("orders", visibility_timeout_seconds=10)
    world.clock.advance(5)
    updated = await world.update_queue(UpdateQueueCommand(queue.id, max_delivery_attempts=9))
    assert updated.settings == QueueSettings(10, 9, 604_800)
    assert updated.name == "orders"
    assert updated.created_at == queue.created_at
    assert updated.updated_at == world.clock.now()
    assert await world.repository.get_queue(queue.id) == updated


async def test_updating_an_unknown_queue_is_queue_not_found(world: World) -> None:
    with pytest.raises(QueueNotFound) as raised:
        await world.update_queue(UpdateQueueCommand(uuid.uuid4(), max_delivery_attempts=2))
    assert raised.value.code == "queue_not_found"


async def test_an_update_without_settings_is_empty_queue_update(world: World) -> None:
    queue = await world.queue()
    with pytest.raises(InvalidInput) as raised:
        await world.update_queue(UpdateQueueCommand(queue.id))
    assert raised.value.code == "empty_queue_update"


async def test_an_empty_update_of_an_unknown_queue_is_still_empty_queue_update(
    world: World,
) -> None:
    with pytest.raises(InvalidInput) as raised:
        await world.update_queue(UpdateQueueCommand(uuid.uuid4()))
    assert raised.value.code == "empty_queue_update"


async def test_an_out_of_range_update_is_refused_with_the_setting_code(world: World) -> None:
    queue = await world.queue()
    with pytest.raises(InvalidInput) as raised:
        await world.update_queue(UpdateQueueCommand(queue.id, visibility_timeout_seconds=0))
    assert raised.value.code == "invalid_visibility_timeout"
    assert (await world.repository.get_queue(queue.id)) == queue


async def test_a_new_visibility_timeout_applies_to_the_next_delivery(world: World) -> None:
    queue = await world.queue(visibility_timeout_seconds=30)
    await world.send(queue)
    await world.update_queue(UpdateQueueCommand(queue.id, visibility_timeout_seconds=5))
    first = await world.receive_one(queue)
    world.clock.advance(6)
    again = await world.receive_one(queue)
    assert again.id == first.id


async def test_lowering_max_delivery_attempts_dead_letters_a_message_that_already_used_them(
    world: World,
) -> None:
    queue = await world.queue(visibility_timeout_seconds=10, max_delivery_attempts=5)
    await world.send(queue)
    for _ in range(2):
        await world.receive_one(queue)
        world.clock.advance(11)
    await world.update_queue(UpdateQueueCommand(queue.id, max_delivery_attempts=2))
    assert await world.receive(queue) == []
    assert [d.delivery_attempts for d in world.dead_letters(queue)] == [2]


# -- enqueue ------------------------------------------------------------------


async def test_enqueue_to_an_unknown_queue_is_queue_not_found(world: World) -> None:
    with pytest.raises(QueueNotFound) as raised:
        await world.enqueue(EnqueueCommand(uuid.uuid4(), [NewMessage.parse("x", "LOW")]))
    assert raised.value.code == "queue_not_found"


async def test_enqueue_returns_time_ordered_ids_in_request_order(world: World) -> None:
    queue = await world.queue()
    ids = await world.enqueue(
        EnqueueCommand(queue.id, [NewMessage.parse(str(i), "LOW") for i in range(5)])
    )
    assert len(ids) == 5
    assert ids == sorted(ids)
    assert all(i.version == 7 for i in ids)
    delivered = await world.receive(queue, max_messages=5)
    assert [d.id for d in delivered] == ids
    assert [d.payload for d in delivered] == ["0", "1", "2", "3", "4"]


async def test_a_message_without_ttl_lives_as_long_as_the_queue_default(world: World) -> None:
    queue = await world.queue(default_message_ttl_seconds=60, visibility_timeout_seconds=1)
    await world.send(queue)
    world.clock.advance(59)
    first = await world.receive_one(queue)
    world.clock.advance(2)  # lease over, and the lifetime too (61 s)
    assert await world.receive(queue) == []
    assert first.delivery_attempts == 1


class CountingDetails:
    """QueueDetails that counts its lookups."""

    def __init__(self, inner: QueueDetails) -> None:
        self.inner = inner
        self.lookups = 0

    async def details_of(self, queue_id: UUID) -> Queue:
        self.lookups += 1
        return await self.inner.details_of(queue_id)

    async def remember(self, queue: Queue) -> None:
        await self.inner.remember(queue)

    async def forget(self, queue_id: UUID) -> None:
        await self.inner.forget(queue_id)


async def test_only_a_delay_without_its_own_lifetime_needs_the_queue_settings(
    world: World,
) -> None:
    queue = await world.queue(default_message_ttl_seconds=60)
    use_cases = world.container.use_cases
    details = CountingDetails(world.container.lookups.details())
    world.container.lookups.details.override(providers.Object(details))
    use_cases.messages.reset()  # a new service, built over the counting details
    enqueue = use_cases.messages().enqueue
    plain = [NewMessage.parse("a", "LOW"), NewMessage.parse("b", "LOW", 30, 10)]
    await enqueue(EnqueueCommand(queue.id, plain, batch=True))
    assert details.lookups == 0  # the name (for the metrics) is all it looked up
    await enqueue(EnqueueCommand(queue.id, [NewMessage.parse("c", "LOW", delay_seconds=10)]))
    assert details.lookups == 1
    with pytest.raises(InvalidInput) as raised:  # still checked before anything is stored
        await enqueue(EnqueueCommand(queue.id, [NewMessage.parse("d", "LOW", 30, 30)]))
    assert raised.value.code == "invalid_delay"
    assert world.events.counts == {("enqueued", "orders", "LOW"): 3}


async def test_the_default_lifetime_is_the_queues_at_the_time_of_storing(world: World) -> None:
    queue = await world.queue(default_message_ttl_seconds=60, visibility_timeout_seconds=1)
    await world.send(queue, "before")  # warms every cache
    await world.update_queue(UpdateQueueCommand(queue.id, default_message_ttl_seconds=10))
    await world.send(queue, "after")
    world.clock.advance(11)
    assert [d.payload for d in await world.receive(queue, max_messages=10)] == ["before"]


async def test_a_message_ttl_overrides_the_queue_default(world: World) -> None:
    queue = await world.queue(default_message_ttl_seconds=60)
    short = await world.send(queue, "short", ttl_seconds=5)
    long = await world.send(queue, "long", ttl_seconds=600)
    world.clock.advance(6)
    assert [d.id for d in await world.receive(queue, max_messages=10)] == [long]
    assert short != long


async def test_a_delayed_message_is_invisible_until_the_clock_passes_the_delay(
    world: World,
) -> None:
    queue = await world.queue()
    delayed = await world.send(queue, "later", priority="HIGH", delay_seconds=10)
    now = await world.send(queue, "now", priority="LOW")
    assert [d.id for d in await world.receive(queue, max_messages=10)] == [now]
    world.clock.advance(9)
    assert await world.receive(queue, max_messages=10) == []
    world.clock.advance(1)
    assert [d.id for d in await world.receive(queue, max_messages=10)] == [delayed]


async def test_a_delay_not_shorter_than_the_queue_default_lifetime_is_invalid_delay(
    world: World,
) -> None:
    queue = await world.queue(default_message_ttl_seconds=60)
    with pytest.raises(InvalidInput) as raised:
        await world.send(queue, delay_seconds=60)
    assert raised.value.code == "invalid_delay"
    await world.send(queue, delay_seconds=59)
    assert world.stored(queue) == 1


async def test_a_delay_not_shorter_than_the_message_ttl_is_invalid_delay(world: World) -> None:
    queue = await world.queue(default_message_ttl_seconds=3600)
    with pytest.raises(InvalidInput) as raised:
        await world.send(queue, ttl_seconds=30, delay_seconds=30)
    assert raised.value.code == "invalid_delay"
    assert world.stored(queue) == 0


async def test_a_batch_is_all_or_nothing_and_names_the_bad_entry(world: World) -> None:
    queue = await world.queue(default_message_ttl_seconds=100)
    batch = [
        NewMessage.parse("ok", "HIGH"),
        NewMessage.parse("ok", "LOW", delay_seconds=99),
        NewMessage.parse("bad", "LOW", delay_seconds=100),
        NewMessage.parse("ok", "LOW"),
    ]
    with pytest.raises(InvalidInput) as raised:
        await world.enqueue(EnqueueCommand(queue.id, batch, batch=True))
    assert raised.value.code == "invalid_delay"
    assert raised.value.detail.startswith("messages[2]")
    assert world.stored(queue) == 0
    assert world.events.counts == {}


async def test_a_single_message_error_has_no_index(world: World) -> None:
    queue = await world.queue(default_message_ttl_seconds=100)
    with pytest.raises(InvalidInput) as raised:
        await world.send(queue, delay_seconds=100)
    assert "messages[" not in raised.value.detail


async def test_enqueue_counts_one_event_per_message_by_priority(world: World) -> None:
    queue = await world.queue("orders")
    await world.enqueue(
        EnqueueCommand(
            queue.id,
            [
                NewMessage.parse("a", "HIGH"),
                NewMessage.parse("b", "LOW"),
                NewMessage.parse("c", "HIGH"),
            ],
        )
    )
    await world.send(queue, priority="MEDIUM")
    assert world.events.counts == {
        ("enqueued", "orders", "HIGH"): 2,
        ("enqueued", "orders", "LOW"): 1,
        ("enqueued", "orders", "MEDIUM"): 1,
    }


async def test_enqueue_works_while_the_queue_is_paused(world: World) -> None:
    queue = await world.queue()
    world.pause(queue)
    await world.send(queue)
    assert world.stored(queue) == 1


# -- dequeue ------------------------------------------------------------------


async def test_dequeue_from_an_unknown_queue_is_queue_not_found(world: World) -> None:
    with pytest.raises(QueueNotFound):
        await world.dequeue(DequeueCommand(uuid.uuid4()))


async def test_an_empty_queue_delivers_nothing(world: World) -> None:
    queue = await world.queue()
    assert await world.receive(queue) == []
    assert await world.receive(queue, max_messages=10) == []


async def test_highest_priority_first_then_fifo_within_a_priority(world: World) -> None:
    queue = await world.queue()
    for payload, priority in [
        ("low-1", "LOW"),
        ("high-1", "HIGH"),
        ("medium-1", "MEDIUM"),
        ("low-2", "LOW"),
        ("high-2", "HIGH"),
        ("medium-2", "MEDIUM"),
    ]:
        world.clock.advance(1)
        await world.send(queue, payload, priority)
    order = [(await world.receive_one(queue)).payload for _ in range(6)]
    assert order == ["high-1", "high-2", "medium-1", "medium-2", "low-1", "low-2"]


async def test_a_delivery_carries_the_message_and_its_first_attempt(world: World) -> None:
    queue = await world.queue()
    enqueued_at = world.clock.now()
    message_id = await world.send(queue, '{"order": 7}', "HIGH")
    world.clock.advance(3)
    delivered = await world.receive_one(queue)
    assert delivered.id == message_id
    assert delivered.payload == '{"order": 7}'
    assert delivered.priority is Priority.HIGH
    assert delivered.delivery_attempts == 1
    assert delivered.enqueued_at == enqueued_at
    assert uuid.UUID(delivered.receipt_handle)


async def test_an_expired_message_is_never_delivered(world: World) -> None:
    queue = await world.queue()
    await world.send(queue, "old", "HIGH", ttl_seconds=10)
    fresh = await world.send(queue, "fresh", "LOW", ttl_seconds=100)
    world.clock.advance(10)  # exactly at expiry: expired
    assert [d.id for d in await world.receive(queue, max_messages=10)] == [fresh]


async def test_a_delivered_message_is_hidden_for_the_visibility_timeout_then_redelivered(
    world: World,
) -> None:
    queue = await world.queue(visibility_timeout_seconds=30)
    await world.send(queue)
    first = await world.receive_one(queue)
    world.clock.advance(29)
    assert await world.receive(queue) == []
    world.clock.advance(1)
    again = await world.receive_one(queue)
    assert again.id == first.id
    assert again.delivery_attempts == 2
    assert again.receipt_handle != first.receipt_handle
    assert again.enqueued_at == first.enqueued_at


async def test_the_request_can_override_the_visibility_timeout(world: World) -> None:
    queue = await world.queue(visibility_timeout_seconds=300)
    await world.send(queue)
    first = await world.receive_one(queue, visibility=5)
    world.clock.advance(5)
    assert (await world.receive_one(queue, visibility=600)).id == first.id
    world.clock.advance(300)  # the queue default would have ended by now; the override not
    assert await world.receive(queue) == []


async def test_max_messages_bounds_one_dequeue(world: World) -> None:
    queue = await world.queue()
    await world.enqueue(
        EnqueueCommand(queue.id, [NewMessage.parse(str(i), "LOW") for i in range(7)])
    )
    assert [d.payload for d in await world.receive(queue, max_messages=3)] == ["0", "1", "2"]
    assert [d.payload for d in await world.receive(queue, max_messages=3)] == ["3", "4", "5"]
    assert [d.payload for d in await world.receive(queue, max_messages=3)] == ["6"]
    assert await world.receive(queue, max_messages=3) == []


async def test_a_paused_queue_delivers_nothing(world: World) -> None:
    queue = await world.queue()
    await world.send(queue)
    world.pause(queue)
    assert await world.receive(queue) == []
    assert await world.receive(queue, max_messages=10) == []
    assert world.stored(queue) == 1


async def test_acknowledge_still_works_on_a_paused_queue(world: World) -> None:
    queue = await world.queue()
    await world.send(queue)
    delivered = await world.receive_one(queue)
    world.pause(queue)
    assert await world.ack(queue, delivered) == 1
    assert world.stored(queue) == 0


async def test_a_message_is_retried_then_dead_lettered_after_max_delivery_attempts(
    world: World,
) -> None:
    queue = await world.queue("orders", visibility_timeout_seconds=10, max_delivery_attempts=3)
    message_id = await world.send(queue, "poison", "HIGH")
    enqueued_at = world.clock.now()
    attempts = []
    for _ in range(3):
        delivered = await world.receive_one(queue)
        attempts.append(delivered.delivery_attempts)
        last_delivered_at = world.clock.now()
        world.clock.advance(10)
    assert attempts == [1, 2, 3]
    assert world.events.counts["dead_lettered", "orders"] == 0

    assert await world.receive(queue) == []

    (dead,) = world.dead_letters(queue)
    assert dead.id == message_id
    assert dead.queue_id == queue.id
    assert dead.payload == "poison"
    assert dead.priority is Priority.HIGH
    assert dead.delivery_attempts == 3
    assert dead.enqueued_at == enqueued_at
    assert dead.last_delivered_at == last_delivered_at
    assert dead.dead_lettered_at == world.clock.now()
    assert (
        dead.reason == REASON_MAX_DELIVERY_ATTEMPTS_EXHAUSTED == "MAX_DELIVERY_ATTEMPTS_EXHAUSTED"
    )
    assert world.events.counts["dead_lettered", "orders"] == 1
    assert world.stored(queue) == 0


async def test_an_exhausted_message_with_an_active_lease_is_left_alone(world: World) -> None:
    queue = await world.queue(visibility_timeout_seconds=10, max_delivery_attempts=1)
    await world.send(queue)
    delivered = await world.receive_one(queue)
    world.clock.advance(9)
    assert await world.receive(queue) == []
    assert world.dead_letters(queue) == []
    assert await world.ack(queue, delivered) == 1


async def test_an_exhausted_message_never_hides_a_deliverable_one(world: World) -> None:
    queue = await world.queue("orders", visibility_timeout_seconds=10, max_delivery_attempts=1)
    await world.send(queue, "poison", "HIGH")
    await world.receive_one(queue)
    world.clock.advance(10)
    good = await world.send(queue, "good", "LOW")

    delivered = await world.receive_one(queue)

    assert delivered.id == good
    assert [d.payload for d in world.dead_letters(queue)] == ["poison"]
    assert world.events.counts["dead_lettered", "orders"] == 1


async def test_a_retry_behind_more_exhausted_messages_than_one_dequeue_moves_is_delivered(
    world: World,
) -> None:
    queue = await world.queue("orders", visibility_timeout_seconds=10, max_delivery_attempts=2)
    poison = DEAD_LETTER_BATCH_SIZE + 5
    for start in range(0, poison, 100):
        batch = [NewMessage.parse("poison", "HIGH") for _ in range(start, min(start + 100, poison))]
        await world.enqueue(EnqueueCommand(queue.id, batch))
    for attempt in (1, 2):  # every poison message uses both of its attempts
        for _ in range(0, poison, 100):
            await world.receive(queue, max_messages=100)
        world.clock.advance(10 if attempt == 1 else 5)
    retry = await world.send(queue, "retry", "LOW")
    await world.receive_one(queue)  # its first attempt; its lease ends after theirs
    world.clock.advance(10)  # every lease has ended

    delivered = await world.receive_one(queue)

    assert delivered.id == retry
    assert delivered.delivery_attempts == 2
    assert world.events.counts["dead_lettered", "orders"] == DEAD_LETTER_BATCH_SIZE


async def test_an_expired_exhausted_message_is_left_to_the_cleaner_not_dead_lettered(
    world: World,
) -> None:
    queue = await world.queue("orders", visibility_timeout_seconds=30, max_delivery_attempts=1)
    await world.send(queue, ttl_seconds=10)
    await world.receive_one(queue)
    world.clock.advance(31)  # lease over and lifetime over: expiry wins
    assert await world.receive(queue) == []
    assert world.dead_letters(queue) == []
    assert world.events.counts["dead_lettered", "orders"] == 0
    assert world.stored(queue) == 1  # the expired-message cleaner's to delete


async def test_dequeue_moves_a_bounded_batch_of_exhausted_messages_at_a_time(
    world: World,
) -> None:
    queue = await world.queue(visibility_timeout_seconds=10, max_delivery_attempts=1)
    await world.enqueue(
        EnqueueCommand(queue.id, [NewMessage.parse(str(i), "LOW") for i in range(5)])
    )
    await world.receive(queue, max_messages=5)
    world.clock.advance(10)

    def dequeue_directly() -> object:
        return world.repository.dequeue(
            queue.id,
            limit=1,
            visibility_timeout_seconds=10,
            dead_letter_batch_size=2,
        )

    moved = [(await dequeue_directly()).dead_lettered for _ in range(4)]  # type: ignore[attr-defined]
    assert moved == [2, 2, 1, 0]
    assert len(world.dead_letters(queue)) == 5


async def test_the_use_case_dead_letters_at_most_its_batch_size_per_dequeue(
    world: World,
) -> None:
    count = DEAD_LETTER_BATCH_SIZE + 5
    queue = await world.queue("orders", visibility_timeout_seconds=10, max_delivery_attempts=1)
    for start in range(0, count, 100):
        batch = [NewMessage.parse(str(i), "LOW") for i in range(start, min(start + 100, count))]
        await world.enqueue(EnqueueCommand(queue.id, batch))
    for _ in range(2):
        await world.receive(queue, max_messages=100)
    world.clock.advance(10)
    await world.receive(queue)
    assert world.events.counts["dead_lettered", "orders"] == DEAD_LETTER_BATCH_SIZE
    await world.receive(queue)
    assert world.events.counts["dead_lettered", "orders"] == count


# -- acknowledge --------------------------------------------------------------


async def test_acknowledging_the_current_delivery_removes_the_message(world: World) -> None:
    queue = await world.queue("orders", visibility_timeout_seconds=10)
    await world.send(queue)
    delivered = await world.receive_one(queue)
    assert await world.ack(queue, delivered) == 1
    assert world.events.counts["acknowledged", "orders"] == 1
    world.clock.advance(60)
    assert await world.receive(queue) == []
    assert world.stored(queue) == 0


async def test_a_second_acknowledge_is_a_harmless_no_op(world: World) -> None:
    queue = await world.queue("orders")
    await world.send(queue)
    delivered = await world.receive_one(queue)
    assert await world.ack(queue, delivered) == 1
    assert await world.ack(queue, delivered) == 0
    assert world.events.counts["acknowledged", "orders"] == 1


async def test_a_stale_handle_never_removes_the_newer_delivery(world: World) -> None:
    queue = await world.queue("orders", visibility_timeout_seconds=10)
    await world.send(queue)
    old = await world.receive_one(queue)
    world.clock.advance(10)
    new = await world.receive_one(queue)
    assert await world.ack(queue, old) == 0
    assert world.stored(queue) == 1
    assert await world.ack(queue, new) == 1
    assert world.events.counts["acknowledged", "orders"] == 1


async def test_a_handle_whose_lease_elapsed_removes_nothing(world: World) -> None:
    queue = await world.queue("orders", visibility_timeout_seconds=10)
    await world.send(queue)
    delivered = await world.receive_one(queue)
    world.clock.advance(10)
    assert await world.ack(queue, delivered) == 0
    assert (await world.receive_one(queue)).delivery_attempts == 2
    assert world.events.counts["acknowledged", "orders"] == 0


@pytest.mark.parametrize("handle", ["", "junk", "6f1c2a4e-5b7d-4c8e-9f10-1a2b3c4d5e6f", "x" * 500])
async def test_a_junk_handle_removes_nothing(world: World, handle: str) -> None:
    queue = await world.queue("orders")
    await world.send(queue)
    delivered = await world.receive_one(queue)
    removed = await world.acknowledge(AcknowledgeCommand(queue.id, [Receipt(delivered.id, handle)]))
    assert removed == 0
    assert world.stored(queue) == 1


async def test_acknowledge_on_an_unknown_queue_is_queue_not_found(world: World) -> None:
    with pytest.raises(QueueNotFound) as raised:
        await world.acknowledge(
            AcknowledgeCommand(uuid.uuid4(), [Receipt(uuid.uuid4(), str(uuid.uuid4()))])
        )
    assert raised.value.code == "queue_not_found"


async def test_acknowledging_through_another_queue_removes_nothing(world: World) -> None:
    orders = await world.queue("orders")
    billing = await world.queue("billing")
    await world.send(orders)
    delivered = await world.receive_one(orders)
    assert await world.ack(billing, delivered) == 0
    assert await world.ack(orders, delivered) == 1


async def test_a_batch_acknowledge_counts_only_current_deliveries(world: World) -> None:
    queue = await world.queue("orders")
    for i in range(3):
        await world.send(queue, str(i))
    a, b, c = await world.receive(queue, max_messages=3)
    stale = dataclasses.replace(b, receipt_handle=str(uuid.uuid4()))
    assert await world.ack(queue, a, stale, c, a) == 2
    assert world.events.counts["acknowledged", "orders"] == 2
    assert world.stored(queue) == 1
