"""Bearer-token auth (SPEC §3.5) over the in-memory app: 401/403 shapes, scopes per route,
open health and metrics, the actor, and a walk over every registered route."""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from litestar import Litestar, Request, get
from litestar.routes import HTTPRoute
from litestar.testing import AsyncTestClient

from retsu.adapters.http.auth import (
    ADMIN,
    MESSAGES,
    READ,
    SCOPES_OPT,
    ApiToken,
    AuthConfig,
    AuthMiddleware,
    check_declared,
)
from retsu.adapters.http.caller import caller_of
from retsu.adapters.telemetry.logging import redact_secrets
from retsu.domain.audit import ANONYMOUS
from retsu.entrypoints.containers import ApiContainer
from tests.unit.http.helpers import MISSING_ID, Client, assert_problem, raw_request

ADMIN_SECRET = "adm-7f3c9a1e5b2d4c8f"
MESSAGES_SECRET = "msg-2b8e6d4a0c9f1e3b"
BOTH_SECRET = "both-5d1a7c3e9b"
READ_SECRET = "read-9c4e2a6f1b"
SECRETS = (ADMIN_SECRET, MESSAGES_SECRET, BOTH_SECRET, READ_SECRET)

TOKENS = (
    ApiToken(name="ops-team", secret=ADMIN_SECRET, scopes=frozenset({ADMIN})),
    ApiToken(name="billing-worker", secret=MESSAGES_SECRET, scopes=frozenset({MESSAGES})),
    ApiToken(name="both", secret=BOTH_SECRET, scopes=frozenset({ADMIN, MESSAGES})),
    ApiToken(name="on-call", secret=READ_SECRET, scopes=frozenset({READ})),
)
AUTH = AuthConfig(enabled=True, tokens=TOKENS)

AS_ADMIN = {"authorization": f"Bearer {ADMIN_SECRET}"}
AS_MESSAGES = {"authorization": f"Bearer {MESSAGES_SECRET}"}
AS_READ = {"authorization": f"Bearer {READ_SECRET}"}
AS = {MESSAGES: AS_MESSAGES, READ: AS_READ, ADMIN: AS_ADMIN}

CHALLENGE = 'Bearer realm="retsu"'

# SPEC §3.5, route by route (templates without Litestar's ``:type``). Every /v1 route of the
# app must be listed here: a new route fails the walk below until its scope is decided.
# Besides admin, which every route accepts.
CONSUMER_READ = frozenset({MESSAGES, READ, ADMIN})
CONSUMER = frozenset({MESSAGES, ADMIN})
OPERATOR_READ = frozenset({READ, ADMIN})
ADMIN_ONLY = frozenset({ADMIN})
SPEC_SCOPES: dict[tuple[str, str], frozenset[str]] = {
    ("POST", "/v1/queues"): ADMIN_ONLY,
    ("GET", "/v1/queues"): CONSUMER_READ,
    ("GET", "/v1/queues/{queue_id}"): CONSUMER_READ,
    ("PATCH", "/v1/queues/{queue_id}"): ADMIN_ONLY,
    ("DELETE", "/v1/queues/{queue_id}"): ADMIN_ONLY,
    ("POST", "/v1/queues/{queue_id}/pause"): ADMIN_ONLY,
    ("POST", "/v1/queues/{queue_id}/resume"): ADMIN_ONLY,
    ("POST", "/v1/queues/{queue_id}/purge"): ADMIN_ONLY,
    ("POST", "/v1/queues/{queue_id}/messages"): CONSUMER,
    ("POST", "/v1/queues/{queue_id}/messages/batch"): CONSUMER,
    ("POST", "/v1/queues/{queue_id}/messages/dequeue"): CONSUMER,
    ("POST", "/v1/queues/{queue_id}/messages/acknowledge"): CONSUMER,
    ("POST", "/v1/queues/{queue_id}/messages/{message_id}/acknowledge"): CONSUMER,
    ("POST", "/v1/queues/{queue_id}/messages/{message_id}/visibility"): CONSUMER,
    ("GET", "/v1/queues/{queue_id}/messages"): OPERATOR_READ,
    ("GET", "/v1/queues/{queue_id}/messages/{message_id}"): OPERATOR_READ,
    ("DELETE", "/v1/queues/{queue_id}/messages/{message_id}"): ADMIN_ONLY,
    ("GET", "/v1/queues/{queue_id}/dead-letters"): OPERATOR_READ,
    ("GET", "/v1/queues/{queue_id}/dead-letters/{message_id}"): OPERATOR_READ,
    ("DELETE", "/v1/queues/{queue_id}/dead-letters/{message_id}"): ADMIN_ONLY,
    ("POST", "/v1/queues/{queue_id}/dead-letters/{message_id}/redrive"): ADMIN_ONLY,
    ("POST", "/v1/queues/{queue_id}/dead-letters/redrive"): ADMIN_ONLY,
    ("POST", "/v1/queues/{queue_id}/dead-letters/delete"): ADMIN_ONLY,
    ("POST", "/v1/queues/{queue_id}/messages/delete"): ADMIN_ONLY,
    ("GET", "/v1/queues/{queue_id}/groups"): OPERATOR_READ,
    ("GET", "/v1/audit-log"): OPERATOR_READ,
    ("GET", "/v1/consumers"): OPERATOR_READ,
    ("GET", "/v1/queues/{queue_id}/history"): OPERATOR_READ,
    # Schedules (SPEC §3.12): as the queue reads and mutations.
    ("POST", "/v1/queues/{queue_id}/schedules"): ADMIN_ONLY,
    ("GET", "/v1/queues/{queue_id}/schedules"): CONSUMER_READ,
    ("GET", "/v1/queues/{queue_id}/schedules/{schedule_id}"): CONSUMER_READ,
    ("PATCH", "/v1/queues/{queue_id}/schedules/{schedule_id}"): ADMIN_ONLY,
    ("DELETE", "/v1/queues/{queue_id}/schedules/{schedule_id}"): ADMIN_ONLY,
    ("POST", "/v1/queues/{queue_id}/schedules/{schedule_id}/pause"): ADMIN_ONLY,
    ("POST", "/v1/queues/{queue_id}/schedules/{schedule_id}/resume"): ADMIN_ONLY,
}

_PARAM = re.compile(r"\{(\w+)(?::\w+)?\}")


def _plain(template: str) -> str:
    return _PARAM.sub(lambda m: "{" + m.group(1) + "}", template)


def _concrete(template: str) -> str:
    return _PARAM.sub(lambda _: str(uuid.uuid4()), template)


def route_scopes(app: Litestar) -> dict[tuple[str, str], frozenset[str] | None]:
    """Every registered route's declared scopes: (method, path template) → scopes."""
    table: dict[tuple[str, str], frozenset[str] | None] = {}
    for route in app.routes:
        if isinstance(route, HTTPRoute):
            for method, (handler, _) in route.route_handler_map.items():
                table[(method, route.path)] = handler.opt.get(SCOPES_OPT)
    return table


@pytest.fixture
def app(container: ApiContainer) -> Litestar:
    return container.app(auth=AUTH)


@pytest.fixture
async def client(app: Litestar) -> AsyncIterator[Client]:
    async with AsyncTestClient(app=app) as test_client:
        yield test_client


async def _queue(client: Client, name: str = "orders") -> str:
    response = await client.post("/v1/queues", json={"name": name}, headers=AS_ADMIN)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _assert_no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text


def _v1_routes(app: Litestar) -> list[tuple[str, str]]:
    return sorted(
        (method, route.path)
        for route in app.routes
        if isinstance(route, HTTPRoute) and route.path.startswith("/v1")
        for method in route.methods
    )


# -- 401 ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "challenge"),
    [
        ({}, CHALLENGE),
        ({"authorization": f"Basic {ADMIN_SECRET}"}, CHALLENGE),
        ({"authorization": "Token abc"}, CHALLENGE),
        ({"authorization": ADMIN_SECRET}, CHALLENGE),
        ({"authorization": "Bearer"}, f'{CHALLENGE}, error="invalid_request"'),
        ({"authorization": "Bearer "}, f'{CHALLENGE}, error="invalid_request"'),
        ({"authorization": "Bearer a b"}, f'{CHALLENGE}, error="invalid_request"'),
        ({"authorization": "Bearer not-a-token"}, f'{CHALLENGE}, error="invalid_token"'),
        ({"authorization": f"Bearer {ADMIN_SECRET}x"}, f'{CHALLENGE}, error="invalid_token"'),
        ({"authorization": f"Bearer {ADMIN_SECRET[:-1]}"}, f'{CHALLENGE}, error="invalid_token"'),
    ],
    ids=[
        "missing",
        "basic-scheme",
        "other-scheme",
        "no-scheme",
        "empty",
        "empty-with-space",
        "two-words",
        "unknown",
        "longer",
        "prefix",
    ],
)
async def test_a_missing_or_bad_credential_is_401(
    client: Client, headers: dict[str, str], challenge: str
) -> None:
    response = await client.get("/v1/queues", headers={**headers, "x-request-id": "r-401"})
    body = assert_problem(response, 401, "unauthorized")
    assert body["title"] == "Unauthorized"
    assert response.headers["www-authenticate"] == challenge
    assert response.headers["x-request-id"] == "r-401"
    _assert_no_secret(response.text)


async def test_a_non_ascii_token_is_malformed(app: Litestar) -> None:
    status, headers, _ = await raw_request(
        app, "GET", "/v1/queues", [(b"authorization", "Bearer tök".encode())], []
    )
    assert status == 401
    assert headers[b"www-authenticate"] == b'Bearer realm="retsu", error="invalid_request"'


async def test_two_authorization_headers_are_refused(app: Litestar) -> None:
    credential = f"Bearer {ADMIN_SECRET}".encode()
    status, headers, _ = await raw_request(
        app, "GET", "/v1/queues", [(b"authorization", credential)] * 2, []
    )
    assert status == 401
    assert b"invalid_request" in headers[b"www-authenticate"]


@pytest.mark.parametrize(
    "scheme", ["Bearer", "bearer", "BEARER", "bEaReR"], ids=["canonical", "lower", "upper", "mixed"]
)
async def test_the_scheme_is_case_insensitive(client: Client, scheme: str) -> None:
    response = await client.post(
        "/v1/queues", json={"name": "q"}, headers={"authorization": f"{scheme} {ADMIN_SECRET}"}
    )
    assert response.status_code == 201, response.text


async def test_extra_spaces_around_the_token_are_tolerated(client: Client) -> None:
    response = await client.post(
        "/v1/queues", json={"name": "q"}, headers={"authorization": f"Bearer   {ADMIN_SECRET} "}
    )
    assert response.status_code == 201, response.text


async def test_every_method_and_v1_path_needs_a_token(client: Client) -> None:
    queue = str(uuid.uuid4())
    requests = [
        ("POST", "/v1/queues"),
        ("PATCH", f"/v1/queues/{queue}"),
        ("POST", f"/v1/queues/{queue}/messages"),
        ("POST", f"/v1/queues/{queue}/messages/dequeue"),
        ("GET", f"/v1/queues/{queue}/dead-letters"),
        ("GET", "/v1/audit-log"),
        ("OPTIONS", "/v1/queues"),
        ("HEAD", "/v1/queues"),
    ]
    for method, path in requests:
        response = await client.request(method, path)
        assert response.status_code == 401, (method, path)
        assert response.headers["www-authenticate"] == CHALLENGE


@pytest.mark.parametrize(
    "path",
    [
        "/v1",
        "/v1/",
        "/v1/nope",
        "/v1/queues/x/y/z/w",
        "/v1/audit-logs",
        "/v1/queues/not-a-uuid/oops",
    ],
)
async def test_an_unknown_v1_path_is_401_without_a_token(client: Client, path: str) -> None:
    # Decision: do not reveal which /v1 routes exist to an anonymous caller.
    response = await client.get(path)
    assert_problem(response, 401, "unauthorized")


@pytest.mark.parametrize("path", ["//v1/queues", "/v1//queues", "/v1/queues/", "///v1///queues///"])
async def test_path_spellings_that_route_like_v1_are_guarded(app: Litestar, path: str) -> None:
    # Litestar's router collapses slashes and drops a trailing one: so does the guard.
    status, headers, _ = await raw_request(app, "GET", path, [], [])
    assert status == 401
    assert headers[b"www-authenticate"] == CHALLENGE.encode()


async def test_a_401_never_reads_the_body_or_echoes_the_header(client: Client) -> None:
    response = await client.post(
        "/v1/queues",
        content=b'{"name":"q"}',
        headers={"content-type": "application/json", "authorization": "Bearer wrong-secret-xyz"},
    )
    assert response.status_code == 401
    assert "wrong-secret-xyz" not in response.text
    assert "wrong-secret-xyz" not in str(response.headers)
    assert response.headers["cache-control"] == "no-store"


# -- 403 ------------------------------------------------------------------------------


async def test_a_messages_token_cannot_mutate_queues(client: Client) -> None:
    response = await client.post("/v1/queues", json={"name": "q"}, headers=AS_MESSAGES)
    body = assert_problem(response, 403, "forbidden")
    assert body["title"] == "Forbidden"
    assert "admin" in body["detail"]
    assert response.headers["www-authenticate"] == (
        'Bearer realm="retsu", error="insufficient_scope", scope="admin"'
    )
    queue = await _queue(client)
    response = await client.patch(
        f"/v1/queues/{queue}", json={"max_delivery_attempts": 3}, headers=AS_MESSAGES
    )
    assert_problem(response, 403, "forbidden")
    # Nothing changed.
    response = await client.patch(
        f"/v1/queues/{queue}", json={"max_delivery_attempts": 9}, headers=AS_ADMIN
    )
    assert response.status_code == 200
    assert response.json()["max_delivery_attempts"] == 9


async def test_a_403_is_counted_under_its_route_template(client: Client, app: Litestar) -> None:
    response = await client.post("/v1/queues", json={"name": "q"}, headers=AS_MESSAGES)
    assert response.status_code == 403
    await client.get("/v1/nope")
    metrics = (await client.get("/metrics")).text
    counted = [
        line
        for line in metrics.splitlines()
        if line.startswith("http_server_requests_total{")
        and 'route="/v1/queues"' in line
        and 'status="403"' in line
    ]
    assert counted, metrics
    assert 'route="/v1/nope"' not in metrics  # raw paths never become labels


async def test_a_token_with_both_scopes_is_admin(client: Client) -> None:
    response = await client.post(
        "/v1/queues", json={"name": "q"}, headers={"authorization": f"Bearer {BOTH_SECRET}"}
    )
    assert response.status_code == 201


# -- allowed ---------------------------------------------------------------------------


async def test_a_messages_token_runs_the_message_lifecycle(client: Client) -> None:
    queue = await _queue(client)
    response = await client.post(
        f"/v1/queues/{queue}/messages",
        json={"payload": "p", "priority": "HIGH"},
        headers=AS_MESSAGES,
    )
    assert response.status_code == 201, response.text
    response = await client.post(
        f"/v1/queues/{queue}/messages/batch",
        json={"messages": [{"payload": "b", "priority": "LOW"}]},
        headers=AS_MESSAGES,
    )
    assert response.status_code == 201, response.text
    response = await client.post(f"/v1/queues/{queue}/messages/dequeue", headers=AS_MESSAGES)
    assert response.status_code == 200, response.text
    message = response.json()
    response = await client.post(
        f"/v1/queues/{queue}/messages/{message['id']}/acknowledge",
        json={"receipt_handle": message["receipt_handle"]},
        headers=AS_MESSAGES,
    )
    assert response.status_code == 204, response.text
    response = await client.post(
        f"/v1/queues/{queue}/messages/acknowledge",
        json={"messages": [{"id": MISSING_ID, "receipt_handle": "h"}]},
        headers=AS_MESSAGES,
    )
    assert response.status_code == 204, response.text


async def test_a_messages_token_reads_queues(client: Client, app: Litestar) -> None:
    queue = await _queue(client, "orders")
    table = route_scopes(app)
    if ("GET", "/v1/queues") not in table:
        pytest.skip("GET /v1/queues is not registered yet")
    response = await client.get("/v1/queues", params={"name": "orders"}, headers=AS_MESSAGES)
    assert response.status_code == 200, response.text
    assert [item["id"] for item in response.json()["items"]] == [queue]
    response = await client.get(f"/v1/queues/{queue}", headers=AS_MESSAGES)
    assert response.status_code == 200, response.text
    assert response.json()["name"] == "orders"


async def test_errors_past_auth_are_unchanged(client: Client) -> None:
    # A valid token reaches the handler: its own problems are answered as without auth.
    response = await client.post(
        f"/v1/queues/{MISSING_ID}/messages",
        json={"payload": "p", "priority": "HIGH"},
        headers=AS_MESSAGES,
    )
    assert_problem(response, 404, "queue_not_found")
    response = await client.post(
        "/v1/queues/not-a-uuid/messages",
        json={"payload": "p", "priority": "HIGH"},
        headers=AS_MESSAGES,
    )
    assert_problem(response, 400, "invalid_path")
    response = await client.post("/v1/queues", content=b"{", headers=AS_ADMIN)
    assert_problem(response, 415, "unsupported_media_type")


@pytest.mark.parametrize("headers", [AS_ADMIN, AS_MESSAGES], ids=["admin", "messages"])
async def test_unknown_routes_still_answer_404_and_405_when_authenticated(
    client: Client, headers: dict[str, str]
) -> None:
    # Also for a messages token on a path the rule would call admin: no 403 for no route.
    for path in ["/v1", "/v1/nope", "/v1/audit-logs", f"/v1/queues/{MISSING_ID}/nope/x"]:
        assert_problem(await client.get(path, headers=headers), 404, "not_found")
    assert_problem(await client.put("/v1/queues", headers=headers), 405, "method_not_allowed")
    assert_problem(
        await client.put(f"/v1/queues/{MISSING_ID}/messages", headers=headers),
        405,
        "method_not_allowed",
    )


# -- open routes -----------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/health/live", "/health/ready", "/metrics"])
@pytest.mark.parametrize(
    "headers",
    [{}, {"authorization": "Bearer wrong"}, {"authorization": "Basic x"}, AS_MESSAGES],
    ids=["none", "wrong", "basic", "valid"],
)
async def test_health_and_metrics_stay_open(
    client: Client, path: str, headers: dict[str, str]
) -> None:
    response = await client.get(path, headers=headers)
    assert response.status_code == 200, response.text


async def test_unknown_paths_outside_v1_are_404_without_a_token(client: Client) -> None:
    assert_problem(await client.get("/nope"), 404, "not_found")
    assert_problem(await client.get("/v1x/queues"), 404, "not_found")
    assert_problem(await client.get("/V1/queues"), 404, "not_found")


# -- disabled --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config",
    [None, AuthConfig(), AuthConfig(enabled=False, tokens=TOKENS)],
    ids=["none", "default", "disabled-with-tokens"],
)
async def test_auth_disabled_leaves_everything_open(
    container: ApiContainer, config: AuthConfig | None
) -> None:
    app = container.app(auth=config)
    assert not any(isinstance(m, AuthMiddleware) for m in _middleware_chain(app))
    async with AsyncTestClient(app=app) as client:
        response = await client.post("/v1/queues", json={"name": "open"})
        assert response.status_code == 201
        queue = response.json()["id"]
        # A credential is simply ignored, even a wrong one.
        response = await client.post(
            f"/v1/queues/{queue}/messages",
            json={"payload": "p", "priority": "LOW"},
            headers={"authorization": "Bearer whatever"},
        )
        assert response.status_code == 201


def _middleware_chain(app: Litestar) -> list[Any]:
    chain: list[Any] = []
    handler: Any = app.asgi_handler
    while handler is not None:
        chain.append(handler)
        handler = getattr(handler, "app", None)
        if len(chain) > 20:
            break
    return chain


# -- the actor -------------------------------------------------------------------------


def _actor_app(config: AuthConfig) -> Litestar:
    @get("/v1/whoami")
    async def whoami(request: Request[Any, Any, Any]) -> dict[str, str | None]:
        caller = caller_of(request)
        return {"actor": caller.actor, "request_id": caller.request_id}

    app = Litestar(route_handlers=[whoami], openapi_config=None)
    if config.enabled:
        app.asgi_handler = AuthMiddleware(app.asgi_handler, config)
    return app


@pytest.mark.parametrize(
    ("secret", "actor"),
    [(ADMIN_SECRET, "ops-team"), (MESSAGES_SECRET, "billing-worker"), (BOTH_SECRET, "both")],
)
async def test_the_token_name_is_the_actor(secret: str, actor: str) -> None:
    # /v1/whoami needs admin by the structural rule; give every token admin for this one.
    tokens = tuple(
        ApiToken(name=t.name, secret=t.secret, scopes=frozenset({ADMIN})) for t in TOKENS
    )
    app = _actor_app(AuthConfig(enabled=True, tokens=tokens))
    async with AsyncTestClient(app=app) as client:
        response = await client.get("/v1/whoami", headers={"authorization": f"Bearer {secret}"})
        assert response.status_code == 200, response.text
        assert response.json()["actor"] == actor


async def test_the_actor_is_anonymous_without_auth() -> None:
    app = _actor_app(AuthConfig(enabled=False))
    async with AsyncTestClient(app=app) as client:
        response = await client.get("/v1/whoami", headers=AS_ADMIN)
        assert response.json()["actor"] == ANONYMOUS


async def test_the_actor_is_written_to_the_audit_log(client: Client, app: Litestar) -> None:
    if ("GET", "/v1/audit-log") not in route_scopes(app):
        pytest.skip("GET /v1/audit-log is not registered yet")
    await _queue(client, "audited")
    response = await client.get("/v1/audit-log", headers=AS_ADMIN)
    assert response.status_code == 200, response.text
    created = [i for i in response.json()["items"] if i["action"] == "queue.created"]
    assert created and created[0]["actor"] == "ops-team"


# -- the route walk --------------------------------------------------------------------


def test_every_registered_route_has_its_spec_scope(app: Litestar) -> None:
    table = route_scopes(app)
    assert table, "no routes"
    options: list[str] = []
    for (method, template), scope in table.items():
        path = _plain(template)
        if not path.startswith("/v1"):
            assert scope is None, f"{method} {template} must stay open"
            continue
        if method == "OPTIONS":
            options.append(path)
            continue
        assert (method, path) in SPEC_SCOPES, (
            f"{method} {path} is not in SPEC_SCOPES: decide its scope (SPEC §3.5) and add it"
        )
        assert scope == SPEC_SCOPES[(method, path)], (method, path, scope)
    # OPTIONS: every scope the path's routes accept but read (only ever for looking).
    for path in options:
        accepted = {
            scope
            for (method, other), scope in table.items()
            if _plain(other) == path and method != "OPTIONS"
        }
        expected = frozenset().union(*(s for s in accepted if s)) - {READ}
        assert table[("OPTIONS", _find(table, path))] == expected, path
        # (Except the operator's bulk delete, an admin action under /messages.)
        if "/messages" in path and not path.endswith(("{message_id}", "/messages/delete")):
            assert expected == CONSUMER, path
        if path in ("/v1/queues", "/v1/queues/{queue_id}"):
            assert expected == CONSUMER, path
    # The core routes of the contract are there (the rest join as they are built).
    assert ("POST", "/v1/queues") in table
    assert ("POST", "/v1/queues/{queue_id:str}/messages/dequeue") in table


def test_the_open_routes_are_exactly_health_and_metrics_and_docs(app: Litestar) -> None:
    open_paths = {path for (_, path), scope in route_scopes(app).items() if scope is None}
    assert {"/health/live", "/health/ready", "/metrics"} <= open_paths
    assert all(not p.startswith("/v1") for p in open_paths)


def _find(table: dict[tuple[str, str], object], plain: str) -> str:
    return next(template for (_, template) in table if _plain(template) == plain)


def test_spec_routes_declare_the_spec_scopes_and_read_only_looks(app: Litestar) -> None:
    table = {(m, _plain(path)): scopes for (m, path), scopes in route_scopes(app).items()}
    for (method, template), scopes in SPEC_SCOPES.items():
        assert table[(method, template)] == scopes, (method, template)
    # read: every GET under /v1, nothing else.
    for (method, template), scopes in SPEC_SCOPES.items():
        assert (READ in scopes) == (method == "GET"), (method, template)


def test_a_v1_route_that_declares_no_scopes_refuses_to_start() -> None:
    @get("/v1/forgotten", sync_to_thread=False)
    def forgotten() -> None:
        return None

    with pytest.raises(RuntimeError, match="declares no scopes"):
        check_declared([forgotten])
    check_declared([get("/elsewhere", sync_to_thread=False)(lambda: None)])


async def test_every_registered_route_enforces_its_scope(app: Litestar, client: Client) -> None:
    """Real requests to every /v1 route: 401 without a token, 403 for a token with none of
    the accepted scopes, never 401/403 for a token with one of them."""
    routes = _v1_routes(app)
    assert routes
    for method, template in routes:
        path = _concrete(template)
        accepted = route_scopes(app)[(method, template)]
        assert accepted is not None and ADMIN in accepted
        anonymous = await client.request(method, path)
        assert anonymous.status_code == 401, (method, template)
        for scope, headers in AS.items():
            response = await client.request(method, path, headers=headers)
            if scope in accepted:
                assert response.status_code not in (401, 403), (method, template, scope)
            else:
                assert response.status_code == 403, (method, template, scope, response.text)


# -- secrets and timing ----------------------------------------------------------------


def test_secrets_never_show_in_a_repr() -> None:
    text = repr(AUTH) + repr(TOKENS) + str(AUTH)
    _assert_no_secret(text)
    assert "ops-team" in text


def test_the_middleware_keeps_digests_not_secrets(container: ApiContainer) -> None:
    middleware = AuthMiddleware(lambda *_: None, AUTH)  # type: ignore[arg-type]
    _assert_no_secret(repr(vars(middleware)) if hasattr(middleware, "__dict__") else "")
    stored = {digest for digest, _ in middleware._tokens._tokens}
    assert stored == {hashlib.sha256(s.encode()).digest() for s in SECRETS}


@pytest.mark.parametrize("secret", [ADMIN_SECRET, MESSAGES_SECRET, BOTH_SECRET, "nope", "x" * 500])
def test_every_token_is_compared_whatever_matches(
    monkeypatch: pytest.MonkeyPatch, secret: str
) -> None:
    calls: list[tuple[int, int]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((len(a), len(b)))
        return bool(real(a, b))

    monkeypatch.setattr(hmac, "compare_digest", spy)
    middleware = AuthMiddleware(lambda *_: None, AUTH)  # type: ignore[arg-type]
    middleware._tokens.match(secret.encode())
    # One comparison per configured token, always of two 32-byte digests.
    assert calls == [(32, 32)] * len(TOKENS)


def test_no_token_configured_refuses_everything(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        middleware = AuthMiddleware(lambda *_: None, AuthConfig(enabled=True))  # type: ignore[arg-type]
    assert middleware._tokens.match(b"anything") is None
    assert "no token" in caplog.text


@pytest.mark.parametrize(
    "line",
    [
        f"authorization: Bearer {ADMIN_SECRET}",
        f"headers=[(b'authorization', b'Bearer {ADMIN_SECRET}')]",
        f'{{"authorization": "bearer {ADMIN_SECRET}"}}',
    ],
)
def test_log_redaction_masks_bearer_credentials(line: str) -> None:
    redacted = redact_secrets(line)
    assert ADMIN_SECRET not in redacted
    assert "***" in redacted


async def test_nothing_logged_by_auth_holds_a_secret(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        for headers in ({"authorization": f"Bearer {ADMIN_SECRET}x"}, AS_MESSAGES, AS_ADMIN):
            await client.post("/v1/queues", json={"name": "logq"}, headers=headers)
    _assert_no_secret(caplog.text)


# -- read ------------------------------------------------------------------------------


async def test_a_read_token_looks_but_does_not_touch(client: Client) -> None:
    queue = await _queue(client, "watched")
    sent = await client.post(
        f"/v1/queues/{queue}/messages", json={"payload": "p", "priority": "LOW"}, headers=AS_ADMIN
    )
    message = sent.json()["id"]
    for path in [
        "/v1/queues",
        f"/v1/queues/{queue}",
        f"/v1/queues/{queue}/messages",
        f"/v1/queues/{queue}/messages/{message}",
        f"/v1/queues/{queue}/dead-letters",
        "/v1/audit-log",
    ]:
        response = await client.get(path, headers=AS_READ)
        assert response.status_code == 200, (path, response.text)
    for method, path in [
        ("POST", f"/v1/queues/{queue}/messages"),
        ("POST", f"/v1/queues/{queue}/messages/dequeue"),
        ("DELETE", f"/v1/queues/{queue}/messages/{message}"),
        ("POST", f"/v1/queues/{queue}/pause"),
        ("POST", f"/v1/queues/{queue}/dead-letters/redrive"),
    ]:
        response = await client.request(method, path, headers=AS_READ)
        body = assert_problem(response, 403, "forbidden")
        assert "admin" in body["detail"]
    browse = await client.get(f"/v1/queues/{queue}/messages", headers=AS_MESSAGES)
    assert_problem(browse, 403, "forbidden")
    assert browse.headers["www-authenticate"] == (
        'Bearer realm="retsu", error="insufficient_scope", scope="admin read"'
    )
    # Nothing was touched.
    shown = await client.get(f"/v1/queues/{queue}/messages/{message}", headers=AS_ADMIN)
    assert shown.json()["state"] == "ready"
