"""SPEC §7 through real `retsu api` processes: exact counters after a scripted workload,
the label budget, JSON log lines, and no secret anywhere in the output."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc  # type: ignore[import-untyped]
import httpx
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from retsu import __version__
from tests.conftest import create_database, drop_database
from tests.support.processes import RetsuProcess, free_port, retsu_env
from tests.support.services import PostgresServer
from tests.support.timeshift import advance_database_clock

pytestmark = pytest.mark.integration

QUEUES = "/v1/queues"
MESSAGES = "/v1/queues/{queue_id}/messages"
DEQUEUE = "/v1/queues/{queue_id}/messages/dequeue"
ACKNOWLEDGE = "/v1/queues/{queue_id}/messages/{message_id}/acknowledge"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(scope="module")
async def database(postgres_server: PostgresServer) -> AsyncIterator[str]:
    url = await create_database(postgres_server)
    yield url
    await drop_database(postgres_server, url)


@contextmanager
def running_api(env: dict[str, str], log_path: Path) -> Iterator[tuple[str, RetsuProcess]]:
    port = free_port()
    process = RetsuProcess(["api"], {**env, "RETSU_HTTP__PORT": str(port)}, log_path)
    base = f"http://127.0.0.1:{port}"
    try:
        process.wait_until_ready(f"{base}/health/ready")
        yield base, process
    finally:
        code = process.stop()
        assert code == 0, f"exit code {code}:\n{process.log_path.read_text()}"


def parse_metrics(text: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def series(samples: Samples, name: str) -> dict[frozenset[tuple[str, str]], float]:
    return {labels: v for (n, labels), v in samples.items() if n == name}


def json_lines(output: str) -> list[dict[str, Any]]:
    lines = [line for line in output.splitlines() if line.strip()]
    assert lines, "the process logged nothing"
    parsed = []
    for line in lines:
        try:
            parsed.append(json.loads(line))
        except json.JSONDecodeError:
            pytest.fail(f"not a JSON log line: {line!r}")
    return parsed


async def _post(client: httpx.AsyncClient, path: str, body: Any = None) -> httpx.Response:
    return await client.post(path, json=body) if body is not None else await client.post(path)


async def test_a_scripted_workload_shows_exact_counters(database: str, tmp_path: Path) -> None:
    env = retsu_env(
        database,
        environment="test",
        logging__format="json",
        logging__filter="info",
    )
    name = f"obs-{uuid.uuid4().hex[:10]}"
    with running_api(env, tmp_path / "api.log") as (base, process):
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            created = await _post(
                client,
                QUEUES,
                {"name": name, "max_delivery_attempts": 1, "visibility_timeout_seconds": 5},
            )
            assert created.status_code == 201, created.text
            queue_id = created.json()["id"]
            messages = f"/v1/queues/{queue_id}/messages"
            for priority in ("HIGH", "HIGH", "HIGH", "LOW", "LOW"):
                response = await _post(client, messages, {"payload": "p", "priority": priority})
                assert response.status_code == 201, response.text
            delivered = []
            for _ in range(4):
                response = await _post(client, f"{messages}/dequeue")
                assert response.status_code == 200, response.text
                delivered.append(response.json())
            assert [m["priority"] for m in delivered] == ["HIGH", "HIGH", "HIGH", "LOW"]
            for message in delivered[:3]:
                response = await _post(
                    client,
                    f"{messages}/{message['id']}/acknowledge",
                    {"receipt_handle": message["receipt_handle"]},
                )
                assert response.status_code == 204, response.text
            # The unacknowledged LOW message had its only attempt: once its lease ends,
            # the next dequeue dead-letters it, then delivers the last LOW message.
            await advance_database_clock(database, 6)
            fifth = await _post(client, f"{messages}/dequeue")
            assert fifth.status_code == 200, fifth.text
            assert fifth.json()["id"] not in {m["id"] for m in delivered}
            sixth = await _post(client, f"{messages}/dequeue")
            assert sixth.status_code == 204, sixth.text
            scrape = await client.get("/metrics")
        assert scrape.status_code == 200
        assert scrape.headers["content-type"].startswith("text/plain; version=0.0.4")
        samples = parse_metrics(scrape.text)

    # Queue events, recorded by the operations themselves.
    assert series(samples, "queue_messages_enqueued_total") == {
        frozenset({("queue_name", name), ("message_priority", "HIGH")}): 3.0,
        frozenset({("queue_name", name), ("message_priority", "LOW")}): 2.0,
    }
    assert series(samples, "queue_messages_acknowledged_total") == {
        frozenset({("queue_name", name)}): 3.0
    }
    assert series(samples, "queue_messages_dead_lettered_total") == {
        frozenset({("queue_name", name)}): 1.0
    }
    # HTTP: route templates, never raw paths.
    requests = series(samples, "http_server_requests_total")
    expected = {
        ("POST", QUEUES, "201"): 1.0,
        ("POST", MESSAGES, "201"): 5.0,
        ("POST", DEQUEUE, "200"): 5.0,
        ("POST", DEQUEUE, "204"): 1.0,
        ("POST", ACKNOWLEDGE, "204"): 3.0,
    }
    for (method, route, status), count in expected.items():
        labels = frozenset({("method", method), ("route", route), ("status", status)})
        assert requests.get(labels) == count, (method, route, status, requests)
    assert not any(queue_id in dict(labels)["route"] for labels in requests)
    for route, count in [(QUEUES, 1), (MESSAGES, 5), (DEQUEUE, 6), (ACKNOWLEDGE, 3)]:
        assert (
            value(samples, "http_server_request_duration_seconds_count", method="POST", route=route)
            == count
        )
    # The scrape itself is the one request in flight while /metrics renders.
    assert value(samples, "http_server_active_requests") == 1.0
    # Database: one repository call per message operation, all successful.
    operations = series(samples, "db_operation_duration_seconds_count")
    counts = {
        (dict(labels)["operation"], dict(labels)["outcome"]): v for labels, v in operations.items()
    }
    assert counts[("enqueue", "success")] == 5
    assert counts[("dequeue", "success")] == 6
    assert counts[("acknowledge", "success")] == 3
    assert counts[("add_queue", "success")] == 1
    assert all(v == 0 for (_, outcome), v in counts.items() if outcome == "error"), counts
    assert {outcome for _, outcome in counts} == {"success", "error"}
    pool_checkouts = value(samples, "db_pool_acquire_duration_seconds_count")
    assert pool_checkouts is not None and pool_checkouts >= 15
    # No state gauges in the API (only the collector leader exports them).
    assert not series(samples, "queue_messages_ready")

    lines = json_lines(process.log_path.read_text())
    for line in lines:
        assert line["role"] == "api", line
        assert line["environment"] == "test", line
        assert line["version"] == __version__, line
        assert line["level"] in {"INFO", "WARNING", "ERROR", "CRITICAL"}, line  # filter: info
        assert {"timestamp", "logger", "message"} <= set(line), line
    assert any(line["message"] == "API listening" for line in lines)


async def test_queues_past_the_label_budget_share_the_overflow_label(
    database: str, tmp_path: Path
) -> None:
    env = retsu_env(database, telemetry__metrics__max_queues="2")
    names = [f"budget-{i}-{uuid.uuid4().hex[:8]}" for i in range(3)]
    with running_api(env, tmp_path / "api.log") as (base, _process):
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            for name in names:
                created = await _post(client, QUEUES, {"name": name})
                assert created.status_code == 201, created.text
                queue_id = created.json()["id"]
                for _ in range(2):
                    response = await _post(
                        client,
                        f"/v1/queues/{queue_id}/messages",
                        {"payload": "p", "priority": "MEDIUM"},
                    )
                    assert response.status_code == 201, response.text
                response = await _post(client, f"/v1/queues/{queue_id}/messages/dequeue")
                assert response.status_code == 200, response.text
                message = response.json()
                response = await _post(
                    client,
                    f"/v1/queues/{queue_id}/messages/{message['id']}/acknowledge",
                    {"receipt_handle": message["receipt_handle"]},
                )
                assert response.status_code == 204, response.text
            scrape = await client.get("/metrics")
    samples = parse_metrics(scrape.text)
    assert series(samples, "queue_messages_enqueued_total") == {
        frozenset({("queue_name", names[0]), ("message_priority", "MEDIUM")}): 2.0,
        frozenset({("queue_name", names[1]), ("message_priority", "MEDIUM")}): 2.0,
        frozenset({("queue_name", "_overflow"), ("message_priority", "MEDIUM")}): 2.0,
    }
    assert series(samples, "queue_messages_acknowledged_total") == {
        frozenset({("queue_name", names[0])}): 1.0,
        frozenset({("queue_name", names[1])}): 1.0,
        frozenset({("queue_name", "_overflow")}): 1.0,
    }
    assert value(samples, "telemetry_label_overflow_total") == 1.0
    assert names[2] not in scrape.text


async def test_no_secret_reaches_the_logs_even_at_debug(
    database: str, tmp_path: Path, postgres_server: PostgresServer
) -> None:
    password = f"pw-{uuid.uuid4().hex}"
    token = f"tok-{uuid.uuid4().hex}"
    wrong_token = f"wrong-{uuid.uuid4().hex}"
    # The test server trusts local connections, so any password is accepted.
    with_password = database.replace("://postgres@", f"://postgres:{password}@", 1)
    assert password in with_password, "the test database URL has an unexpected shape"
    env = retsu_env(
        with_password,
        logging__format="json",
        # SQLAlchemy pins its own loggers to WARN unless named: name them, to see the
        # pool's DEBUG lines and every SQL statement (with its parameters) at INFO.
        logging__filter="debug,asyncio=warn,sqlalchemy.engine=info,sqlalchemy.pool=debug",
        auth__enabled="true",
        auth__tokens=json.dumps(
            [{"name": "observer", "secret": token, "scopes": ["admin", "messages"]}]
        ),
    )
    with running_api(env, tmp_path / "api.log") as (base, process):
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            refused = await client.get(QUEUES, headers={"authorization": f"Bearer {wrong_token}"})
            assert refused.status_code == 401
            created = await client.post(
                QUEUES,
                json={"name": f"secret-{uuid.uuid4().hex[:8]}"},
                headers={"authorization": f"Bearer {token}"},
            )
            assert created.status_code == 201, created.text
            request_id = created.headers["x-request-id"]
    output = process.log_path.read_text()
    for secret in (password, token, wrong_token):
        assert secret not in output
    lines = json_lines(output)
    assert all((line["role"], line["version"]) == ("api", __version__) for line in lines)
    assert any(
        line["level"] == "DEBUG" and line["logger"].startswith("sqlalchemy.pool") for line in lines
    ), "logging.filter=...,sqlalchemy.pool=debug ignored"
    assert not any(line["logger"] == "asyncio" and line["level"] == "DEBUG" for line in lines), (
        "the per-logger level (asyncio=warn) was ignored"
    )
    # Lines logged while answering the request carry its id (SQLAlchemy logs every
    # statement at this level).
    during_request = [line for line in lines if line.get("request_id") == request_id]
    assert during_request, "no log line carries the request id"
    assert any(line["logger"].startswith("sqlalchemy") for line in during_request)


# -- traces over OTLP/gRPC ----------------------------------------------------------------

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN_ID = "b7ad6b7169203331"
LOOKUP_TRACE_ID = "0af7651916cd43dd8448eb211c80319d"
SERVER, CLIENT = 2, 3  # opentelemetry.proto.trace.v1.Span.SpanKind


class _Collector(trace_service_pb2_grpc.TraceServiceServicer):
    """A minimal OTLP/gRPC trace receiver that keeps what it is sent."""

    def __init__(self) -> None:
        self.requests: list[trace_service_pb2.ExportTraceServiceRequest] = []

    def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: Any
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        self.requests.append(request)
        return trace_service_pb2.ExportTraceServiceResponse()

    def spans(self) -> list[tuple[dict[str, Any], Any]]:
        """(resource attributes, span) for every span received."""
        found: list[tuple[dict[str, Any], Any]] = []
        for request in self.requests:
            for resource_spans in request.resource_spans:
                resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    found.extend((resource, span) for span in scope_spans.spans)
        return found


@pytest.fixture
def collector() -> Iterator[tuple[_Collector, int]]:
    receiver = _Collector()
    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(receiver, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield receiver, port
    server.stop(grace=None)


def _attributes(span: Any) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for attribute in span.attributes:
        kind = attribute.value.WhichOneof("value")
        values[attribute.key] = getattr(attribute.value, kind) if kind else None
    return values


async def test_spans_reach_an_otlp_collector_and_logs_carry_their_trace_id(
    database: str, tmp_path: Path, collector: tuple[_Collector, int]
) -> None:
    receiver, port = collector
    env = retsu_env(
        database,
        environment="test",
        logging__format="json",
        logging__filter="info,sqlalchemy.engine=info",
        telemetry__traces__enabled="true",
        telemetry__traces__endpoint=f"http://127.0.0.1:{port}",
        telemetry__traces__timeout_seconds="5",
    )
    traceparent = f"00-{TRACE_ID}-{CALLER_SPAN_ID}-01"
    with running_api(env, tmp_path / "api.log") as (base, process):
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            created = await _post(client, QUEUES, {"name": f"traced-{uuid.uuid4().hex[:8]}"})
            assert created.status_code == 201, created.text
            queue_id = created.json()["id"]
            enqueued = await client.post(
                f"/v1/queues/{queue_id}/messages",
                json={"payload": "p", "priority": "HIGH"},
                headers={"traceparent": traceparent},
            )
            assert enqueued.status_code == 201, enqueued.text
            # A read through SQLAlchemy (the hot enqueue logs no SQL): its SQL log lines must
            # carry its trace id.
            looked = await client.get(
                f"/v1/queues/{queue_id}",
                headers={"traceparent": f"00-{LOOKUP_TRACE_ID}-{CALLER_SPAN_ID}-01"},
            )
            assert looked.status_code == 200, looked.text
            assert (await client.get("/metrics")).status_code == 200
    # Stopping flushed the batch processor: everything is at the collector now.
    spans = receiver.spans()
    assert spans, "no span was exported"
    resource = spans[0][0]
    assert resource["service.name"] == "retsu"
    assert resource["service.version"] == __version__
    assert resource["deployment.environment"] == "test"
    assert resource["retsu.role"] == "api"
    [server] = [
        span for _, span in spans if span.kind == SERVER and span.trace_id.hex() == TRACE_ID
    ]
    assert server.name == "POST /v1/queues/{queue_id}/messages"
    assert server.parent_span_id.hex() == CALLER_SPAN_ID
    attributes = _attributes(server)
    assert attributes["http.route"] == "/v1/queues/{queue_id}/messages"
    assert attributes["http.response.status_code"] == 201
    assert attributes["retsu.request_id"] == enqueued.headers["x-request-id"]
    children = [span for _, span in spans if span.parent_span_id == server.span_id]
    assert "enqueue" in {span.name for span in children}
    for child in children:
        assert child.kind == CLIENT
        assert child.trace_id == server.trace_id
        assert _attributes(child)["db.system"] == "postgresql"
    assert not any(_attributes(span).get("url.path") == "/metrics" for _, span in spans), (
        "/metrics must not be traced"
    )
    # The SQL lines logged while answering the traced read carry its trace id.
    lines = json_lines(process.log_path.read_text())
    traced = [line for line in lines if line.get("trace_id") == LOOKUP_TRACE_ID]
    assert traced, "no log line carries the trace id"
    assert all(line["request_id"] == looked.headers["x-request-id"] for line in traced)


async def test_an_unreachable_collector_never_holds_the_exit(database: str, tmp_path: Path) -> None:
    env = retsu_env(
        database,
        telemetry__traces__enabled="true",
        telemetry__traces__endpoint=f"http://127.0.0.1:{free_port()}",
        telemetry__traces__timeout_seconds="1",
    )
    with running_api(env, tmp_path / "api.log") as (base, process):
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            for _ in range(3):
                assert (await client.get("/health/live")).status_code == 200
        started = time.monotonic()
    # running_api asserted exit code 0 on the way out.
    assert time.monotonic() - started < 10, process.log_path.read_text()
