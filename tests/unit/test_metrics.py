"""The Prometheus metrics object: names as in SPEC §7, bounded labels, private registries."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from retsu.adapters.telemetry.metrics import OVERFLOW_LABEL, Metrics
from retsu.application.ports import QueueEvents
from retsu.domain.message import Priority


def _text(metrics: Metrics) -> str:
    body, content_type = metrics.render()
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    return body.decode()


def test_every_spec_metric_is_exposed_under_its_name() -> None:
    text = _text(Metrics())
    expected = {
        "http_server_requests_total": "counter",
        "http_server_request_duration_seconds": "histogram",
        "http_server_active_requests": "gauge",
        "db_pool_acquire_duration_seconds": "histogram",
        "db_operation_duration_seconds": "histogram",
        "cache_requests_total": "counter",
        "cache_load_duration_seconds": "histogram",
        "queue_messages_enqueued_total": "counter",
        "queue_messages_acknowledged_total": "counter",
        "queue_messages_dead_lettered_total": "counter",
        "queue_messages_expired_total": "counter",
        "queue_dead_letter_messages_purged_total": "counter",
        "queue_messages_redriven_total": "counter",
        "telemetry_label_overflow_total": "counter",
    }
    for name, kind in expected.items():
        assert f"# TYPE {name} {kind}\n" in text, name
    assert "_created" not in text


def test_queue_events_are_counted_with_their_labels() -> None:
    metrics = Metrics()
    events: QueueEvents = metrics  # implements the port
    events.enqueued("orders", Priority.HIGH)
    events.enqueued("orders", Priority.HIGH)
    events.enqueued("orders", Priority.LOW, 3)
    events.acknowledged("orders", 2)
    events.dead_lettered("orders")
    metrics.expired("orders", "never_delivered", count=4)
    metrics.expired("orders", "previously_delivered")
    metrics.dead_letters_purged("orders", 5)
    metrics.redriven("orders", 6)
    text = _text(metrics)
    for line in [
        'queue_messages_enqueued_total{message_priority="HIGH",queue_name="orders"} 2.0',
        'queue_messages_enqueued_total{message_priority="LOW",queue_name="orders"} 3.0',
        'queue_messages_acknowledged_total{queue_name="orders"} 2.0',
        'queue_messages_dead_lettered_total{queue_name="orders"} 1.0',
        'queue_messages_expired_total{delivery_history="never_delivered",queue_name="orders"} 4.0',
        'queue_messages_expired_total{delivery_history="previously_delivered",'
        'queue_name="orders"} 1.0',
        'queue_dead_letter_messages_purged_total{queue_name="orders"} 5.0',
        'queue_messages_redriven_total{queue_name="orders"} 6.0',
    ]:
        assert line + "\n" in text, line
    assert 'message_priority="MEDIUM"' not in text


def test_queue_labels_are_bounded() -> None:
    metrics = Metrics(max_queues=2)
    assert metrics.queue_label("a") == "a"
    assert metrics.queue_label("b") == "b"
    assert metrics.queue_label("a") == "a"
    assert metrics.queue_label("c") == OVERFLOW_LABEL
    assert metrics.queue_label("c") == OVERFLOW_LABEL
    assert metrics.queue_label("d") == OVERFLOW_LABEL
    assert metrics.queue_label("b") == "b"
    metrics.enqueued("c", Priority.MEDIUM)
    metrics.enqueued("d", Priority.MEDIUM, 2)
    metrics.acknowledged("a")
    text = _text(metrics)
    assert "telemetry_label_overflow_total 2.0\n" in text  # once per overflowing name
    assert (
        'queue_messages_enqueued_total{message_priority="MEDIUM",queue_name="_overflow"} 3.0\n'
        in text
    )
    assert 'queue_name="c"' not in text
    assert 'queue_messages_acknowledged_total{queue_name="a"} 1.0\n' in text


def test_http_recording() -> None:
    metrics = Metrics()
    metrics.http_request_started()
    metrics.http_request_started()
    metrics.http_request_finished("GET", "/health/live", 200, 0.002)
    metrics.http_request_finished("BREW", "unmatched", 405, 0.001)
    text = _text(metrics)
    assert 'http_server_requests_total{method="GET",route="/health/live",status="200"} 1.0' in text
    assert 'http_server_requests_total{method="_OTHER",route="unmatched",status="405"} 1.0' in text
    assert "BREW" not in text
    assert "http_server_active_requests 0.0\n" in text
    assert (
        'http_server_request_duration_seconds_bucket{le="0.0025",method="GET",route="/health/live"}'
        " 1.0" in text
    )


def test_database_and_cache_recording() -> None:
    metrics = Metrics()
    metrics.db_pool_acquired(0.001)
    metrics.db_operation_finished("dequeue", "success", 0.003)
    metrics.cache_request("queue_names", hit=True)
    metrics.cache_request("queue_names", hit=False)
    metrics.cache_request("queue_details", hit=True)
    metrics.cache_loaded("queue_details", "not_found", 0.01)
    text = _text(metrics)
    for line in [
        "db_pool_acquire_duration_seconds_count 1.0",
        'db_operation_duration_seconds_count{operation="dequeue",outcome="success"} 1.0',
        'cache_requests_total{cache_name="queue_names",outcome="hit"} 1.0',
        'cache_requests_total{cache_name="queue_names",outcome="miss"} 1.0',
        'cache_requests_total{cache_name="queue_details",outcome="hit"} 1.0',
        'cache_load_duration_seconds_count{cache_name="queue_details",outcome="not_found"} 1.0',
    ]:
        assert line + "\n" in text, line


def test_instances_are_independent() -> None:
    first, second = Metrics(), Metrics()
    first.enqueued("orders", Priority.HIGH)
    assert "orders" in _text(first)
    assert "orders" not in _text(second)
    assert first.registry is not second.registry


def test_processes_sharing_a_multiprocess_directory_are_aggregated(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import sys
        from retsu.adapters.telemetry.metrics import Metrics
        from retsu.domain.message import Priority
        metrics = Metrics()
        metrics.enqueued("orders", Priority.HIGH, int(sys.argv[1]))
        metrics.http_request_started()
        if sys.argv[2] == "render":
            sys.stdout.write(metrics.render()[0].decode())
        """
    )
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    subprocess.run([sys.executable, "-c", script, "2", "quiet"], env=env, check=True)
    result = subprocess.run(
        [sys.executable, "-c", script, "3", "render"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    text = result.stdout
    assert 'queue_messages_enqueued_total{message_priority="HIGH",queue_name="orders"} 5.0' in text
