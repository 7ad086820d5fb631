"""Messages (SPEC §3.3) through the client — the same tests against the fake and a real server.

Leases are the smallest the API allows (1 s); on the fake, time jumps instead of passing.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from client_support import Target, unique
from retsu_client import (
    IdempotencyKeyConflict,
    Message,
    NewMessage,
    Priority,
    QueueNotFound,
    StaleReceiptHandle,
)
from retsu_client.errors import (
    InvalidBatchSize,
    InvalidDelay,
    InvalidIdempotencyKey,
    InvalidMaxMessages,
    InvalidPriority,
    InvalidTtl,
    InvalidWaitSeconds,
)


class Order(msgspec.Struct):
    order_id: int
    items: list[str]


def _stats(target: Target, queue: str) -> tuple[int, int, int, int]:
    s = target.client().get_queue(queue).stats
    return s.ready, s.in_flight, s.delayed, s.dead_letters


def test_highest_priority_first_then_enqueue_order(target: Target) -> None:
    retsu = target.client()
    queue = retsu.create_queue(unique()).name
    for payload, priority in [
        ("low-1", "LOW"),
        ("medium-1", "MEDIUM"),
        ("low-2", Priority.LOW),
        ("high-1", "HIGH"),
        ("medium-2", Priority.MEDIUM),
    ]:
        retsu.enqueue(queue, payload, priority=priority)

    delivered = [m.payload for m in retsu.dequeue_many(queue, 10)]

    assert delivered == ["high-1", "medium-1", "medium-2", "low-1", "low-2"]


def test_a_delivery_is_typed_and_counts_its_attempt(target: Target) -> None:
    retsu = target.client()
    queue = retsu.create_queue(unique()).name
    before = datetime.now(UTC) - timedelta(minutes=5)
    sent = retsu.enqueue(queue, "hello", priority="HIGH")

    message = retsu.dequeue(queue)

    assert isinstance(message, Message)
    assert message.id == sent.id and sent.replayed is False
    assert (message.payload, message.priority, message.delivery_attempts) == ("hello", "HIGH", 1)
    assert message.priority is Priority.HIGH
    assert message.receipt_handle
    assert message.enqueued_at.tzinfo is not None and message.enqueued_at > before


def test_nothing_deliverable_is_none_or_an_empty_list(target: Target) -> None:
    retsu = target.client()
    queue = retsu.create_queue(unique()).name

    assert retsu.dequeue(queue) is None
    assert retsu.dequeue_many(queue, 5) == []


def test_json_helpers_round_trip(target: Target) -> None:
    retsu = target.client()
    queue = retsu.create_queue(unique()).name
    retsu.enqueue_json(queue, {"to": "ada@example.com", "n": [1, 2]})
    retsu.enqueue_json(queue, Order(order_id=7, items=["tea"]))

    first, second = retsu.dequeue_many(queue, 2)

    assert first.json() == {"to": "ada@example.com", "n": [1, 2]}
    assert second.json(Order) == Order(order_id=7, items=["tea"])


def test_a_batch_is_stored_in_order_all_or_nothing(target: Target) -> None:
    retsu = target.client()
    queue = retsu.create_queue(unique()).name

    ids = retsu.enqueue_batch(
        queue, ["one", NewMessage(payload="two", priority="HIGH"), "three"], priority="LOW"
    )
    with pytest.raises(InvalidTtl) as error:
        retsu.enqueue_batch(
            queue, [NewMessage(payload="ok"), NewMessage(payload="x", ttl_seconds=0)]
        )
    with pytest.raises(InvalidBatchSize):
        retsu.enqueue_batch(queue, [])

    assert len(ids) == 3
    assert error.value.detail.startswith("messages[1]")
    assert [m.id for m in retsu.dequeue_many(queue, 10)] == [ids[1], ids[0], ids[2]]


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"priority": "urgent"}, InvalidPriority),
        ({"ttl_seconds": 0}, InvalidTtl),
        ({"delay_seconds": 86401}, InvalidDelay),
        ({"ttl_seconds": 60, "delay_seconds": 60}, InvalidDelay),
        ({"idempotency_key": "has spaces"}, InvalidIdempotencyKey),
    ],
)
def test_invalid_messages_are_refused_with_their_code(
    target: Target, kwargs: dict[str, object], error: type[Exception]
) -> None:
    retsu = target.client()
    queue = retsu.create_queue(unique()).name

    with pytest.raises(error):
        retsu.enqueue(queue, "x", **kwargs)  # type: ignore[arg-type]

    assert _stats(target, queue) == (0, 0, 0, 0)


def test_a_delay_not_shorter_than_the_queues_lifetime_is_refused(target: Target) -> None:
    retsu = target.client()
    queue = retsu.create_queue(unique(), default_message_ttl_seconds=30).name

    with pytest.raises(InvalidDelay):
        retsu.enqueue(queue, "x", delay_seconds=30)


def test_dequeue_options_are_validated(target: Target) -> None:
    retsu = target.client()
    queue = retsu.create_queue(unique()).name

    with pytest.raises(InvalidWaitSeconds):
        retsu.dequeue(queue, wait_seconds=21)
    with pytest.raises(InvalidMaxMessages):
        retsu.dequeue_many(queue, 101)


def test_acknowledge_removes_and_is_idempotent(target: Target) -> None:
    retsu = target.client()
    queue = retsu.create_queue(unique()).name
    retsu.enqueue_batch(queue, ["a", "b", "c"])
    a, b, c = retsu.dequeue_many(queue, 3)

    retsu.acknowledge(queue, a)
    retsu.acknowledge(queue, a)  # already removed: still fine
    retsu.acknowledge(queue, b.id, b.receipt_handle)
    retsu.acknowledge_batch(queue, [c, (a.id, a.receipt_handle)])

    assert _stats(target, queue) == (0, 0, 0, 0)


def test_an_unacknowledged_message_comes_back_after_its_lease(target: Target) -> None:
    retsu = target.client()
    queue = retsu.create_queue(unique(), visibility_timeout_seconds=1).name
    retsu.enqueue(queue, "again")
    first = retsu.dequeue(queue)
    assert retsu.dequeue(queue) is None

    target.sleep(1.3)
    second = retsu.dequeue(queue)

    assert first is not None and second is not None
    assert second.id == first.id and second.delivery_attempts == 2
    assert second.receipt_handle != first.receipt_handle


def test_a_stale_handle_never_removes_a_newer_delivery(target: Target) -> None:
    retsu = target.client()
    queue = retsu.create_queue(unique(), visibility_timeout_seconds=1).name
    retsu.enqueue(queue, "x")
    old = retsu.dequeue(queue)
    target.sleep(1.3)
    new = retsu.dequeue(queue, visibility_timeout_seconds=60)
    assert old is not None and new is not None

    retsu.acknowledge(queue, old)
    assert _stats(target, queue) == (0, 1, 0, 0)
    retsu.acknowledge(queue, new)
    assert _stats(target, queue) == (0, 0, 0, 0)


def test_visibility_extends_releases_and_refuses_a_stale_handle(target: Target) -> None:
    retsu = target.client()
    queue = retsu.create_queue(unique(), visibility_timeout_seconds=1).name
    retsu.enqueue(queue, "x")
    message = retsu.dequeue(queue)
    assert message is not None

    retsu.change_visibility(queue, message, 30)
    target.sleep(1.3)
    assert retsu.dequeue(queue) is None  # still leased: the extension held

    retsu.change_visibility(queue, message, 0)  # release
    again = retsu.dequeue(queue)
    assert again is not None and again.delivery_attempts == 2

    with pytest.raises(StaleReceiptHandle) as error:
        retsu.change_visibility(queue, message, 10)
    assert (error.value.status, error.value.code) == (409, "stale_receipt_handle")


def test_a_delayed_message_is_delivered_after_its_delay(target: Target) -> None:
    retsu = target.client()
    queue = retsu.create_queue(unique()).name
    retsu.enqueue(queue, "later", delay_seconds=1)

    assert retsu.dequeue(queue) is None
    target.sleep(1.3)
    message = retsu.dequeue(queue)

    assert message is not None and message.payload == "later"


def test_the_same_idempotency_key_stores_one_message(target: Target) -> None:
    retsu = target.client()
    queue = retsu.create_queue(unique()).name

    first = retsu.enqueue(queue, "order 1042", priority="HIGH", idempotency_key="order-1042")
    again = retsu.enqueue(queue, "order 1042", priority="HIGH", idempotency_key="order-1042")
    with pytest.raises(IdempotencyKeyConflict) as error:
        retsu.enqueue(queue, "order 1042 CANCELLED", priority="HIGH", idempotency_key="order-1042")

    assert (first.replayed, again.replayed) == (False, True)
    assert again.id == first.id
    assert error.value.status == 409
    assert _stats(target, queue) == (1, 0, 0, 0)


def test_a_key_is_remembered_after_the_message_was_consumed(target: Target) -> None:
    retsu = target.client()
    queue = retsu.create_queue(unique()).name
    sent = retsu.enqueue(queue, "once", idempotency_key="k-1")
    message = retsu.dequeue(queue)
    assert message is not None
    retsu.acknowledge(queue, message)

    replay = retsu.enqueue(queue, "once", idempotency_key="k-1")

    assert (replay.id, replay.replayed) == (sent.id, True)
    assert retsu.dequeue(queue) is None


def test_a_long_poll_answers_as_soon_as_a_message_arrives(target: Target) -> None:
    retsu = target.client()
    queue = retsu.create_queue(unique()).name
    producer = target.client()
    timer = threading.Timer(0.3, lambda: producer.enqueue(queue, "late arrival"))
    started = time.monotonic()
    timer.start()
    try:
        message = retsu.dequeue(queue, wait_seconds=10)
    finally:
        timer.cancel()
    elapsed = time.monotonic() - started

    assert message is not None and message.payload == "late arrival"
    assert elapsed < 5


def test_a_long_poll_on_an_empty_queue_ends_empty(target: Target) -> None:
    retsu = target.client()
    queue = retsu.create_queue(unique()).name
    started = time.monotonic()

    assert retsu.dequeue_many(queue, 3, wait_seconds=1) == []
    assert time.monotonic() - started >= 0.9


def test_message_routes_on_an_unknown_queue_are_queue_not_found(target: Target) -> None:
    retsu = target.client()
    missing = "01a20000-0000-7000-8000-000000000001"
    other = "01a20000-0000-7000-8000-000000000002"

    for call in (
        lambda: retsu.enqueue(missing, "x"),
        lambda: retsu.dequeue(missing),
        lambda: retsu.acknowledge(missing, other, "handle"),
        lambda: retsu.change_visibility(missing, other, 1, receipt_handle="handle"),
    ):
        with pytest.raises(QueueNotFound):
            call()
