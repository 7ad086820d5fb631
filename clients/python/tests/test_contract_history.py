"""What happened to a message (SPEC §3.11) through the client — attempts, completed
messages and results, search, bulk actions with a dry run — against the fake and a real
server."""

from __future__ import annotations

import pytest

from client_support import Target, unique
from retsu_client import (
    Attempt,
    AttemptOutcome,
    Client,
    MessageNotFound,
    MessageState,
)
from retsu_client.errors import InvalidErrorText, InvalidMatch, InvalidResult


def _dead(target: Target, retsu: Client, payloads: list[str], group: str | None = None) -> str:
    """A queue whose messages used up their single attempt, each released with an error
    (a group of them all delivered at once: ``group_max_in_flight`` is above their number)."""
    queue = retsu.create_queue(
        unique("dlq"), visibility_timeout_seconds=1, max_delivery_attempts=1, group_max_in_flight=10
    )
    retsu.enqueue_batch(queue.name, payloads, group=group)
    got = retsu.dequeue_many(queue.name, 10)
    assert len(got) == len(payloads)
    for message in got:
        retsu.release(queue.name, message, error=f"failed on {message.payload}")
    assert retsu.dequeue(queue.name) is None  # this dequeue moves them to dead letters
    return queue.name


def test_attempts_record_the_consumer_the_outcome_and_the_error(target: Target) -> None:
    retsu = target.client(consumer="billing-7")
    queue = retsu.create_queue(unique("att")).name
    mid = retsu.enqueue(queue, "charge").id

    first = retsu.dequeue(queue)
    assert first is not None
    retsu.release(queue, first, error="TimeoutError: the bank did not answer")
    second = retsu.dequeue(queue, consumer="billing-8")
    assert second is not None

    message = retsu.get_message(queue, mid)
    one, two = message.attempts
    assert isinstance(one, Attempt)
    assert (one.number, one.consumer, one.outcome) == (1, "billing-7", AttemptOutcome.RELEASED)
    assert one.error == "TimeoutError: the bank did not answer"
    assert one.ended_at is not None and one.ended_at >= one.delivered_at
    assert (two.number, two.consumer, two.outcome) == (2, "billing-8", AttemptOutcome.IN_FLIGHT)
    assert (two.ended_at, two.error) == (None, None)
    assert [m.attempts for m in retsu.iter_messages(queue)] == [message.attempts]


def test_a_visibility_change_records_its_error_on_the_current_attempt(target: Target) -> None:
    retsu = target.client()
    queue = retsu.create_queue(unique("att")).name
    retsu.enqueue(queue, "slow")
    message = retsu.dequeue(queue)
    assert message is not None

    retsu.change_visibility(queue, message, 60, error="waiting for a lock")

    (attempt,) = retsu.get_message(queue, message.id).attempts
    assert (attempt.outcome, attempt.error) == (AttemptOutcome.IN_FLIGHT, "waiting for a lock")
    with pytest.raises(InvalidErrorText) as error:
        retsu.change_visibility(queue, message, 0, error="e" * 4097)
    assert error.value.code == "invalid_error"


def test_a_kept_message_is_completed_with_its_result(target: Target) -> None:
    retsu = target.client()
    queue = retsu.create_queue(unique("done"), completed_retention_seconds=3600).name
    mid = retsu.enqueue(queue, '{"order": 1}').id
    message = retsu.dequeue(queue)
    assert message is not None

    retsu.acknowledge(queue, message, result='{"receipt": "r-1"}')

    done = retsu.get_message(queue, mid)
    assert (done.state, done.result) == (MessageState.COMPLETED, '{"receipt": "r-1"}')
    assert done.completed_at is not None
    assert [a.outcome for a in done.attempts] == [AttemptOutcome.ACKNOWLEDGED]
    assert [m.id for m in retsu.iter_messages(queue, state="completed")] == [mid]
    assert list(retsu.iter_messages(queue)) == []  # not live
    stats = retsu.get_queue(queue).stats
    assert (stats.completed, stats.ready, stats.in_flight) == (1, 0, 0)
    assert retsu.purge_queue(queue) == 0  # purge never touches completed messages
    assert retsu.get_queue(queue).stats.completed == 1


def test_without_retention_an_acknowledged_message_is_gone_result_or_not(target: Target) -> None:
    retsu = target.client()
    queue = retsu.create_queue(unique("done")).name
    mid = retsu.enqueue(queue, "x").id
    message = retsu.dequeue(queue)
    assert message is not None

    with pytest.raises(InvalidResult) as error:
        retsu.acknowledge(queue, message, result="r" * 65537)
    retsu.acknowledge(queue, message, result="r" * 65536)

    assert error.value.code == "invalid_result"
    with pytest.raises(MessageNotFound):
        retsu.get_message(queue, mid)
    assert retsu.get_queue(queue).stats.completed == 0


def test_browsing_searches_by_group_and_json_containment(target: Target) -> None:
    retsu = target.client()
    queue = retsu.create_queue(unique("search")).name
    retsu.enqueue_json(queue, {"customer": 42, "kind": "invoice"}, group="c42")
    retsu.enqueue_json(queue, {"customer": 42, "kind": "refund"})
    retsu.enqueue_json(queue, {"customer": 7, "kind": "invoice"})
    retsu.enqueue(queue, "customer 42, not JSON")

    def found(**filters: object) -> list[str]:
        return sorted(m.payload for m in retsu.iter_messages(queue, page_size=1, **filters))  # type: ignore[arg-type]

    assert found(match={"customer": 42}) == [
        '{"customer":42,"kind":"invoice"}',
        '{"customer":42,"kind":"refund"}',
    ]
    assert found(match={"kind": "invoice"}, group="c42") == ['{"customer":42,"kind":"invoice"}']
    assert found(match={"customer": 42, "kind": "parcel"}) == []
    with pytest.raises(InvalidMatch) as error:
        retsu.list_messages(queue, match=[1, 2])  # type: ignore[arg-type]
    assert (error.value.status, error.value.code) == (400, "invalid_match")


def test_dead_letters_carry_attempts_and_the_last_error_and_are_searched(target: Target) -> None:
    retsu = target.client()
    queue = _dead(target, retsu, ['{"n": 1}', '{"n": 2}'], group="g")

    records = retsu.list_dead_letters(queue).items

    assert {r.last_error for r in records} == {'failed on {"n": 1}', 'failed on {"n": 2}'}
    assert all(r.group == "g" for r in records)
    assert all([a.outcome for a in r.attempts] == [AttemptOutcome.RELEASED] for r in records)
    assert [r.payload for r in retsu.iter_dead_letters(queue, match={"n": 2})] == ['{"n": 2}']
    assert len(list(retsu.iter_dead_letters(queue, group="g"))) == 2
    assert list(retsu.iter_dead_letters(queue, group="other")) == []
    assert retsu.get_dead_letter(queue, records[0].id).attempts == records[0].attempts


def test_bulk_delete_of_messages_counts_first_then_deletes(target: Target) -> None:
    retsu = target.client()
    queue = retsu.create_queue(unique("bulk")).name
    for n in range(5):
        retsu.enqueue_json(queue, {"tenant": "a" if n < 3 else "b", "n": n})
    retsu.enqueue(queue, "later", delay_seconds=600)

    assert retsu.delete_messages(queue, match={"tenant": "a"}, dry_run=True) == 3
    assert retsu.delete_messages(queue, state="delayed", dry_run=True) == 1
    assert retsu.delete_messages(queue, match={"tenant": "a"}, limit=2) == 2
    assert retsu.get_queue(queue).stats.ready == 3
    assert retsu.delete_messages(queue, match={"tenant": "a"}) == 1
    assert retsu.delete_messages(queue, match={"tenant": "a"}, dry_run=True) == 0
    assert sorted(m.json()["n"] for m in retsu.iter_messages(queue, state="ready")) == [3, 4]
    entry = retsu.list_audit_log(queue=queue, action="message.deleted").items[0]
    assert (entry.details["deleted"], entry.details["filter"]) == (1, {"match": {"tenant": "a"}})


def test_bulk_redrive_and_delete_of_dead_letters_by_filter(target: Target) -> None:
    retsu = target.client()
    queue = _dead(target, retsu, ['{"n": 1}', '{"n": 2}', '{"n": 3}'])

    assert retsu.redrive_dead_letters(queue, match={"n": 2}, dry_run=True) == 1
    assert retsu.get_queue(queue).stats.dead_letters == 3  # a dry run changes nothing
    assert retsu.redrive_dead_letters(queue, match={"n": 2}) == 1
    assert retsu.delete_dead_letters(queue, dry_run=True) == 2
    assert retsu.delete_dead_letters(queue, match={"n": 1}) == 1
    assert retsu.delete_dead_letters(queue, reason="MAX_DELIVERY_ATTEMPTS_EXHAUSTED") == 1

    assert retsu.get_queue(queue).stats.dead_letters == 0
    assert [m.payload for m in retsu.iter_messages(queue)] == ['{"n": 2}']


async def test_the_async_client_covers_results_errors_and_bulk_actions(target: Target) -> None:
    async with target.async_client() as retsu:
        queue = (await retsu.create_queue(unique("done"), completed_retention_seconds=60)).name
        mid = (await retsu.enqueue(queue, "job", group="g")).id
        message = await retsu.dequeue(queue)
        assert message is not None
        await retsu.release(queue, message, error="ValueError: no")
        message = await retsu.dequeue(queue)
        assert message is not None
        await retsu.acknowledge(queue, message, result="ok")
        done = await retsu.get_message(queue, mid)
        completed = [m.id async for m in retsu.iter_messages(queue, state="completed")]
        await retsu.enqueue(queue, "drop me")
        dry = await retsu.delete_messages(queue, dry_run=True)
        deleted = await retsu.delete_messages(queue)

    assert (done.result, done.group, completed) == ("ok", "g", [mid])
    assert [(a.outcome, a.error) for a in done.attempts] == [
        (AttemptOutcome.RELEASED, "ValueError: no"),
        (AttemptOutcome.ACKNOWLEDGED, None),
    ]
    assert (dry, deleted) == (1, 1)
