"""The hot routes answer exactly as Litestar's handlers do (adapters/http/hot_routes.py).

Two apps, production-wired over the memory twin with the same clock and the same ids,
receive the same requests in the same order: one as it is built (the hot path in front),
one with every request handed straight to the Litestar handler behind it. Their answers
must be the same bytes — status, headers (but the request id) and body — for requests of
the common shape, which the hot path answers itself, and for every other, which it must
hand over untouched. A receipt handle is random in the memory twin, so the second app's
handles are mapped to the first's before comparing.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

import pytest
from dependency_injector import providers
from litestar import Litestar

from retsu.adapters.http.auth import ADMIN, MESSAGES, READ, ApiToken, AuthConfig
from retsu.adapters.http.hot_routes import HotRoutes
from retsu.adapters.memory.clock import ManualClock
from retsu.adapters.memory.storage import MemoryStorage
from tests.support.containers import api_container
from tests.unit.http.helpers import raw_request

MISSING = "01890a5d-ac96-774b-bcce-b302099a8057"
JSON = (b"content-type", b"application/json")


class CountingIds:
    """Ids 00000000-…-000000000001, …: the same in both apps."""

    def __init__(self) -> None:
        self._next = 0

    def new_id(self) -> uuid.UUID:
        self._next += 1
        return uuid.UUID(int=(7 << 76) | self._next)

    def new_ids(self, count: int) -> list[uuid.UUID]:
        return [self.new_id() for _ in range(count)]


def _app(auth: AuthConfig | None = None) -> Litestar:
    clock = ManualClock()
    container = api_container(clock=clock, storage=MemoryStorage(clock))
    container.core.ids.override(providers.Object(CountingIds()))
    return container.app() if auth is None else container.app(auth=auth)


def _hot(app: Litestar) -> HotRoutes:
    handler: Any = app.asgi_handler
    while not isinstance(handler, HotRoutes):
        handler = handler.app
    return handler


def _bypass(app: Litestar) -> None:
    """Every request of ``app`` past its hot path, straight to Litestar's handler."""
    parent: Any = app.asgi_handler
    while not isinstance(parent.app, HotRoutes):
        parent = parent.app
    parent.app = parent.app.app


class _Spy:
    """Litestar's handler behind the hot path, counting what is handed to it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.calls += 1
        await self.inner(scope, receive, send)


async def _call(
    app: Litestar,
    method: str,
    path: str,
    headers: Sequence[tuple[bytes, bytes]] = (),
    chunks: Sequence[bytes] = (),
    query: bytes = b"",
) -> tuple[int, dict[bytes, bytes], bytes]:
    status, answered, body = await raw_request(app, method, path, headers, chunks, query)
    answered.pop(b"x-request-id")
    return status, answered, body


def _body(value: object) -> list[bytes]:
    return [json.dumps(value).encode()]


class Pair:
    """The same requests to both apps; the first one's hot path, the second's handler."""

    def __init__(self, auth: AuthConfig | None = None) -> None:
        self.hot_app = _app(auth)
        self.plain_app = _app(auth)
        self.spy = _Spy(_hot(self.hot_app).app)
        _hot(self.hot_app).app = self.spy
        _bypass(self.plain_app)
        self.handles: dict[str, str] = {}
        self.queue = ""

    async def both(
        self, method: str, path: str, *, taken: bool | None, **request: Any
    ) -> tuple[int, Any]:
        """Both answers, compared; ``taken``: whether the hot path must answer it itself
        (None: either)."""
        before = self.spy.calls
        hot = await _call(self.hot_app, method, path, **request)
        if taken is not None:
            assert (self.spy.calls == before) is taken, f"answered by the hot path: {not taken}"
        plain = await _call(self.plain_app, method, path, **self._mapped(request))
        assert hot[0] == plain[0], (hot, plain)
        assert hot[1] == plain[1], (hot, plain)
        hot_body, plain_body = hot[2], plain[2]
        if hot_body != plain_body and hot[1].get(JSON[0]) == JSON[1]:
            self._learn(json.loads(hot_body), json.loads(plain_body))
            plain_body = self._unmapped(plain_body)
        assert hot_body == plain_body, (hot_body, plain_body)
        return hot[0], json.loads(hot_body) if hot_body else None

    def _learn(self, hot: Any, plain: Any) -> None:
        if isinstance(hot, dict) and isinstance(plain, dict):
            if "receipt_handle" in hot and "receipt_handle" in plain:
                self.handles[hot["receipt_handle"]] = plain["receipt_handle"]
            for key in hot.keys() & plain.keys():
                self._learn(hot[key], plain[key])
        elif isinstance(hot, list) and isinstance(plain, list):
            for a, b in zip(hot, plain, strict=False):
                self._learn(a, b)

    def _unmapped(self, body: bytes) -> bytes:
        for mine, theirs in self.handles.items():
            body = body.replace(theirs.encode(), mine.encode())
        return body

    def _mapped(self, request: dict[str, Any]) -> dict[str, Any]:
        chunks = request.get("chunks")
        if not chunks:
            return request
        mapped = []
        for chunk in chunks:
            for mine, theirs in self.handles.items():
                chunk = chunk.replace(mine.encode(), theirs.encode())
            mapped.append(chunk)
        return {**request, "chunks": mapped}


@pytest.fixture
async def pair() -> Pair:
    pair = Pair()
    status, queue = await pair.both(
        "POST",
        "/v1/queues",
        taken=False,
        headers=[JSON],
        chunks=_body({"name": "orders", "max_delivery_attempts": 3}),
    )
    assert status == 201
    pair.queue = queue["id"]
    return pair


async def test_enqueue_dequeue_and_acknowledge_answer_as_the_handlers_do(pair: Pair) -> None:
    q = pair.queue
    messages = f"/v1/queues/{q}/messages"
    for message in (
        {"payload": "a", "priority": "HIGH"},
        {"payload": "b", "priority": "LOW", "ttl_seconds": 60, "group": "g-1"},
        {"payload": "c", "priority": "MEDIUM", "delay_seconds": 0, "ttl_seconds": None},
        {"payload": "é \\u2603 ☃", "priority": "MEDIUM"},
    ):
        status, _ = await pair.both(
            "POST", messages, taken=True, headers=[JSON], chunks=_body(message)
        )
        assert status == 201
    status, first = await pair.both("POST", messages + "/dequeue", taken=True)
    assert status == 200 and first["payload"] == "a"
    status, listed = await pair.both(
        "POST",
        messages + "/dequeue",
        taken=True,
        headers=[JSON, (b"retsu-consumer", b"worker-1")],
        chunks=_body({"max_messages": 5, "visibility_timeout_seconds": 10}),
    )
    assert status == 200 and len(listed["messages"]) == 3
    for delivered in (first, *listed["messages"]):
        status, _ = await pair.both(
            "POST",
            f"{messages}/{delivered['id']}/acknowledge",
            taken=True,
            headers=[JSON],
            chunks=_body({"receipt_handle": delivered["receipt_handle"], "result": "ok"}),
        )
        assert status == 204
    # Nothing left: 204, and an empty list.
    assert (await pair.both("POST", messages + "/dequeue", taken=True))[0] == 204
    status, empty = await pair.both(
        "POST", messages + "/dequeue", taken=True, headers=[JSON], chunks=[b'{"max_messages":2}']
    )
    assert status == 200 and empty == {"messages": []}
    # A stale receipt handle, and a handle that is not even a UUID: 204 both.
    for handle in (first["receipt_handle"], "not-a-uuid"):
        status, _ = await pair.both(
            "POST",
            f"{messages}/{first['id']}/acknowledge",
            taken=True,
            headers=[JSON],
            chunks=_body({"receipt_handle": handle}),
        )
        assert status == 204


async def test_use_case_errors_are_answered_by_the_apps_handlers(pair: Pair) -> None:
    missing = f"/v1/queues/{MISSING}/messages"
    one = _body({"payload": "x", "priority": "HIGH"})
    assert (await pair.both("POST", missing, taken=True, headers=[JSON], chunks=one))[0] == 404
    assert (await pair.both("POST", missing + "/dequeue", taken=True))[0] == 404
    status, problem = await pair.both(
        "POST",
        f"{missing}/{MISSING}/acknowledge",
        taken=True,
        headers=[JSON],
        chunks=_body({"receipt_handle": MISSING}),
    )
    assert status == 404 and problem["code"] == "queue_not_found"


def _json(body: bytes, *headers: tuple[bytes, bytes], **more: Any) -> dict[str, Any]:
    return {"headers": [JSON, *headers], "chunks": [body], **more}


X = b'"payload": "x", "priority": "HIGH"'
ACK = f"/{MISSING}/acknowledge"


@pytest.mark.parametrize(
    ("route", "request_", "code", "taken"),
    [
        # Refused before any use case runs: handed to Litestar, which answers as always.
        ("", _json(b'{"payload": "x", "priority": "URGENT"}'), 400, False),
        ("", _json(b"{" + X + b', "x": 1}'), 400, False),
        ("", _json(b'{"payload": "y", ' + X + b"}"), 400, False),
        ("", _json(b'{"payload": "x\\u0000", "priority": "HIGH"}'), 400, False),
        ("", _json(b'{"payload": 1, "priority": "HIGH"}'), 400, False),
        ("", _json(b"{" + X), 400, False),
        ("", _json(b"null"), 400, False),
        ("", _json(b""), 400, False),
        ("", {"headers": [(b"content-type", b"text/plain")], "chunks": [b"{}"]}, 415, False),
        ("", {"chunks": [b"{" + X + b"}"]}, 415, False),
        ("", _json(b"{" + X + b"}", JSON), 201, False),
        ("", _json(b"{" + X + b', "ttl_seconds": 0}'), 400, False),
        ("", _json(b"{" + X + b', "group": ""}'), 400, False),
        ("", _json(b"{" + X + b"}", query=b"a=1"), 201, False),
        ("", _json(b"{" + X + b"}", (b"idempotency-key", b"k-1")), 201, False),
        ("", _json(b"{}", (b"content-length", b"2000000")), 413, False),
        ("", _json(b'{"payload": "' + b"x" * 1048576 + b'", "priority": "HIGH"}'), 413, False),
        ("/dequeue", _json(b'{"wait_seconds": 99}'), 400, False),
        ("/dequeue", _json(b'{"max_messages": 0}'), 400, False),
        ("/dequeue", _json(b"null"), 400, False),
        ("/dequeue", {"headers": [(b"content-type", b"text/xml")], "chunks": [b"{}"]}, 415, False),
        ("/dequeue", {"headers": [(b"retsu-consumer", b"")]}, 400, False),
        ("/dequeue", {"headers": [(b"retsu-consumer", b"a b")]}, 400, False),
        ("/dequeue", {"headers": [(b"retsu-consumer", b"a")] * 2}, 400, False),
        (ACK, _json(b"{}"), 400, False),
        (ACK.replace("-", ""), _json(b'{"receipt_handle": "x"}'), 400, False),
        # A Host header Litestar's router refuses: its answer, not the hot path's.
        ("", _json(b"{" + X + b"}", (b"host", b"bad host")), 400, False),
        ("/dequeue", _json(b"{}", (b"host", b"a\x7fb")), 400, False),
        (ACK, _json(b'{"receipt_handle": "x"}', (b"host", b"<x>")), 400, False),
        ("", _json(b"{" + X + b"}", (b"host", b"retsu.example:2424")), 201, True),
        ("", _json(b"{" + X + b"}", (b"host", b"[::1]:2424")), 201, True),
        # The common shape: a body in two chunks, upper-case hex digits.
        ("", {"headers": [JSON], "chunks": [b'{"payload": "x", ', b"}"]}, 400, False),
        ("", {"headers": [JSON], "chunks": [b"{" + X, b"}"]}, 201, True),
        (f"/{MISSING.upper()}/acknowledge", _json(b'{"receipt_handle": "x"}'), 204, True),
        # The use case's to refuse: answered through the app's handlers.
        ("", _json(b"{" + X + b', "delay_seconds": 9, "ttl_seconds": 5}'), 400, True),
        (ACK, _json(b'{"receipt_handle": "x", "result": "\\u0000"}'), 400, True),
    ],
)  # fmt: skip
async def test_any_other_request_is_handed_over_and_answered_as_before(
    pair: Pair, route: str, request_: dict[str, Any], code: int, taken: bool
) -> None:
    """Refused input, a repeated header, a query string, an Idempotency-Key, a body over
    the limit: handed to Litestar (``taken`` False)."""
    path = f"/v1/queues/{pair.queue}/messages{route}"
    status, _ = await pair.both("POST", path, taken=taken, **request_)
    assert status == code


async def test_other_methods_and_paths_are_litestars(pair: Pair) -> None:
    q = pair.queue
    for method, path in (
        ("GET", f"/v1/queues/{q}/messages"),
        ("PUT", f"/v1/queues/{q}/messages"),
        ("POST", f"/v1/queues/{q}/messages/batch"),
        ("POST", f"/v1/queues/{q}/messages/"),
        ("POST", f"/v1/queues/{q.replace('-', '')}/messages"),
        ("POST", f"/v1/queues/{q}/messages/{MISSING}/visibility"),
    ):
        await pair.both(method, path, taken=False, headers=[JSON], chunks=[b"{}"])


def _bearer(secret: bytes) -> tuple[bytes, bytes]:
    return (b"authorization", b"Bearer " + secret)


async def test_with_auth_each_token_is_answered_as_the_handlers_do() -> None:
    """Auth runs before the hot path; a token without the consumer scope is refused by
    Litestar's guard (handed over), one with it is answered by the hot path."""
    tokens = (
        ApiToken(name="ops", secret="adm-1a2b3c4d5e6f", scopes=frozenset({ADMIN})),
        ApiToken(name="worker", secret="msg-6f5e4d3c2b1a", scopes=frozenset({MESSAGES})),
        ApiToken(name="on-call", secret="read-0a9b8c7d6e", scopes=frozenset({READ})),
    )
    pair = Pair(AuthConfig(enabled=True, tokens=tokens))
    admin, worker, reader = (_bearer(t.secret.encode()) for t in tokens)
    status, queue = await pair.both(
        "POST", "/v1/queues", taken=False, headers=[JSON, admin], chunks=_body({"name": "q"})
    )
    assert status == 201
    messages = f"/v1/queues/{queue['id']}/messages"
    one = _body({"payload": "x", "priority": "HIGH"})
    # No token, a wrong one: the auth layer answers, before either path.
    assert (await pair.both("POST", messages, taken=None, headers=[JSON], chunks=one))[0] == 401
    wrong = _bearer(b"msg-not-a-token")
    assert (await pair.both("POST", messages, taken=None, headers=[JSON, wrong], chunks=one))[
        0
    ] == 401
    # The read scope may not enqueue or dequeue: Litestar's guard, 403.
    for path, body in ((messages, one), (messages + "/dequeue", [b"{}"])):
        status, problem = await pair.both(
            "POST", path, taken=False, headers=[JSON, reader], chunks=body
        )
        assert status == 403, problem
    assert (await pair.both("POST", messages, taken=True, headers=[JSON, worker], chunks=one))[
        0
    ] == 201
    status, delivered = await pair.both("POST", messages + "/dequeue", taken=True, headers=[admin])
    assert status == 200
    status, _ = await pair.both(
        "POST",
        f"{messages}/{delivered['id']}/acknowledge",
        taken=True,
        headers=[JSON, worker],
        chunks=_body({"receipt_handle": delivered["receipt_handle"]}),
    )
    assert status == 204


async def test_the_request_metrics_count_hot_answers_under_the_routes_templates(
    pair: Pair,
) -> None:
    q = pair.queue
    messages = f"/v1/queues/{q}/messages"
    one = _body({"payload": "x", "priority": "HIGH"})
    await pair.both("POST", messages, taken=True, headers=[JSON], chunks=one)
    await pair.both("POST", messages, taken=False, headers=[JSON], chunks=[b"{}"])
    status, delivered = await pair.both("POST", messages + "/dequeue", taken=True)
    assert status == 200
    await pair.both(
        "POST",
        f"{messages}/{delivered['id']}/acknowledge",
        taken=True,
        headers=[JSON],
        chunks=_body({"receipt_handle": delivered["receipt_handle"]}),
    )

    async def counted(app: Litestar) -> list[str]:
        status, _, body = await raw_request(app, "GET", "/metrics", [], [])
        assert status == 200
        return sorted(
            line
            for line in body.decode().splitlines()
            if line.startswith("http_server_requests_total{")
        )

    hot, plain = await counted(pair.hot_app), await counted(pair.plain_app)
    assert hot == plain
    routes = {line.split('route="', 1)[1].split('"', 1)[0] for line in hot}
    assert "/v1/queues/{queue_id}/messages/{message_id}/acknowledge" in routes
    assert "/v1/queues/{queue_id}/messages/dequeue" in routes
