"""Groups and flow control (SPEC §3.10, the settings of §3.2) through the client — against
the fake and a real server."""

from __future__ import annotations

import pytest

from client_support import Target, unique
from retsu_client import (
    UNSET,
    Group,
    GroupState,
    IdempotencyKeyConflict,
    NewMessage,
    RateLimit,
)
from retsu_client.errors import (
    InvalidCompletedRetention,
    InvalidGroup,
    InvalidGroupMaxInFlight,
    InvalidMaxInFlight,
    InvalidRateLimit,
    InvalidState,
)


def test_a_new_queue_has_no_limits_and_keeps_nothing(target: Target) -> None:
    queue = target.client().create_queue(unique("flow"))

    assert queue.group_max_in_flight == 1
    assert (queue.max_in_flight, queue.rate_limit, queue.group_rate_limit) == (None, None, None)
    assert queue.completed_retention_seconds == 0


def test_flow_control_settings_are_created_and_shown(target: Target) -> None:
    retsu = target.client()

    queue = retsu.create_queue(
        unique("flow"),
        group_max_in_flight=3,
        max_in_flight=50,
        rate_limit=2.5,  # per second alone: the default burst, max(1, ceil(2.5))
        group_rate_limit=RateLimit(per_second=1, burst=4),
        completed_retention_seconds=600,
    )

    assert (queue.group_max_in_flight, queue.max_in_flight) == (3, 50)
    assert queue.rate_limit == RateLimit(per_second=2.5, burst=3)
    assert queue.group_rate_limit == RateLimit(per_second=1, burst=4)
    assert queue.completed_retention_seconds == 600
    details = retsu.get_queue(queue.name)
    assert details.rate_limit == queue.rate_limit
    assert details.completed_retention_seconds == 600


def test_an_update_tells_a_removed_limit_from_one_not_given(target: Target) -> None:
    retsu = target.client()
    name = retsu.create_queue(
        unique("flow"), max_in_flight=10, rate_limit=5, group_rate_limit=1
    ).name

    kept = retsu.update_queue(name, group_max_in_flight=2)  # the limits are not given
    assert (kept.max_in_flight, kept.rate_limit, kept.group_rate_limit) == (
        10,
        RateLimit(per_second=5, burst=5),
        RateLimit(per_second=1, burst=1),
    )
    assert kept.group_max_in_flight == 2

    removed = retsu.update_queue(name, max_in_flight=None, rate_limit=None)
    assert (removed.max_in_flight, removed.rate_limit) == (None, None)
    assert removed.group_rate_limit == RateLimit(per_second=1, burst=1)

    # {"group_rate_limit": null} alone is a valid update (SPEC §3.2).
    assert retsu.update_queue(name, group_rate_limit=None).group_rate_limit is None
    changed = retsu.update_queue(
        name, max_in_flight=7, completed_retention_seconds=60, rate_limit=UNSET
    )
    assert (changed.max_in_flight, changed.completed_retention_seconds) == (7, 60)
    assert changed.rate_limit is None


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        ({"group_max_in_flight": 0}, InvalidGroupMaxInFlight),
        ({"max_in_flight": 0}, InvalidMaxInFlight),
        ({"rate_limit": RateLimit(per_second=0.001)}, InvalidRateLimit),
        ({"group_rate_limit": RateLimit(per_second=1, burst=0)}, InvalidRateLimit),
        ({"completed_retention_seconds": 604801}, InvalidCompletedRetention),
    ],
)
def test_out_of_range_flow_settings_get_their_own_code(
    target: Target, settings: dict[str, object], error: type[Exception]
) -> None:
    retsu = target.client()
    name = retsu.create_queue(unique("flow")).name

    with pytest.raises(error):
        retsu.create_queue(unique("flow"), **settings)  # type: ignore[arg-type]
    with pytest.raises(error):
        retsu.update_queue(name, **settings)  # type: ignore[arg-type]


def test_a_group_is_an_ordered_lane(target: Target) -> None:
    retsu = target.client()
    queue = retsu.create_queue(unique("lane"), visibility_timeout_seconds=5).name
    retsu.enqueue(queue, "a1", group="a", priority="LOW")
    retsu.enqueue(queue, "a2", group="a", priority="HIGH")  # a lane ignores priority
    retsu.enqueue(queue, "free")

    first = retsu.dequeue_many(queue, 10)

    assert sorted(m.payload for m in first) == ["a1", "free"]
    assert {m.payload: m.group for m in first} == {"a1": "a", "free": None}
    head = next(m for m in first if m.group == "a")
    retsu.acknowledge(queue, head)
    (second,) = retsu.dequeue_many(queue, 10)
    assert (second.payload, second.group) == ("a2", "a")


def test_a_batch_takes_groups_per_message_or_for_all(target: Target) -> None:
    retsu = target.client()
    queue = retsu.create_queue(unique("lane")).name

    retsu.enqueue_batch(queue, ["x1", "x2"], group="x")
    retsu.enqueue_batch(queue, [NewMessage(payload="y1", group="y"), "none"])

    grouped = {m.payload: m.group for m in retsu.iter_messages(queue)}
    assert grouped == {"x1": "x", "x2": "x", "y1": "y", "none": None}
    assert retsu.get_queue(queue).stats.groups == 2
    assert [m.payload for m in retsu.iter_messages(queue, group="x")] == ["x1", "x2"]


def test_the_group_is_part_of_the_idempotency_comparison(target: Target) -> None:
    retsu = target.client()
    queue = retsu.create_queue(unique("lane")).name
    first = retsu.enqueue(queue, "once", group="g", idempotency_key="k-1")

    again = retsu.enqueue(queue, "once", group="g", idempotency_key="k-1")
    with pytest.raises(IdempotencyKeyConflict):
        retsu.enqueue(queue, "once", group="h", idempotency_key="k-1")

    assert again.replayed and again.id == first.id


def test_an_invalid_group_is_refused(target: Target) -> None:
    retsu = target.client()
    queue = retsu.create_queue(unique("lane")).name

    with pytest.raises(InvalidGroup) as error:
        retsu.enqueue(queue, "x", group="g" * 129)

    assert (error.value.status, error.value.code) == (400, "invalid_group")


def test_groups_are_listed_with_their_head_and_state(target: Target) -> None:
    retsu = target.client()
    queue = retsu.create_queue(unique("groups"), visibility_timeout_seconds=30).name
    retsu.enqueue_batch(queue, ["a1", "a2"], group="a")
    retsu.enqueue(queue, "b1", group="b", delay_seconds=60)
    retsu.enqueue(queue, "c1", group="c")
    a1 = retsu.dequeue(queue)  # the longest waiting head: group a's
    assert a1 is not None and a1.payload == "a1"

    page = retsu.list_groups(queue)
    by_name = {g.group: g for g in page.items}

    assert page.next_cursor is None and set(by_name) == {"a", "b", "c"}
    a = by_name["a"]
    assert isinstance(a, Group)
    assert (a.state, a.in_flight, a.ready, a.delayed) == (GroupState.BLOCKED, 1, 1, 0)
    assert (a.head_id, a.head_delivery_attempts) == (a1.id, 1)
    assert a.last_delivered_at is not None
    assert (by_name["b"].state, by_name["b"].delayed) == (GroupState.WAITING, 1)
    assert by_name["c"].state == GroupState.READY and by_name["c"].last_delivered_at is None
    assert [g.group for g in retsu.list_groups(queue, state="blocked").items] == ["a"]
    assert [g.group for g in retsu.iter_groups(queue, state=GroupState.READY)] == ["c"]
    assert sorted(g.group for g in retsu.iter_groups(queue, page_size=1)) == ["a", "b", "c"]
    with pytest.raises(InvalidState):
        retsu.list_groups(queue, state="stuck")


async def test_the_async_client_enqueues_into_groups_and_lists_them(target: Target) -> None:
    async with target.async_client() as retsu:
        queue = (await retsu.create_queue(unique("lane"), max_in_flight=1)).name
        await retsu.enqueue(queue, "one", group="g")
        await retsu.enqueue_json(queue, {"n": 2}, group="g")
        await retsu.enqueue(queue, "other", group="h")

        got = await retsu.dequeue_many(queue, 10)
        groups = [g.group async for g in retsu.iter_groups(queue)]
        updated = await retsu.update_queue(queue, max_in_flight=None)

    assert len(got) == 1  # max_in_flight 1: one lease at a time
    assert sorted(groups) == ["g", "h"]
    assert updated.max_in_flight is None
