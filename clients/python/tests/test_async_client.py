"""AsyncClient: the same calls, awaited (against the fake and a real server)."""

from __future__ import annotations

import pytest

from client_support import Target, unique
from retsu_client import Priority, QueueNotFound, StaleReceiptHandle


async def test_the_async_client_covers_a_message_lifecycle(target: Target) -> None:
    async with target.async_client() as retsu:
        queue = await retsu.create_queue(unique("async"), visibility_timeout_seconds=5)
        ids = await retsu.enqueue_batch(queue.name, ["b", "c"], priority=Priority.LOW)
        first = await retsu.enqueue_json(queue.name, {"a": 1}, priority="HIGH")

        got = await retsu.dequeue_many(queue.name, 3, visibility_timeout_seconds=10)
        assert [m.id for m in got] == [first.id, *ids]
        assert got[0].json() == {"a": 1}
        await retsu.change_visibility(queue.name, got[1], 0)
        with pytest.raises(StaleReceiptHandle):
            await retsu.change_visibility(queue.name, got[1], 5)
        await retsu.acknowledge(queue.name, got[0])
        await retsu.acknowledge_batch(queue.name, [got[2]])

        again = await retsu.dequeue(queue.name)
        assert again is not None and again.delivery_attempts == 2
        await retsu.acknowledge(queue.name, again)
        stats = (await retsu.get_queue(queue.name)).stats
        assert (stats.ready, stats.in_flight) == (0, 0)


async def test_async_iterators_follow_cursors(target: Target) -> None:
    async with target.async_client() as retsu:
        prefix = unique("aiter")
        names = [f"{prefix}-{i}" for i in range(3)]
        for name in names:
            await retsu.create_queue(name)
        await retsu.pause_queue(names[0])

        listed = [q.name async for q in retsu.iter_queues(page_size=1) if q.name in names]
        audit = [e.action async for e in retsu.iter_audit_log(queue=names[0], page_size=1)]
        dead = [d async for d in retsu.iter_dead_letters(names[1], page_size=1)]

    assert listed == names
    assert audit == ["queue.paused", "queue.created"]
    assert dead == []


async def test_async_errors_are_the_same_exceptions(target: Target) -> None:
    async with target.async_client() as retsu:
        with pytest.raises(QueueNotFound):
            await retsu.get_queue(unique("missing"))
        name = unique("gone")
        await retsu.create_queue(name)
        await retsu.delete_queue(name)
        with pytest.raises(QueueNotFound):
            await retsu.purge_queue(name)
