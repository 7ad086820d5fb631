"""The OpenAPI document at /openapi.json: valid, complete (every route of the app, nothing
more), and accurate (real responses of the in-memory app validate against it)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from httpx import Response
from litestar import Litestar
from litestar.routes import HTTPRoute
from litestar.testing import AsyncTestClient
from openapi_schema_validator import OAS31Validator
from openapi_spec_validator import validate

from retsu.adapters.http import dto
from retsu.adapters.http.auth import ADMIN, ApiToken, AuthConfig, required_scope
from retsu.adapters.http.openapi import (
    OPENAPI_PATH,
    OPERATIONS,
    build_document,
    plain_template,
)
from retsu.adapters.memory.clock import FakeClock
from retsu.entrypoints.containers import ApiContainer
from tests.unit.http.helpers import MISSING_ID, Client, NewQueue

SRC = Path(__file__).resolve().parents[3] / "src" / "retsu"
METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")


@pytest.fixture
def document(app: Litestar) -> dict[str, Any]:
    return build_document(app)


def _app_operations(app: Litestar) -> set[tuple[str, str]]:
    """Every (METHOD, template) the app routes, minus Litestar's automatic OPTIONS."""
    found: set[tuple[str, str]] = set()
    for route in app.routes:
        assert isinstance(route, HTTPRoute)
        for handler in route.route_handlers:
            if handler.include_in_schema is False:
                continue
            found.update((m, plain_template(route.path)) for m in handler.http_methods)
    return found


def _doc_operations(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (method.upper(), path)
        for path, item in document["paths"].items()
        for method in item
        if method in METHODS
    }


# -- served, valid, complete -------------------------------------------------------------


async def test_the_document_is_served_and_valid(client: Client) -> None:
    response = await client.get(OPENAPI_PATH)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert response.headers["x-request-id"]
    document = response.json()
    validate(document)  # openapi-spec-validator: OpenAPI 3.1 + JSON Schema 2020-12
    assert document["openapi"].startswith("3.1")
    # Served twice: the same bytes (built once per app).
    assert (await client.get(OPENAPI_PATH)).content == response.content


def test_every_route_of_the_app_is_in_the_document_and_nothing_else(
    app: Litestar, document: dict[str, Any]
) -> None:
    app_ops = _app_operations(app)
    doc_ops = _doc_operations(document)
    assert app_ops == doc_ops, {"missing": app_ops - doc_ops, "extra": doc_ops - app_ops}
    assert ("GET", OPENAPI_PATH) in doc_ops


def test_every_route_is_described(app: Litestar, document: dict[str, Any]) -> None:
    undocumented = sorted(op for op in _app_operations(app) if op not in OPERATIONS)
    assert not undocumented, f"describe these routes in openapi.OPERATIONS: {undocumented}"
    stale = sorted(op for op in OPERATIONS if op not in _app_operations(app))
    # A described route the app does not have (yet) is listed, so it is not forgotten.
    assert not stale or all(path.startswith("/v1") for _, path in stale), stale


def test_the_document_is_open_with_auth_enabled(container: ApiContainer) -> None:
    auth = AuthConfig(enabled=True, tokens=(ApiToken("ops", "s3cret-ops", frozenset({ADMIN})),))
    app = container.app(auth=auth)
    with_auth = build_document(app)
    assert with_auth["paths"][OPENAPI_PATH]["get"]["security"] == []


async def test_the_document_needs_no_token(container: ApiContainer) -> None:
    auth = AuthConfig(enabled=True, tokens=(ApiToken("ops", "s3cret-ops", frozenset({ADMIN})),))
    async with AsyncTestClient(app=container.app(auth=auth)) as client:
        assert (await client.get(OPENAPI_PATH)).status_code == 200
        assert (await client.get("/v1/queues")).status_code == 401


# -- parameters, bodies, errors ---------------------------------------------------------


def _resolve(document: dict[str, Any], item: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in item:
        node: Any = document
        for part in item["$ref"].removeprefix("#/").split("/"):
            node = node[part]
        item = node
    return item


def _operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, op)
        for path, item in document["paths"].items()
        for method, op in item.items()
        if method in METHODS
    ]


def test_path_parameters_are_uuids(document: dict[str, Any]) -> None:
    for method, path, op in _operations(document):
        names = re.findall(r"\{(\w+)\}", path)
        params = [_resolve(document, p) for p in op["parameters"]]
        in_path = {p["name"]: p for p in params if p["in"] == "path"}
        assert set(in_path) == set(names), (method, path)
        for param in in_path.values():
            assert param["required"] is True
            assert param["schema"] == {"type": "string", "format": "uuid"}
        if names:
            assert "invalid_path" in op["x-retsu-error-codes"]["400"], (method, path)


def test_list_routes_take_limit_and_cursor(document: dict[str, Any]) -> None:
    expected = {
        ("GET", "/v1/queues"): {"limit", "cursor", "name"},
        ("GET", "/v1/queues/{queue_id}/dead-letters"): {"limit", "cursor"},
        ("GET", "/v1/audit-log"): {"limit", "cursor", "queue_id", "action"},
    }
    for (method, path), names in expected.items():
        if path not in document["paths"]:
            continue
        op = document["paths"][path][method.lower()]
        query = {p["name"]: p for p in op["parameters"] if p.get("in") == "query"}
        assert set(query) == names, path
        assert query["limit"]["schema"] == {
            "type": "integer",
            "minimum": 1,
            "maximum": 100,
            "default": 50,
        }
    audit = document["paths"].get("/v1/audit-log")
    if audit:
        query = {p["name"]: p for p in audit["get"]["parameters"] if p.get("in") == "query"}
        assert query["queue_id"]["schema"]["format"] == "uuid"
        assert "queue.created" in query["action"]["schema"]["enum"]


@pytest.mark.parametrize(
    ("method", "path", "struct", "required"),
    [
        ("POST", "/v1/queues", dto.CreateQueueBody, True),
        ("PATCH", "/v1/queues/{queue_id}", dto.UpdateQueueBody, True),
        ("POST", "/v1/queues/{queue_id}/messages", dto.MessageBody, True),
        ("POST", "/v1/queues/{queue_id}/messages/batch", dto.BatchEnqueueBody, True),
        ("POST", "/v1/queues/{queue_id}/messages/dequeue", dto.DequeueBody, False),
        (
            "POST",
            "/v1/queues/{queue_id}/messages/{message_id}/acknowledge",
            dto.AcknowledgeBody,
            True,
        ),
        ("POST", "/v1/queues/{queue_id}/messages/acknowledge", dto.BatchAcknowledgeBody, True),
    ],
)
def test_request_bodies_are_the_dto_structs(
    document: dict[str, Any], method: str, path: str, struct: type[msgspec.Struct], required: bool
) -> None:
    op = document["paths"][path][method.lower()]
    body = op["requestBody"]
    assert body["required"] is required
    schema = _resolve(document, body["content"]["application/json"]["schema"])
    fields = {f.encode_name: f for f in msgspec.inspect.type_info(struct).fields}  # type: ignore[attr-defined]
    assert set(schema["properties"]) == set(fields)
    assert set(schema.get("required", [])) == {n for n, f in fields.items() if f.required}
    assert schema["additionalProperties"] is False  # unknown fields are invalid_json
    for status, code in [("400", "invalid_json"), ("413", "payload_too_large")]:
        assert code in op["x-retsu-error-codes"][status]
    assert "unsupported_media_type" in op["x-retsu-error-codes"]["415"]


def test_body_ranges_come_from_the_domain(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    visibility = schemas["CreateQueueBody"]["properties"]["visibility_timeout_seconds"]
    branch = next(s for s in visibility["anyOf"] if s["type"] == "integer")
    assert (branch["minimum"], branch["maximum"], branch["default"]) == (1, 21600, 30)
    assert "invalid_visibility_timeout" in visibility["description"]
    priority = schemas["MessageBody"]["properties"]["priority"]
    assert priority["enum"] == ["HIGH", "MEDIUM", "LOW"]
    name = schemas["CreateQueueBody"]["properties"]["name"]
    assert (name["minLength"], name["maxLength"]) == (1, 64)
    assert schemas["MessageOut"]["properties"]["enqueued_at"]["format"] == "date-time"


def test_errors_are_problem_json_with_their_codes(document: dict[str, Any]) -> None:
    problem = document["components"]["schemas"]["Problem"]
    assert set(problem["required"]) == {"type", "title", "status", "detail", "code"}
    for method, path, op in _operations(document):
        codes = op["x-retsu-error-codes"]
        assert "500" in codes, (method, path)
        for status, listed in codes.items():
            response = op["responses"][status]
            content = response["content"]
            assert list(content) == ["application/problem+json"], (method, path, status)
            assert content["application/problem+json"]["schema"] == {
                "$ref": "#/components/schemas/Problem"
            }
            for code in listed:
                assert f"`{code}`" in response["description"], (method, path, code)
                assert f"`{code}`" in op["description"], (method, path, code)
        scope = required_scope(method, path)
        if scope is None:
            assert op["security"] == [] and "401" not in codes, (method, path)
        else:
            assert op["security"] == [{"bearer": []}], (method, path)
            assert codes["401"] == ["unauthorized"]
            assert ("403" in codes) == (scope == ADMIN), (method, path)
            assert "bearer" in document["components"]["securitySchemes"]
        if path.startswith("/v1/queues/{queue_id}"):
            assert "queue_not_found" in codes["404"], (method, path)


def test_every_documented_code_exists_in_the_code(document: dict[str, Any]) -> None:
    source = "\n".join(p.read_text() for p in SRC.rglob("*.py") if p.name != "openapi.py")
    for method, path, op in _operations(document):
        for codes in op["x-retsu-error-codes"].values():
            for code in codes:
                assert f'"{code}"' in source, (method, path, code)


# -- accuracy: real answers validate against the document ---------------------------------


class Checker:
    """Validates responses of the in-memory app against the document."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        self.seen: set[tuple[str, str, str]] = set()

    def check(self, method: str, template: str, response: Response) -> Response:
        op = self.document["paths"][template][method.lower()]
        status = str(response.status_code)
        assert status in op["responses"], (method, template, status, response.text)
        documented = op["responses"][status]
        self.seen.add((method, template, status))
        content = documented.get("content")
        if content is None:
            assert response.content == b"", (method, template, status)
            return response
        media_type = response.headers["content-type"].split(";")[0]
        assert media_type in content, (method, template, status, media_type)
        schema = content[media_type]["schema"]
        if media_type.endswith("json"):
            root = {**schema, "components": self.document["components"]}
            OAS31Validator(root, format_checker=OAS31Validator.FORMAT_CHECKER).validate(
                response.json()
            )
            if status.startswith(("4", "5")):
                assert response.json()["code"] in op["x-retsu-error-codes"][status]
        return response


@pytest.fixture
async def checker(app: Litestar) -> AsyncIterator[Checker]:
    yield Checker(build_document(app))


async def test_real_responses_match_the_document(
    client: Client, checker: Checker, new_queue: NewQueue, clock: FakeClock, app: Litestar
) -> None:
    ops = _app_operations(app)
    c = checker.check
    q = "/v1/queues"
    qid = "/v1/queues/{queue_id}"

    created = c("POST", q, await client.post(q, json={"name": "docs", "max_delivery_attempts": 1}))
    queue = created.json()["id"]
    c("POST", q, await client.post(q, json={"name": "docs"}))  # 409
    c("POST", q, await client.post(q, json={"name": "Bad Name"}))  # 400
    c("POST", q, await client.post(q, content=b"{}"))  # 415
    c("PATCH", qid, await client.patch(f"{q}/{queue}", json={"visibility_timeout_seconds": 5}))
    c("PATCH", qid, await client.patch(f"{q}/{queue}", json={}))
    c("PATCH", qid, await client.patch(f"{q}/{MISSING_ID}", json={"max_delivery_attempts": 2}))
    c("PATCH", qid, await client.patch(f"{q}/nope", json={"max_delivery_attempts": 2}))

    messages = f"{q}/{queue}/messages"
    enqueue = await client.post(
        messages, json={"payload": "a", "priority": "HIGH"}, headers={"idempotency-key": "k1"}
    )
    c("POST", qid + "/messages", enqueue)
    c(
        "POST",
        qid + "/messages",
        await client.post(
            messages, json={"payload": "a", "priority": "HIGH"}, headers={"idempotency-key": "k1"}
        ),
    )
    c(
        "POST",
        qid + "/messages",
        await client.post(messages, json={"payload": "a", "priority": "X"}),
    )
    c(
        "POST",
        qid + "/messages/batch",
        await client.post(
            messages + "/batch", json={"messages": [{"payload": "b", "priority": "LOW"}]}
        ),
    )
    c(
        "POST",
        qid + "/messages/batch",
        await client.post(messages + "/batch", json={"messages": []}),
    )
    c(
        "POST",
        qid + "/messages",
        await client.post(messages, json={"payload": "nul\u0000", "priority": "LOW"}),
    )
    c(
        "POST",
        qid + "/messages/batch",
        await client.post(
            messages + "/batch",
            json={"messages": [{"payload": "b", "priority": "LOW"}]},
            headers={"idempotency-key": "k2"},
        ),
    )
    c(
        "POST",
        qid + "/messages",
        await client.post(
            messages,
            json={"payload": "other", "priority": "LOW"},
            headers={"idempotency-key": "k1"},
        ),
    )

    one = c("POST", qid + "/messages/dequeue", await client.post(messages + "/dequeue")).json()
    c(
        "POST",
        qid + "/messages/dequeue",
        await client.post(messages + "/dequeue", json={"max_messages": 5}),
    )
    c("POST", qid + "/messages/dequeue", await client.post(messages + "/dequeue"))  # 204
    c(
        "POST",
        qid + "/messages/dequeue",
        await client.post(messages + "/dequeue", json={"wait_seconds": 99}),
    )
    if ("POST", qid + "/messages/{message_id}/visibility") in ops:
        c(
            "POST",
            qid + "/messages/{message_id}/visibility",
            await client.post(
                f"{messages}/{one['id']}/visibility",
                json={"receipt_handle": "stale", "visibility_timeout_seconds": 0},
            ),
        )
    if ("POST", qid + "/messages/{message_id}/visibility") in ops:
        c(
            "POST",
            qid + "/messages/{message_id}/visibility",
            await client.post(
                f"{messages}/{one['id']}/visibility",
                json={"receipt_handle": one["receipt_handle"], "visibility_timeout_seconds": 60},
            ),
        )
    c(
        "POST",
        qid + "/messages/acknowledge",
        await client.post(
            messages + "/acknowledge",
            json={"messages": [{"id": MISSING_ID, "receipt_handle": "gone"}]},
        ),
    )
    c(
        "POST",
        qid + "/messages/{message_id}/acknowledge",
        await client.post(
            f"{messages}/{one['id']}/acknowledge", json={"receipt_handle": one["receipt_handle"]}
        ),
    )
    c(
        "POST",
        qid + "/messages/acknowledge",
        await client.post(messages + "/acknowledge", json={"messages": [{"id": "x"}]}),
    )

    # A dead letter: one attempt allowed, the lease runs out, the next dequeue moves it.
    c(
        "POST",
        qid + "/messages",
        await client.post(messages, json={"payload": "d", "priority": "LOW"}),
    )
    await client.post(messages + "/dequeue")
    clock.advance(3600)
    await client.post(messages + "/dequeue")

    if ("GET", qid) in ops:
        c("GET", q, await client.get(q, params={"limit": 1}))
        c("GET", q, await client.get(q, params={"limit": 0}))
        c("GET", q, await client.get(q, params={"cursor": "garbage"}))
        c("GET", qid, await client.get(f"{q}/{queue}"))
        c("GET", qid, await client.get(f"{q}/{MISSING_ID}"))
    dl = qid + "/dead-letters"
    if ("GET", dl) in ops:
        letters = c("GET", dl, await client.get(f"{q}/{queue}/dead-letters")).json()["items"]
        assert letters, "no dead letter was made"
        letter = letters[0]["id"]
        c("GET", dl + "/{message_id}", await client.get(f"{q}/{queue}/dead-letters/{letter}"))
        c("GET", dl + "/{message_id}", await client.get(f"{q}/{queue}/dead-letters/{MISSING_ID}"))
        c(
            "POST",
            dl + "/{message_id}/redrive",
            await client.post(f"{q}/{queue}/dead-letters/{letter}/redrive"),
        )
        c(
            "DELETE",
            dl + "/{message_id}",
            await client.delete(f"{q}/{queue}/dead-letters/{MISSING_ID}"),
        )
        c("POST", dl + "/redrive", await client.post(f"{q}/{queue}/dead-letters/redrive"))
        c(
            "POST",
            dl + "/redrive",
            await client.post(f"{q}/{queue}/dead-letters/redrive", json={"limit": 0}),
        )
    if ("POST", qid + "/pause") in ops:
        c("POST", qid + "/pause", await client.post(f"{q}/{queue}/pause"))
        c("POST", qid + "/resume", await client.post(f"{q}/{queue}/resume"))
        c("POST", qid + "/purge", await client.post(f"{q}/{queue}/purge"))
    if ("GET", "/v1/audit-log") in ops:
        c("GET", "/v1/audit-log", await client.get("/v1/audit-log"))
        c("GET", "/v1/audit-log", await client.get("/v1/audit-log", params={"action": "nope"}))
        c("GET", "/v1/audit-log", await client.get("/v1/audit-log", params={"queue_id": "x"}))
    if ("DELETE", qid) in ops:
        c("DELETE", qid, await client.delete(f"{q}/{queue}"))
        c("DELETE", qid, await client.delete(f"{q}/{queue}"))

    c("GET", "/health/live", await client.get("/health/live"))
    c("GET", "/health/ready", await client.get("/health/ready"))
    c("GET", "/metrics", await client.get("/metrics"))
    c("GET", OPENAPI_PATH, await client.get(OPENAPI_PATH))

    # Every route of the app answered at least once with a documented success.
    succeeded = {(m, p) for m, p, s in checker.seen if s.startswith("2")}
    missing = {(m, p) for m, p in ops if (m, p) not in succeeded and m != "DELETE"}
    missing -= {("DELETE", qid + "/dead-letters/{message_id}")}
    assert not missing, missing
