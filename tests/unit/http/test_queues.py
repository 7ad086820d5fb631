"""POST /v1/queues and PATCH /v1/queues/{queue_id}."""

from __future__ import annotations

import uuid

import pytest

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

# field, lowest accepted, highest accepted, error code
SETTINGS = [
    ("visibility_timeout_seconds", 1, 21_600, "invalid_visibility_timeout"),
    ("max_delivery_attempts", 1, 100, "invalid_max_delivery_attempts"),
    ("default_message_ttl_seconds", 1, 2_592_000, "invalid_default_message_ttl"),
    ("group_max_in_flight", 1, 10_000, "invalid_group_max_in_flight"),
    ("max_in_flight", 1, 1_000_000, "invalid_max_in_flight"),
    ("completed_retention_seconds", 0, 604_800, "invalid_completed_retention"),
]


async def test_create_queue_with_defaults(client: Client) -> None:
    response = await client.post("/v1/queues", json={"name": "orders"})
    assert response.status_code == 201
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == QUEUE_KEYS
    assert uuid.UUID(body["id"]).version == 7
    assert body == {
        "id": body["id"],
        "name": "orders",
        "visibility_timeout_seconds": 30,
        "max_delivery_attempts": 5,
        "default_message_ttl_seconds": 604_800,
        "group_max_in_flight": 1,
        "max_in_flight": None,
        "rate_limit": None,
        "group_rate_limit": None,
        "completed_retention_seconds": 0,
        "paused": False,
    }


async def test_create_queue_with_settings_and_nulls(client: Client) -> None:
    response = await client.post(
        "/v1/queues",
        json={
            "name": "a.b_c-1",
            "visibility_timeout_seconds": 10,
            "max_delivery_attempts": None,
            "default_message_ttl_seconds": 60,
        },
    )
    assert response.status_code == 201
    body = response.json()
    assert body["visibility_timeout_seconds"] == 10
    assert body["max_delivery_attempts"] == 5  # null means absent: the default
    assert body["default_message_ttl_seconds"] == 60


@pytest.mark.parametrize(("field", "low", "high", "code"), SETTINGS)
async def test_create_queue_setting_bounds(
    client: Client, field: str, low: int, high: int, code: str
) -> None:
    for index, value in enumerate((low, high)):
        response = await client.post("/v1/queues", json={"name": f"ok-{index}", field: value})
        assert response.status_code == 201, response.text
        assert response.json()[field] == value
    for value in (low - 1, high + 1):
        response = await client.post("/v1/queues", json={"name": "bad", field: value})
        body = assert_problem(response, 400, code)
        assert field in body["detail"]


@pytest.mark.parametrize("name", ["a", "9", "a" * 64, "a.b", "a_b", "a-b", "0rders.v2"])
async def test_queue_name_accepted(client: Client, name: str) -> None:
    response = await client.post("/v1/queues", json={"name": name})
    assert response.status_code == 201, response.text
    assert response.json()["name"] == name


@pytest.mark.parametrize("name", ["", "a" * 65, "Orders", "-a", "a-", ".a", "a_", "a b", "ä"])
async def test_queue_name_rejected(client: Client, name: str) -> None:
    response = await client.post("/v1/queues", json={"name": name})
    assert_problem(response, 400, "invalid_queue_name")


async def test_same_name_twice_conflicts(client: Client, new_queue: NewQueue) -> None:
    await new_queue("orders")
    response = await client.post("/v1/queues", json={"name": "orders"})
    body = assert_problem(response, 409, "queue_already_exists")
    assert body["title"] == "Conflict"


async def test_update_queue_returns_whole_queue(client: Client, new_queue: NewQueue) -> None:
    queue = await new_queue("orders", max_delivery_attempts=3)
    response = await client.patch(
        f"/v1/queues/{queue['id']}", json={"visibility_timeout_seconds": 90}
    )
    assert response.status_code == 200
    assert response.json() == {**queue, "visibility_timeout_seconds": 90}

    response = await client.patch(
        f"/v1/queues/{queue['id']}",
        json={"max_delivery_attempts": 7, "default_message_ttl_seconds": 120},
    )
    assert response.json() == {
        **queue,
        "visibility_timeout_seconds": 90,
        "max_delivery_attempts": 7,
        "default_message_ttl_seconds": 120,
    }


@pytest.mark.parametrize("body", [{}, {"visibility_timeout_seconds": None}])
async def test_update_without_a_field_is_empty(
    client: Client, new_queue: NewQueue, body: dict[str, object]
) -> None:
    queue = await new_queue()
    response = await client.patch(f"/v1/queues/{queue['id']}", json=body)
    assert_problem(response, 400, "empty_queue_update")


async def test_update_with_name_is_an_unknown_field(client: Client, new_queue: NewQueue) -> None:
    queue = await new_queue()
    response = await client.patch(f"/v1/queues/{queue['id']}", json={"name": "renamed"})
    assert_problem(response, 400, "invalid_json")
    response = await client.patch(
        f"/v1/queues/{queue['id']}", json={"name": "renamed", "max_delivery_attempts": 2}
    )
    assert_problem(response, 400, "invalid_json")


@pytest.mark.parametrize(("field", "low", "high", "code"), SETTINGS)
async def test_update_setting_bounds(
    client: Client, new_queue: NewQueue, field: str, low: int, high: int, code: str
) -> None:
    queue = await new_queue()
    for value in (low, high):
        response = await client.patch(f"/v1/queues/{queue['id']}", json={field: value})
        assert response.status_code == 200, response.text
        assert response.json()[field] == value
    for value in (low - 1, high + 1):
        response = await client.patch(f"/v1/queues/{queue['id']}", json={field: value})
        assert_problem(response, 400, code)


async def test_update_unknown_queue(client: Client) -> None:
    response = await client.patch(f"/v1/queues/{MISSING_ID}", json={"max_delivery_attempts": 2})
    body = assert_problem(response, 404, "queue_not_found")
    assert body["title"] == "Not Found"


async def test_update_with_invalid_path(client: Client) -> None:
    response = await client.patch("/v1/queues/not-a-uuid", json={"max_delivery_attempts": 2})
    assert_problem(response, 400, "invalid_path")
