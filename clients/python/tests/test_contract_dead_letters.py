"""Dead letters (SPEC §3.4) through the client — against the fake and a real server."""

from __future__ import annotations

import pytest

from client_support import Target, unique
from retsu_client import Client, DeadLetter, DeadLetterNotFound


def _exhaust(target: Target, retsu: Client, payloads: list[str], priority: str = "MEDIUM") -> str:
    """A queue whose messages used up their single attempt and were moved by a dequeue."""
    queue = retsu.create_queue(unique("dlq"), visibility_timeout_seconds=1, max_delivery_attempts=1)
    retsu.enqueue_batch(queue.name, payloads, priority=priority)
    assert len(retsu.dequeue_many(queue.name, len(payloads))) == len(payloads)
    target.sleep(1.3)
    assert retsu.dequeue(queue.name) is None  # this dequeue moves them to dead letters
    return queue.name


def test_an_exhausted_message_is_moved_by_a_later_dequeue(target: Target) -> None:
    retsu = target.client()
    queue = _exhaust(target, retsu, ["charge 17", "charge 18", "refund 4"])

    page = retsu.list_dead_letters(queue)

    assert [d.payload for d in page.items] == ["refund 4", "charge 18", "charge 17"]
    assert page.next_cursor is None
    record = page.items[0]
    assert isinstance(record, DeadLetter)
    assert record.reason == "MAX_DELIVERY_ATTEMPTS_EXHAUSTED"
    assert record.delivery_attempts == 1
    assert record.last_delivered_at is not None
    assert record.dead_lettered_at >= record.enqueued_at
    assert retsu.get_queue(queue).stats.dead_letters == 3


def test_an_exhausted_message_never_hides_a_deliverable_one(target: Target) -> None:
    retsu = target.client()
    queue = retsu.create_queue(unique("dlq"), visibility_timeout_seconds=1, max_delivery_attempts=1)
    retsu.enqueue(queue.name, "poison", priority="HIGH")
    assert retsu.dequeue(queue.name) is not None
    retsu.enqueue(queue.name, "fine", priority="LOW")
    target.sleep(1.3)

    message = retsu.dequeue(queue.name)

    assert message is not None and message.payload == "fine"
    assert [d.payload for d in retsu.list_dead_letters(queue.name).items] == ["poison"]


def test_iterating_dead_letters_follows_cursors(target: Target) -> None:
    retsu = target.client()
    queue = _exhaust(target, retsu, [f"m{i}" for i in range(5)])

    first = retsu.list_dead_letters(queue, limit=2)
    every = [d.payload for d in retsu.iter_dead_letters(queue, page_size=2)]

    assert first.next_cursor is not None
    assert every == ["m4", "m3", "m2", "m1", "m0"]


def test_get_redrive_and_delete_one(target: Target) -> None:
    retsu = target.client()
    queue = _exhaust(target, retsu, ["keep", "drop"], priority="HIGH")
    drop, keep = retsu.list_dead_letters(queue).items

    assert retsu.get_dead_letter(queue, keep.id) == keep
    new_id = retsu.redrive_dead_letter(queue, keep)
    retsu.delete_dead_letter(queue, drop.id)

    assert new_id != keep.id
    for call in (
        lambda: retsu.get_dead_letter(queue, keep.id),
        lambda: retsu.redrive_dead_letter(queue, keep.id),
        lambda: retsu.delete_dead_letter(queue, drop.id),
    ):
        with pytest.raises(DeadLetterNotFound) as error:
            call()
        assert (error.value.status, error.value.code) == (404, "dead_letter_not_found")
    message = retsu.dequeue(queue)
    assert message is not None
    assert (message.id, message.payload, message.priority) == (new_id, "keep", "HIGH")
    assert message.delivery_attempts == 1
    assert retsu.get_queue(queue).stats.dead_letters == 0


def test_bulk_redrive_takes_the_oldest_first(target: Target) -> None:
    retsu = target.client()
    queue = _exhaust(target, retsu, ["first", "second", "third"])

    assert retsu.redrive_dead_letters(queue, limit=2) == 2
    assert [d.payload for d in retsu.list_dead_letters(queue).items] == ["third"]
    assert [m.payload for m in retsu.dequeue_many(queue, 10)] == ["first", "second"]
    assert retsu.redrive_dead_letters(queue) == 1
    assert retsu.redrive_dead_letters(queue) == 0


def test_purge_leaves_dead_letters(target: Target) -> None:
    retsu = target.client()
    queue = _exhaust(target, retsu, ["dead"])
    retsu.enqueue(queue, "live")

    assert retsu.purge_queue(queue) == 1
    assert retsu.get_queue(queue).stats.dead_letters == 1
