"""A dequeue whose client disconnects (SPEC §3.1), through the ASGI interface.

The app is production's over the memory twin; each request is a raw ASGI call whose
``receive`` behaves as uvicorn's: the body, then nothing until the connection closes, then
``http.disconnect``. Everything runs on the test's event loop (httpx's ASGI transport for
the ordinary requests), so a poll can wait while the test acts. The same paths against a
real ``retsu api`` process: tests/integration/test_disconnected_polls.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

import httpx
import pytest
from dependency_injector import providers
from litestar import Litestar
from prometheus_client.parser import text_string_to_metric_families

from retsu.adapters.memory.clock import ManualClock
from retsu.adapters.memory.storage import MemoryStorage
from retsu.adapters.signals import InProcessMessageSignals
from retsu.adapters.telemetry.metrics import Metrics
from retsu.domain.message import DequeueResult
from retsu.entrypoints.containers import ApiContainer
from tests.support.containers import api_container
from tests.unit.http.helpers import NewQueue

DEQUEUE_ROUTE = "/v1/queues/{queue_id}/messages/dequeue"


class Connection:
    """One HTTP request as uvicorn hands it to the app: ``receive`` gives the body (in the
    chunks given), then waits until the client leaves (``leave``) and says
    ``http.disconnect``."""

    def __init__(self, app: Litestar, path: str, *chunks: bytes) -> None:
        self.app = app
        self.left = asyncio.Event()
        self.sent: list[dict[str, Any]] = []
        self.receiving = 0  # receive() calls waiting right now
        self._messages = [
            {"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1}
            for i, chunk in enumerate(chunks)
        ]
        self._scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "root_path": "",
            "query_string": b"",
            "headers": [(b"host", b"retsu.test"), (b"content-type", b"application/json")],
            "client": ("127.0.0.1", 1234),
            "server": ("retsu.test", 80),
        }

    async def receive(self) -> dict[str, Any]:
        if self._messages:
            return self._messages.pop(0)
        self.receiving += 1
        try:
            await self.left.wait()
        finally:
            self.receiving -= 1
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        if not self.left.is_set():  # as uvicorn: after a disconnect, sends go nowhere
            self.sent.append(message)

    def start(self) -> asyncio.Task[None]:
        return asyncio.create_task(self.app(self._scope, self.receive, self.send))  # type: ignore[arg-type]

    def leave(self) -> None:
        self.left.set()

    @property
    def status(self) -> int | None:
        starts = [m["status"] for m in self.sent if m["type"] == "http.response.start"]
        return starts[0] if starts else None


class Claims:
    """The memory twin's messages port, with a hook run right after a claim took
    something, before the use case sees it (the client leaves while the claim is in
    flight)."""

    def __init__(self, inner: MemoryStorage) -> None:
        self._inner = inner
        self.after_claim: Any = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def dequeue(self, queue_id: UUID, **kwargs: Any) -> DequeueResult:
        result: DequeueResult = await self._inner.dequeue(queue_id, **kwargs)
        if result.messages and self.after_claim is not None:
            hook, self.after_claim = self.after_claim, None
            await hook()
        return result


@pytest.fixture
def claims(repository: MemoryStorage) -> Claims:
    return Claims(repository)


@pytest.fixture
def container(
    clock: ManualClock,
    repository: MemoryStorage,
    metrics: Metrics,
    signals: InProcessMessageSignals,
    claims: Claims,
) -> ApiContainer:
    container = api_container(clock=clock, storage=repository, metrics=metrics, signals=signals)
    container.storage.messages.override(providers.Object(claims))
    return container


@pytest.fixture
async def client(app: Litestar) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://retsu.test") as http:
        yield http


def dequeue_path(queue: dict[str, Any]) -> str:
    return f"/v1/queues/{queue['id']}/messages/dequeue"


async def enqueue(client: httpx.AsyncClient, queue: dict[str, Any], payload: str) -> None:
    response = await client.post(
        f"/v1/queues/{queue['id']}/messages", json={"payload": payload, "priority": "MEDIUM"}
    )
    assert response.status_code == 201, response.text


async def deliveries(client: httpx.AsyncClient, queue: dict[str, Any]) -> list[tuple[str, int]]:
    """(payload, delivery_attempts) of everything a second consumer takes now."""
    response = await client.post(dequeue_path(queue), json={"max_messages": 10})
    assert response.status_code == 200, response.text
    return [(m["payload"], m["delivery_attempts"]) for m in response.json()["messages"]]


def dequeue_statuses(metrics: Metrics) -> dict[str, float]:
    body, _ = metrics.render()
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if (
                sample.name == "http_server_requests_total"
                and sample.labels["route"] == DEQUEUE_ROUTE
            ):
                found[sample.labels["status"]] = sample.value
    return found


def assert_no_server_error(metrics: Metrics, caplog: pytest.LogCaptureFixture) -> None:
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    statuses = dequeue_statuses(metrics)
    assert statuses.get("499") == 1, statuses
    assert not [s for s in statuses if s.startswith("5")], statuses


async def test_a_long_poll_stops_when_its_client_leaves_and_swallows_nothing(
    app: Litestar,
    client: httpx.AsyncClient,
    new_queue: NewQueue,
    metrics: Metrics,
    signals: InProcessMessageSignals,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    queue = await new_queue()
    # The body in two chunks: the app reads it whole before watching the connection.
    poll = Connection(app, dequeue_path(queue), b'{"wait_seconds":', b" 20}")
    request = poll.start()
    await asyncio.sleep(0.05)
    assert not request.done(), "the poll waits"
    assert signals.waiting == 1
    poll.leave()
    await asyncio.wait_for(request, timeout=0.5)  # at once, not at its next re-check
    assert signals.waiting == 0, "it stopped waiting"
    assert poll.sent == [], "nobody to answer"
    # The next message goes to the next consumer, on its first attempt.
    await enqueue(client, queue, "next")
    assert await deliveries(client, queue) == [("next", 1)]
    assert_no_server_error(metrics, caplog)
    assert any("disconnected" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("wait_seconds", [0, 20])
async def test_what_was_claimed_for_a_client_that_left_goes_back_at_once(
    app: Litestar,
    client: httpx.AsyncClient,
    new_queue: NewQueue,
    claims: Claims,
    metrics: Metrics,
    caplog: pytest.LogCaptureFixture,
    wait_seconds: int,
) -> None:
    queue = await new_queue(visibility_timeout_seconds=600)
    await enqueue(client, queue, "first")
    await enqueue(client, queue, "second")
    body = b'{"max_messages": 2, "wait_seconds": %d}' % wait_seconds
    poll = Connection(app, dequeue_path(queue), body)

    async def the_client_leaves_while_the_claim_is_in_flight() -> None:
        poll.leave()
        for _ in range(3):  # the server learns of it (the watcher's receive() returns)
            await asyncio.sleep(0)

    claims.after_claim = the_client_leaves_while_the_claim_is_in_flight
    await asyncio.wait_for(poll.start(), timeout=0.5)
    assert claims.after_claim is None, "the claim took the two messages"
    # Deliverable again at once (not after the 600 s lease), the attempt not counted.
    assert await deliveries(client, queue) == [("first", 1), ("second", 1)]
    assert_no_server_error(metrics, caplog)


async def test_a_client_that_stays_gets_its_message_and_nothing_is_left_watching(
    app: Litestar, client: httpx.AsyncClient, new_queue: NewQueue, metrics: Metrics
) -> None:
    queue = await new_queue()
    poll = Connection(app, dequeue_path(queue), b'{"wait_seconds": 20}')
    request = poll.start()
    await asyncio.sleep(0.05)
    assert poll.receiving == 1, "the connection is watched while the poll waits"
    await enqueue(client, queue, "arrived")
    await asyncio.wait_for(request, timeout=0.5)
    assert poll.status == 200
    body = b"".join(m.get("body", b"") for m in poll.sent)
    assert b'"arrived"' in body and b'"delivery_attempts":1' in body
    await asyncio.sleep(0)
    assert poll.receiving == 0, "the watcher ended with the request"
    assert dequeue_statuses(metrics) == {"200": 1}
