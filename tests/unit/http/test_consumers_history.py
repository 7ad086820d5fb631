"""``Retsu-Consumer`` on dequeue, ``GET /v1/consumers`` (SPEC §3.7) and
``GET /v1/queues/{id}/history`` (SPEC §3.8) over HTTP, on the memory adapters."""

from __future__ import annotations

from typing import Any

import pytest

from retsu.adapters.memory.clock import ManualClock
from retsu.adapters.memory.leadership import InMemoryLeadership, InMemoryLock
from retsu.adapters.memory.storage import MemoryStorage
from retsu.application.track_consumers import ConsumerTracker
from retsu.entrypoints.containers import ApiContainer
from tests.unit.http.helpers import MISSING_ID, Client, NewQueue, assert_problem


def _tracker(container: ApiContainer) -> ConsumerTracker:
    tracker: ConsumerTracker = container.use_cases.consumer_tracker()
    return tracker


async def _dequeue(client: Client, queue_id: str, consumer: str | None, **body: Any) -> Any:
    headers = {} if consumer is None else {"retsu-consumer": consumer}
    return await client.post(f"/v1/queues/{queue_id}/messages/dequeue", json=body, headers=headers)


async def test_a_named_consumer_is_listed_after_the_coalesced_write(
    client: Client, new_queue: NewQueue, container: ApiContainer, clock: ManualClock
) -> None:
    queue = await new_queue()
    for payload in ("a", "b"):
        await client.post(
            f"/v1/queues/{queue['id']}/messages", json={"payload": payload, "priority": "LOW"}
        )
    assert (await _dequeue(client, queue["id"], "billing-1", max_messages=5)).status_code == 200
    assert (await _dequeue(client, queue["id"], "billing-1")).status_code == 204
    assert (await client.get("/v1/consumers")).json()["items"] == []  # not written yet

    await _tracker(container).flush()
    response = await client.get("/v1/consumers")

    assert response.status_code == 200
    (item,) = response.json()["items"]
    assert item == {
        "queue_id": queue["id"],
        "queue_name": queue["name"],
        "name": "billing-1",
        "first_seen_at": item["first_seen_at"],
        "last_seen_at": item["last_seen_at"],
        "deliveries": 2,
        "health": "healthy",
    }
    assert item["last_seen_at"].endswith("Z")
    assert response.json()["next_cursor"] is None
    clock.advance(31)
    assert (await client.get("/v1/consumers")).json()["items"][0]["health"] == "stale"
    clock.advance(300)
    offline = await client.get("/v1/consumers", params={"health": "offline"})
    assert [i["name"] for i in offline.json()["items"]] == ["billing-1"]
    by_queue = await client.get("/v1/consumers", params={"queue_id": queue["id"]})
    assert len(by_queue.json()["items"]) == 1
    assert (await client.get("/v1/consumers", params={"queue_id": MISSING_ID})).json()[
        "items"
    ] == []


@pytest.mark.parametrize(
    "headers",
    [
        [("retsu-consumer", "has spaces")],
        [("retsu-consumer", "x" * 129)],
        [("retsu-consumer", "")],
        [("retsu-consumer", "a"), ("retsu-consumer", "b")],
    ],
)
async def test_a_bad_consumer_name_is_invalid_consumer(
    client: Client, new_queue: NewQueue, headers: list[tuple[str, str]]
) -> None:
    queue = await new_queue()
    response = await client.post(f"/v1/queues/{queue['id']}/messages/dequeue", headers=headers)
    assert_problem(response, 400, "invalid_consumer")


async def test_a_non_ascii_consumer_name_is_invalid_consumer(
    client: Client, new_queue: NewQueue
) -> None:
    queue = await new_queue()
    response = await client.post(
        f"/v1/queues/{queue['id']}/messages/dequeue",
        headers=[(b"retsu-consumer", "caf\xe9".encode())],
    )
    assert_problem(response, 400, "invalid_consumer")


async def test_a_named_dequeue_of_an_unknown_queue_is_queue_not_found(client: Client) -> None:
    response = await _dequeue(client, MISSING_ID, "w1")
    assert_problem(response, 404, "queue_not_found")


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"health": "sleepy"}, "invalid_health"),
        ({"limit": "0"}, "invalid_limit"),
        ({"limit": "101"}, "invalid_limit"),
        ({"cursor": "nope"}, "invalid_cursor"),
        ({"queue_id": "not-a-uuid"}, "invalid_queue_id"),
    ],
)
async def test_bad_consumer_list_parameters(
    client: Client, params: dict[str, str], code: str
) -> None:
    assert_problem(await client.get("/v1/consumers", params=params), 400, code)


async def test_consumers_page_with_a_cursor(
    client: Client, new_queue: NewQueue, container: ApiContainer, clock: ManualClock
) -> None:
    queue = await new_queue()
    for i in range(3):
        await _dequeue(client, queue["id"], f"w{i}")
        clock.advance(1)
    await _tracker(container).flush()
    first = (await client.get("/v1/consumers", params={"limit": 2})).json()
    assert [i["name"] for i in first["items"]] == ["w2", "w1"]
    rest = (
        await client.get("/v1/consumers", params={"limit": 2, "cursor": first["next_cursor"]})
    ).json()
    assert [i["name"] for i in rest["items"]] == ["w0"]
    assert rest["next_cursor"] is None


# -- history ----------------------------------------------------------------------------------


async def _snapshot(repository: MemoryStorage) -> None:
    session = await InMemoryLeadership(InMemoryLock(), repository).try_acquire()
    assert session is not None
    await session.record_history(await session.read_state())
    await session.release()


async def test_history_points_count_what_happened(
    client: Client, new_queue: NewQueue, repository: MemoryStorage, clock: ManualClock
) -> None:
    queue = await new_queue()
    messages = f"/v1/queues/{queue['id']}/messages"
    await _snapshot(repository)
    clock.advance(15)
    for payload in ("a", "b", "c"):
        await client.post(messages, json={"payload": payload, "priority": "HIGH"})
    taken = (await client.post(messages + "/dequeue")).json()
    await client.post(
        f"{messages}/{taken['id']}/acknowledge", json={"receipt_handle": taken["receipt_handle"]}
    )
    await _snapshot(repository)
    clock.advance(15)

    response = await client.get(f"/v1/queues/{queue['id']}/history")

    assert response.status_code == 200
    body = response.json()
    assert body["interval_seconds"] == 15  # the collection interval (60 min fit in 240)
    first, second = body["points"]
    assert first["enqueued"] == 0 and first["at"] < second["at"]
    assert {k: v for k, v in second.items() if k != "at"} == {
        "ready": 2,
        "in_flight": 0,
        "delayed": 0,
        "dead_letters": 0,
        "enqueued": 3,
        "delivered": 1,
        "acknowledged": 1,
        "dead_lettered": 0,
        "expired": 0,
    }
    week = (await client.get(f"/v1/queues/{queue['id']}/history", params={"minutes": 10080})).json()
    assert week["interval_seconds"] == 1680  # 7 days in 360 points
    assert sum(p["enqueued"] for p in week["points"]) == 3
    clock.advance(120)
    recent = (await client.get(f"/v1/queues/{queue['id']}/history", params={"minutes": 1})).json()
    assert recent["points"] == []


@pytest.mark.parametrize("minutes", ["0", "10081", "-1", "1.5", "abc"])
async def test_history_minutes_out_of_range_is_invalid_minutes(
    client: Client, new_queue: NewQueue, minutes: str
) -> None:
    queue = await new_queue()
    response = await client.get(f"/v1/queues/{queue['id']}/history", params={"minutes": minutes})
    assert_problem(response, 400, "invalid_minutes")


async def test_history_of_an_unknown_queue_is_queue_not_found(client: Client) -> None:
    assert_problem(await client.get(f"/v1/queues/{MISSING_ID}/history"), 404, "queue_not_found")
    assert_problem(await client.get("/v1/queues/nope/history"), 400, "invalid_path")


async def test_a_day_of_history_never_holds_more_than_360_points(
    client: Client, new_queue: NewQueue, repository: MemoryStorage, clock: ManualClock
) -> None:
    # 24 h in 240-s buckets is 360 widths; a window not aligned to them touches 361 buckets,
    # and the oldest, partial one is left out.
    queue = await new_queue()
    clock.advance(100)
    for _ in range(362):
        await _snapshot(repository)
        clock.advance(240)
    clock.advance(-240)

    day = (await client.get(f"/v1/queues/{queue['id']}/history", params={"minutes": 1440})).json()

    assert day["interval_seconds"] == 240
    assert len(day["points"]) == 360
