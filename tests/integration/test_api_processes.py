"""`http.workers` > 1: several API processes on one port, metrics summed across them."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import httpx
import pytest

from tests.support.processes import RetsuProcess, free_port, retsu_env

pytestmark = pytest.mark.integration


def _value(metrics: str, line_start: str) -> float:
    for line in metrics.splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{line_start} not in /metrics")


async def test_several_api_processes_share_the_port_and_sum_their_metrics(
    database_url: str, tmp_path: Path
) -> None:
    port = free_port()
    env = {
        **retsu_env(database_url),
        "RETSU_HTTP__PORT": str(port),
        "RETSU_HTTP__WORKERS": "3",
        "RETSU_DATABASE__MAX_CONNECTIONS": "4",
        "RETSU_LOGGING__FILTER": "info",
    }
    process = RetsuProcess(["api"], env, tmp_path / "api.log")
    base = f"http://127.0.0.1:{port}"
    try:
        process.wait_until_ready(f"{base}/health/ready")
        name = f"multi-{uuid.uuid4().hex[:8]}"
        async with httpx.AsyncClient(base_url=base, timeout=10) as client:
            queue = (await client.post("/v1/queues", json={"name": name})).json()

            # Fresh connections spread the requests over the processes.
            async def enqueue() -> int:
                async with httpx.AsyncClient(base_url=base, timeout=10) as single:
                    response = await single.post(
                        f"/v1/queues/{queue['id']}/messages",
                        json={"payload": "x", "priority": "LOW"},
                    )
                    return response.status_code

            statuses = await asyncio.gather(*(enqueue() for _ in range(30)))
            assert statuses == [201] * 30, process.log_path.read_text()[-4000:]
            for _ in range(20):
                async with httpx.AsyncClient(base_url=base, timeout=10) as single:
                    metrics = (await single.get("/metrics")).text
                    assert (
                        _value(
                            metrics,
                            f'queue_messages_enqueued_total{{message_priority="LOW",queue_name="{name}"}}',
                        )
                        == 30
                    )
    finally:
        assert process.stop() == 0, process.output()
