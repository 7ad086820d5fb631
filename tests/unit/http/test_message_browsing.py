"""Browsing messages without claiming them over HTTP (SPEC §3.6), on the memory adapter."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from retsu.adapters.memory.clock import ManualClock
from tests.unit.http.helpers import MISSING_ID, Client, NewQueue, assert_problem

ITEM_KEYS = {
    "id",
    "payload",
    "priority",
    "state",
    "delivery_attempts",
    "enqueued_at",
    "expires_at",
    "available_at",
    "last_delivered_at",
    "redriven_from",
    "group",
    "schedule_id",
    "attempts",
    "completed_at",
    "result",
}


async def _send(client: Client, queue_id: str, payload: str, priority: str, **extra: Any) -> str:
    response = await client.post(
        f"/v1/queues/{queue_id}/messages", json={"payload": payload, "priority": priority, **extra}
    )
    assert response.status_code == 201, response.text
    message_id: str = response.json()["id"]
    return message_id


async def _mixed(client: Client, clock: ManualClock, queue_id: str) -> dict[str, str]:
    """ready: high (released once), low-1, low-2 · in flight: medium · delayed: later."""
    ids = {}
    for payload, priority, delay in [
        ("low-1", "LOW", 0),
        ("medium", "MEDIUM", 0),
        ("low-2", "LOW", 0),
        ("later", "HIGH", 600),
        ("high", "HIGH", 0),
    ]:
        ids[payload] = await _send(client, queue_id, payload, priority, delay_seconds=delay)
        clock.advance(0.001)
    taken = await client.post(
        f"/v1/queues/{queue_id}/messages/dequeue",
        json={"max_messages": 2, "visibility_timeout_seconds": 300},
    )
    high, medium = taken.json()["messages"]
    assert (high["payload"], medium["payload"]) == ("high", "medium")
    released = await client.post(
        f"/v1/queues/{queue_id}/messages/{high['id']}/visibility",
        json={"receipt_handle": high["receipt_handle"], "visibility_timeout_seconds": 0},
    )
    assert released.status_code == 204
    clock.advance(0.001)
    return ids


async def _list(client: Client, queue_id: str, **params: Any) -> dict[str, Any]:
    response = await client.get(f"/v1/queues/{queue_id}/messages", params=params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def test_each_state_in_its_order(
    client: Client, clock: ManualClock, new_queue: NewQueue
) -> None:
    queue = await new_queue()
    ids = await _mixed(client, clock, queue["id"])

    every = await _list(client, queue["id"])
    ready = await _list(client, queue["id"], state="ready")
    in_flight = await _list(client, queue["id"], state="in_flight")
    delayed = await _list(client, queue["id"], state="delayed")

    assert set(every) == {"items", "next_cursor"} and every["next_cursor"] is None
    assert [m["payload"] for m in every["items"]] == ["low-1", "medium", "low-2", "later", "high"]
    assert [m["payload"] for m in ready["items"]] == ["high", "low-1", "low-2"]
    assert [m["payload"] for m in in_flight["items"]] == ["medium"]
    assert [m["payload"] for m in delayed["items"]] == ["later"]
    for item in every["items"]:
        assert set(item) == ITEM_KEYS
    high = ready["items"][0]
    assert high["id"] == ids["high"]
    assert (high["state"], high["priority"], high["delivery_attempts"]) == ("ready", "HIGH", 1)
    assert high["last_delivered_at"] is not None and high["redriven_from"] is None
    assert delayed["items"][0]["last_delivered_at"] is None
    assert delayed["items"][0]["available_at"] > delayed["items"][0]["enqueued_at"]
    assert in_flight["items"][0]["available_at"] > in_flight["items"][0]["last_delivered_at"]
    assert high["enqueued_at"].endswith("Z") or high["enqueued_at"].endswith("+00:00")


async def test_browsing_never_claims(
    client: Client, clock: ManualClock, new_queue: NewQueue
) -> None:
    queue = await new_queue()
    await _mixed(client, clock, queue["id"])
    before = (await client.get(f"/v1/queues/{queue['id']}")).json()["stats"]
    for state in (None, "ready", "in_flight", "delayed"):
        await _list(client, queue["id"], **({} if state is None else {"state": state}))
    after = (await client.get(f"/v1/queues/{queue['id']}")).json()["stats"]
    assert after == before
    assert "receipt_handle" not in str(await _list(client, queue["id"]))


async def test_priority_filter(client: Client, clock: ManualClock, new_queue: NewQueue) -> None:
    queue = await new_queue()
    await _mixed(client, clock, queue["id"])
    low = await _list(client, queue["id"], priority="LOW")
    assert [m["payload"] for m in low["items"]] == ["low-1", "low-2"]
    high_ready = await _list(client, queue["id"], state="ready", priority="HIGH")
    assert [m["payload"] for m in high_ready["items"]] == ["high"]


@pytest.mark.parametrize("state", [None, "ready", "in_flight", "delayed"])
async def test_pages_walk_every_message_once(
    client: Client, clock: ManualClock, new_queue: NewQueue, state: str | None
) -> None:
    queue = await new_queue()
    for i in range(5):
        delay = 600 - 10 * i if state == "delayed" else 0
        await _send(
            client, queue["id"], f"m{i}", ["LOW", "HIGH", "MEDIUM"][i % 3], delay_seconds=delay
        )
        clock.advance(0.001)
    if state == "in_flight":
        for seconds in (50, 20, 40, 10, 30):
            await client.post(
                f"/v1/queues/{queue['id']}/messages/dequeue",
                json={"visibility_timeout_seconds": seconds},
            )
    params: dict[str, Any] = {} if state is None else {"state": state}
    whole = (await _list(client, queue["id"], **params))["items"]
    assert len(whole) == 5
    seen: list[dict[str, Any]] = []
    cursor = None
    pages = 0
    while True:
        page = await _list(
            client, queue["id"], limit=2, **params, **({} if cursor is None else {"cursor": cursor})
        )
        seen += page["items"]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert [m["id"] for m in seen] == [m["id"] for m in whole]
    assert pages == 3  # never an empty last page


async def test_a_cursor_is_bound_to_its_queue_and_filters(
    client: Client, new_queue: NewQueue
) -> None:
    queue, other = await new_queue("a"), await new_queue("b")
    for i in range(3):
        await _send(client, queue["id"], f"m{i}", "LOW")
    cursor = (await _list(client, queue["id"], limit=1))["next_cursor"]
    assert cursor is not None
    for path, params in [
        (f"/v1/queues/{other['id']}/messages", {"cursor": cursor}),
        (f"/v1/queues/{queue['id']}/messages", {"cursor": cursor, "state": "ready"}),
        (f"/v1/queues/{queue['id']}/messages", {"cursor": cursor, "priority": "LOW"}),
        (f"/v1/queues/{queue['id']}/messages", {"cursor": cursor[:-2]}),
        (f"/v1/queues/{queue['id']}/messages", {"cursor": ""}),
        (f"/v1/queues/{queue['id']}/dead-letters", {"cursor": cursor}),
    ]:
        assert_problem(await client.get(path, params=params), 400, "invalid_cursor")


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"state": "sleeping"}, "invalid_state"),
        ({"state": "READY"}, "invalid_state"),
        ({"state": ""}, "invalid_state"),
        ({"state": ["ready", "ready"]}, "invalid_state"),
        ({"priority": "URGENT"}, "invalid_priority"),
        ({"priority": "low"}, "invalid_priority"),
        ({"limit": "0"}, "invalid_limit"),
        ({"limit": "101"}, "invalid_limit"),
        ({"limit": "ten"}, "invalid_limit"),
        ({"cursor": "not-a-cursor"}, "invalid_cursor"),
    ],
)
async def test_bad_parameters_are_400(
    client: Client, new_queue: NewQueue, params: dict[str, Any], code: str
) -> None:
    queue = await new_queue()
    response = await client.get(f"/v1/queues/{queue['id']}/messages", params=params)
    assert_problem(response, 400, code)


async def test_an_unknown_queue_is_404(client: Client) -> None:
    base = f"/v1/queues/{MISSING_ID}/messages"
    assert_problem(await client.get(base), 404, "queue_not_found")
    assert_problem(await client.get(f"{base}/{uuid.uuid4()}"), 404, "queue_not_found")
    assert_problem(await client.delete(f"{base}/{uuid.uuid4()}"), 404, "queue_not_found")
    assert_problem(await client.get("/v1/queues/nope/messages"), 400, "invalid_path")
    assert_problem(await client.get(f"{base}/nope"), 400, "invalid_path")


async def test_show_and_delete_one(client: Client, clock: ManualClock, new_queue: NewQueue) -> None:
    queue = await new_queue()
    ids = await _mixed(client, clock, queue["id"])
    url = f"/v1/queues/{queue['id']}/messages/{ids['medium']}"

    shown = await client.get(url)
    assert shown.status_code == 200
    assert set(shown.json()) == ITEM_KEYS
    assert (shown.json()["payload"], shown.json()["state"]) == ("medium", "in_flight")

    deleted = await client.delete(url, headers={"x-request-id": "op-42"})
    assert deleted.status_code == 204 and deleted.content == b""
    assert_problem(await client.get(url), 404, "message_not_found")
    assert_problem(await client.delete(url), 404, "message_not_found")
    stats = (await client.get(f"/v1/queues/{queue['id']}")).json()["stats"]
    assert (stats["ready"], stats["in_flight"], stats["delayed"]) == (3, 0, 1)

    audit = (await client.get("/v1/audit-log", params={"action": "message.deleted"})).json()[
        "items"
    ]
    assert [(a["target_type"], a["target_id"], a["request_id"], a["actor"]) for a in audit] == [
        ("message", ids["medium"], "op-42", "anonymous")
    ]


async def test_a_deleted_messages_delivery_still_acknowledges_204(
    client: Client, new_queue: NewQueue
) -> None:
    queue = await new_queue()
    await _send(client, queue["id"], "job", "LOW")
    taken = (await client.post(f"/v1/queues/{queue['id']}/messages/dequeue")).json()
    assert (
        await client.delete(f"/v1/queues/{queue['id']}/messages/{taken['id']}")
    ).status_code == 204
    ack = await client.post(
        f"/v1/queues/{queue['id']}/messages/{taken['id']}/acknowledge",
        json={"receipt_handle": taken["receipt_handle"]},
    )
    assert ack.status_code == 204


async def test_acknowledged_expired_and_unknown_ids_are_404(
    client: Client, clock: ManualClock, new_queue: NewQueue
) -> None:
    queue = await new_queue()
    short = await _send(client, queue["id"], "short", "LOW", ttl_seconds=5)
    done = await _send(client, queue["id"], "done", "HIGH")
    taken = (await client.post(f"/v1/queues/{queue['id']}/messages/dequeue")).json()
    assert taken["id"] == done
    await client.post(
        f"/v1/queues/{queue['id']}/messages/{done}/acknowledge",
        json={"receipt_handle": taken["receipt_handle"]},
    )
    clock.advance(6)
    for gone in (short, done, str(uuid.uuid4())):
        url = f"/v1/queues/{queue['id']}/messages/{gone}"
        assert_problem(await client.get(url), 404, "message_not_found")
        assert_problem(await client.delete(url), 404, "message_not_found")
    assert (await _list(client, queue["id"]))["items"] == []


async def test_a_redriven_message_names_its_dead_letter(
    client: Client, clock: ManualClock, new_queue: NewQueue
) -> None:
    queue = await new_queue("dlq", max_delivery_attempts=1)
    await _send(client, queue["id"], "a", "LOW")
    await _send(client, queue["id"], "b", "LOW")
    await client.post(
        f"/v1/queues/{queue['id']}/messages/dequeue",
        json={"max_messages": 2, "visibility_timeout_seconds": 1},
    )
    clock.advance(2)
    await client.post(f"/v1/queues/{queue['id']}/messages/dequeue")
    newest, oldest = (await client.get(f"/v1/queues/{queue['id']}/dead-letters")).json()["items"]

    one = (
        await client.post(f"/v1/queues/{queue['id']}/dead-letters/{newest['id']}/redrive")
    ).json()
    bulk = await client.post(f"/v1/queues/{queue['id']}/dead-letters/redrive", json={})
    assert bulk.json() == {"redriven": 1}

    shown = (await client.get(f"/v1/queues/{queue['id']}/messages/{one['id']}")).json()
    assert shown["redriven_from"] == newest["id"]
    items = (await _list(client, queue["id"]))["items"]
    assert {m["redriven_from"] for m in items} == {newest["id"], oldest["id"]}
    (bulk_row, single_row) = (
        await client.get("/v1/audit-log", params={"action": "dead_letter.redriven"})
    ).json()["items"]
    assert (single_row["target_id"], single_row["details"]["new_message_id"]) == (
        newest["id"],
        one["id"],
    )
    (from_oldest,) = [m["id"] for m in items if m["redriven_from"] == oldest["id"]]
    assert bulk_row["details"]["new_message_ids"] == {oldest["id"]: from_oldest}
