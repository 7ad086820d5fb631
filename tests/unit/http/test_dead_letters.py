"""Dead-letter routes over HTTP: browse, read, redrive (one and bulk), delete."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from retsu.adapters.memory.clock import ManualClock
from tests.unit.http.helpers import MISSING_ID, Client, NewQueue, assert_problem

DEAD_LETTER_KEYS = {
    "id",
    "payload",
    "priority",
    "delivery_attempts",
    "enqueued_at",
    "last_delivered_at",
    "dead_lettered_at",
    "reason",
    "group",
    "attempts",
    "last_error",
}


async def _poison(client: Client, clock: ManualClock, queue_id: str, *payloads: str) -> list[str]:
    """Dead-letter ``payloads`` with one dequeue (the queue allows one attempt); returns ids."""
    ids = []
    for payload in payloads:
        response = await client.post(
            f"/v1/queues/{queue_id}/messages", json={"payload": payload, "priority": "LOW"}
        )
        ids.append(response.json()["id"])
    response = await client.post(
        f"/v1/queues/{queue_id}/messages/dequeue",
        json={"max_messages": len(payloads), "visibility_timeout_seconds": 1},
    )
    assert len(response.json()["messages"]) == len(payloads)
    clock.advance(2)
    response = await client.post(f"/v1/queues/{queue_id}/messages/dequeue")
    assert response.status_code == 204
    clock.advance(1)
    return ids


@pytest.fixture
async def queue(new_queue: NewQueue) -> dict[str, Any]:
    return await new_queue("dlq", max_delivery_attempts=1)


async def test_list_dead_letters_newest_first(
    client: Client, clock: ManualClock, queue: dict[str, Any]
) -> None:
    older = await _poison(client, clock, queue["id"], "a", "b")
    newer = await _poison(client, clock, queue["id"], "c")
    response = await client.get(f"/v1/queues/{queue['id']}/dead-letters")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"items", "next_cursor"}
    assert body["next_cursor"] is None
    assert [d["id"] for d in body["items"]] == [newer[0], older[1], older[0]]
    first = body["items"][0]
    assert set(first) == DEAD_LETTER_KEYS
    assert (first["payload"], first["priority"], first["delivery_attempts"]) == ("c", "LOW", 1)
    assert first["reason"] == "MAX_DELIVERY_ATTEMPTS_EXHAUSTED"
    assert first["enqueued_at"] <= first["last_delivered_at"] < first["dead_lettered_at"]
    assert first["dead_lettered_at"].endswith("Z")


async def test_list_dead_letters_with_a_cursor(
    client: Client, clock: ManualClock, queue: dict[str, Any]
) -> None:
    ids = await _poison(client, clock, queue["id"], *(str(i) for i in range(5)))
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        body = (await client.get(f"/v1/queues/{queue['id']}/dead-letters", params=params)).json()
        seen += [d["id"] for d in body["items"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(ids))


async def test_a_dead_letter_cursor_is_bound_to_its_queue(
    client: Client, clock: ManualClock, queue: dict[str, Any], new_queue: NewQueue
) -> None:
    other = await new_queue("other", max_delivery_attempts=1)
    await _poison(client, clock, queue["id"], "a", "b")
    await _poison(client, clock, other["id"], "c", "d")
    cursor = (await client.get(f"/v1/queues/{queue['id']}/dead-letters?limit=1")).json()[
        "next_cursor"
    ]
    response = await client.get(f"/v1/queues/{other['id']}/dead-letters", params={"cursor": cursor})
    assert_problem(response, 400, "invalid_cursor")
    audit_cursor = await client.get("/v1/audit-log", params={"cursor": cursor})
    assert_problem(audit_cursor, 400, "invalid_cursor")


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ("limit=0", "invalid_limit"),
        ("limit=101", "invalid_limit"),
        ("limit=x", "invalid_limit"),
        ("cursor=x", "invalid_cursor"),
        ("cursor=", "invalid_cursor"),
    ],
)
async def test_list_dead_letters_bad_query(
    client: Client, queue: dict[str, Any], query: str, code: str
) -> None:
    response = await client.get(f"/v1/queues/{queue['id']}/dead-letters?{query}")
    assert_problem(response, 400, code)


async def test_read_one_dead_letter(
    client: Client, clock: ManualClock, queue: dict[str, Any]
) -> None:
    (message_id,) = await _poison(client, clock, queue["id"], "x")
    response = await client.get(f"/v1/queues/{queue['id']}/dead-letters/{message_id}")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == DEAD_LETTER_KEYS
    assert (body["id"], body["payload"]) == (message_id, "x")
    listed = (await client.get(f"/v1/queues/{queue['id']}/dead-letters")).json()["items"]
    assert listed == [body]


async def test_redrive_one(client: Client, clock: ManualClock, queue: dict[str, Any]) -> None:
    (message_id,) = await _poison(client, clock, queue["id"], "again")
    response = await client.post(f"/v1/queues/{queue['id']}/dead-letters/{message_id}/redrive")
    assert response.status_code == 201
    body = response.json()
    assert set(body) == {"id"}
    assert body["id"] != message_id and uuid.UUID(body["id"]).version == 7
    path = f"/v1/queues/{queue['id']}/dead-letters/{message_id}"
    assert_problem(await client.get(path), 404, "dead_letter_not_found")
    taken = (await client.post(f"/v1/queues/{queue['id']}/messages/dequeue")).json()
    assert (taken["id"], taken["payload"], taken["priority"]) == (body["id"], "again", "LOW")
    assert taken["delivery_attempts"] == 1
    again = await client.post(f"{path}/redrive")
    assert_problem(again, 404, "dead_letter_not_found")
    metrics = (await client.get("/metrics")).text
    assert 'queue_messages_redriven_total{queue_name="dlq"} 1.0' in metrics


async def test_bulk_redrive(client: Client, clock: ManualClock, queue: dict[str, Any]) -> None:
    await _poison(client, clock, queue["id"], "a", "b")
    await _poison(client, clock, queue["id"], "c")
    path = f"/v1/queues/{queue['id']}/dead-letters/redrive"
    response = await client.post(path, json={"limit": 2})
    assert response.status_code == 200
    assert response.json() == {"redriven": 2}
    remaining = (await client.get(f"/v1/queues/{queue['id']}/dead-letters")).json()["items"]
    assert [d["payload"] for d in remaining] == ["c"]
    # No body, an empty object and a null limit all mean the default (100).
    assert (await client.post(path)).json() == {"redriven": 1}
    assert (await client.post(path, json={})).json() == {"redriven": 0}
    assert (await client.post(path, json={"limit": None})).json() == {"redriven": 0}
    body = (
        await client.post(f"/v1/queues/{queue['id']}/messages/dequeue", json={"max_messages": 10})
    ).json()
    assert [m["payload"] for m in body["messages"]] == ["a", "b", "c"]
    metrics = (await client.get("/metrics")).text
    assert 'queue_messages_redriven_total{queue_name="dlq"} 3.0' in metrics


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"limit": 0}, "invalid_limit"),
        ({"limit": 1001}, "invalid_limit"),
        ({"limit": "5"}, "invalid_json"),
        ({"limit": 2.5}, "invalid_json"),
        ({"limit": True}, "invalid_json"),
        ({"max": 5}, "invalid_json"),
        ([], "invalid_json"),
    ],
)
async def test_bulk_redrive_bad_bodies(
    client: Client, queue: dict[str, Any], body: Any, code: str
) -> None:
    response = await client.post(f"/v1/queues/{queue['id']}/dead-letters/redrive", json=body)
    assert_problem(response, 400, code)


async def test_bulk_redrive_limits_at_the_bounds(client: Client, queue: dict[str, Any]) -> None:
    path = f"/v1/queues/{queue['id']}/dead-letters/redrive"
    for limit in (1, 1000):
        assert (await client.post(path, json={"limit": limit})).json() == {"redriven": 0}


async def test_delete_a_dead_letter(
    client: Client, clock: ManualClock, queue: dict[str, Any]
) -> None:
    first, second = await _poison(client, clock, queue["id"], "a", "b")
    path = f"/v1/queues/{queue['id']}/dead-letters/{first}"
    response = await client.delete(path)
    assert response.status_code == 204
    assert response.content == b""
    assert_problem(await client.delete(path), 404, "dead_letter_not_found")
    listed = (await client.get(f"/v1/queues/{queue['id']}/dead-letters")).json()["items"]
    assert [d["id"] for d in listed] == [second]


@pytest.mark.parametrize(
    ("method", "suffix"),
    [
        ("GET", ""),
        ("GET", f"/{MISSING_ID}"),
        ("POST", f"/{MISSING_ID}/redrive"),
        ("POST", "/redrive"),
        ("DELETE", f"/{MISSING_ID}"),
    ],
)
async def test_dead_letter_routes_of_an_unknown_queue(
    client: Client, method: str, suffix: str
) -> None:
    response = await client.request(method, f"/v1/queues/{MISSING_ID}/dead-letters{suffix}")
    assert_problem(response, 404, "queue_not_found")
    response = await client.request(method, f"/v1/queues/bad/dead-letters{suffix}")
    assert_problem(response, 400, "invalid_path")


@pytest.mark.parametrize(
    ("method", "suffix"),
    [("GET", f"/{MISSING_ID}"), ("POST", f"/{MISSING_ID}/redrive"), ("DELETE", f"/{MISSING_ID}")],
)
async def test_an_unknown_dead_letter_is_404(
    client: Client, queue: dict[str, Any], method: str, suffix: str
) -> None:
    response = await client.request(method, f"/v1/queues/{queue['id']}/dead-letters{suffix}")
    assert_problem(response, 404, "dead_letter_not_found")
    bad = suffix.replace(MISSING_ID, "bad")
    response = await client.request(method, f"/v1/queues/{queue['id']}/dead-letters{bad}")
    assert_problem(response, 400, "invalid_path")


async def test_dead_letter_routes_wrong_method(client: Client, queue: dict[str, Any]) -> None:
    base = f"/v1/queues/{queue['id']}/dead-letters"
    assert_problem(await client.put(base), 405, "method_not_allowed")
    assert_problem(await client.get(f"{base}/{MISSING_ID}/redrive"), 405, "method_not_allowed")
    assert_problem(await client.put(f"{base}/{MISSING_ID}"), 405, "method_not_allowed")


async def test_bulk_redrive_body_rules(client: Client, queue: dict[str, Any]) -> None:
    path = f"/v1/queues/{queue['id']}/dead-letters/redrive"
    response = await client.post(
        path, content=b'{"limit":5}', headers={"content-type": "text/plain"}
    )
    assert_problem(response, 415, "unsupported_media_type")
    too_big = b'{"limit":5}' + b" " * (1024 * 1024)
    response = await client.post(
        path, content=too_big, headers={"content-type": "application/json"}
    )
    assert_problem(response, 413, "payload_too_large")
    response = await client.post(path, content=b"{", headers={"content-type": "application/json"})
    assert_problem(response, 400, "invalid_json")
    empty = await client.post(path, content=b"", headers={"content-length": "0"})
    assert (empty.status_code, empty.json()) == (200, {"redriven": 0})
