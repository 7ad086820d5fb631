"""Operator routes of SPEC §3.6 (browsing), §3.7 (consumers), §3.8 (history) and the `read`
scope, written from the spec and run against the fake and a real server."""

from __future__ import annotations

import pytest

from client_support import Target, unique
from retsu_client import (
    Consumer,
    ConsumerHealth,
    Forbidden,
    MessageNotFound,
    MessageState,
    StoredMessage,
)
from retsu_client.errors import InvalidConsumer, InvalidHealth, InvalidState


def _mixed_queue(target: Target) -> tuple[str, dict[str, str]]:
    """ready: high, low-1, low-2 (low-1 released once) · in flight: medium · delayed: later."""
    retsu = target.client()
    name = retsu.create_queue(unique("browse")).name
    ids = {
        payload: retsu.enqueue(name, payload, priority=priority, delay_seconds=delay).id
        for payload, priority, delay in [
            ("low-1", "LOW", None),
            ("medium", "MEDIUM", None),
            ("low-2", "LOW", None),
            ("later", "HIGH", 600),
            ("high", "HIGH", None),
        ]
    }
    taken = retsu.dequeue_many(name, 2)  # high, medium
    assert [m.payload for m in taken] == ["high", "medium"]
    retsu.change_visibility(name, taken[0], 0)  # high: released, ready again (attempt 1)
    return name, ids


def test_browsing_lists_each_state_in_its_order(target: Target) -> None:
    retsu = target.client()
    name, ids = _mixed_queue(target)

    ready = retsu.list_messages(name, state=MessageState.READY)
    in_flight = retsu.list_messages(name, state="in_flight")
    delayed = retsu.list_messages(name, state="delayed")
    every = retsu.list_messages(name)

    assert [m.payload for m in ready.items] == ["high", "low-1", "low-2"]
    assert [m.payload for m in in_flight.items] == ["medium"]
    assert [m.payload for m in delayed.items] == ["later"]
    assert [m.payload for m in every.items] == ["low-1", "medium", "low-2", "later", "high"]
    high = ready.items[0]
    assert isinstance(high, StoredMessage)
    assert (high.id, high.state, high.delivery_attempts) == (ids["high"], "ready", 1)
    assert high.last_delivered_at is not None and high.redriven_from is None
    assert in_flight.items[0].available_at > in_flight.items[0].enqueued_at
    assert delayed.items[0].last_delivered_at is None
    assert delayed.items[0].expires_at > delayed.items[0].available_at


def test_browsing_never_claims_and_filters_by_priority(target: Target) -> None:
    retsu = target.client()
    name, _ = _mixed_queue(target)

    def counts() -> tuple[int, int, int, int]:
        stats = retsu.get_queue(name).stats  # the age moves on with a real clock
        return (stats.ready, stats.in_flight, stats.delayed, stats.dead_letters)

    before = counts()

    low = retsu.list_messages(name, priority="LOW")
    pages = list(retsu.iter_messages(name, page_size=1))

    assert [m.payload for m in low.items] == ["low-1", "low-2"]
    assert len(pages) == 5
    assert counts() == before
    assert all(not hasattr(m, "receipt_handle") for m in pages)


def test_a_message_can_be_shown_and_deleted(target: Target) -> None:
    retsu = target.client()
    name, ids = _mixed_queue(target)

    shown = retsu.get_message(name, ids["medium"])
    retsu.delete_message(name, ids["medium"])

    assert (shown.payload, shown.state) == ("medium", "in_flight")
    with pytest.raises(MessageNotFound) as error:
        retsu.get_message(name, ids["medium"])
    assert (error.value.status, error.value.code) == (404, "message_not_found")
    with pytest.raises(MessageNotFound):
        retsu.delete_message(name, ids["medium"])
    deleted = retsu.list_audit_log(queue=name, action="message.deleted").items
    assert [e.target_id for e in deleted] == [ids["medium"]]


def test_a_redriven_message_remembers_its_dead_letter(target: Target) -> None:
    retsu = target.client()
    name = retsu.create_queue(unique(), visibility_timeout_seconds=1, max_delivery_attempts=1).name
    retsu.enqueue(name, "poison")
    assert retsu.dequeue(name) is not None
    target.sleep(1.3)
    assert retsu.dequeue(name) is None
    (record,) = retsu.list_dead_letters(name).items

    new_id = retsu.redrive_dead_letter(name, record)

    assert retsu.get_message(name, new_id).redriven_from == record.id


def test_browse_filters_are_validated(target: Target) -> None:
    retsu = target.client()
    name = retsu.create_queue(unique()).name

    with pytest.raises(InvalidState):
        retsu.list_messages(name, state="sleeping")


def test_consumers_are_seen_on_every_dequeue(target: Target) -> None:
    retsu = target.client()
    queue = retsu.create_queue(unique("consumed"))
    retsu.enqueue_batch(queue.name, ["a", "b"])
    consumer = f"billing-{unique()}"

    assert len(retsu.dequeue_many(queue.name, 2, consumer=consumer)) == 2
    assert retsu.dequeue(queue.name, consumer=consumer) is None

    def seen() -> list[Consumer]:
        return [c for c in retsu.iter_consumers(queue=queue.name) if c.name == consumer]

    (found,) = target.eventually(seen, timeout=8)
    assert (found.queue_id, found.queue_name, found.deliveries) == (queue.id, queue.name, 2)
    assert found.health is ConsumerHealth.HEALTHY
    assert found.first_seen_at <= found.last_seen_at
    healthy = retsu.list_consumers(queue=queue.name, health="healthy").items
    assert consumer in [c.name for c in healthy]


def test_consumer_names_and_health_filters_are_validated(target: Target) -> None:
    retsu = target.client()
    name = retsu.create_queue(unique()).name

    with pytest.raises(InvalidConsumer):
        retsu.dequeue(name, consumer="has spaces")
    with pytest.raises(InvalidHealth):
        retsu.list_consumers(health="sleepy")


def test_history_counts_what_happened(target: Target, request: pytest.FixtureRequest) -> None:
    if target.server is not None:
        request.getfixturevalue("real_collector")  # snapshots come from the collector
    retsu = target.client()
    name = retsu.create_queue(unique("history")).name
    retsu.enqueue_batch(name, ["a", "b", "c"])
    message = retsu.dequeue(name)
    assert message is not None
    retsu.acknowledge(name, message)

    def counted() -> bool:
        points = retsu.queue_history(name, minutes=10).points
        return (
            sum(p.enqueued for p in points) == 3
            and sum(p.delivered for p in points) == 1
            and sum(p.acknowledged for p in points) == 1
        )

    target.eventually(counted, timeout=20, step=1)
    history = retsu.queue_history(name)
    assert history.interval_seconds > 0
    assert history.points[-1].ready == 2
    assert [p.at for p in history.points] == sorted(p.at for p in history.points)


def test_a_read_token_looks_but_does_not_touch(target: Target) -> None:
    admin, reader = target.client(), target.client(token="read")
    name = admin.create_queue(unique("read")).name
    admin.enqueue(name, "visible")

    assert reader.get_queue(name).stats.ready == 1
    assert [m.payload for m in reader.list_messages(name).items] == ["visible"]
    assert reader.list_dead_letters(name).items == []
    assert reader.list_audit_log(queue=name).items
    for call in (
        lambda: reader.enqueue(name, "no"),
        lambda: reader.dequeue(name),
        lambda: reader.pause_queue(name),
        lambda: reader.redrive_dead_letters(name),
    ):
        with pytest.raises(Forbidden):
            call()
