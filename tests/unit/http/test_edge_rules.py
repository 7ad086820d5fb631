"""The typed edge keeps the contract's reading of a request (SPEC §3.1), and issue 9's HTTP
items: OPTIONS lists every method of a path, a client that disconnects is not a server
error, a database outage is 503 with Retry-After (and counted so)."""

from __future__ import annotations

import logging
from typing import Any
from uuid import UUID

import pytest
from dependency_injector import providers
from litestar import Litestar
from litestar.routes import HTTPRoute
from litestar.testing import AsyncTestClient
from prometheus_client.parser import text_string_to_metric_families

from retsu.adapters.memory.storage import MemoryStorage
from retsu.adapters.telemetry.metrics import Metrics
from retsu.domain.errors import DatabaseUnavailable
from retsu.entrypoints.containers import ApiContainer
from tests.support.containers import STORAGE_PORTS
from tests.unit.http.helpers import MISSING_ID, Client, NewQueue, assert_problem, raw_request

JSON = [(b"content-type", b"application/json")]

# -- lexical rules msgspec's lax parsing would relax -------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        MISSING_ID.replace("-", ""),  # 32 bare hex digits: uuid.UUID would take it
        "{" + MISSING_ID + "}",
        "urn:uuid:" + MISSING_ID,
    ],
)
async def test_a_path_id_is_the_canonical_uuid_form(client: Client, bad: str) -> None:
    assert_problem(await client.get(f"/v1/queues/{bad}"), 400, "invalid_path")


async def test_a_query_uuid_is_the_canonical_form(client: Client) -> None:
    response = await client.get("/v1/audit-log", params={"queue_id": MISSING_ID.replace("-", "")})
    assert_problem(response, 400, "invalid_queue_id")
    assert (await client.get("/v1/audit-log", params={"queue_id": MISSING_ID})).status_code == 200


@pytest.mark.parametrize("limit", ["5.0", "1e2", "+5", " 5", "-1", "0x10", "1234567890", ""])
async def test_an_integer_query_value_is_plain_digits(client: Client, limit: str) -> None:
    assert_problem(await client.get("/v1/queues", params={"limit": limit}), 400, "invalid_limit")


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ([("limit", "5"), ("limit", "6")], "invalid_limit"),
        ([("name", "a"), ("name", "b")], "invalid_queue_name"),
        ([("action", "queue.created"), ("action", "queue.deleted")], "invalid_action"),
    ],
)
async def test_a_parameter_given_twice_is_refused_with_its_code(
    client: Client, params: list[tuple[str, str]], code: str
) -> None:
    path = "/v1/audit-log" if params[0][0] == "action" else "/v1/queues"
    assert_problem(await client.get(path, params=params), 400, code)


async def test_unknown_query_parameters_are_ignored(client: Client, new_queue: NewQueue) -> None:
    await new_queue()
    response = await client.get("/v1/queues", params={"colour": "red", "limit": "1"})
    assert response.status_code == 200
    assert len(response.json()["items"]) == 1


# -- bodies -------------------------------------------------------------------------------


async def test_a_missing_required_body_is_415_without_json_media_type(app: Litestar) -> None:
    status, _, body = await raw_request(app, "POST", "/v1/queues", [], [])
    assert status == 415 and b'"unsupported_media_type"' in body
    status, _, body = await raw_request(app, "POST", "/v1/queues", JSON, [])
    assert status == 400 and b'"invalid_json"' in body


async def test_the_optional_dequeue_body(client: Client, new_queue: NewQueue) -> None:
    dequeue = f"/v1/queues/{(await new_queue())['id']}/messages/dequeue"
    assert (await client.post(dequeue)).status_code == 204  # no body: the defaults
    assert (
        await client.post(dequeue, content=b"", headers={"content-type": "text/plain"})
    ).status_code == 204
    assert (await client.post(dequeue, json={"wait_seconds": None})).status_code == 204
    response = await client.post(
        dequeue, content=b"null", headers={"content-type": "application/json"}
    )
    assert_problem(response, 400, "invalid_json")  # a JSON null is not "no body"
    response = await client.post(dequeue, content=b"{}", headers={"content-type": "text/plain"})
    assert_problem(response, 415, "unsupported_media_type")


async def test_a_repeated_idempotency_key_is_answered_before_a_bad_body(
    app: Litestar, new_queue: NewQueue
) -> None:
    queue = (await new_queue())["id"]
    key = (b"idempotency-key", b"k")
    status, _, body = await raw_request(
        app, "POST", f"/v1/queues/{queue}/messages", [*JSON, key, key], [b"{"]
    )
    assert status == 400 and b'"invalid_idempotency_key"' in body


async def test_a_bad_path_is_answered_before_a_bad_body(client: Client) -> None:
    response = await client.post("/v1/queues/nope/messages", content=b"{", headers={})
    assert_problem(response, 400, "invalid_path")


# -- OPTIONS (issue 9, item 7) ----------------------------------------------------------


def _paths(app: Litestar) -> dict[str, set[str]]:
    return {route.path: set(route.methods) for route in app.routes if isinstance(route, HTTPRoute)}


def _concrete(template: str) -> str:
    return template.replace("{queue_id:str}", MISSING_ID).replace("{message_id:str}", MISSING_ID)


async def test_options_lists_every_method_of_every_path_like_a_405(
    client: Client, app: Litestar
) -> None:
    paths = _paths(app)
    assert "/v1/queues/{queue_id:str}" in paths
    for template, methods in paths.items():
        path = _concrete(template)
        options = await client.options(path)
        assert options.status_code == 204, template
        allowed = [m.strip() for m in options.headers["allow"].split(",")]
        assert set(allowed) == methods, template
        assert "OPTIONS" in allowed
        wrong = next(m for m in ("PUT", "PATCH", "DELETE", "POST") if m not in methods)
        refused = await client.request(wrong, path)
        assert_problem(refused, 405, "method_not_allowed")
        assert refused.headers["allow"] == options.headers["allow"], template


async def test_options_on_a_queue_lists_patch_and_delete(client: Client) -> None:
    response = await client.options(f"/v1/queues/{MISSING_ID}")
    assert response.headers["allow"] == "DELETE, GET, OPTIONS, PATCH"
    assert response.headers["x-request-id"]


# -- a client that goes away (issue 9, item 5) -------------------------------------------


def _http_requests(metrics: Metrics) -> dict[tuple[str, str, str], float]:
    body, _ = metrics.render()
    found = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name == "http_server_requests_total":
                labels = sample.labels
                found[(labels["method"], labels["route"], labels["status"])] = sample.value
    return found


async def test_a_client_that_disconnects_mid_body_is_no_server_error(
    app: Litestar, metrics: Metrics, caplog: pytest.LogCaptureFixture, new_queue: NewQueue
) -> None:
    queue = (await new_queue())["id"]
    caplog.set_level(logging.DEBUG)
    messages = [
        {"type": "http.request", "body": b'{"payload": "half', "more_body": True},
        {"type": "http.disconnect"},
    ]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": f"/v1/queues/{queue}/messages",
        "raw_path": b"",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"t"), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 1),
        "server": ("t", 80),
    }
    await app(scope, receive, send)  # type: ignore[arg-type]

    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert any(
        "disconnected" in r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG
    )
    counted = _http_requests(metrics)
    route = "/v1/queues/{queue_id}/messages"
    assert counted[("POST", route, "499")] == 1
    assert not any(status == "500" for _, _, status in counted)
    # Nothing was stored from the half body.
    assert (await raw_request(app, "POST", f"/v1/queues/{queue}/messages/dequeue", [], []))[
        0
    ] == 204


# -- a database outage (issue 9, item 6) -------------------------------------------------


class UnreachableRepository(MemoryStorage):
    """PostgreSQL refusing connections, as the storage adapter reports it."""

    async def enqueue(self, *args: Any, **kwargs: Any) -> Any:
        raise DatabaseUnavailable()

    async def get_queue(self, queue_id: UUID) -> Any:
        raise DatabaseUnavailable()


async def test_a_database_outage_is_503_with_retry_after_and_counted_so(
    container: ApiContainer, metrics: Metrics, clock: Any
) -> None:
    unreachable_storage = UnreachableRepository(clock)
    for port in STORAGE_PORTS:
        getattr(container.storage, port).override(providers.Object(unreachable_storage))

    async def unreachable() -> None:
        raise DatabaseUnavailable()

    container.storage.readiness.override(providers.Callable(unreachable))
    async with AsyncTestClient(app=container.app()) as client:
        response = await client.get(f"/v1/queues/{MISSING_ID}")
        ready = await client.get("/health/ready")
    body = assert_problem(response, 503, "database_unavailable")
    assert "Retry" in body["detail"]
    assert response.headers["retry-after"] == "1"
    assert_problem(ready, 503, "not_ready")
    counted = _http_requests(metrics)
    assert counted[("GET", "/v1/queues/{queue_id}", "503")] == 1
    assert counted[("GET", "/health/ready", "503")] == 1
    assert not any(status == "500" for _, _, status in counted)
