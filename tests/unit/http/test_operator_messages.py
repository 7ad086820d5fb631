"""Idempotency-Key on enqueue and visibility changes over HTTP."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from litestar import Litestar

from retsu.adapters.memory.clock import ManualClock
from tests.unit.http.helpers import MISSING_ID, Client, NewQueue, assert_problem, raw_request

MESSAGE = {"payload": "hello", "priority": "HIGH"}


async def _keyed(client: Client, queue_id: str, key: str, body: Any = None) -> Any:
    return await client.post(
        f"/v1/queues/{queue_id}/messages",
        json=MESSAGE if body is None else body,
        headers={"idempotency-key": key},
    )


async def _take(client: Client, queue_id: str, **body: Any) -> dict[str, Any] | None:
    response = await client.post(f"/v1/queues/{queue_id}/messages/dequeue", json=body or None)
    if response.status_code == 204:
        return None
    assert response.status_code == 200, response.text
    taken: dict[str, Any] = response.json()
    return taken


# -- Idempotency-Key ----------------------------------------------------------------------


async def test_a_repeat_is_answered_200_with_the_original_id(
    client: Client, new_queue: NewQueue
) -> None:
    queue = await new_queue()
    first = await _keyed(client, queue["id"], "order-7")
    assert first.status_code == 201
    assert "idempotent-replayed" not in first.headers
    again = await _keyed(client, queue["id"], "order-7")
    assert again.status_code == 200
    assert again.json() == first.json()
    assert again.headers["idempotent-replayed"] == "true"
    assert again.headers["content-type"] == "application/json"
    taken = await _take(client, queue["id"], max_messages=10)
    assert taken is not None and len(taken["messages"]) == 1


async def test_a_repeat_after_consumption_still_replays(
    client: Client, new_queue: NewQueue
) -> None:
    queue = await new_queue()
    first = (await _keyed(client, queue["id"], "k")).json()
    message = await _take(client, queue["id"])
    assert message is not None
    ack = await client.post(
        f"/v1/queues/{queue['id']}/messages/{message['id']}/acknowledge",
        json={"receipt_handle": message["receipt_handle"]},
    )
    assert ack.status_code == 204
    again = await _keyed(client, queue["id"], "k")
    assert (again.status_code, again.json()) == (200, first)


async def test_the_same_message_after_parsing_is_a_repeat(
    client: Client, new_queue: NewQueue
) -> None:
    queue = await new_queue()
    await _keyed(client, queue["id"], "k", {**MESSAGE, "delay_seconds": None})
    reordered = {"priority": "HIGH", "ttl_seconds": None, "payload": "hello", "delay_seconds": 0}
    assert (await _keyed(client, queue["id"], "k", reordered)).status_code == 200


@pytest.mark.parametrize(
    "changed",
    [{"payload": "other"}, {"priority": "LOW"}, {"ttl_seconds": 60}, {"delay_seconds": 1}],
)
async def test_the_key_with_another_message_is_409(
    client: Client, new_queue: NewQueue, changed: dict[str, Any]
) -> None:
    queue = await new_queue()
    await _keyed(client, queue["id"], "k")
    response = await _keyed(client, queue["id"], "k", {**MESSAGE, **changed})
    assert_problem(response, 409, "idempotency_key_conflict")


async def test_keys_are_scoped_to_the_queue(client: Client, new_queue: NewQueue) -> None:
    a = await new_queue("a")
    b = await new_queue("b")
    assert (await _keyed(client, a["id"], "k")).status_code == 201
    assert (await _keyed(client, b["id"], "k")).status_code == 201


async def test_keys_are_remembered_for_24_hours(
    client: Client, new_queue: NewQueue, clock: ManualClock
) -> None:
    queue = await new_queue()
    first = (await _keyed(client, queue["id"], "k")).json()
    clock.advance(24 * 3600 - 1)
    assert (await _keyed(client, queue["id"], "k")).status_code == 200
    clock.advance(1)
    fresh = await _keyed(client, queue["id"], "k", {**MESSAGE, "payload": "new day"})
    assert fresh.status_code == 201 and fresh.json() != first


@pytest.mark.parametrize("key", ["x" * 129, "with space", "tab\tinside"])
async def test_an_invalid_key_is_400(client: Client, new_queue: NewQueue, key: str) -> None:
    queue = await new_queue()
    response = await _keyed(client, queue["id"], key)
    assert_problem(response, 400, "invalid_idempotency_key")
    assert (await _take(client, queue["id"])) is None


@pytest.mark.parametrize(
    "headers",
    [
        [(b"idempotency-key", b"")],
        [(b"idempotency-key", "é".encode())],
        [(b"idempotency-key", b"\xff\xfe")],
        [(b"idempotency-key", b"a\x01b")],
        [(b"idempotency-key", b"a"), (b"idempotency-key", b"a")],
    ],
)
async def test_raw_invalid_keys_are_400(
    app: Litestar, new_queue: NewQueue, headers: list[tuple[bytes, bytes]]
) -> None:
    queue = await new_queue()
    status, response_headers, body = await raw_request(
        app,
        "POST",
        f"/v1/queues/{queue['id']}/messages",
        [(b"content-type", b"application/json"), *headers],
        [b'{"payload":"p","priority":"LOW"}'],
    )
    assert status == 400
    assert b"invalid_idempotency_key" in body
    assert response_headers[b"content-type"] == b"application/problem+json"


async def test_key_limits_are_accepted(client: Client, new_queue: NewQueue) -> None:
    queue = await new_queue()
    for key in ("a", "~" * 128, "!#$%&'*+-.^_`|~0123456789"):
        assert (await _keyed(client, queue["id"], key)).status_code == 201


async def test_the_batch_route_refuses_the_header(client: Client, new_queue: NewQueue) -> None:
    queue = await new_queue()
    response = await client.post(
        f"/v1/queues/{queue['id']}/messages/batch",
        json={"messages": [MESSAGE]},
        headers={"idempotency-key": "k"},
    )
    body = assert_problem(response, 400, "invalid_idempotency_key")
    assert "batch" in body["detail"]
    assert await _take(client, queue["id"]) is None


async def test_keyed_enqueue_keeps_the_other_errors(client: Client, new_queue: NewQueue) -> None:
    queue = await new_queue(default_message_ttl_seconds=60)
    assert_problem(await _keyed(client, MISSING_ID, "k"), 404, "queue_not_found")
    bad = {**MESSAGE, "priority": "URGENT"}
    assert_problem(await _keyed(client, queue["id"], "k", bad), 400, "invalid_priority")
    late = {**MESSAGE, "delay_seconds": 60}
    assert_problem(await _keyed(client, queue["id"], "k", late), 400, "invalid_delay")
    assert_problem(await _keyed(client, queue["id"], "k", {"x": 1}), 400, "invalid_json")
    # None of the refused requests took the key.
    assert (await _keyed(client, queue["id"], "k")).status_code == 201


async def test_a_replay_does_not_count_as_an_enqueue(client: Client, new_queue: NewQueue) -> None:
    queue = await new_queue("counted")
    for _ in range(3):
        await _keyed(client, queue["id"], "k")
    metrics = (await client.get("/metrics")).text
    line = next(
        line
        for line in metrics.splitlines()
        if line.startswith("queue_messages_enqueued_total") and 'queue_name="counted"' in line
    )
    assert line.endswith(" 1.0")


# -- visibility -------------------------------------------------------------------------------


async def _visibility(client: Client, queue_id: str, message: dict[str, Any], seconds: Any) -> Any:
    return await client.post(
        f"/v1/queues/{queue_id}/messages/{message['id']}/visibility",
        json={"receipt_handle": message["receipt_handle"], "visibility_timeout_seconds": seconds},
    )


async def test_visibility_extends_the_lease(
    client: Client, new_queue: NewQueue, clock: ManualClock
) -> None:
    queue = await new_queue(visibility_timeout_seconds=10)
    await client.post(f"/v1/queues/{queue['id']}/messages", json=MESSAGE)
    message = await _take(client, queue["id"])
    assert message is not None
    response = await _visibility(client, queue["id"], message, 120)
    assert response.status_code == 204
    assert response.content == b""
    clock.advance(100)
    assert await _take(client, queue["id"]) is None
    clock.advance(21)
    again = await _take(client, queue["id"])
    assert again is not None and again["delivery_attempts"] == 2


async def test_visibility_zero_releases_now(client: Client, new_queue: NewQueue) -> None:
    queue = await new_queue()
    await client.post(f"/v1/queues/{queue['id']}/messages", json=MESSAGE)
    message = await _take(client, queue["id"])
    assert message is not None
    assert (await _visibility(client, queue["id"], message, 0)).status_code == 204
    again = await _take(client, queue["id"])
    assert again is not None
    assert (again["id"], again["delivery_attempts"]) == (message["id"], 2)
    stale = await _visibility(client, queue["id"], message, 30)
    assert_problem(stale, 409, "stale_receipt_handle")
    assert (await _visibility(client, queue["id"], again, 21_600)).status_code == 204


async def test_visibility_with_a_stale_or_junk_handle_is_409(
    client: Client, new_queue: NewQueue, clock: ManualClock
) -> None:
    queue = await new_queue(visibility_timeout_seconds=10)
    await client.post(f"/v1/queues/{queue['id']}/messages", json=MESSAGE)
    message = await _take(client, queue["id"])
    assert message is not None
    for handle in ("junk", "", str(uuid.uuid4())):
        response = await _visibility(client, queue["id"], {**message, "receipt_handle": handle}, 5)
        assert_problem(response, 409, "stale_receipt_handle")
    unknown = {**message, "id": MISSING_ID}
    assert_problem(await _visibility(client, queue["id"], unknown, 5), 409, "stale_receipt_handle")
    clock.advance(11)
    response = await _visibility(client, queue["id"], message, 5)
    assert_problem(response, 409, "stale_receipt_handle")


@pytest.mark.parametrize("seconds", [-1, 21_601])
async def test_visibility_out_of_range(client: Client, new_queue: NewQueue, seconds: int) -> None:
    queue = await new_queue()
    await client.post(f"/v1/queues/{queue['id']}/messages", json=MESSAGE)
    message = await _take(client, queue["id"])
    assert message is not None
    response = await _visibility(client, queue["id"], message, seconds)
    assert_problem(response, 400, "invalid_visibility_timeout")


@pytest.mark.parametrize(
    "body",
    [
        {"receipt_handle": "h"},
        {"visibility_timeout_seconds": 5},
        {"receipt_handle": "h", "visibility_timeout_seconds": "5"},
        {"receipt_handle": "h", "visibility_timeout_seconds": 5.5},
        {"receipt_handle": "h", "visibility_timeout_seconds": True},
        {"receipt_handle": "h", "visibility_timeout_seconds": None},
        {"receipt_handle": 1, "visibility_timeout_seconds": 5},
        {"receipt_handle": "h", "visibility_timeout_seconds": 5, "extra": 1},
        [],
    ],
)
async def test_visibility_invalid_json(client: Client, new_queue: NewQueue, body: Any) -> None:
    queue = await new_queue()
    response = await client.post(
        f"/v1/queues/{queue['id']}/messages/{MISSING_ID}/visibility", json=body
    )
    assert_problem(response, 400, "invalid_json")


async def test_visibility_request_errors(client: Client, new_queue: NewQueue) -> None:
    queue = await new_queue()
    body = {"receipt_handle": "h", "visibility_timeout_seconds": 5}
    path = f"/v1/queues/{MISSING_ID}/messages/{MISSING_ID}/visibility"
    assert_problem(await client.post(path, json=body), 404, "queue_not_found")
    bad_message = f"/v1/queues/{queue['id']}/messages/nope/visibility"
    assert_problem(await client.post(bad_message, json=body), 400, "invalid_path")
    response = await client.post(
        f"/v1/queues/{queue['id']}/messages/{MISSING_ID}/visibility",
        content=b'{"receipt_handle":"h","visibility_timeout_seconds":5}',
        headers={"content-type": "text/plain"},
    )
    assert_problem(response, 415, "unsupported_media_type")
    assert_problem(await client.get(path), 405, "method_not_allowed")
