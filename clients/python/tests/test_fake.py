"""What the fake offers beyond the contract: a clock you move, the cleaner on demand, and
unit-testing a handler with the real Worker and no server."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from retsu_client import Client, Message, RetryLater, Worker
from retsu_client.testing import FakeRetsu, FakeToken, ManualClock


def test_time_on_the_fake_moves_only_when_told() -> None:
    fake = FakeRetsu(clock=ManualClock())
    with Client(transport=fake.transport()) as retsu:
        retsu.create_queue("jobs", visibility_timeout_seconds=30)
        retsu.enqueue("jobs", "x", delay_seconds=60)

        assert retsu.dequeue("jobs") is None
        fake.clock.advance(60)
        message = retsu.dequeue("jobs")
        assert message is not None
        fake.clock.advance(29)
        assert retsu.dequeue("jobs") is None
        fake.clock.advance(1)
        again = retsu.dequeue("jobs")
        assert again is not None and again.delivery_attempts == 2


def test_expired_messages_are_never_delivered_and_the_cleaner_counts_them() -> None:
    fake = FakeRetsu(clock=ManualClock(), history_interval_seconds=60)
    with fake.client() as retsu:
        retsu.create_queue("short")
        retsu.enqueue("short", "brief", ttl_seconds=10)
        fake.clock.advance(10)

        assert retsu.dequeue("short") is None
        assert retsu.get_queue("short").stats.ready == 0
        assert fake.clean_expired() == 1
        fake.clock.advance(60)
        (point,) = retsu.queue_history("short").points
        assert (point.enqueued, point.expired) == (1, 1)


def test_idempotency_keys_are_forgotten_after_24_hours() -> None:
    fake = FakeRetsu(clock=ManualClock())
    with fake.client() as retsu:
        retsu.create_queue("orders")
        first = retsu.enqueue("orders", "x", idempotency_key="k")
        fake.clock.advance(24 * 3600)

        second = retsu.enqueue("orders", "x", idempotency_key="k")

    assert second.id != first.id and second.replayed is False


def test_a_long_poll_ends_when_the_clock_passes_its_deadline_or_a_delay() -> None:
    fake = FakeRetsu(clock=ManualClock())
    with fake.client() as retsu:
        retsu.create_queue("jobs")
        started = time.monotonic()
        threading.Timer(0.2, fake.clock.advance, [20]).start()
        assert retsu.dequeue("jobs", wait_seconds=20) is None  # not 20 real seconds
        assert time.monotonic() - started < 5

        retsu.enqueue("jobs", "later", delay_seconds=60)
        threading.Timer(0.2, fake.clock.advance, [60]).start()
        message = retsu.dequeue("jobs", wait_seconds=20)  # the move made it ready
        assert message is not None and message.payload == "later"
        assert time.monotonic() - started < 10


def test_a_closed_fake_answers_no_more() -> None:
    with FakeRetsu() as fake:
        retsu = fake.client()
        retsu.create_queue("jobs")
    with retsu, pytest.raises(RuntimeError, match="this FakeRetsu is closed"):
        retsu.list_queues()


def test_the_fake_refuses_unknown_token_scopes() -> None:
    with pytest.raises(ValueError):
        FakeRetsu(tokens=[FakeToken("x", "s", ["everything"])])


async def test_a_handler_is_unit_tested_with_the_real_worker_and_no_server() -> None:
    fake = FakeRetsu()
    handled: list[dict[str, object]] = []
    both = asyncio.Event()

    async def send_email(message: Message) -> None:
        order = message.json()
        if order["to"] == "later@example.com" and message.delivery_attempts == 1:
            raise RetryLater(1)
        handled.append(order)
        if len(handled) == 2:
            both.set()

    with fake.client() as retsu:
        retsu.create_queue("emails")
        retsu.enqueue_json("emails", {"to": "ada@example.com"})
        retsu.enqueue_json("emails", {"to": "later@example.com"})

    async with fake.async_client() as client:
        worker = Worker(client, "emails", send_email, wait_seconds=1)
        task = asyncio.create_task(worker.run())
        await asyncio.wait_for(both.wait(), 10)
        worker.stop()
        await task

    assert [h["to"] for h in handled] == ["ada@example.com", "later@example.com"]


def test_the_fakes_history_comes_from_the_servers_collector_on_its_clock() -> None:
    # SPEC §3.8 as the server answers it (the fake runs the server's collector and
    # history reader): buckets at least one snapshot interval wide and wide enough for at
    # most 360 points, aligned to the Unix epoch; counts summed, the depth and time of the
    # bucket's latest snapshot.
    fake = FakeRetsu(clock=ManualClock(), history_interval_seconds=120)
    with fake.client() as retsu:
        retsu.create_queue("busy")
        fake.clock.advance(100)
        for _ in range(24 * 30):  # a day of 2-minute snapshots, one message in each
            retsu.enqueue("busy", "x")
            fake.clock.advance(120)

        hour = retsu.queue_history("busy")
        day = retsu.queue_history("busy", minutes=1440)

    # A snapshot is taken at the first request once the interval has passed on the fake's
    # clock: here at +100 s, +220 s, … from its start (2026-01-01, a multiple of 240 s
    # since the epoch), so a full 240-s bucket holds two, the latest at +220 s. An hour
    # holds 31 snapshots: the window includes both ends.
    assert hour.interval_seconds == 120 and len(hour.points) == 31
    assert day.interval_seconds == 240 and len(day.points) == 360
    assert all(p.enqueued == 2 for p in day.points[:-1])
    assert day.points[-1].ready == 24 * 30  # the latest snapshot's depth
    assert [p.at for p in day.points] == sorted(p.at for p in day.points)
    assert all(p.at.timestamp() % 240 == 220 for p in day.points[:-1])
    assert sum(p.enqueued for p in day.points) < 24 * 30  # the partial oldest bucket left out
