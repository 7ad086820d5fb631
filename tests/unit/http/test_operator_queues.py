"""GET /v1/queues, GET /v1/queues/{id}, pause, resume, purge and DELETE over HTTP."""

from __future__ import annotations

from typing import Any

import pytest

from retsu.adapters.memory.clock import ManualClock
from tests.unit.http.helpers import MISSING_ID, Client, NewQueue, assert_problem

QUEUE_KEYS = {
    "id",
    "name",
    "visibility_timeout_seconds",
    "max_delivery_attempts",
    "default_message_ttl_seconds",
    "paused",
    "group_max_in_flight",
    "max_in_flight",
    "rate_limit",
    "group_rate_limit",
    "completed_retention_seconds",
}
STATS_KEYS = {
    "ready",
    "in_flight",
    "delayed",
    "dead_letters",
    "oldest_ready_age_seconds",
    "groups",
    "completed",
}


async def _send(client: Client, queue_id: str, payload: str = "x", **extra: Any) -> str:
    response = await client.post(
        f"/v1/queues/{queue_id}/messages", json={"payload": payload, "priority": "HIGH", **extra}
    )
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def _take(client: Client, queue_id: str) -> dict[str, Any] | None:
    response = await client.post(f"/v1/queues/{queue_id}/messages/dequeue")
    if response.status_code == 204:
        return None
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


# -- GET /v1/queues -------------------------------------------------------------------


async def test_list_queues_by_name_in_byte_order(client: Client, new_queue: NewQueue) -> None:
    for name in ("b", "a_1", "a-1", "a0"):
        await new_queue(name)
    response = await client.get("/v1/queues")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"items", "next_cursor"}
    assert [q["name"] for q in body["items"]] == ["a-1", "a0", "a_1", "b"]
    assert all(set(q) == QUEUE_KEYS for q in body["items"])
    assert body["next_cursor"] is None


async def test_list_queues_pages_with_an_opaque_cursor(client: Client, new_queue: NewQueue) -> None:
    names = [f"q{i:02}" for i in range(7)]
    for name in reversed(names):
        await new_queue(name)
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 3, **({"cursor": cursor} if cursor else {})}
        body = (await client.get("/v1/queues", params=params)).json()
        assert len(body["items"]) <= 3
        seen += [q["name"] for q in body["items"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
        assert isinstance(cursor, str) and "q0" not in cursor
    assert seen == names


async def test_list_queues_name_filter(client: Client, new_queue: NewQueue) -> None:
    queue = await new_queue("orders")
    await new_queue("orders-2")
    body = (await client.get("/v1/queues", params={"name": "orders"})).json()
    assert body == {"items": [queue], "next_cursor": None}
    assert (await client.get("/v1/queues?name=absent")).json()["items"] == []
    # No queue can be called that, so the exact-name filter simply matches nothing.
    impossible = await client.get("/v1/queues?name=Not%20Valid")
    assert impossible.status_code == 200
    assert impossible.json() == {"items": [], "next_cursor": None}
    assert_problem(await client.get("/v1/queues?name=a&name=b"), 400, "invalid_queue_name")


@pytest.mark.parametrize(
    "query",
    ["limit=0", "limit=101", "limit=-1", "limit=abc", "limit=", "limit=1.5", "limit=1&limit=2"],
)
async def test_list_queues_invalid_limit(client: Client, query: str) -> None:
    assert_problem(await client.get(f"/v1/queues?{query}"), 400, "invalid_limit")


@pytest.mark.parametrize("limit", ["1", "100", "050"])
async def test_list_queues_limits_in_range(client: Client, limit: str) -> None:
    assert (await client.get(f"/v1/queues?limit={limit}")).status_code == 200


@pytest.mark.parametrize(
    "cursor",
    ["", "x", "%00", "eyJ2IjoxfQ", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "a" * 2000, "é"],
)
async def test_list_queues_malformed_cursor(client: Client, cursor: str) -> None:
    response = await client.get("/v1/queues", params={"cursor": cursor})
    assert_problem(response, 400, "invalid_cursor")


async def test_list_queues_tampered_cursor(client: Client, new_queue: NewQueue) -> None:
    for name in ("a", "b", "c"):
        await new_queue(name)
    cursor = (await client.get("/v1/queues?limit=1")).json()["next_cursor"]
    tampered = cursor[:-1] + ("A" if cursor[-1] != "A" else "B")
    assert_problem(
        await client.get("/v1/queues", params={"cursor": tampered}), 400, "invalid_cursor"
    )
    repeated = await client.get("/v1/queues", params=[("cursor", cursor), ("cursor", cursor)])
    assert_problem(repeated, 400, "invalid_cursor")
    assert (await client.get("/v1/queues", params={"cursor": cursor})).status_code == 200


# -- GET /v1/queues/{id} ----------------------------------------------------------------


async def test_get_queue_with_exact_stats(
    client: Client, new_queue: NewQueue, clock: ManualClock
) -> None:
    queue = await new_queue(max_delivery_attempts=1, visibility_timeout_seconds=5)
    qid = queue["id"]
    await _send(client, qid, "poison")
    await _take(client, qid)
    clock.advance(6)
    assert await _take(client, qid) is None  # dead-letters "poison"
    await _send(client, qid, "ready-1")
    await _send(client, qid, "delayed", delay_seconds=30)
    clock.advance(2.5)
    await _send(client, qid, "ready-2")
    await _send(client, qid, "leased")
    taken = await _take(client, qid)
    assert taken is not None and taken["payload"] == "ready-1"

    response = await client.get(f"/v1/queues/{qid}")

    assert response.status_code == 200
    body = response.json()
    assert set(body) == QUEUE_KEYS | {"stats"}
    assert {k: body[k] for k in QUEUE_KEYS} == queue
    assert set(body["stats"]) == STATS_KEYS
    assert body["stats"] == {
        "ready": 2,
        "in_flight": 1,
        "delayed": 1,
        "dead_letters": 1,
        "oldest_ready_age_seconds": 0.0,
        "groups": 0,
        "completed": 0,
    }
    clock.advance(1.25)
    stats = (await client.get(f"/v1/queues/{qid}")).json()["stats"]
    assert stats["oldest_ready_age_seconds"] == 1.25


async def test_get_queue_empty_stats(client: Client, new_queue: NewQueue) -> None:
    queue = await new_queue()
    stats = (await client.get(f"/v1/queues/{queue['id']}")).json()["stats"]
    assert stats == dict.fromkeys(STATS_KEYS, 0) | {"oldest_ready_age_seconds": 0.0}


async def test_get_queue_errors(client: Client) -> None:
    assert_problem(await client.get(f"/v1/queues/{MISSING_ID}"), 404, "queue_not_found")
    assert_problem(await client.get("/v1/queues/not-a-uuid"), 400, "invalid_path")


# -- pause / resume ---------------------------------------------------------------------


async def test_pause_and_resume(client: Client, new_queue: NewQueue) -> None:
    queue = await new_queue()
    qid = queue["id"]
    await _send(client, qid, "job")
    response = await client.post(f"/v1/queues/{qid}/pause")
    assert response.status_code == 200
    assert response.json() == {**queue, "paused": True}
    assert await _take(client, qid) is None
    assert (await client.get(f"/v1/queues/{qid}")).json()["paused"] is True
    await _send(client, qid, "while-paused")
    again = await client.post(f"/v1/queues/{qid}/pause")  # pausing twice is fine
    assert again.status_code == 200 and again.json()["paused"] is True
    resumed = await client.post(f"/v1/queues/{qid}/resume")
    assert resumed.status_code == 200
    assert resumed.json() == queue
    taken = await _take(client, qid)
    assert taken is not None and taken["payload"] == "job"


@pytest.mark.parametrize("action", ["pause", "resume", "purge"])
async def test_queue_actions_on_missing_or_malformed_ids(client: Client, action: str) -> None:
    response = await client.post(f"/v1/queues/{MISSING_ID}/{action}")
    assert_problem(response, 404, "queue_not_found")
    assert_problem(await client.post(f"/v1/queues/nope/{action}"), 400, "invalid_path")
    response = await client.get(f"/v1/queues/{MISSING_ID}/{action}")
    assert_problem(response, 405, "method_not_allowed")


# -- purge ------------------------------------------------------------------------------


async def test_purge_counts_live_messages(client: Client, new_queue: NewQueue) -> None:
    queue = await new_queue()
    for i in range(3):
        await _send(client, queue["id"], str(i))
    await _take(client, queue["id"])
    response = await client.post(f"/v1/queues/{queue['id']}/purge")
    assert response.status_code == 200
    assert response.json() == {"purged": 3}
    assert await _take(client, queue["id"]) is None
    assert (await client.post(f"/v1/queues/{queue['id']}/purge")).json() == {"purged": 0}


# -- delete -----------------------------------------------------------------------------


async def test_delete_queue(client: Client, new_queue: NewQueue) -> None:
    queue = await new_queue("orders")
    await _send(client, queue["id"])
    response = await client.delete(f"/v1/queues/{queue['id']}")
    assert response.status_code == 204
    assert response.content == b""
    assert response.headers.get("x-request-id")
    assert_problem(await client.get(f"/v1/queues/{queue['id']}"), 404, "queue_not_found")
    response = await client.post(f"/v1/queues/{queue['id']}/messages/dequeue")
    assert_problem(response, 404, "queue_not_found")
    assert_problem(await client.delete(f"/v1/queues/{queue['id']}"), 404, "queue_not_found")
    again = await new_queue("orders")  # the name is free again
    assert again["id"] != queue["id"]


async def test_delete_queue_errors(client: Client) -> None:
    assert_problem(await client.delete(f"/v1/queues/{MISSING_ID}"), 404, "queue_not_found")
    assert_problem(await client.delete("/v1/queues/123"), 400, "invalid_path")
    assert_problem(await client.delete("/v1/queues"), 405, "method_not_allowed")
