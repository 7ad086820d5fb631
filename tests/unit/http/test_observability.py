"""Request ids, problem+json for unexpected failures, health, readiness and /metrics."""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

import pytest
from dependency_injector import providers
from litestar.testing import AsyncTestClient

from retsu.adapters.memory.clock import ManualClock
from retsu.adapters.memory.storage import MemoryStorage
from retsu.adapters.telemetry.metrics import Metrics
from retsu.entrypoints.containers import ApiContainer
from tests.unit.http.helpers import MISSING_ID, Client, NewQueue, assert_problem

# -- x-request-id ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "request_id", ["abc", "A", "x" * 128, "!~" * 64, "req-1:2/3?#[]@$&'()*+,;="]
)
async def test_a_valid_request_id_is_echoed(client: Client, request_id: str) -> None:
    response = await client.get("/health/live", headers={"x-request-id": request_id})
    assert response.headers["x-request-id"] == request_id


@pytest.mark.parametrize(
    "request_id", ["", "x" * 129, "y" * 200, "has space", "tab\there", "ünï", "a\x7f"]
)
async def test_an_invalid_request_id_is_replaced(client: Client, request_id: str) -> None:
    response = await client.get(
        "/health/live", headers=[(b"x-request-id", request_id.encode("utf-8"))]
    )
    generated = response.headers["x-request-id"]
    assert generated != request_id
    assert re.fullmatch(r"[0-9a-f]{32}", generated)


async def test_generated_request_ids_differ(client: Client) -> None:
    ids = {(await client.get("/health/live")).headers["x-request-id"] for _ in range(5)}
    assert len(ids) == 5


async def test_every_kind_of_response_carries_a_request_id(
    client: Client, new_queue: NewQueue
) -> None:
    queue = await new_queue()
    responses = [
        await client.get("/health/live", headers={"x-request-id": "r1"}),
        await client.get("/health/ready", headers={"x-request-id": "r2"}),
        await client.get("/metrics", headers={"x-request-id": "r3"}),
        await client.get("/nope", headers={"x-request-id": "r4"}),
        await client.put("/v1/queues", headers={"x-request-id": "r5"}),
        await client.post(
            f"/v1/queues/{queue['id']}/messages/dequeue", headers={"x-request-id": "r6"}
        ),
        await client.post("/v1/queues", json={"name": "orders"}, headers={"x-request-id": "r7"}),
        await client.post(
            "/v1/queues",
            content=b"x" * (2 << 20),
            headers={"x-request-id": "r8", "content-type": "application/json"},
        ),
    ]
    assert [r.status_code for r in responses] == [200, 200, 200, 404, 405, 204, 409, 413]
    assert [r.headers.get_list("x-request-id") for r in responses] == [
        [f"r{i}"] for i in range(1, 9)
    ]


# -- unexpected failures -------------------------------------------------------------------


class ExplodingStorage(MemoryStorage):
    async def dequeue(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("secret-internal-detail")


@pytest.mark.parametrize("debug", [False, True])
async def test_unexpected_error_is_a_500_problem_without_stack_trace(
    container: ApiContainer, caplog: pytest.LogCaptureFixture, debug: bool, clock: ManualClock
) -> None:
    container.storage.messages.override(providers.Object(ExplodingStorage(clock)))
    app = container.app(debug=debug)
    caplog.set_level(logging.ERROR, logger="retsu.adapters.http")
    async with AsyncTestClient(app=app) as client:
        response = await client.post(
            f"/v1/queues/{MISSING_ID}/messages/dequeue", headers={"x-request-id": "req-500"}
        )
    body = assert_problem(response, 500, "internal_error")
    assert body["title"] == "Internal Server Error"
    assert "req-500" in body["detail"]
    assert "secret-internal-detail" not in response.text
    assert "Traceback" not in response.text
    assert response.headers["x-request-id"] == "req-500"
    [record] = [r for r in caplog.records if r.name == "retsu.adapters.http"]
    assert record.levelno == logging.ERROR
    assert "req-500" in record.getMessage()
    assert record.request_id == "req-500"  # type: ignore[attr-defined]
    assert record.exc_info is not None and isinstance(record.exc_info[1], RuntimeError)


# -- health -----------------------------------------------------------------------------------


async def test_live(client: Client) -> None:
    response = await client.get("/health/live")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


async def test_ready(client: Client) -> None:
    response = await client.get("/health/ready")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


async def test_not_ready_when_readiness_raises(
    container: ApiContainer, caplog: pytest.LogCaptureFixture
) -> None:
    async def failing() -> None:
        raise ConnectionRefusedError("database down")

    container.storage.readiness.override(providers.Callable(failing))
    app = container.app()
    async with AsyncTestClient(app=app) as client:
        response = await client.get("/health/ready")
        live = await client.get("/health/live")
    assert_problem(response, 503, "not_ready")
    assert response.json()["title"] == "Service Unavailable"
    assert live.status_code == 200
    assert any("database down" in r.getMessage() for r in caplog.records)


async def test_not_ready_when_readiness_hangs(container: ApiContainer) -> None:
    async def hanging() -> None:
        await asyncio.sleep(3600)

    container.storage.readiness.override(providers.Callable(hanging))
    app = container.app(readiness_timeout_seconds=0.05)
    async with AsyncTestClient(app=app) as client:
        response = await client.get("/health/ready")
    assert "0.05 s" in assert_problem(response, 503, "not_ready")["detail"]


# -- /metrics -----------------------------------------------------------------------------------


def _samples(text: str) -> dict[str, float]:
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


async def test_metrics_after_a_workload(client: Client, new_queue: NewQueue) -> None:
    queue = await new_queue("orders", visibility_timeout_seconds=10)
    qid = queue["id"]
    for priority in ("HIGH", "HIGH", "LOW"):
        response = await client.post(
            f"/v1/queues/{qid}/messages", json={"payload": "x", "priority": priority}
        )
        assert response.status_code == 201
    response = await client.post(
        f"/v1/queues/{qid}/messages/batch",
        json={"messages": [{"payload": "y", "priority": "MEDIUM"}] * 4},
    )
    assert response.status_code == 201
    delivered = (
        await client.post(f"/v1/queues/{qid}/messages/dequeue", json={"max_messages": 2})
    ).json()["messages"]
    for message in delivered:
        response = await client.post(
            f"/v1/queues/{qid}/messages/{message['id']}/acknowledge",
            json={"receipt_handle": message["receipt_handle"]},
        )
        assert response.status_code == 204
    await client.get("/nope")
    await client.get(f"/v1/queues/{qid}/nope")

    response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    text = response.text
    samples = _samples(text)
    assert (
        samples['queue_messages_enqueued_total{message_priority="HIGH",queue_name="orders"}'] == 2
    )
    assert samples['queue_messages_enqueued_total{message_priority="LOW",queue_name="orders"}'] == 1
    assert (
        samples['queue_messages_enqueued_total{message_priority="MEDIUM",queue_name="orders"}'] == 4
    )
    assert samples['queue_messages_acknowledged_total{queue_name="orders"}'] == 2
    assert 'queue_messages_enqueued_total{message_priority="HIGH",queue_name="orders"} 2.0' in text

    requests = 'http_server_requests_total{method="%s",route="%s",status="%s"}'
    assert samples[requests % ("POST", "/v1/queues", "201")] == 1
    assert samples[requests % ("POST", "/v1/queues/{queue_id}/messages", "201")] == 3
    assert samples[requests % ("POST", "/v1/queues/{queue_id}/messages/batch", "201")] == 1
    assert samples[requests % ("POST", "/v1/queues/{queue_id}/messages/dequeue", "200")] == 1
    ack_route = "/v1/queues/{queue_id}/messages/{message_id}/acknowledge"
    assert samples[requests % ("POST", ack_route, "204")] == 2
    assert samples[requests % ("GET", "unmatched", "404")] == 2
    duration = 'http_server_request_duration_seconds_count{method="POST",route="%s"}'
    assert samples[duration % "/v1/queues/{queue_id}/messages"] == 3
    assert samples["http_server_active_requests"] == 1  # this very scrape
    # Raw paths never become labels.
    assert qid not in text
    assert "/nope" not in text


async def test_metrics_count_dead_letters(
    client: Client, new_queue: NewQueue, clock: ManualClock
) -> None:
    queue = await new_queue("jobs", max_delivery_attempts=1, visibility_timeout_seconds=5)
    await client.post(
        f"/v1/queues/{queue['id']}/messages", json={"payload": "x", "priority": "LOW"}
    )
    await client.post(f"/v1/queues/{queue['id']}/messages/dequeue")
    clock.advance(5)
    assert (await client.post(f"/v1/queues/{queue['id']}/messages/dequeue")).status_code == 204
    text = (await client.get("/metrics")).text
    assert 'queue_messages_dead_lettered_total{queue_name="jobs"} 1.0' in text


async def test_each_app_reports_its_own_metrics(container: ApiContainer) -> None:
    container.core.metrics.override(providers.Object(Metrics()))
    async with AsyncTestClient(app=container.app()) as client:
        await client.get("/health/live")
        text = (await client.get("/metrics")).text
    assert 'http_server_requests_total{method="GET",route="/health/live",status="200"} 1.0' in text
