"""The queue service end to end: `retsu migrate`, then `retsu api`, over real HTTP."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from retsu.adapters.postgres.migrations import head_revision
from tests.conftest import create_database, drop_database
from tests.support.processes import RetsuProcess, free_port, retsu_env, run_retsu
from tests.support.services import PostgresServer
from tests.support.timeshift import advance_database_clock

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
async def fresh_database(postgres_server: PostgresServer) -> AsyncIterator[str]:
    url = await create_database(postgres_server, migrate=False)
    yield url
    await drop_database(postgres_server, url)


@pytest.fixture(scope="module")
def api(fresh_database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    env = retsu_env(fresh_database)
    migrated = run_retsu(["migrate"], env)
    assert migrated.returncode == 0, migrated.stderr + migrated.stdout
    # It says what it applied (issue 20: it used to print nothing), then that nothing is
    # left to apply.
    head = head_revision()
    applied = migrated.stdout.splitlines()
    assert applied[0].startswith("retsu migrate: applied "), migrated.stdout
    assert "  0001_queues_and_messages" in applied and f"  {head}_" in "\n".join(applied)
    assert applied[-1] == f"retsu migrate: the database is at revision {head}"
    again = run_retsu(["migrate"], env)
    assert again.returncode == 0, again.stderr + again.stdout
    assert again.stdout.splitlines() == [
        "retsu migrate: nothing to apply",
        f"retsu migrate: the database is at revision {head}",
    ]
    port = free_port()
    process = RetsuProcess(
        ["api"],
        {**env, "RETSU_HTTP__PORT": str(port), "RETSU_DATABASE__MAX_CONNECTIONS": "30"},
        Path(tmp_path_factory.mktemp("api")) / "api.log",
    )
    base = f"http://127.0.0.1:{port}"
    try:
        process.wait_until_ready(f"{base}/health/ready")
        yield base
    finally:
        assert process.stop() == 0, process.output()


@pytest.fixture
async def client(api: str) -> AsyncIterator[httpx.AsyncClient]:
    limits = httpx.Limits(max_connections=64)
    async with httpx.AsyncClient(base_url=api, timeout=30, limits=limits) as http:
        yield http


async def new_queue(client: httpx.AsyncClient, **settings: int) -> str:
    response = await client.post(
        "/v1/queues", json={"name": f"q-{uuid.uuid4().hex[:12]}", **settings}
    )
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def enqueue(client: httpx.AsyncClient, queue_id: str, payload: str, priority: str) -> str:
    response = await client.post(
        f"/v1/queues/{queue_id}/messages", json={"payload": payload, "priority": priority}
    )
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def dequeue(client: httpx.AsyncClient, queue_id: str) -> dict[str, object] | None:
    response = await client.post(f"/v1/queues/{queue_id}/messages/dequeue")
    if response.status_code == 204:
        return None
    assert response.status_code == 200, response.text
    return dict(response.json())


async def acknowledge(client: httpx.AsyncClient, queue_id: str, message: dict[str, object]) -> None:
    response = await client.post(
        f"/v1/queues/{queue_id}/messages/{message['id']}/acknowledge",
        json={"receipt_handle": message["receipt_handle"]},
    )
    assert response.status_code == 204, response.text


async def test_the_api_serves_health_and_metrics(client: httpx.AsyncClient) -> None:
    assert (await client.get("/health/live")).status_code == 200
    assert (await client.get("/health/ready")).status_code == 200
    metrics = await client.get("/metrics")
    assert metrics.status_code == 200
    assert "http_server_requests_total" in metrics.text


async def test_messages_come_out_by_priority_then_in_enqueue_order(
    client: httpx.AsyncClient,
) -> None:
    queue_id = await new_queue(client)
    sent = [
        ("low-1", "LOW"),
        ("high-1", "HIGH"),
        ("medium-1", "MEDIUM"),
        ("high-2", "HIGH"),
        ("low-2", "LOW"),
        ("medium-2", "MEDIUM"),
    ]
    for payload, priority in sent:
        await enqueue(client, queue_id, payload, priority)
    received = []
    while (message := await dequeue(client, queue_id)) is not None:
        received.append(message["payload"])
        await acknowledge(client, queue_id, message)
    assert received == ["high-1", "high-2", "medium-1", "medium-2", "low-1", "low-2"]


async def test_a_stale_receipt_handle_never_removes_a_newer_delivery(
    client: httpx.AsyncClient, fresh_database: str
) -> None:
    queue_id = await new_queue(client, visibility_timeout_seconds=30)
    await enqueue(client, queue_id, "work", "MEDIUM")
    first = await dequeue(client, queue_id)
    assert first is not None
    await advance_database_clock(fresh_database, 31)
    second = await dequeue(client, queue_id)
    assert second is not None and second["id"] == first["id"]
    assert second["receipt_handle"] != first["receipt_handle"]
    assert second["delivery_attempts"] == 2
    await acknowledge(client, queue_id, first)  # stale: answers 204, removes nothing
    await advance_database_clock(fresh_database, 31)
    third = await dequeue(client, queue_id)
    assert third is not None and third["id"] == first["id"], "the stale ack removed the message"
    await acknowledge(client, queue_id, third)
    assert await dequeue(client, queue_id) is None


async def test_concurrent_dequeues_of_one_message_deliver_it_once(
    client: httpx.AsyncClient,
) -> None:
    queue_id = await new_queue(client)
    message_id = await enqueue(client, queue_id, "only-one", "HIGH")
    results = await asyncio.gather(*(dequeue(client, queue_id) for _ in range(24)))
    delivered = [r for r in results if r is not None]
    assert len(delivered) == 1
    assert delivered[0]["id"] == message_id


async def test_many_concurrent_consumers_drain_a_queue_exactly_once(
    client: httpx.AsyncClient,
) -> None:
    queue_id = await new_queue(client)
    expected = set()
    for start in range(0, 300, 100):
        response = await client.post(
            f"/v1/queues/{queue_id}/messages/batch",
            json={
                "messages": [
                    {"payload": f"m{i}", "priority": ("HIGH", "MEDIUM", "LOW")[i % 3]}
                    for i in range(start, start + 100)
                ]
            },
        )
        assert response.status_code == 201, response.text
        expected.update(response.json()["ids"])
    seen: list[str] = []

    async def consumer() -> None:
        while (message := await dequeue(client, queue_id)) is not None:
            seen.append(str(message["id"]))
            await acknowledge(client, queue_id, message)

    await asyncio.gather(*(consumer() for _ in range(12)))
    assert len(seen) == len(expected) == 300
    assert set(seen) == expected


async def test_a_message_is_retried_then_dead_lettered(
    client: httpx.AsyncClient, fresh_database: str
) -> None:
    queue_id = await new_queue(client, visibility_timeout_seconds=5, max_delivery_attempts=2)
    message_id = await enqueue(client, queue_id, "poison", "HIGH")
    for attempt in (1, 2):
        message = await dequeue(client, queue_id)
        assert message is not None
        assert (message["id"], message["delivery_attempts"]) == (message_id, attempt)
        await advance_database_clock(fresh_database, 6)
    assert await dequeue(client, queue_id) is None
    metrics = (await client.get("/metrics")).text
    assert "queue_messages_dead_lettered_total" in metrics


async def test_an_exhausted_message_never_hides_a_deliverable_one(
    client: httpx.AsyncClient, fresh_database: str
) -> None:
    queue_id = await new_queue(client, visibility_timeout_seconds=5, max_delivery_attempts=1)
    await enqueue(client, queue_id, "poison", "HIGH")
    poisoned = await dequeue(client, queue_id)
    assert poisoned is not None
    await advance_database_clock(fresh_database, 6)
    await enqueue(client, queue_id, "good", "LOW")
    message = await dequeue(client, queue_id)
    assert message is not None and message["payload"] == "good"


async def test_bad_input_gets_a_problem_not_a_stack_trace(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/v1/queues", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["code"] == "invalid_json"
    assert "Traceback" not in response.text
    assert response.headers["x-request-id"]
