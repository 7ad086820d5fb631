"""Traces (SPEC §7) over the ASGI app on the memory twin, and the storage telemetry
(``adapters/telemetry/operations.py``) on its own.

The app is the API container's, with its storage swapped for the memory twin. Spans go to
an in-memory exporter: one SERVER span per request named after the route template, the
caller's ``traceparent`` honoured, nothing for ``/metrics``; with tracing off nothing is
added. The CLIENT span of each database operation is made by the PostgreSQL adapter's
``Database`` (checked against PostgreSQL in tests/integration/test_storage_telemetry.py);
here, the ``Instrumentation`` it uses: outcomes, spans, metrics.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import pytest
from dependency_injector import providers
from litestar import Litestar
from litestar.testing import AsyncTestClient
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client.parser import text_string_to_metric_families

from retsu.adapters.http.middleware import (
    HttpMetricsMiddleware,
    RequestIdMiddleware,
    TracingMiddleware,
)
from retsu.adapters.memory.clock import ManualClock
from retsu.adapters.memory.storage import MemoryStorage
from retsu.adapters.telemetry.logging import configure_logging
from retsu.adapters.telemetry.metrics import Metrics
from retsu.adapters.telemetry.operations import Instrumentation
from retsu.adapters.telemetry.tracing import Tracing, create_tracing, new_tracer_provider
from retsu.domain.errors import DatabaseUnavailable, QueueAlreadyExists
from retsu.domain.message import MessageToStore
from retsu.entrypoints.containers import ApiContainer
from retsu.entrypoints.settings import build_settings
from tests.support.containers import memory_storage

# The HTTP tests' clock and metrics fixtures.
from tests.unit.http.conftest import clock, metrics  # noqa: F401

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_SPAN_ID}-01"


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = new_tracer_provider(
        exporter, role="api", environment="test", version="9.9.9", batch=False
    )
    yield provider
    provider.shutdown()


@pytest.fixture
def tracing(provider: TracerProvider) -> Iterator[Tracing]:
    tracing = Tracing(provider, version="9.9.9")
    yield tracing
    tracing.shutdown()


@pytest.fixture
def instrumentation(metrics: Metrics, tracing: Tracing) -> Instrumentation:  # noqa: F811
    return Instrumentation(metrics, tracing.tracer)


@pytest.fixture
def repository_class() -> type[MemoryStorage]:
    return MemoryStorage


@pytest.fixture
def container(
    clock: ManualClock,  # noqa: F811
    metrics: Metrics,  # noqa: F811
    tracing: Tracing,
    repository_class: type[MemoryStorage],
) -> Iterator[ApiContainer]:
    """The API container, its storage overridden with the memory storage container."""
    settings = build_settings(
        {
            "database": {"url": "postgresql://retsu@127.0.0.1:1/unused"},
            "cache": {"distributed": {"enabled": False}, "in_memory": {"enabled": False}},
        }
    )
    container = ApiContainer(settings=settings)
    container.core.metrics.override(providers.Object(metrics))
    container.core.tracing.override(providers.Object(tracing))
    container.storage.override(memory_storage(clock, repository_class(clock)))
    yield container
    container.unwire()


@pytest.fixture
def app(container: ApiContainer) -> Litestar:
    return container.app()


@pytest.fixture
async def client(app: Litestar) -> AsyncIterator[AsyncTestClient[Litestar]]:
    async with AsyncTestClient(app=app) as test_client:
        yield test_client


def _finished(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return list(exporter.get_finished_spans())


def _server_spans(spans: Sequence[ReadableSpan]) -> list[ReadableSpan]:
    return [s for s in spans if s.kind == SpanKind.SERVER]


async def _new_queue(client: AsyncTestClient[Litestar], name: str = "orders") -> str:
    response = await client.post("/v1/queues", json={"name": name})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


# -- the HTTP server span ----------------------------------------------------------------


async def test_each_request_gets_one_server_span_named_after_its_route_template(
    client: AsyncTestClient[Litestar], exporter: InMemorySpanExporter
) -> None:
    queue_id = await _new_queue(client)
    exporter.clear()
    response = await client.post(
        f"/v1/queues/{queue_id}/messages", json={"payload": "p", "priority": "HIGH"}
    )
    assert response.status_code == 201
    [span] = _server_spans(_finished(exporter))
    assert span.name == "POST /v1/queues/{queue_id}/messages"
    assert span.parent is None
    attributes = dict(span.attributes or {})
    assert attributes["http.request.method"] == "POST"
    assert attributes["http.route"] == "/v1/queues/{queue_id}/messages"
    assert attributes["http.response.status_code"] == 201
    assert attributes["url.path"] == f"/v1/queues/{queue_id}/messages"
    assert attributes["retsu.request_id"] == response.headers["x-request-id"]
    assert span.status.status_code == StatusCode.UNSET
    resource = dict(span.resource.attributes)
    assert resource["service.name"] == "retsu"
    assert resource["service.version"] == "9.9.9"
    assert resource["deployment.environment"] == "test"
    assert resource["retsu.role"] == "api"


async def test_a_traceparent_header_makes_the_request_span_a_child_of_the_caller(
    client: AsyncTestClient[Litestar], exporter: InMemorySpanExporter
) -> None:
    queue_id = await _new_queue(client)
    exporter.clear()
    response = await client.post(
        f"/v1/queues/{queue_id}/messages/dequeue", headers={"traceparent": TRACEPARENT}
    )
    assert response.status_code == 204
    spans = _finished(exporter)
    [server] = _server_spans(spans)
    assert server.name == "POST /v1/queues/{queue_id}/messages/dequeue"
    assert format(server.context.trace_id, "032x") == TRACE_ID
    assert server.parent is not None and server.parent.is_remote
    assert format(server.parent.span_id, "016x") == PARENT_SPAN_ID
    assert all(format(s.context.trace_id, "032x") == TRACE_ID for s in spans)


async def test_a_malformed_traceparent_starts_a_new_trace(
    client: AsyncTestClient[Litestar], exporter: InMemorySpanExporter
) -> None:
    await client.get("/health/live", headers={"traceparent": "00-garbage-01"})
    [server] = _server_spans(_finished(exporter))
    assert server.parent is None
    assert format(server.context.trace_id, "032x") != TRACE_ID


async def test_metrics_scrapes_are_not_traced(
    client: AsyncTestClient[Litestar], exporter: InMemorySpanExporter
) -> None:
    response = await client.get("/metrics", headers={"traceparent": TRACEPARENT})
    assert response.status_code == 200
    assert _finished(exporter) == []
    # ...but they are still counted.
    assert 'route="/metrics"' in (await client.get("/metrics")).text


async def test_an_unmatched_path_is_named_by_its_method_only(
    client: AsyncTestClient[Litestar], exporter: InMemorySpanExporter
) -> None:
    response = await client.get("/no/such/path/12345")
    assert response.status_code == 404
    [server] = _server_spans(_finished(exporter))
    assert server.name == "GET"
    attributes = dict(server.attributes or {})
    assert "http.route" not in attributes
    assert attributes["http.response.status_code"] == 404
    assert server.status.status_code == StatusCode.UNSET  # a 4xx is the caller's error


class _BrokenRepository(MemoryStorage):
    async def enqueue(self, queue_id: Any, messages: Sequence[MessageToStore]) -> None:
        raise ConnectionResetError("the database went away")


@pytest.mark.parametrize("repository_class", [_BrokenRepository])
async def test_a_failing_operation_marks_both_spans_as_errors_and_logs_with_trace_ids(
    app: Litestar,
    exporter: InMemorySpanExporter,
    metrics: Metrics,  # noqa: F811
) -> None:
    stream = io.StringIO()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    configure_logging(
        filter="warn", format="json", role="api", environment="test", version="9.9.9", stream=stream
    )
    try:
        async with AsyncTestClient(app=app) as client:
            queue_id = await _new_queue(client)
            exporter.clear()
            response = await client.post(
                f"/v1/queues/{queue_id}/messages", json={"payload": "p", "priority": "HIGH"}
            )
    finally:
        configure_logging(filter="warn", format="pretty", role="-", environment="-", version="-")
        for handler in list(root.handlers):
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)
    assert response.status_code == 500
    spans = _finished(exporter)
    [server] = _server_spans(spans)
    assert server.status.status_code == StatusCode.ERROR
    assert dict(server.attributes or {})["http.response.status_code"] == 500
    # The error log line of that request carries its request id and trace ids.
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    [error] = [line for line in lines if line["level"] == "ERROR"]
    assert error["request_id"] == response.headers["x-request-id"]
    assert error["trace_id"] == format(server.context.trace_id, "032x")
    assert error["span_id"] == format(server.context.span_id, "016x")
    assert "the database went away" not in response.text


# -- tracing off -----------------------------------------------------------------------


def _layers(handler: Any) -> list[type]:
    found = []
    while handler is not None and type(handler).__module__.startswith("retsu."):
        found.append(type(handler))
        handler = getattr(handler, "app", None)
    return found


def test_with_tracing_off_there_is_no_tracing_layer(container: ApiContainer) -> None:
    disabled = create_tracing(
        enabled=False,
        endpoint="http://127.0.0.1:4317",
        timeout_seconds=5,
        role="api",
        environment="test",
        version="1",
    )
    assert disabled.tracer is None and not disabled.enabled
    assert disabled.shutdown() is True
    layers = _layers(container.app(tracer=disabled.tracer).asgi_handler)
    assert layers[:2] == [RequestIdMiddleware, HttpMetricsMiddleware]
    assert TracingMiddleware not in layers


def test_with_tracing_on_the_layers_are_request_id_span_metrics(
    container: ApiContainer,
    tracing: Tracing,
) -> None:
    layers = _layers(container.app(tracer=tracing.tracer).asgi_handler)
    assert layers[:3] == [RequestIdMiddleware, TracingMiddleware, HttpMetricsMiddleware]


def _operation_counts(of: Metrics) -> dict[tuple[str, str], float]:
    return {
        (sample.labels["operation"], sample.labels["outcome"]): sample.value
        for family in text_string_to_metric_families(of.render()[0].decode())
        for sample in family.samples
        if sample.name == "db_operation_duration_seconds_count"
    }


async def _run(instrumentation: Instrumentation, name: str, error: BaseException | None) -> None:
    with instrumentation.operation(name):
        await asyncio.sleep(0)
        if error is not None:
            raise error


async def test_without_a_tracer_operations_are_still_timed_but_make_no_span(
    exporter: InMemorySpanExporter,
) -> None:
    own_metrics = Metrics()
    instrumentation = Instrumentation(own_metrics, None)
    await _run(instrumentation, "enqueue", None)
    # A domain answer ("that name is taken") is the database working: success...
    with pytest.raises(QueueAlreadyExists):
        await _run(instrumentation, "enqueue", QueueAlreadyExists("taken"))
    # ... an unreachable database, or any other failure, is not.
    with pytest.raises(ConnectionResetError):
        await _run(instrumentation, "enqueue", ConnectionResetError("gone"))
    with pytest.raises(DatabaseUnavailable):
        await _run(instrumentation, "enqueue", DatabaseUnavailable())
    assert _operation_counts(own_metrics) == {("enqueue", "success"): 2, ("enqueue", "error"): 2}
    assert _finished(exporter) == []


async def test_an_operation_is_a_client_span_named_after_it_with_its_outcome(
    exporter: InMemorySpanExporter, tracing: Tracing
) -> None:
    own_metrics = Metrics()
    instrumentation = Instrumentation(own_metrics, tracing.tracer)
    await _run(instrumentation, "dequeue", None)
    with pytest.raises(QueueAlreadyExists):
        await _run(instrumentation, "add_queue", QueueAlreadyExists("taken"))
    with pytest.raises(ConnectionResetError):
        await _run(instrumentation, "enqueue", ConnectionResetError("gone"))
    with pytest.raises(DatabaseUnavailable):
        await _run(instrumentation, "acknowledge", DatabaseUnavailable())
    spans = {s.name: s for s in _finished(exporter)}
    for span in spans.values():
        assert span.kind == SpanKind.CLIENT
        assert span.parent is None  # no request around it: a root span (e.g. a worker batch)
        attributes = dict(span.attributes or {})
        assert attributes["db.system"] == "postgresql"
        assert attributes["db.operation.name"] == span.name
    assert spans["dequeue"].status.status_code == StatusCode.UNSET
    taken = spans["add_queue"]
    assert taken.status.status_code == StatusCode.UNSET
    assert dict(taken.attributes or {})["retsu.domain_error"] == "QueueAlreadyExists"
    gone = spans["enqueue"]
    assert gone.status.status_code == StatusCode.ERROR
    assert dict(gone.attributes or {})["error.type"] == "ConnectionResetError"
    assert [e.name for e in gone.events] == ["exception"]
    down = spans["acknowledge"]
    assert down.status.status_code == StatusCode.ERROR
    assert dict(down.attributes or {})["error.type"] == "DatabaseUnavailable"
    assert down.events == ()  # an unreachable database is not an exception to record
    assert _operation_counts(own_metrics) == {
        ("dequeue", "success"): 1,
        ("dequeue", "error"): 0,
        ("add_queue", "success"): 1,
        ("add_queue", "error"): 0,
        ("enqueue", "success"): 0,
        ("enqueue", "error"): 1,
        ("acknowledge", "success"): 0,
        ("acknowledge", "error"): 1,
    }


async def test_an_operation_inside_a_request_span_is_its_child(
    exporter: InMemorySpanExporter, tracing: Tracing
) -> None:
    assert tracing.tracer is not None
    instrumentation = Instrumentation(Metrics(), tracing.tracer)
    with tracing.tracer.start_as_current_span("request", kind=SpanKind.SERVER) as request:
        await _run(instrumentation, "dequeue", None)
    child = next(s for s in _finished(exporter) if s.name == "dequeue")
    assert child.parent is not None
    assert child.parent.span_id == request.get_span_context().span_id


class _StuckExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        time.sleep(3)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


def test_shutdown_flushes_but_never_holds_the_process_longer_than_its_limit() -> None:
    provider = new_tracer_provider(
        _StuckExporter(), role="api", environment="test", version="1", export_timeout_seconds=1
    )
    tracing = Tracing(provider)
    assert tracing.tracer is not None
    tracing.tracer.start_span("work").end()
    started = time.monotonic()
    assert tracing.shutdown(timeout_seconds=0.2) is False
    assert time.monotonic() - started < 2
    assert tracing.shutdown() is True  # idempotent


def test_shutdown_exports_what_is_buffered() -> None:
    exporter = InMemorySpanExporter()
    tracing = Tracing(new_tracer_provider(exporter, role="api", environment="t", version="1"))
    assert tracing.tracer is not None
    tracing.tracer.start_span("buffered").end()
    assert tracing.shutdown(timeout_seconds=5) is True
    assert [s.name for s in exporter.get_finished_spans()] == ["buffered"]


def test_enabled_tracing_builds_an_otlp_grpc_pipeline_with_the_resource() -> None:
    tracing = create_tracing(
        enabled=True,
        endpoint="http://127.0.0.1:4317",
        timeout_seconds=1,
        role="worker:state-metrics-collector",
        environment="staging",
        version="1.2.3",
    )
    try:
        assert tracing.enabled and tracing.provider is not None
        resource = dict(tracing.provider.resource.attributes)
        assert resource["service.name"] == "retsu"
        assert resource["service.version"] == "1.2.3"
        assert resource["deployment.environment"] == "staging"
        assert resource["retsu.role"] == "worker:state-metrics-collector"
        processors = tracing.provider._active_span_processor._span_processors
        assert [type(p).__name__ for p in processors] == ["BatchSpanProcessor"]
        exporter = processors[0]._batch_processor._exporter  # type: ignore[attr-defined]
        assert type(exporter).__name__ == "OTLPSpanExporter"
    finally:
        started = time.monotonic()
        assert tracing.shutdown() is True  # nothing buffered: no export attempted
        assert time.monotonic() - started < 1
