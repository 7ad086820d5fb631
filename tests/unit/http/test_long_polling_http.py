"""Long polling at the HTTP layer: the answer when a wait ends empty, waking, shutdown.

The app runs on the memory adapters with ``FakeMessageSignals`` (virtual time: an
unsignalled wait ends only when the test advances it) and a repository that signals
like PostgreSQL's triggers. Requests go through httpx's ASGI transport, which runs the
app on the test's own event loop, so a request can wait while the test acts (Litestar's
test client runs the app in a portal thread and blocks the loop for each request).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from dependency_injector import providers
from litestar import Litestar

from retsu.adapters.memory.clock import ManualClock
from retsu.entrypoints.containers import ApiContainer
from tests.support.doubles.signals import FakeMessageSignals
from tests.unit.http.helpers import NewQueue

Client = httpx.AsyncClient


class FakeSignals(FakeMessageSignals):
    """Virtual-time signals, started and stopped with the app."""

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        self.close()


@pytest.fixture
def signals(clock: ManualClock) -> FakeMessageSignals:
    return FakeSignals(clock)


@pytest.fixture
def app(container: ApiContainer, signals: FakeMessageSignals) -> Litestar:
    # Long polls wait in virtual time: their deadline is the fake clock's.
    container.core.monotonic.override(providers.Object(signals.monotonic))
    return container.app()


@pytest.fixture
async def client(app: Litestar) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://retsu.test") as http:
        yield http


def poll(client: Client, queue_id: str, **body: Any) -> asyncio.Task[httpx.Response]:
    return asyncio.create_task(client.post(f"/v1/queues/{queue_id}/messages/dequeue", json=body))


async def settle(signals: FakeMessageSignals) -> None:
    """Let the in-process HTTP round trips run (they need a few more loop turns)."""
    for _ in range(4):
        await signals.settle()


async def test_a_wait_without_max_messages_ends_with_204(
    client: Client, new_queue: NewQueue, signals: FakeMessageSignals
) -> None:
    queue = await new_queue()
    request = poll(client, queue["id"], wait_seconds=2)
    await settle(signals)
    await signals.advance(1.5)
    assert not request.done()
    await signals.advance(0.5)
    await settle(signals)
    response = await request
    assert response.status_code == 204
    assert response.content == b""


async def test_a_wait_with_max_messages_ends_with_an_empty_list(
    client: Client, new_queue: NewQueue, signals: FakeMessageSignals
) -> None:
    queue = await new_queue()
    request = poll(client, queue["id"], wait_seconds=2, max_messages=10)
    await settle(signals)
    await signals.advance(2)
    await settle(signals)
    response = await request
    assert response.status_code == 200
    assert response.json() == {"messages": []}


async def test_a_waiting_dequeue_is_answered_by_an_enqueue(
    client: Client, new_queue: NewQueue, signals: FakeMessageSignals
) -> None:
    queue = await new_queue()
    request = poll(client, queue["id"], wait_seconds=20)
    await settle(signals)
    await signals.advance(4)
    assert not request.done()
    sent = await client.post(
        f"/v1/queues/{queue['id']}/messages", json={"payload": "hi", "priority": "LOW"}
    )
    assert sent.status_code == 201
    await settle(signals)
    response = await request
    assert response.status_code == 200
    assert response.json()["payload"] == "hi"
    assert response.json()["id"] == sent.json()["id"]


async def test_a_paused_queue_holds_an_http_long_poll_until_resume(
    client: Client, new_queue: NewQueue, signals: FakeMessageSignals
) -> None:
    queue = await new_queue()
    assert (await client.post(f"/v1/queues/{queue['id']}/pause")).status_code == 200
    sent = await client.post(
        f"/v1/queues/{queue['id']}/messages", json={"payload": "held", "priority": "HIGH"}
    )
    assert sent.status_code == 201
    request = poll(client, queue["id"], wait_seconds=20, max_messages=3)
    await settle(signals)
    await signals.advance(6)
    assert not request.done()
    assert (await client.post(f"/v1/queues/{queue['id']}/resume")).status_code == 200
    await settle(signals)
    response = await request
    assert response.status_code == 200
    assert [m["payload"] for m in response.json()["messages"]] == ["held"]


async def test_shutdown_answers_waiting_polls_empty(
    client: Client, new_queue: NewQueue, signals: FakeMessageSignals
) -> None:
    queue = await new_queue()
    bare = poll(client, queue["id"], wait_seconds=20)
    listed = poll(client, queue["id"], wait_seconds=20, max_messages=2)
    await settle(signals)
    await signals.advance(1.5)
    signals.close()
    await settle(signals)
    assert (await bare).status_code == 204
    response = await listed
    assert (response.status_code, response.json()) == (200, {"messages": []})
