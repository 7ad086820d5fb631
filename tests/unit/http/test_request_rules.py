"""SPEC §3.1 conventions: media type, size, JSON shape, path ids, unknown routes and methods."""

from __future__ import annotations

import json
from typing import Any

import pytest
from litestar import Litestar, post
from litestar.exceptions.http_exceptions import RequestEntityTooLarge
from litestar.testing import AsyncTestClient

from retsu.adapters.http.problems import EXCEPTION_HANDLERS
from tests.unit.http.helpers import (
    MISSING_ID,
    PROBLEM,
    Client,
    NewQueue,
    assert_problem,
    raw_request,
)

MiB = 1024 * 1024

# -- 415 ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [{}, {"content-type": "text/plain"}, {"content-type": "application/jsonx"}],
)
async def test_body_needs_json_media_type(client: Client, headers: dict[str, str]) -> None:
    response = await client.post("/v1/queues", content=b'{"name":"orders"}', headers=headers)
    assert_problem(response, 415, "unsupported_media_type")


@pytest.mark.parametrize(
    "content_type",
    ["application/json", "application/json; charset=utf-8", "Application/JSON ;charset=UTF-8"],
)
async def test_json_media_type_with_parameters(client: Client, content_type: str) -> None:
    response = await client.post(
        "/v1/queues", content=b'{"name":"orders"}', headers={"content-type": content_type}
    )
    assert response.status_code == 201, response.text


# -- 413 ---------------------------------------------------------------------------


def _queue_body(size: int) -> bytes:
    """A valid create-queue body of exactly ``size`` bytes (padded with JSON whitespace)."""
    body = b'{"name":"orders"}'
    return body + b" " * (size - len(body))


async def test_body_of_exactly_one_mib_is_accepted(client: Client) -> None:
    response = await client.post(
        "/v1/queues", content=_queue_body(MiB), headers={"content-type": "application/json"}
    )
    assert response.status_code == 201, response.text


async def test_large_body_is_too_large(client: Client) -> None:
    response = await client.post(
        "/v1/queues", content=_queue_body(MiB + 1), headers={"content-type": "application/json"}
    )
    body = assert_problem(response, 413, "payload_too_large")
    assert body["title"] == "Request Entity Too Large"


async def test_announced_content_length_is_checked_before_reading(app: Litestar) -> None:
    status, headers, body = await raw_request(
        app,
        "POST",
        "/v1/queues",
        [(b"content-type", b"application/json"), (b"content-length", str(MiB + 1).encode())],
        [b'{"name":"orders"}'],
    )
    assert status == 413
    assert headers[b"content-type"] == PROBLEM.encode()
    assert b'"code":"payload_too_large"' in body
    assert b"x-request-id" in headers


async def test_streamed_body_without_length_is_limited_while_reading(app: Litestar) -> None:
    chunk = b" " * (256 * 1024)
    status, _, body = await raw_request(
        app,
        "POST",
        "/v1/queues",
        [(b"content-type", b"application/json")],
        [b'{"name":"orders"}', chunk, chunk, chunk, chunk],
    )
    assert status == 413
    assert b'"code":"payload_too_large"' in body


async def test_streamed_body_within_the_limit_is_read_whole(app: Litestar) -> None:
    status, _, body = await raw_request(
        app,
        "POST",
        "/v1/queues",
        [(b"content-type", b"application/json")],
        [b'{"na', b'me":"or', b'ders"}', b" " * 1000],
    )
    assert status == 201, body


async def test_optional_dequeue_body_is_limited_too(client: Client, new_queue: NewQueue) -> None:
    queue = await new_queue()
    response = await client.post(
        f"/v1/queues/{queue['id']}/messages/dequeue",
        content=b"{}" + b" " * MiB,
        headers={"content-type": "application/json"},
    )
    assert_problem(response, 413, "payload_too_large")


async def test_litestars_own_http_exceptions_come_out_as_problems() -> None:
    @post("/boom")
    async def boom() -> None:
        raise RequestEntityTooLarge

    app = Litestar([boom], exception_handlers=EXCEPTION_HANDLERS, logging_config=None)
    async with AsyncTestClient(app=app) as client:
        response = await client.post("/boom")
    assert response.status_code == 413
    assert response.headers["content-type"] == PROBLEM
    assert response.json()["code"] == "payload_too_large"


# -- 400 invalid_json --------------------------------------------------------------

INVALID_CREATE_BODIES = [
    pytest.param(b'{"name": "orders"', id="malformed"),
    pytest.param(b"", id="empty"),
    pytest.param(b"\xff\xfe", id="not-utf8"),
    pytest.param(b'{"name": "orders"} {}', id="trailing-data"),
    pytest.param(b'{"name": "orders", "colour": "red"}', id="unknown-field"),
    pytest.param(b'{"name": 5}', id="wrong-type"),
    pytest.param(b'{"name": null}', id="null-required"),
    pytest.param(b'{"name": "orders", "max_delivery_attempts": true}', id="bool-as-int"),
    pytest.param(b'{"name": "orders", "max_delivery_attempts": 3.0}', id="float-as-int"),
    pytest.param(b'{"name": "orders", "max_delivery_attempts": "3"}', id="string-as-int"),
    pytest.param(b'{"visibility_timeout_seconds": 30}', id="missing-field"),
    pytest.param(b'[{"name": "orders"}]', id="top-level-array"),
    pytest.param(b'"orders"', id="top-level-string"),
    pytest.param(b"null", id="top-level-null"),
]


@pytest.mark.parametrize("body", INVALID_CREATE_BODIES)
async def test_invalid_json_on_create(client: Client, body: bytes) -> None:
    response = await client.post(
        "/v1/queues", content=body, headers={"content-type": "application/json"}
    )
    assert_problem(response, 400, "invalid_json")


async def test_invalid_json_detail_names_the_problem(client: Client) -> None:
    response = await client.post("/v1/queues", json={"name": "orders", "colour": "red"})
    assert "colour" in assert_problem(response, 400, "invalid_json")["detail"]


@pytest.mark.parametrize(
    "body",
    [
        {"priority": "HIGH"},
        {"payload": "x"},
        {"payload": 1, "priority": "HIGH"},
        {"payload": "x", "priority": 3},
        {"payload": "x", "priority": "HIGH", "ttl_seconds": True},
        {"payload": "x", "priority": "HIGH", "delay_seconds": 1.5},
        {"payload": "x", "priority": "HIGH", "extra": 1},
        [{"payload": "x", "priority": "HIGH"}],
    ],
)
async def test_invalid_json_on_enqueue(client: Client, new_queue: NewQueue, body: Any) -> None:
    queue = await new_queue()
    response = await client.post(f"/v1/queues/{queue['id']}/messages", json=body)
    assert_problem(response, 400, "invalid_json")


# Duplicate keys: msgspec (like most parsers) keeps the last; the contract refuses them.
DUPLICATE_KEYS = [
    pytest.param(b'{"payload": "a", "priority": "HIGH", "payload": "b"}', id="top-level"),
    pytest.param(b'{"payload":"a","payload":"a","priority":"HIGH"}', id="same-value"),
    pytest.param(
        b'{"payload": "a", "priority": "HIGH", "ttl_seconds": 5, "ttl_seconds": null}',
        id="then-null",
    ),
    pytest.param(
        b'{"payload": "a", "priority": "HIGH", "ttl_seconds": null, "ttl_seconds": null}',
        id="null-twice",
    ),
    pytest.param(b'{"payload": "a", "priority": "HIGH", "p\\u0061yload": "b"}', id="escaped"),
    pytest.param(
        b'{"payload": "a", "priority": "HIGH", "\\u0070\\u0072iority": "LOW"}', id="escaped-both"
    ),
    pytest.param(
        b'{"payload": "\\"priority\\"", "priority": "HIGH", "priority": "LOW"}',
        id="key-text-in-a-value",
    ),
]


@pytest.mark.parametrize("body", DUPLICATE_KEYS)
async def test_duplicate_keys_are_invalid_json(
    client: Client, new_queue: NewQueue, body: bytes
) -> None:
    queue = await new_queue()
    url = f"/v1/queues/{queue['id']}/messages"
    json_headers = {"content-type": "application/json"}
    response = await client.post(url, content=body, headers=json_headers)
    assert "repeats" in assert_problem(response, 400, "invalid_json")["detail"]
    # In one entry of a batch, too (and nothing is enqueued).
    one = b'{"payload": "ok", "priority": "LOW"}'
    batch = b'{"messages": [' + one + b", " + body + b"]}"
    response = await client.post(url + "/batch", content=batch, headers=json_headers)
    assert_problem(response, 400, "invalid_json")
    stats = (await client.get(f"/v1/queues/{queue['id']}")).json()["stats"]
    assert stats["ready"] == 0


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(
            b'{"messages": [{"payload": "a", "priority": "HIGH"}], "messages": []}',
            id="batch-top-level",
        ),
        pytest.param(
            b'{"messages": [{"payload": "a", "priority": "HIGH"}, '
            b'{"payload": "b", "priority": "LOW", "delay_seconds": 1, '
            b'"delay_seconds": 2}]}',
            id="batch-entry",
        ),
        pytest.param(
            b'{"messages": [{"payload": "a", "priority": "HIGH", "ttl_seconds": 9, '
            b'"ttl_seconds": 9}, {"payload": "b", "priority": "LOW"}]}',
            id="hidden-by-an-entry-without-it",
        ),
    ],
)
async def test_duplicate_keys_in_a_batch_are_invalid_json(
    client: Client, new_queue: NewQueue, body: bytes
) -> None:
    queue = await new_queue()
    response = await client.post(
        f"/v1/queues/{queue['id']}/messages/batch",
        content=body,
        headers={"content-type": "application/json"},
    )
    assert_problem(response, 400, "invalid_json")


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("", b'{"name": "a", "name": "b"}'),
        ("/{q}", b'{"max_delivery_attempts": 2, "max_delivery_attempts": 3}'),
        ("/{q}/messages/dequeue", b'{"wait_seconds": 0, "wait_seconds": 0}'),
        (
            "/{q}/messages/acknowledge",
            b'{"messages": [{"id": "' + MISSING_ID.encode() + b'", "receipt_handle": "h", '
            b'"receipt_handle": "h"}]}',
        ),
    ],
)
async def test_every_json_body_refuses_duplicate_keys(
    client: Client, new_queue: NewQueue, path: str, body: bytes
) -> None:
    queue = await new_queue()
    method = "PATCH" if path == "/{q}" else "POST"
    response = await client.request(
        method,
        "/v1/queues" + path.replace("{q}", queue["id"]),
        content=body,
        headers={"content-type": "application/json"},
    )
    assert_problem(response, 400, "invalid_json")


@pytest.mark.parametrize(
    "payload",
    [
        '"priority"',
        '{"payload": 1, "payload": 2}',  # a JSON text inside the payload is only text
        '\\u0070ayload "payload" "priority" "ttl_seconds"',
        "C:\\u00e9\\u0070",
        "é ü ß 東京",
    ],
)
async def test_key_names_inside_values_are_not_duplicates(
    client: Client, new_queue: NewQueue, payload: str
) -> None:
    queue = await new_queue()
    url = f"/v1/queues/{queue['id']}/messages"
    body = {"payload": payload, "priority": "HIGH", "ttl_seconds": 60}
    for raw in (json.dumps(body).encode(), json.dumps(body, ensure_ascii=False).encode()):
        response = await client.post(url, content=raw, headers={"content-type": "application/json"})
        assert response.status_code == 201, response.text
    batch = {"messages": [body, {"payload": payload, "priority": "LOW"}]}
    assert (await client.post(url + "/batch", json=batch)).status_code == 201
    taken = (await client.post(url + "/dequeue", json={"max_messages": 10})).json()["messages"]
    assert [m["payload"] for m in taken] == [payload] * 4


# -- paths, routes, methods ----------------------------------------------------------

BAD_IDS = ["not-a-uuid", "123", "01890a5d-ac96-774b-bcce-b302099a805", "z" * 36]


@pytest.mark.parametrize("bad", BAD_IDS)
@pytest.mark.parametrize(
    ("method", "template", "body"),
    [
        ("PATCH", "/v1/queues/{q}", {"max_delivery_attempts": 2}),
        ("POST", "/v1/queues/{q}/messages", {"payload": "x", "priority": "LOW"}),
        ("POST", "/v1/queues/{q}/messages/batch", {"messages": []}),
        ("POST", "/v1/queues/{q}/messages/dequeue", None),
        ("POST", "/v1/queues/{q}/messages/{m}/acknowledge", {"receipt_handle": "h"}),
        ("POST", "/v1/queues/{q}/messages/acknowledge", {"messages": []}),
    ],
)
async def test_path_id_must_be_a_uuid(
    client: Client, method: str, template: str, body: Any, bad: str
) -> None:
    path = template.format(q=bad, m=MISSING_ID)
    response = await client.request(method, path, json=body)
    assert_problem(response, 400, "invalid_path")


async def test_message_id_must_be_a_uuid(client: Client, new_queue: NewQueue) -> None:
    queue = await new_queue()
    response = await client.post(
        f"/v1/queues/{queue['id']}/messages/nope/acknowledge", json={"receipt_handle": "h"}
    )
    assert "message_id" in assert_problem(response, 400, "invalid_path")["detail"]


async def test_uppercase_uuid_is_a_uuid(client: Client, new_queue: NewQueue) -> None:
    queue = await new_queue()
    response = await client.patch(
        f"/v1/queues/{queue['id'].upper()}", json={"max_delivery_attempts": 2}
    )
    assert response.status_code == 200


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/"),
        ("GET", "/nope"),
        ("POST", "/v1/nope"),
        ("POST", f"/v1/queues/{MISSING_ID}/nope"),
        ("POST", f"/v1/queues/{MISSING_ID}/messages/{MISSING_ID}/nope"),
    ],
)
async def test_unknown_route(client: Client, method: str, path: str) -> None:
    response = await client.request(method, path)
    body = assert_problem(response, 404, "not_found")
    assert body["title"] == "Not Found"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("PUT", "/v1/queues"),
        ("POST", "/health/live"),
        ("POST", "/health/ready"),
        ("DELETE", "/metrics"),
        ("GET", f"/v1/queues/{MISSING_ID}/messages/dequeue"),
        ("PUT", f"/v1/queues/{MISSING_ID}/messages/acknowledge"),
    ],
)
async def test_wrong_method(client: Client, method: str, path: str) -> None:
    response = await client.request(method, path)
    body = assert_problem(response, 405, "method_not_allowed")
    assert body["title"] == "Method Not Allowed"
    assert method in body["detail"]
    assert response.headers.get("allow")


# -- unknown queue on every /v1/queues/{id}/… route ----------------------------------


@pytest.mark.parametrize(
    ("method", "suffix", "body"),
    [
        ("PATCH", "", {"max_delivery_attempts": 2}),
        ("POST", "/messages", {"payload": "x", "priority": "HIGH"}),
        ("POST", "/messages/batch", {"messages": [{"payload": "x", "priority": "HIGH"}]}),
        ("POST", "/messages/dequeue", None),
        ("POST", "/messages/dequeue", {"max_messages": 10}),
        ("POST", f"/messages/{MISSING_ID}/acknowledge", {"receipt_handle": "h"}),
        (
            "POST",
            "/messages/acknowledge",
            {"messages": [{"id": MISSING_ID, "receipt_handle": "h"}]},
        ),
    ],
)
async def test_unknown_queue(client: Client, method: str, suffix: str, body: Any) -> None:
    response = await client.request(method, f"/v1/queues/{MISSING_ID}{suffix}", json=body)
    detail = assert_problem(response, 404, "queue_not_found")["detail"]
    assert MISSING_ID in detail
