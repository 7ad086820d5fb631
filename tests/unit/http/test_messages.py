"""Enqueue, batch enqueue, dequeue and acknowledge through HTTP."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from retsu.adapters.memory.clock import ManualClock
from retsu.adapters.memory.storage import MemoryStorage
from tests.unit.http.helpers import Client, NewQueue, assert_problem

MESSAGE_KEYS = {
    "id",
    "payload",
    "priority",
    "group",
    "receipt_handle",
    "delivery_attempts",
    "enqueued_at",
}


async def _enqueue(client: Client, queue_id: str, payload: str, priority: str, **extra: Any) -> str:
    response = await client.post(
        f"/v1/queues/{queue_id}/messages",
        json={"payload": payload, "priority": priority, **extra},
    )
    assert response.status_code == 201, response.text
    message_id: str = response.json()["id"]
    return message_id


async def _dequeue(client: Client, queue_id: str, body: Any = None) -> Any:
    response = await client.post(f"/v1/queues/{queue_id}/messages/dequeue", json=body)
    if response.status_code == 204:
        assert response.content == b""
        return None
    assert response.status_code == 200, response.text
    return response.json()


async def _ack(client: Client, queue_id: str, message: dict[str, Any]) -> None:
    response = await client.post(
        f"/v1/queues/{queue_id}/messages/{message['id']}/acknowledge",
        json={"receipt_handle": message["receipt_handle"]},
    )
    assert response.status_code == 204, response.text
    assert response.content == b""


# -- enqueue -------------------------------------------------------------------------


async def test_enqueue_returns_the_id(client: Client, new_queue: NewQueue) -> None:
    queue = await new_queue()
    response = await client.post(
        f"/v1/queues/{queue['id']}/messages", json={"payload": "hello", "priority": "HIGH"}
    )
    assert response.status_code == 201
    body = response.json()
    assert set(body) == {"id"}
    assert uuid.UUID(body["id"]).version == 7


async def test_enqueue_nulls_mean_absent(client: Client, new_queue: NewQueue) -> None:
    queue = await new_queue()
    await _enqueue(client, queue["id"], "x", "LOW", ttl_seconds=None, delay_seconds=None)
    assert (await _dequeue(client, queue["id"]))["payload"] == "x"


@pytest.mark.parametrize(
    ("extra", "code"),
    [
        ({"priority": "URGENT"}, "invalid_priority"),
        ({"priority": "high"}, "invalid_priority"),
        ({"priority": ""}, "invalid_priority"),
        ({"ttl_seconds": 0}, "invalid_ttl"),
        ({"ttl_seconds": 2_592_001}, "invalid_ttl"),
        ({"ttl_seconds": 10**30}, "invalid_ttl"),
        ({"delay_seconds": -1}, "invalid_delay"),
        ({"delay_seconds": 86_401}, "invalid_delay"),
        ({"delay_seconds": 10, "ttl_seconds": 10}, "invalid_delay"),
        ({"payload": "nul\u0000"}, "invalid_payload"),
    ],
)
async def test_enqueue_range_errors(
    client: Client, new_queue: NewQueue, repository: MemoryStorage, extra: Any, code: str
) -> None:
    queue = await new_queue()
    response = await client.post(
        f"/v1/queues/{queue['id']}/messages",
        json={"payload": "x", "priority": "MEDIUM", **extra},
    )
    assert_problem(response, 400, code)
    assert repository.message_count(uuid.UUID(queue["id"])) == 0


@pytest.mark.parametrize(
    "extra",
    [
        {"ttl_seconds": 1},
        {"ttl_seconds": 2_592_000},
        {"delay_seconds": 0},
        {"delay_seconds": 86_400},
        {"delay_seconds": 9, "ttl_seconds": 10},
        {"payload": ""},
    ],
)
async def test_enqueue_bounds_accepted(client: Client, new_queue: NewQueue, extra: Any) -> None:
    queue = await new_queue()
    await _enqueue(client, queue["id"], **{"payload": "x", "priority": "LOW", **extra})


async def test_delay_not_shorter_than_the_queue_default_lifetime(
    client: Client, new_queue: NewQueue
) -> None:
    queue = await new_queue(default_message_ttl_seconds=60)
    response = await client.post(
        f"/v1/queues/{queue['id']}/messages",
        json={"payload": "x", "priority": "LOW", "delay_seconds": 60},
    )
    assert_problem(response, 400, "invalid_delay")


async def test_delayed_message_becomes_deliverable(
    client: Client, new_queue: NewQueue, clock: ManualClock
) -> None:
    queue = await new_queue()
    await _enqueue(client, queue["id"], "later", "HIGH", delay_seconds=10)
    assert await _dequeue(client, queue["id"]) is None
    clock.advance(10)
    assert (await _dequeue(client, queue["id"]))["payload"] == "later"


# -- batch enqueue ---------------------------------------------------------------------


def _batch(n: int) -> list[dict[str, Any]]:
    return [{"payload": f"m{i}", "priority": "MEDIUM"} for i in range(n)]


async def test_batch_enqueue_returns_ids_in_order(client: Client, new_queue: NewQueue) -> None:
    queue = await new_queue()
    response = await client.post(
        f"/v1/queues/{queue['id']}/messages/batch", json={"messages": _batch(3)}
    )
    assert response.status_code == 201, response.text
    ids = response.json()["ids"]
    assert len(ids) == 3
    body = await _dequeue(client, queue["id"], {"max_messages": 10})
    assert [m["id"] for m in body["messages"]] == ids
    assert [m["payload"] for m in body["messages"]] == ["m0", "m1", "m2"]


@pytest.mark.parametrize("size", [1, 100])
async def test_batch_size_bounds_accepted(client: Client, new_queue: NewQueue, size: int) -> None:
    queue = await new_queue()
    response = await client.post(
        f"/v1/queues/{queue['id']}/messages/batch", json={"messages": _batch(size)}
    )
    assert response.status_code == 201, response.text
    assert len(response.json()["ids"]) == size


@pytest.mark.parametrize("size", [0, 101])
async def test_batch_size_bounds_rejected(client: Client, new_queue: NewQueue, size: int) -> None:
    queue = await new_queue()
    response = await client.post(
        f"/v1/queues/{queue['id']}/messages/batch", json={"messages": _batch(size)}
    )
    assert_problem(response, 400, "invalid_batch_size")


@pytest.mark.parametrize(
    ("entry", "code"),
    [
        ({"payload": "x", "priority": "NOPE"}, "invalid_priority"),
        ({"payload": "x", "priority": "LOW", "ttl_seconds": 0}, "invalid_ttl"),
        (
            {"payload": "x", "priority": "LOW", "delay_seconds": 5, "ttl_seconds": 5},
            "invalid_delay",
        ),
    ],
)
@pytest.mark.parametrize(("size", "index"), [(1, 0), (3, 2), (5, 1)])
async def test_batch_invalid_entry_names_its_index(
    client: Client,
    new_queue: NewQueue,
    repository: MemoryStorage,
    entry: dict[str, Any],
    code: str,
    size: int,
    index: int,
) -> None:
    queue = await new_queue()
    messages = _batch(size)
    messages[index] = entry
    response = await client.post(
        f"/v1/queues/{queue['id']}/messages/batch", json={"messages": messages}
    )
    body = assert_problem(response, 400, code)
    assert body["detail"].startswith(f"messages[{index}]: ")
    assert repository.message_count(uuid.UUID(queue["id"])) == 0  # all or nothing


async def test_batch_entry_of_wrong_type_is_invalid_json(
    client: Client, new_queue: NewQueue
) -> None:
    queue = await new_queue()
    messages: list[Any] = _batch(3)
    messages[1] = {"payload": "x", "priority": "LOW", "ttl_seconds": "10"}
    response = await client.post(
        f"/v1/queues/{queue['id']}/messages/batch", json={"messages": messages}
    )
    assert "messages[1]" in assert_problem(response, 400, "invalid_json")["detail"]


@pytest.mark.parametrize("body", [{}, {"messages": None}, {"messages": {}}, {"message": []}])
async def test_batch_body_shape(client: Client, new_queue: NewQueue, body: Any) -> None:
    queue = await new_queue()
    response = await client.post(f"/v1/queues/{queue['id']}/messages/batch", json=body)
    assert_problem(response, 400, "invalid_json")


# -- dequeue -----------------------------------------------------------------------------


async def test_dequeue_message_shape(client: Client, new_queue: NewQueue) -> None:
    queue = await new_queue()
    message_id = await _enqueue(client, queue["id"], "hello", "MEDIUM")
    message = await _dequeue(client, queue["id"])
    assert set(message) == MESSAGE_KEYS
    assert message["id"] == message_id
    assert message["payload"] == "hello"
    assert message["priority"] == "MEDIUM"
    assert message["delivery_attempts"] == 1
    assert message["enqueued_at"] == "2026-01-01T00:00:00Z"
    assert isinstance(message["receipt_handle"], str) and message["receipt_handle"]


async def test_priority_then_fifo(client: Client, new_queue: NewQueue) -> None:
    queue = await new_queue()
    sent = [("l1", "LOW"), ("m1", "MEDIUM"), ("h1", "HIGH"), ("l2", "LOW"), ("h2", "HIGH")]
    sent += [("m2", "MEDIUM")]
    for payload, priority in sent:
        await _enqueue(client, queue["id"], payload, priority)
    first = await _dequeue(client, queue["id"])
    rest = await _dequeue(client, queue["id"], {"max_messages": 2})
    more = await _dequeue(client, queue["id"], {"max_messages": 100})
    received = [first["payload"]] + [m["payload"] for m in rest["messages"] + more["messages"]]
    assert received == ["h1", "h2", "m1", "m2", "l1", "l2"]
    assert [m["priority"] for m in more["messages"]] == ["MEDIUM", "LOW", "LOW"]


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (None, None),
        (b"", None),
        (b"", "text/plain"),
        (b"{}", "application/json"),
        (b'{"wait_seconds": null, "max_messages": null}', "application/json"),
    ],
)
async def test_dequeue_without_options_answers_204_when_empty(
    client: Client, new_queue: NewQueue, body: bytes | None, content_type: str | None
) -> None:
    queue = await new_queue()
    headers = {"content-type": content_type} if content_type else {}
    response = await client.post(
        f"/v1/queues/{queue['id']}/messages/dequeue", content=body, headers=headers
    )
    assert response.status_code == 204
    assert response.content == b""
    assert "content-type" not in response.headers
    assert response.headers["x-request-id"]


async def test_dequeue_with_max_messages_answers_an_empty_list(
    client: Client, new_queue: NewQueue
) -> None:
    queue = await new_queue()
    response = await client.post(
        f"/v1/queues/{queue['id']}/messages/dequeue", json={"max_messages": 5}
    )
    assert response.status_code == 200
    assert response.json() == {"messages": []}


async def test_dequeue_body_needs_json_media_type(client: Client, new_queue: NewQueue) -> None:
    queue = await new_queue()
    response = await client.post(
        f"/v1/queues/{queue['id']}/messages/dequeue",
        content=b'{"max_messages": 5}',
        headers={"content-type": "text/plain"},
    )
    assert_problem(response, 415, "unsupported_media_type")
    response = await client.post(
        f"/v1/queues/{queue['id']}/messages/dequeue", content=b'{"max_messages": 5}'
    )
    assert_problem(response, 415, "unsupported_media_type")


@pytest.mark.parametrize(
    "body",
    [b"{", b"[]", b"null", b'{"max_messages": true}', b'{"wait_seconds": 1.0}', b'{"x": 1}'],
)
async def test_dequeue_invalid_json(client: Client, new_queue: NewQueue, body: bytes) -> None:
    queue = await new_queue()
    response = await client.post(
        f"/v1/queues/{queue['id']}/messages/dequeue",
        content=body,
        headers={"content-type": "application/json"},
    )
    assert_problem(response, 400, "invalid_json")


DEQUEUE_OPTIONS = [
    ("wait_seconds", 0, 20, "invalid_wait_seconds"),
    ("visibility_timeout_seconds", 1, 21_600, "invalid_visibility_timeout"),
    ("max_messages", 1, 100, "invalid_max_messages"),
]


@pytest.mark.parametrize(("field", "low", "high", "code"), DEQUEUE_OPTIONS)
async def test_dequeue_option_bounds(
    client: Client, new_queue: NewQueue, field: str, low: int, high: int, code: str
) -> None:
    queue = await new_queue()
    for _ in (low, high):  # something to take, so an accepted long poll answers at once
        await _enqueue(client, queue["id"], "job", "LOW")
    for value in (low, high):
        response = await client.post(
            f"/v1/queues/{queue['id']}/messages/dequeue", json={field: value}
        )
        assert response.status_code == 200, response.text
    for value in (low - 1, high + 1):
        response = await client.post(
            f"/v1/queues/{queue['id']}/messages/dequeue", json={field: value}
        )
        assert field in assert_problem(response, 400, code)["detail"]


async def test_redelivery_after_the_visibility_timeout(
    client: Client, new_queue: NewQueue, clock: ManualClock
) -> None:
    queue = await new_queue(visibility_timeout_seconds=30)
    await _enqueue(client, queue["id"], "job", "HIGH")
    first = await _dequeue(client, queue["id"])
    clock.advance(29)
    assert await _dequeue(client, queue["id"]) is None
    clock.advance(1)
    second = await _dequeue(client, queue["id"])
    assert second["id"] == first["id"]
    assert second["delivery_attempts"] == 2
    assert second["receipt_handle"] != first["receipt_handle"]


async def test_visibility_timeout_override(
    client: Client, new_queue: NewQueue, clock: ManualClock
) -> None:
    queue = await new_queue(visibility_timeout_seconds=300)
    await _enqueue(client, queue["id"], "job", "HIGH")
    first = await _dequeue(client, queue["id"], {"visibility_timeout_seconds": 5})
    clock.advance(5)
    again = await _dequeue(client, queue["id"], {"max_messages": 1})
    assert [m["id"] for m in again["messages"]] == [first["id"]]


async def test_dead_lettering_after_max_attempts(
    client: Client, new_queue: NewQueue, clock: ManualClock, repository: MemoryStorage
) -> None:
    queue = await new_queue(max_delivery_attempts=2, visibility_timeout_seconds=10)
    await _enqueue(client, queue["id"], "poison", "HIGH")
    await _enqueue(client, queue["id"], "fine", "LOW")
    assert (await _dequeue(client, queue["id"]))["payload"] == "poison"
    clock.advance(10)
    attempt = await _dequeue(client, queue["id"])
    assert (attempt["payload"], attempt["delivery_attempts"]) == ("poison", 2)
    clock.advance(10)
    # The exhausted message is moved aside and never hides a deliverable one.
    assert (await _dequeue(client, queue["id"]))["payload"] == "fine"
    dead = repository.dead_letters_of(uuid.UUID(queue["id"]))
    assert [d.payload for d in dead] == ["poison"]
    assert dead[0].reason == "MAX_DELIVERY_ATTEMPTS_EXHAUSTED"


# -- acknowledge ---------------------------------------------------------------------------


async def test_acknowledge_removes_the_message(
    client: Client, new_queue: NewQueue, clock: ManualClock, repository: MemoryStorage
) -> None:
    queue = await new_queue()
    await _enqueue(client, queue["id"], "job", "HIGH")
    message = await _dequeue(client, queue["id"])
    await _ack(client, queue["id"], message)
    assert repository.message_count(uuid.UUID(queue["id"])) == 0
    await _ack(client, queue["id"], message)  # idempotent
    clock.advance(3600)
    assert await _dequeue(client, queue["id"]) is None


async def test_stale_handle_never_removes_a_newer_delivery(
    client: Client, new_queue: NewQueue, clock: ManualClock, repository: MemoryStorage
) -> None:
    queue = await new_queue(visibility_timeout_seconds=10)
    await _enqueue(client, queue["id"], "job", "HIGH")
    old = await _dequeue(client, queue["id"])
    clock.advance(10)
    new = await _dequeue(client, queue["id"])
    await _ack(client, queue["id"], old)
    assert repository.message_count(uuid.UUID(queue["id"])) == 1
    await _ack(client, queue["id"], new)
    assert repository.message_count(uuid.UUID(queue["id"])) == 0


async def test_acknowledge_after_the_timeout_elapsed_is_204_and_keeps_the_message(
    client: Client, new_queue: NewQueue, clock: ManualClock, repository: MemoryStorage
) -> None:
    queue = await new_queue(visibility_timeout_seconds=10)
    await _enqueue(client, queue["id"], "job", "HIGH")
    message = await _dequeue(client, queue["id"])
    clock.advance(10)
    await _ack(client, queue["id"], message)
    assert repository.message_count(uuid.UUID(queue["id"])) == 1


@pytest.mark.parametrize("handle", ["", "garbage", "x" * 500])
async def test_acknowledge_with_a_foreign_handle_is_204(
    client: Client, new_queue: NewQueue, handle: str
) -> None:
    queue = await new_queue()
    message_id = await _enqueue(client, queue["id"], "job", "HIGH")
    delivered = await _dequeue(client, queue["id"])
    await _ack(client, queue["id"], {"id": message_id, "receipt_handle": handle})
    # The foreign handle removed nothing: the real delivery is still current (it can be
    # released) and the message comes back.
    released = await client.post(
        f"/v1/queues/{queue['id']}/messages/{message_id}/visibility",
        json={"receipt_handle": delivered["receipt_handle"], "visibility_timeout_seconds": 0},
    )
    assert released.status_code == 204, released.text
    again = await _dequeue(client, queue["id"])
    assert again is not None and again["id"] == message_id


@pytest.mark.parametrize(
    "body", [{}, {"receipt_handle": None}, {"receipt_handle": 1}, {"receipt_handle": "h", "x": 1}]
)
async def test_acknowledge_invalid_json(client: Client, new_queue: NewQueue, body: Any) -> None:
    queue = await new_queue()
    message_id = await _enqueue(client, queue["id"], "job", "HIGH")
    response = await client.post(
        f"/v1/queues/{queue['id']}/messages/{message_id}/acknowledge", json=body
    )
    assert_problem(response, 400, "invalid_json")


async def test_batch_acknowledge(
    client: Client, new_queue: NewQueue, repository: MemoryStorage
) -> None:
    queue = await new_queue()
    for i in range(3):
        await _enqueue(client, queue["id"], f"m{i}", "HIGH")
    delivered = (await _dequeue(client, queue["id"], {"max_messages": 3}))["messages"]
    receipts = [{"id": m["id"], "receipt_handle": m["receipt_handle"]} for m in delivered[:2]]
    receipts.append({"id": delivered[2]["id"], "receipt_handle": "stale"})
    response = await client.post(
        f"/v1/queues/{queue['id']}/messages/acknowledge", json={"messages": receipts}
    )
    assert response.status_code == 204
    assert response.content == b""
    assert repository.message_count(uuid.UUID(queue["id"])) == 1


@pytest.mark.parametrize("size", [0, 101])
async def test_batch_acknowledge_size(client: Client, new_queue: NewQueue, size: int) -> None:
    queue = await new_queue()
    receipts = [{"id": str(uuid.uuid4()), "receipt_handle": "h"} for _ in range(size)]
    response = await client.post(
        f"/v1/queues/{queue['id']}/messages/acknowledge", json={"messages": receipts}
    )
    assert_problem(response, 400, "invalid_batch_size")


async def test_batch_acknowledge_of_100_is_accepted(client: Client, new_queue: NewQueue) -> None:
    queue = await new_queue()
    receipts = [{"id": str(uuid.uuid4()), "receipt_handle": "h"} for _ in range(100)]
    response = await client.post(
        f"/v1/queues/{queue['id']}/messages/acknowledge", json={"messages": receipts}
    )
    assert response.status_code == 204


@pytest.mark.parametrize(
    "entry",
    [
        {"id": "not-a-uuid", "receipt_handle": "h"},
        {"id": 5, "receipt_handle": "h"},
        {"receipt_handle": "h"},
        {"id": "01890a5d-ac96-774b-bcce-b302099a8057"},
        {"id": "01890a5d-ac96-774b-bcce-b302099a8057", "receipt_handle": "h", "x": 1},
    ],
)
async def test_batch_acknowledge_invalid_json(
    client: Client, new_queue: NewQueue, entry: Any
) -> None:
    queue = await new_queue()
    response = await client.post(
        f"/v1/queues/{queue['id']}/messages/acknowledge", json={"messages": [entry]}
    )
    assert_problem(response, 400, "invalid_json")
