"""Concurrent dequeues, acknowledges and enqueues on a real PostgreSQL, at repository level."""

from __future__ import annotations

import asyncio
import random
from collections import Counter, defaultdict
from collections.abc import AsyncIterator

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from retsu.adapters.postgres.engine import create_engine
from retsu.domain.message import DeliveredMessage, Priority
from tests.contract.repository_contract import Scenario, add, message, new_queue
from tests.integration.test_postgres_repository_contract import PostgresHarness

pytestmark = pytest.mark.integration

CONNECTIONS = 30


@pytest.fixture(scope="module")
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(database_url, max_connections=CONNECTIONS)
    yield engine
    await engine.dispose()


@pytest.fixture
async def q(engine: AsyncEngine) -> Scenario:
    harness = PostgresHarness(engine)
    return Scenario(harness, await add(harness, new_queue()))


async def test_one_message_is_delivered_exactly_once_to_25_concurrent_dequeues(
    q: Scenario,
) -> None:
    for round_ in range(5):
        (message_id,) = await q.send(message(f"only-{round_}"))
        results = await asyncio.gather(*(q.take_messages(1) for _ in range(25)))
        delivered = [m for result in results for m in result]
        assert [m.id for m in delivered] == [message_id]
        assert await q.ack(delivered[0]) == 1


async def test_25_concurrent_batch_dequeues_never_share_a_delivery(q: Scenario) -> None:
    await q.send(*(message(str(i), Priority(1 + i % 3)) for i in range(100)))
    results = await asyncio.gather(*(q.take_messages(10) for _ in range(25)))
    ids = [m.id for result in results for m in result]
    assert len(ids) == 100
    assert len(set(ids)) == 100
    for result in results:  # each dequeue's own messages come back in delivery order
        keys = [(-m.priority, int(m.payload)) for m in result]
        assert keys == sorted(keys)


async def test_eight_consumers_drain_500_messages_each_delivered_exactly_once(
    q: Scenario,
) -> None:
    total = 500
    sent: list = []
    for start in range(0, total, 100):
        sent += await q.send(
            *(message(str(i), Priority(1 + i % 3)) for i in range(start, start + 100))
        )
    received: list[DeliveredMessage] = []
    acknowledged = 0
    rng = random.Random(7)

    async def consumer() -> None:
        nonlocal acknowledged
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while len(received) < total and loop.time() < deadline:
            batch = await q.take_messages(rng.randint(1, 10), visibility=60)
            if not batch:
                await asyncio.sleep(0.002)  # others hold the rest of the rows right now
                continue
            received.extend(batch)
            removed = await q.ack(*batch)  # not `+= await`: that would read the total early
            acknowledged += removed

    await asyncio.gather(*(consumer() for _ in range(8)))

    counts = Counter(m.id for m in received)
    assert [i for i, n in counts.items() if n > 1] == []  # no duplicates
    assert set(counts) == set(sent)  # none lost
    assert all(m.delivery_attempts == 1 for m in received)
    assert acknowledged == total
    assert await q.stored() == 0
    assert await q.dead_letter_records() == []


async def test_a_stale_handle_racing_a_redelivery_never_removes_the_newer_delivery(
    q: Scenario, engine: AsyncEngine
) -> None:
    count = 40
    await q.send(*(message(str(i)) for i in range(count)))
    first = {m.id: m for m in await q.take_messages(count, visibility=60)}
    assert len(first) == count
    # Every lease now ends 150 ms from now: acknowledges with the old handles race the
    # dequeues that will redeliver the same messages once the leases end.
    async with engine.begin() as connection:
        await connection.execute(
            sa.text(
                "UPDATE queue_message SET available_after = clock_timestamp() + "
                "interval '150 milliseconds' WHERE queue_id = :queue_id"
            ),
            {"queue_id": q.id},
        )

    old_ack_removed: dict = {}
    redelivered: dict = defaultdict(list)
    rng = random.Random(11)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 1.0

    async def late_acknowledger(delivery: DeliveredMessage) -> None:
        await asyncio.sleep(rng.uniform(0.0, 0.3))
        old_ack_removed[delivery.id] = await q.ack(delivery)

    async def redeliverer() -> None:
        while loop.time() < deadline:
            for m in await q.take_messages(5, visibility=60):
                redelivered[m.id].append(m)
            await asyncio.sleep(0.005)

    await asyncio.gather(
        *(late_acknowledger(d) for d in first.values()),
        *(redeliverer() for _ in range(4)),
    )

    for message_id, removed in old_ack_removed.items():
        again = redelivered.get(message_id, [])
        assert len(again) <= 1
        if removed:
            assert again == [], "a message acknowledged by its old handle was redelivered"
        else:
            assert len(again) == 1, "a message neither acknowledged nor redelivered"
            assert again[0].delivery_attempts == 2
            # The old handle lost; the newer delivery is intact and still acknowledgeable.
            assert await q.ack(first[message_id]) == 0
            assert await q.ack(again[0]) == 1
    assert set(old_ack_removed) == set(first)
    assert await q.stored() == 0
    # The race really happened: some old handles won, some redeliveries won.
    assert 0 < sum(old_ack_removed.values()) < count


async def test_concurrent_producers_keep_their_own_fifo_order(q: Scenario) -> None:
    producers, per_producer = 6, 30

    async def producer(p: int) -> None:
        for i in range(0, per_producer, 3):
            if i % 2:
                await q.send(*(message(f"{p}:{i + k}") for k in range(3)))
            else:
                for k in range(3):
                    await q.send(message(f"{p}:{i + k}"))

    await asyncio.gather(*(producer(p) for p in range(producers)))

    delivered: list[str] = []
    while batch := await q.take_payloads(100):
        delivered += batch
    assert len(delivered) == producers * per_producer
    by_producer: dict[int, list[int]] = defaultdict(list)
    for payload in delivered:
        p, i = payload.split(":")
        by_producer[int(p)].append(int(i))
    assert by_producer == {p: list(range(per_producer)) for p in range(producers)}
