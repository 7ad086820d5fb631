"""`retsu dev` from nothing: embedded PostgreSQL, migrations, API and workers in one
process, and messages that survive a restart."""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.processes import RetsuProcess, free_port, retsu_env

pytestmark = pytest.mark.integration


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A working directory outside pytest's basetemp. Run as root, the embedded PostgreSQL
    runs as the `pgserver` user, which must traverse every parent directory; pytest keeps
    /tmp/pytest-of-<user> private (0700) and re-applies that whenever another pytest session
    starts, so a run beside another one could lose access mid-test."""
    path = Path(tempfile.mkdtemp(prefix="retsu-dev-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _start(workdir: Path, port: int, log_name: str) -> RetsuProcess:
    env = retsu_env(None, http__port=str(port))
    # A Redis that does not answer: dev must say so once and carry on without it.
    env["RETSU_CACHE__DISTRIBUTED__ENABLED"] = "true"
    env["RETSU_CACHE__DISTRIBUTED__URL"] = f"redis://127.0.0.1:{free_port()}"
    process = RetsuProcess(["dev"], env, workdir / log_name, cwd=workdir)
    process.wait_until_ready(f"http://127.0.0.1:{port}/health/ready", timeout=60)
    return process


def test_dev_runs_on_an_embedded_postgresql_and_keeps_messages_across_restarts(
    workdir: Path,
) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    first = _start(workdir, port, "dev-1.log")
    try:
        queue = httpx.post(f"{base}/v1/queues", json={"name": f"dev-{uuid.uuid4().hex[:6]}"})
        assert queue.status_code == 201, queue.text
        queue_id = queue.json()["id"]
        sent = httpx.post(
            f"{base}/v1/queues/{queue_id}/messages",
            json={"payload": "survives", "priority": "HIGH"},
        )
        assert sent.status_code == 201
        metrics = httpx.get(f"{base}/metrics").text
        assert "queue_messages_enqueued_total" in metrics
    finally:
        assert first.stop() == 0, first.log_path.read_text()
    assert (workdir / ".retsu" / "pgdata" / "PG_VERSION").is_file()

    second = _start(workdir, port, "dev-2.log")
    try:
        message = httpx.post(f"{base}/v1/queues/{queue_id}/messages/dequeue")
        assert message.status_code == 200, message.text
        assert message.json()["payload"] == "survives"
    finally:
        assert second.stop() == 0, second.log_path.read_text()
    output = (workdir / "dev-2.log").read_text()
    assert output.count("running without the shared cache") == 1
    assert "Traceback" not in output
    assert "RuntimeDirWarning" not in output


def test_dev_says_where_it_listens_at_the_default_log_level(workdir: Path) -> None:
    port = free_port()
    env = retsu_env(None, http__port=str(port))
    env.pop("XDG_RUNTIME_DIR", None)  # as for root in a container
    process = RetsuProcess(["dev"], env, workdir / "dev.log", cwd=workdir)
    try:
        process.wait_until_ready(f"http://127.0.0.1:{port}/health/ready", timeout=60)
        deadline = time.monotonic() + 10
        while "database:" not in process.output() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        assert process.stop() == 0, process.output()
    output = (workdir / "dev.log").read_text()
    assert output.count("retsu dev is ready") == 1
    assert f"API:       http://127.0.0.1:{port}" in output
    assert f"console:   http://127.0.0.1:{port}/console/" in output
    assert "database:  postgresql://postgres@/retsu?host=" in output
    assert "RuntimeDirWarning" not in output and "XDG_RUNTIME_DIR" not in output


def test_dev_leaves_out_the_console_when_it_is_disabled(workdir: Path) -> None:
    port = free_port()
    env = retsu_env(None, http__port=str(port), console__enabled="false")
    process = RetsuProcess(["dev"], env, workdir / "dev.log", cwd=workdir)
    try:
        process.wait_until_ready(f"http://127.0.0.1:{port}/health/ready", timeout=60)
        deadline = time.monotonic() + 10
        while "database:" not in process.output() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        assert process.stop() == 0, process.output()
    output = (workdir / "dev.log").read_text()
    assert "retsu dev is ready" in output
    assert "console:" not in output
