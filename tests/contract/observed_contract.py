"""The storage contract of consumers (SPEC §3.7) and queue history (SPEC §3.8), mixed
into ``RepositoryContract``: the harness also has ``consumers`` (ConsumerStore and
ConsumerMaintenance), ``history`` (QueueHistoryReader and HistoryMaintenance) and
``now()``, the adapter's current time (PostgreSQL's ``now()``, the memory clock).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Protocol
from uuid import UUID

from retsu.adapters.ids import uuid7
from retsu.application.ports import (
    ConsumerMaintenance,
    ConsumerStore,
    HistoryMaintenance,
    Leadership,
    MessageRepository,
    QueueHistoryReader,
    QueueRepository,
)
from retsu.domain.consumer import (
    CONSUMER_RETENTION_SECONDS,
    ConsumerPosition,
    ConsumerRecord,
    ConsumerSighting,
    SeenBetween,
)
from retsu.domain.history import HISTORY_RETENTION_SECONDS, HistoryPoint, Throughput
from retsu.domain.message import Priority, Receipt
from retsu.domain.queue import Queue


class ObservedHarness(Protocol):
    queues: QueueRepository
    messages: MessageRepository
    leadership: Leadership
    consumers: Any  # ConsumerStore and ConsumerMaintenance
    history: Any  # QueueHistoryReader and HistoryMaintenance

    async def advance(self, seconds: float) -> None: ...

    async def now(self) -> datetime: ...


def _consumers(harness: ObservedHarness) -> Any:
    store: ConsumerStore = harness.consumers
    maintenance: ConsumerMaintenance = harness.consumers
    assert store is maintenance
    return store


def _history(harness: ObservedHarness) -> Any:
    reader: QueueHistoryReader = harness.history
    maintenance: HistoryMaintenance = harness.history
    assert reader is maintenance
    return reader


# Wide enough that every snapshot of a test falls in one bucket.
ONE_BUCKET = 10**9


class ObservedContract:
    """Consumers and history, alike on every adapter."""

    async def _queue(self, harness: ObservedHarness, **settings: int) -> Queue:
        from tests.contract.repository_contract import add, new_queue

        return await add(harness, new_queue(**settings))  # type: ignore[arg-type]

    async def _mine(
        self, harness: ObservedHarness, queue_ids: set[UUID], **filters: Any
    ) -> list[ConsumerRecord]:
        found = await harness.consumers.list_consumers(
            limit=100,
            after=None,
            queue_id=filters.get("queue_id"),
            seen=filters.get("seen", SeenBetween()),
        )
        return [c for c in found if c.queue_id in queue_ids]

    # -- consumers ---------------------------------------------------------------------

    async def test_sightings_merge_per_queue_and_name(self, harness: ObservedHarness) -> None:
        queue = await self._queue(harness)
        t0 = (await harness.now()).replace(microsecond=0) - timedelta(minutes=10)
        store = _consumers(harness)
        await store.record_consumers(
            [
                ConsumerSighting(
                    queue.id, "a", t0 + timedelta(seconds=5), t0 + timedelta(seconds=9), 2
                )
            ]
        )
        await store.record_consumers(
            [
                ConsumerSighting(queue.id, "a", t0, t0 + timedelta(seconds=7), 3),
                ConsumerSighting(queue.id, "b", t0, t0 + timedelta(seconds=1), 0),
            ]
        )
        (a, b) = await self._mine(harness, {queue.id})
        assert (a.name, a.queue_name, a.first_seen_at, a.last_seen_at, a.deliveries) == (
            "a",
            queue.name,
            t0,
            t0 + timedelta(seconds=9),
            5,
        )
        assert (b.name, b.deliveries, b.last_seen_at) == ("b", 0, t0 + timedelta(seconds=1))

    async def test_consumers_list_most_recently_seen_first_a_page_at_a_time(
        self, harness: ObservedHarness
    ) -> None:
        first, second = await self._queue(harness), await self._queue(harness)
        t0 = (await harness.now()).replace(microsecond=0) - timedelta(minutes=1)
        later = t0 + timedelta(seconds=30)
        sightings = [
            ConsumerSighting(first.id, "old", t0, t0, 0),
            ConsumerSighting(first.id, "z-tied", t0, later, 1),
            ConsumerSighting(first.id, "a-tied", t0, later, 1),
            ConsumerSighting(second.id, "a-tied", t0, later, 1),
        ]
        await _consumers(harness).record_consumers(sightings)
        everything = await self._mine(harness, {first.id, second.id})
        keys = [(c.last_seen_at, c.queue_id, c.name) for c in everything]
        # last_seen_at descending, then queue id and name ascending (ids compare as text).
        assert keys == sorted(keys, key=lambda k: (-k[0].timestamp(), str(k[1]), k[2]))
        assert len(keys) == 4 and keys[-1][2] == "old"
        assert [k[2] for k in keys if k[1] == first.id] == ["a-tied", "z-tied", "old"]
        # Keyset pages of one reproduce the whole list.
        paged: list[tuple[datetime, UUID, str]] = []
        after: ConsumerPosition | None = None
        for _ in range(10):
            page = await harness.consumers.list_consumers(
                limit=1, after=after, queue_id=first.id, seen=SeenBetween()
            )
            if not page:
                break
            paged.append((page[0].last_seen_at, page[0].queue_id, page[0].name))
            after = page[0].position
        assert paged == [k for k in keys if k[1] == first.id]

    async def test_the_seen_bounds_filter_in_storage(self, harness: ObservedHarness) -> None:
        queue = await self._queue(harness)
        t0 = (await harness.now()).replace(microsecond=0) - timedelta(hours=1)
        await _consumers(harness).record_consumers(
            [
                ConsumerSighting(queue.id, f"c{i}", t0, t0 + timedelta(seconds=i), 0)
                for i in range(5)
            ]
        )
        since = t0 + timedelta(seconds=1)
        before = t0 + timedelta(seconds=3)
        found = await self._mine(harness, {queue.id}, seen=SeenBetween(since=since, before=before))
        assert [c.name for c in found] == ["c2", "c1"]
        page = await harness.consumers.list_consumers(
            limit=1, after=found[0].position, queue_id=queue.id, seen=SeenBetween(since=since)
        )
        assert [c.name for c in page] == ["c1"]

    async def test_sightings_of_a_missing_queue_are_dropped_and_a_deleted_queue_takes_its_consumers(
        self, harness: ObservedHarness
    ) -> None:
        from tests.contract.repository_contract import audit_of

        queue = await self._queue(harness)
        now = await harness.now()
        missing = uuid7()
        await _consumers(harness).record_consumers(
            [
                ConsumerSighting(missing, "ghost", now, now, 1),
                ConsumerSighting(queue.id, "w", now, now, 1),
            ]
        )
        assert [c.name for c in await self._mine(harness, {queue.id, missing})] == ["w"]
        assert await harness.queues.delete_queue(queue.id, audit_of(queue.id))
        assert await self._mine(harness, {queue.id}) == []

    async def test_consumers_are_counted_per_queue_within_a_health(
        self, harness: ObservedHarness
    ) -> None:
        a, b, c = [await self._queue(harness) for _ in range(3)]
        now = await harness.now()

        def seen(queue: Queue, name: str, seconds_ago: int) -> ConsumerSighting:
            moment = now - timedelta(seconds=seconds_ago)
            return ConsumerSighting(queue.id, name, moment, moment, 1)

        await _consumers(harness).record_consumers(
            [seen(a, "w1", 1), seen(a, "w2", 5), seen(a, "old", 3600), seen(b, "w1", 2)]
        )
        await _consumers(harness).record_consumers([seen(c, "gone", 7200)])
        healthy = SeenBetween(since=now - timedelta(seconds=30))
        counts = await _consumers(harness).count_consumers(seen=healthy)
        assert (counts.get(a.id), counts.get(b.id), counts.get(c.id)) == (2, 1, None)
        everyone = await _consumers(harness).count_consumers(seen=SeenBetween())
        assert (everyone[a.id], everyone[b.id], everyone[c.id]) == (3, 1, 1)
        offline = SeenBetween(before=now - timedelta(seconds=300))
        old = await _consumers(harness).count_consumers(seen=offline)
        assert (old.get(a.id), old.get(b.id), old.get(c.id)) == (1, None, 1)

    async def test_consumers_not_seen_for_24_hours_are_removed(
        self, harness: ObservedHarness
    ) -> None:
        queue = await self._queue(harness)
        now = await harness.now()
        old = now - timedelta(seconds=CONSUMER_RETENTION_SECONDS + 60)
        recent = now - timedelta(seconds=CONSUMER_RETENTION_SECONDS - 3600)
        store = _consumers(harness)
        await store.record_consumers(
            [
                ConsumerSighting(queue.id, "gone", old, old, 1),
                ConsumerSighting(queue.id, "kept", old, recent, 1),
            ]
        )
        for _ in range(100):
            if await store.delete_consumers_not_seen_for(CONSUMER_RETENTION_SECONDS, 100) == 0:
                break
        assert [c.name for c in await self._mine(harness, {queue.id})] == ["kept"]

    # -- history -------------------------------------------------------------------------

    async def _snapshot(self, harness: ObservedHarness) -> None:
        session = await harness.leadership.try_acquire()
        assert session is not None
        try:
            await session.record_history(await session.read_state())
        finally:
            await session.release()
        await harness.advance(1)  # the next snapshot is taken at a later moment

    async def _points(
        self, harness: ObservedHarness, queue_id: UUID, width: int = 1
    ) -> list[HistoryPoint]:
        since = await harness.now() - timedelta(days=1)
        return await _history(harness).read_history(queue_id, since=since, bucket_seconds=width)

    async def test_history_interval_counts_sum_to_what_happened(
        self, harness: ObservedHarness
    ) -> None:
        """A scripted workload with snapshots between its steps, and a leader change: the
        interval counts add up to exactly what happened."""
        from tests.contract.repository_contract import message

        queue = await self._queue(harness, max_delivery_attempts=1)
        messages = harness.messages

        async def take(limit: int, visibility: int = 60) -> list[Any]:
            result = await messages.dequeue(
                queue.id,
                limit=limit,
                visibility_timeout_seconds=visibility,
                dead_letter_batch_size=100,
            )
            return result.messages

        await self._snapshot(harness)  # before anything: zeros
        await messages.enqueue(
            queue.id, [message(str(i), Priority.MEDIUM, ttl=3600) for i in range(5)]
        )
        await messages.enqueue(queue.id, [message("short", Priority.LOW, ttl=60)])
        await self._snapshot(harness)
        taken = await take(3, visibility=4)  # three MEDIUM ones
        await self._snapshot(harness)
        await messages.acknowledge(queue.id, [Receipt(taken[0].id, taken[0].receipt_handle)])
        await harness.advance(10)  # the other two leases end; one attempt only
        await self._snapshot(harness)  # (a new leader session each time)
        await take(1, visibility=600)  # dead-letters the two exhausted, delivers a MEDIUM
        await harness.advance(120)  # "short" expires
        for _ in range(100):
            if not await harness.maintenance.delete_expired_messages(100):  # type: ignore[attr-defined]
                break
        await self._snapshot(harness)
        await self._snapshot(harness)  # nothing happened since: zeros

        points = await self._points(harness, queue.id)
        assert len(points) == 6, points
        total = Throughput()
        for point in points:
            total = total + point.counts
        assert total == Throughput(
            enqueued=6, delivered=4, acknowledged=1, dead_lettered=2, expired=1
        ), total
        assert points[0].counts == Throughput()
        assert points[1].counts == Throughput(enqueued=6)
        assert points[2].counts == Throughput(delivered=3)
        assert points[-1].counts == Throughput()
        last = points[-1]
        assert (last.ready, last.in_flight, last.delayed, last.dead_letters) == (1, 1, 0, 2)
        assert [p.at for p in points] == sorted(p.at for p in points)
        # Summed into one bucket: the counts add up, the depth is the latest snapshot's.
        (bucket,) = await self._points(harness, queue.id, width=ONE_BUCKET)
        assert bucket.counts == total
        assert (bucket.at, bucket.ready, bucket.dead_letters) == (last.at, last.ready, 2)

    async def test_histories_of_several_queues_read_like_each_alone(
        self, harness: ObservedHarness
    ) -> None:
        from tests.contract.repository_contract import message

        a, b, quiet = [await self._queue(harness) for _ in range(3)]
        await harness.messages.enqueue(a.id, [message("a1")])
        await self._snapshot(harness)
        await harness.messages.enqueue(a.id, [message("a2"), message("a3")])
        await harness.messages.enqueue(b.id, [message("b1")])
        await self._snapshot(harness)
        since = await harness.now() - timedelta(days=1)
        missing = uuid7()
        for width in (1, ONE_BUCKET):
            histories = await _history(harness).read_histories(
                [b.id, missing, a.id, quiet.id], since=since, bucket_seconds=width
            )
            assert set(histories) == {a.id, b.id, missing, quiet.id}
            for queue_id in (a.id, b.id, quiet.id):
                alone = await _history(harness).read_history(
                    queue_id, since=since, bucket_seconds=width
                )
                assert histories[queue_id] == alone
            assert histories[missing] == []
        assert [p.counts.enqueued for p in histories[a.id]] == [3]
        assert await _history(harness).read_histories([], since=since, bucket_seconds=1) == {}

    async def test_history_reads_only_the_window_and_snapshots_go_after_7_days(
        self, harness: ObservedHarness
    ) -> None:
        from tests.contract.repository_contract import message

        queue = await self._queue(harness)
        await harness.messages.enqueue(queue.id, [message("a")])
        await self._snapshot(harness)
        await harness.advance(HISTORY_RETENTION_SECONDS + 60)
        await harness.messages.enqueue(queue.id, [message("b")])
        await self._snapshot(harness)
        points = await self._points(harness, queue.id)
        assert [p.counts.enqueued for p in points] == [1]  # the old one is outside the window
        history = _history(harness)
        for _ in range(100):
            if await history.delete_history_older_than(HISTORY_RETENTION_SECONDS, 100) == 0:
                break
        since = await harness.now() - timedelta(days=30)
        left = await history.read_history(queue.id, since=since, bucket_seconds=1)
        assert [p.counts.enqueued for p in left] == [1]
        # The next snapshot still counts from the last one kept.
        await harness.messages.enqueue(queue.id, [message("c"), message("d")])
        await self._snapshot(harness)
        assert [p.counts.enqueued for p in await self._points(harness, queue.id)] == [1, 2]
