"""`http.workers` > 1: several API processes on one port, metrics summed across them."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
import uuid
from pathlib import Path

import httpx
import pytest

from tests.support.processes import RetsuProcess, free_port, retsu_env, run_retsu

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


def _second_instance_refused(database_url: str, port: int, workers: int) -> None:
    env = {**retsu_env(database_url), "RETSU_HTTP__PORT": str(port)}
    env["RETSU_HTTP__WORKERS"] = str(workers)
    result = run_retsu(["api"], env, timeout=30)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1] == f"retsu: cannot listen on 127.0.0.1:{port}: the port is already in use"
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("first_workers", [1, 2])
def test_a_port_already_served_is_a_startup_error(
    database_url: str, tmp_path: Path, first_workers: int
) -> None:
    port = free_port()
    env = {
        **retsu_env(database_url),
        "RETSU_HTTP__PORT": str(port),
        "RETSU_HTTP__WORKERS": str(first_workers),
    }
    first = RetsuProcess(["api"], env, tmp_path / "first.log")
    try:
        first.wait_until_ready(f"http://127.0.0.1:{port}/health/ready")
        # Neither a multi-process nor a single-process instance may join the port.
        _second_instance_refused(database_url, port, workers=2)
        _second_instance_refused(database_url, port, workers=1)
        assert httpx.get(f"http://127.0.0.1:{port}/health/ready").status_code == 200
    finally:
        assert first.stop() == 0, first.output()


def test_a_management_port_already_served_is_a_startup_error(database_url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**retsu_env(database_url), "RETSU_WORKER__MANAGEMENT__PORT": str(port)}
        result = run_retsu(["worker", "run", "queue", "expired-message-cleaner"], env, timeout=30)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1] == f"retsu: cannot listen on 127.0.0.1:{port}: the port is already in use"
    assert "Traceback" not in result.stderr


def _api_processes(supervisor: int) -> set[int]:
    """The supervisor's API processes (not multiprocessing's helper processes)."""
    children = Path(f"/proc/{supervisor}/task/{supervisor}/children").read_text().split()
    found = set()
    for pid in map(int, children):
        try:
            if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.add(pid)
        except FileNotFoundError:
            continue
    return found


def test_a_dead_api_process_is_replaced(database_url: str, tmp_path: Path) -> None:
    port = free_port()
    env = {**retsu_env(database_url), "RETSU_HTTP__PORT": str(port), "RETSU_HTTP__WORKERS": "2"}
    process = RetsuProcess(["api"], env, tmp_path / "api.log")
    try:
        process.wait_until_ready(f"http://127.0.0.1:{port}/health/ready")
        deadline = time.monotonic() + 30
        while len(before := _api_processes(process.process.pid)) < 2:
            assert time.monotonic() < deadline, process.output()
            time.sleep(0.1)
        victim = min(before)
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while True:
            now = _api_processes(process.process.pid)
            if victim not in now and len(now) == 2:
                break
            assert time.monotonic() < deadline, f"{now} {process.output()}"
            time.sleep(0.1)
        for _ in range(10):  # fresh connections reach both processes
            assert httpx.get(f"http://127.0.0.1:{port}/health/ready").status_code == 200
    finally:
        assert process.stop() == 0, process.output()


def _alive(pid: int) -> bool:
    """Running (a zombie nobody reaps is gone for our purpose: it holds no socket)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_api_processes_exit_when_their_supervisor_is_killed(
    database_url: str, tmp_path: Path
) -> None:
    """SIGKILL (or the OOM killer) gives the supervisor no chance to stop its processes; they
    must notice on their own, or they hold the port and a restarted `retsu api` cannot
    bind it."""
    port = free_port()
    env = {**retsu_env(database_url), "RETSU_HTTP__PORT": str(port), "RETSU_HTTP__WORKERS": "2"}
    process = RetsuProcess(["api"], env, tmp_path / "api.log")
    restarted: RetsuProcess | None = None
    children: set[int] = set()
    try:
        process.wait_until_ready(f"http://127.0.0.1:{port}/health/ready")
        deadline = time.monotonic() + 30
        while len(children := _api_processes(process.process.pid)) < 2:
            assert time.monotonic() < deadline, process.output()
            time.sleep(0.1)
        process.signal(signal.SIGKILL)
        process.process.wait(10)
        killed_at = time.monotonic()
        while alive := {pid for pid in children if _alive(pid)}:
            assert time.monotonic() - killed_at < 10, f"{alive} still running"
            time.sleep(0.1)
        print(f"\nAPI processes gone {time.monotonic() - killed_at:.1f} s after the supervisor")
        restarted = RetsuProcess(["api"], env, tmp_path / "restarted.log")
        restarted.wait_until_ready(f"http://127.0.0.1:{port}/health/ready")
    finally:
        for pid in children:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        process.stop()
        if restarted is not None:
            assert restarted.stop() == 0, restarted.output()
