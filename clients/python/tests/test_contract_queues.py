"""Queues (SPEC §3.2) through the client — the same tests against the fake and a real server."""

from __future__ import annotations

import uuid

import pytest

from client_support import Target, unique
from retsu_client import (
    InvalidRequest,
    Priority,
    Queue,
    QueueAlreadyExists,
    QueueDetails,
    QueueNotFound,
)
from retsu_client.errors import EmptyQueueUpdate, InvalidCursor, InvalidQueueName


def test_a_new_queue_has_the_documented_defaults(target: Target) -> None:
    retsu = target.client()
    name = unique()

    queue = retsu.create_queue(name)

    assert isinstance(queue, Queue)
    assert (queue.name, queue.paused) == (name, False)
    assert queue.visibility_timeout_seconds == 30
    assert queue.max_delivery_attempts == 5
    assert queue.default_message_ttl_seconds == 604800
    assert uuid.UUID(queue.id).version == 7


def test_a_queue_is_found_by_name_by_id_and_by_value(target: Target) -> None:
    retsu = target.client()
    queue = retsu.create_queue(unique(), visibility_timeout_seconds=7, max_delivery_attempts=2)

    by_name = retsu.get_queue(queue.name)
    by_id = retsu.get_queue(queue.id)
    by_uuid = retsu.get_queue(uuid.UUID(queue.id))
    by_value = retsu.get_queue(queue)

    assert by_name == by_id == by_uuid == by_value
    assert isinstance(by_name, QueueDetails)
    assert (by_name.visibility_timeout_seconds, by_name.max_delivery_attempts) == (7, 2)
    assert retsu.queue_id(queue.name) == queue.id


def test_an_unknown_queue_raises_queue_not_found_with_the_problem(target: Target) -> None:
    retsu = target.client()
    missing = "01a20000-0000-7000-8000-000000000000"

    with pytest.raises(QueueNotFound) as by_id:
        retsu.get_queue(missing)
    with pytest.raises(QueueNotFound) as by_name:
        retsu.enqueue(unique("nothing"), "x")

    assert (by_id.value.code, by_id.value.status) == ("queue_not_found", 404)
    assert missing in by_id.value.detail
    assert by_id.value.request_id
    assert by_name.value.code == "queue_not_found"


def test_the_same_name_twice_is_a_conflict(target: Target) -> None:
    retsu = target.client()
    name = unique()
    retsu.create_queue(name)

    with pytest.raises(QueueAlreadyExists) as error:
        retsu.create_queue(name)

    assert (error.value.status, error.value.code) == (409, "queue_already_exists")


@pytest.mark.parametrize("name", ["Upper", "-dash-first", "a" * 65, "spa ce"])
def test_an_invalid_name_is_refused_with_its_code(target: Target, name: str) -> None:
    with pytest.raises(InvalidQueueName) as error:
        target.client().create_queue(name)

    assert isinstance(error.value, InvalidRequest)
    assert (error.value.status, error.value.code) == (400, "invalid_queue_name")


def test_out_of_range_settings_get_the_fields_own_code(target: Target) -> None:
    retsu = target.client()

    with pytest.raises(InvalidRequest) as error:
        retsu.create_queue(unique(), max_delivery_attempts=0)

    assert error.value.code == "invalid_max_delivery_attempts"


def test_update_changes_only_the_given_settings(target: Target) -> None:
    retsu = target.client()
    queue = retsu.create_queue(unique(), visibility_timeout_seconds=10)

    updated = retsu.update_queue(queue.name, max_delivery_attempts=9)

    assert (updated.visibility_timeout_seconds, updated.max_delivery_attempts) == (10, 9)
    with pytest.raises(EmptyQueueUpdate):
        retsu.update_queue(queue.name)


def test_list_follows_cursors_in_byte_order_of_names(target: Target) -> None:
    retsu = target.client()
    prefix = unique("list")
    names = [f"{prefix}-{suffix}" for suffix in ("b", "a", "c.1", "c-1", "d_2")]
    for name in names:
        retsu.create_queue(name)

    first = retsu.list_queues(limit=2)
    listed = [q.name for q in retsu.iter_queues(page_size=2) if q.name.startswith(prefix)]

    assert len(first.items) == 2 and first.next_cursor is not None
    assert listed == sorted(names, key=str.encode)
    assert [q.name for q in retsu.list_queues(name=names[0]).items] == [names[0]]
    assert retsu.list_queues(name=unique("absent")).items == []


def test_a_cursor_the_server_did_not_issue_is_refused(target: Target) -> None:
    with pytest.raises(InvalidCursor) as error:
        target.client().list_queues(cursor="bm90LWEtY3Vyc29y")

    assert error.value.code == "invalid_cursor"


def test_stats_count_ready_in_flight_delayed(target: Target) -> None:
    retsu = target.client()
    queue = retsu.create_queue(unique())
    retsu.enqueue(queue.name, "now-1", priority=Priority.HIGH)
    retsu.enqueue(queue.name, "now-2")
    retsu.enqueue(queue.name, "later", delay_seconds=600)
    retsu.dequeue(queue.name)

    stats = retsu.get_queue(queue.name).stats

    assert (stats.ready, stats.in_flight, stats.delayed, stats.dead_letters) == (1, 1, 1, 0)
    assert stats.oldest_ready_age_seconds >= 0


def test_a_paused_queue_takes_messages_but_delivers_none(target: Target) -> None:
    retsu = target.client()
    queue = retsu.create_queue(unique())

    assert retsu.pause_queue(queue.name).paused is True
    retsu.enqueue(queue.name, "waits")
    assert retsu.dequeue(queue.name) is None
    assert retsu.resume_queue(queue.name).paused is False
    delivered = retsu.dequeue(queue.name)

    assert delivered is not None and delivered.payload == "waits"


def test_purge_removes_live_messages_and_answers_how_many(target: Target) -> None:
    retsu = target.client()
    queue = retsu.create_queue(unique())
    retsu.enqueue_batch(queue.name, ["a", "b", "c"])
    retsu.dequeue(queue.name)

    assert retsu.purge_queue(queue.name) == 3
    assert retsu.get_queue(queue.name).stats.ready == 0
    assert retsu.purge_queue(queue.name) == 0


def test_delete_removes_the_queue_and_frees_its_name(target: Target) -> None:
    retsu = target.client()
    name = unique()
    first = retsu.create_queue(name)
    retsu.enqueue(name, "gone with the queue")

    retsu.delete_queue(name)

    with pytest.raises(QueueNotFound):
        retsu.get_queue(first.id)
    with pytest.raises(QueueNotFound):
        retsu.delete_queue(first.id)
    assert retsu.create_queue(name).id != first.id


def test_a_cached_name_follows_a_queue_created_again(target: Target) -> None:
    """The name → id cache must not pin a deleted queue: another client deletes and
    re-creates the queue, and this client's next call by name still lands."""
    retsu, other = target.client(), target.client()
    name = unique()
    old = retsu.create_queue(name)
    retsu.enqueue(name, "old")  # caches name → old id
    other.delete_queue(name)
    new = other.create_queue(name)

    retsu.enqueue(name, "new")

    assert new.id != old.id
    assert retsu.queue_id(name) == new.id
    assert other.get_queue(new.id).stats.ready == 1
