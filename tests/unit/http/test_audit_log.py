"""GET /v1/audit-log: one row per operator action, newest first, filtered and paged."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from retsu.adapters.memory.clock import ManualClock
from tests.unit.http.helpers import MISSING_ID, Client, NewQueue, assert_problem

ROW_KEYS = {"id", "at", "actor", "action", "target_type", "target_id", "request_id", "details"}


async def _log(client: Client, **params: Any) -> list[dict[str, Any]]:
    response = await client.get("/v1/audit-log", params={"limit": 100, **params})
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


async def test_every_operator_action_writes_one_row(
    client: Client, new_queue: NewQueue, clock: ManualClock
) -> None:
    queue = await new_queue("audited", max_delivery_attempts=1)
    qid = queue["id"]
    headers = {"x-request-id": "req-operator-1"}
    await client.patch(f"/v1/queues/{qid}", json={"max_delivery_attempts": 1}, headers=headers)
    await client.post(f"/v1/queues/{qid}/pause")
    await client.post(f"/v1/queues/{qid}/resume")
    for payload in ("a", "b", "c"):
        await client.post(
            f"/v1/queues/{qid}/messages", json={"payload": payload, "priority": "LOW"}
        )
    await client.post(
        f"/v1/queues/{qid}/messages/dequeue",
        json={"max_messages": 3, "visibility_timeout_seconds": 1},
    )
    clock.advance(2)
    await client.post(f"/v1/queues/{qid}/messages/dequeue")
    dead = (await client.get(f"/v1/queues/{qid}/dead-letters")).json()["items"]
    await client.post(f"/v1/queues/{qid}/dead-letters/{dead[0]['id']}/redrive")
    await client.delete(f"/v1/queues/{qid}/dead-letters/{dead[1]['id']}")
    await client.post(f"/v1/queues/{qid}/dead-letters/redrive", json={"limit": 10})
    await client.post(f"/v1/queues/{qid}/purge")
    await client.delete(f"/v1/queues/{qid}")

    rows = await _log(client)

    assert [r["action"] for r in rows] == [
        "queue.deleted",
        "queue.purged",
        "dead_letter.redriven",
        "dead_letter.deleted",
        "dead_letter.redriven",
        "queue.resumed",
        "queue.paused",
        "queue.updated",
        "queue.created",
    ]
    assert all(set(r) == ROW_KEYS for r in rows)
    assert all(r["actor"] == "anonymous" for r in rows)
    assert all(uuid.UUID(r["id"]).version == 7 for r in rows)
    assert all(r["at"].endswith("Z") for r in rows)
    by_action = {r["action"]: r for r in rows}
    assert by_action["queue.updated"]["request_id"] == "req-operator-1"
    assert by_action["queue.updated"]["details"] == {"changes": {"max_delivery_attempts": 1}}
    assert by_action["queue.purged"]["details"] == {"purged": 2}  # the two redriven
    assert by_action["queue.deleted"]["details"] == {
        "name": "audited",
        "messages": 0,
        "dead_letters": 0,
    }
    assert rows[2]["target_type"] == "queue"
    # The bulk redrive names both ids of each record it moved (SPEC §3.6).
    new_ids = rows[2]["details"].pop("new_message_ids")
    assert rows[2]["details"] == {"limit": 10, "redriven": 1}
    assert list(new_ids) == [dead[2]["id"]]
    assert (rows[3]["target_type"], rows[3]["target_id"]) == ("dead_letter", dead[1]["id"])
    assert (rows[4]["target_type"], rows[4]["target_id"]) == ("dead_letter", dead[0]["id"])
    assert all(r["target_id"] == qid for r in rows if r["target_type"] == "queue")
    assert all(isinstance(r["request_id"], str) and r["request_id"] for r in rows)


async def test_failed_actions_write_no_row(client: Client, new_queue: NewQueue) -> None:
    queue = await new_queue()
    assert (await client.post("/v1/queues", json={"name": queue["name"]})).status_code == 409
    await client.patch(f"/v1/queues/{MISSING_ID}", json={"max_delivery_attempts": 2})
    await client.patch(f"/v1/queues/{queue['id']}", json={})
    await client.patch(f"/v1/queues/{queue['id']}", json={"max_delivery_attempts": 0})
    await client.post(f"/v1/queues/{MISSING_ID}/pause")
    await client.post(f"/v1/queues/{MISSING_ID}/purge")
    await client.delete(f"/v1/queues/{MISSING_ID}")
    await client.post(f"/v1/queues/{queue['id']}/dead-letters/{MISSING_ID}/redrive")
    await client.delete(f"/v1/queues/{queue['id']}/dead-letters/{MISSING_ID}")
    await client.post(f"/v1/queues/{queue['id']}/dead-letters/redrive", json={"limit": 0})
    assert [r["action"] for r in await _log(client)] == ["queue.created"]


async def test_filters_and_pages(client: Client, new_queue: NewQueue) -> None:
    a = await new_queue("a")
    b = await new_queue("b")
    for _ in range(3):
        await client.post(f"/v1/queues/{a['id']}/pause")
    only_b = await _log(client, queue_id=b["id"])
    assert [(r["action"], r["target_id"]) for r in only_b] == [("queue.created", b["id"])]
    pauses = await _log(client, action="queue.paused")
    assert len(pauses) == 3 and {r["target_id"] for r in pauses} == {a["id"]}
    both = await _log(client, action="queue.created", queue_id=a["id"])
    assert [r["target_id"] for r in both] == [a["id"]]
    assert await _log(client, queue_id=MISSING_ID) == []

    everything = await _log(client)
    seen: list[dict[str, Any]] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        body = (await client.get("/v1/audit-log", params=params)).json()
        seen += body["items"]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == everything and len(seen) == 5


async def test_a_cursor_is_bound_to_the_filters(client: Client, new_queue: NewQueue) -> None:
    a = await new_queue("a")
    await new_queue("b")
    cursor = (await client.get("/v1/audit-log?limit=1")).json()["next_cursor"]
    response = await client.get("/v1/audit-log", params={"cursor": cursor, "queue_id": a["id"]})
    assert_problem(response, 400, "invalid_cursor")


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ("limit=0", "invalid_limit"),
        ("limit=101", "invalid_limit"),
        ("limit=ten", "invalid_limit"),
        ("cursor=nope", "invalid_cursor"),
        ("queue_id=nope", "invalid_queue_id"),
        (f"queue_id={MISSING_ID}&queue_id={MISSING_ID}", "invalid_queue_id"),
        ("action=queue.exploded", "invalid_action"),
        ("action=", "invalid_action"),
    ],
)
async def test_bad_queries(client: Client, query: str, code: str) -> None:
    assert_problem(await client.get(f"/v1/audit-log?{query}"), 400, code)


async def test_wrong_method(client: Client) -> None:
    assert_problem(await client.post("/v1/audit-log"), 405, "method_not_allowed")
