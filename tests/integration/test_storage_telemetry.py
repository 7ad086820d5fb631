"""Storage telemetry against PostgreSQL: every statement the PostgreSQL adapter runs is
timed (``db_operation_duration_seconds``) and traced (a CLIENT span, the request's child)
once, by ``adapters/postgres/database.py`` — no port is wrapped by a decorator."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from dependency_injector import providers
from litestar import Litestar
from litestar.testing import AsyncTestClient
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client.parser import text_string_to_metric_families

from retsu.adapters.telemetry.metrics import Metrics
from retsu.adapters.telemetry.tracing import Tracing, new_tracer_provider
from retsu.entrypoints.containers import ApiContainer, WorkerContainer
from retsu.entrypoints.settings import build_settings
from tests.support.containers import NO_CACHES

pytestmark = pytest.mark.integration


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def tracing(exporter: InMemorySpanExporter) -> Iterator[Tracing]:
    provider: TracerProvider = new_tracer_provider(
        exporter, role="api", environment="test", version="9.9.9", batch=False
    )
    tracing = Tracing(provider, version="9.9.9")
    yield tracing
    tracing.shutdown()


def _counts(metrics: Metrics) -> dict[tuple[str, str], float]:
    return {
        (sample.labels["operation"], sample.labels["outcome"]): sample.value
        for family in text_string_to_metric_families(metrics.render()[0].decode())
        for sample in family.samples
        if sample.name == "db_operation_duration_seconds_count"
    }


@pytest.fixture
async def app(database_url: str, tracing: Tracing, metrics: Metrics) -> AsyncIterator[Litestar]:
    container = ApiContainer(
        settings=build_settings({**NO_CACHES, "database": {"url": database_url}})
    )
    container.core.tracing.override(providers.Object(tracing))
    container.core.metrics.override(providers.Object(metrics))
    yield container.app()
    await container.storage.engine().dispose()


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


async def test_each_statement_is_a_client_span_under_its_request_and_is_timed(
    app: Litestar, exporter: InMemorySpanExporter, metrics: Metrics
) -> None:
    async with AsyncTestClient(app=app) as client:
        created = await client.post("/v1/queues", json={"name": "telemetry"})
        queue_id = created.json()["id"]
        await client.post(
            f"/v1/queues/{queue_id}/messages", json={"payload": "p", "priority": "LOW"}
        )
        exporter.clear()
        response = await client.post(f"/v1/queues/{queue_id}/messages/dequeue")
        assert response.status_code == 200
    spans = exporter.get_finished_spans()
    [server] = [s for s in spans if s.kind == SpanKind.SERVER]
    children = [s for s in spans if s.kind == SpanKind.CLIENT]
    assert [s.name for s in children] == ["dequeue"]
    for child in children:
        assert child.parent is not None and child.parent.span_id == server.context.span_id
        assert child.context.trace_id == server.context.trace_id
        attributes = dict(child.attributes or {})
        assert attributes["db.system"] == "postgresql"
        assert attributes["db.operation.name"] == child.name
        assert child.status.status_code == StatusCode.UNSET
        assert (child.end_time or 0) <= (server.end_time or 0)
    counts = _counts(metrics)
    assert counts[("add_queue", "success")] == 1
    assert counts[("enqueue", "success")] == 1
    assert counts[("dequeue", "success")] == 1
    assert counts[("dequeue", "error")] == 0


async def test_a_domain_answer_of_the_database_is_a_success(
    app: Litestar, metrics: Metrics
) -> None:
    async with AsyncTestClient(app=app) as client:
        assert (await client.post("/v1/queues", json={"name": "taken"})).status_code == 201
        assert (await client.post("/v1/queues", json={"name": "taken"})).status_code == 409
    assert _counts(metrics)[("add_queue", "success")] == 2


async def test_the_collectors_lock_and_its_session_are_measured(database_url: str) -> None:
    metrics = Metrics()
    container = WorkerContainer(settings=build_settings({"database": {"url": database_url}}))
    container.core.metrics.override(providers.Object(metrics))
    try:
        leadership = container.storage.leadership()
        session = await leadership.try_acquire()
        assert session is not None
        assert await leadership.try_acquire() is None  # held: the second try is refused
        await session.record_history(await session.read_state())
        await session.release()
    finally:
        await container.storage.engine().dispose()
    counts = _counts(metrics)
    for operation, count in [
        ("acquire_leadership", 2),
        ("read_state", 1),
        ("record_history", 1),
        ("release_leadership", 1),
    ]:
        assert counts[(operation, "success")] == count, operation
