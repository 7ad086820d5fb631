"""retsu-worker as a process: a handler module from the working directory, SIGTERM/SIGINT
stop it gracefully with exit 0 (against a real server)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from client_support import ADMIN, CLIENT_SRC, RealServer, Target, unique
from retsu_client import Client
from retsu_client.cli.worker import load_handler, main

HANDLERS = textwrap.dedent(
    """
    import asyncio, os, time

    OUT = os.environ["HANDLED_FILE"]

    async def record(message):
        with open(OUT, "a") as out:
            out.write(message.payload + "\\n")

    def slow(message):
        with open(OUT, "a") as out:
            out.write("started " + message.payload + "\\n")
        time.sleep(1.5)
        with open(OUT, "a") as out:
            out.write("finished " + message.payload + "\\n")

    class Handlers:
        @staticmethod
        async def nested(message):
            await record(message)

    not_callable = 42
    """
)


def _worker(tmp_path: Path, server: RealServer, *args: str) -> subprocess.Popen[str]:
    (tmp_path / "jobs.py").write_text(HANDLERS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RETSU_")}
    env.update(
        PYTHONPATH=str(CLIENT_SRC),
        HANDLED_FILE=str(tmp_path / "handled.txt"),
        RETSU_URL=server.url,
        RETSU_TOKEN=ADMIN,
    )
    return subprocess.Popen(
        [sys.executable, "-m", "retsu_client.cli.worker", *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _lines(tmp_path: Path) -> list[str]:
    path = tmp_path / "handled.txt"
    return path.read_text().splitlines() if path.exists() else []


def _wait_for(check: object, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture
def server(real_server: RealServer) -> RealServer:
    return real_server


@pytest.fixture
def retsu(server: RealServer) -> Client:
    return Target("real", server.url, server=server).client()


@pytest.mark.real_server
def test_the_worker_consumes_and_exits_0_on_sigterm(
    tmp_path: Path, server: RealServer, retsu: Client
) -> None:
    queue = retsu.create_queue(unique("cli")).name
    retsu.enqueue_batch(queue, ["one", "two", "three"])

    process = _worker(
        tmp_path,
        server,
        "jobs:record",
        "--queue",
        queue,
        "--prefetch",
        "10",
        "--log-format",
        "json",
    )
    try:
        _wait_for(lambda: len(_lines(tmp_path)) == 3 or process.poll() is not None)
        _wait_for(lambda: retsu.get_queue(queue).stats.in_flight == 0)
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=20)
    finally:
        process.kill()

    assert process.returncode == 0, output
    assert sorted(_lines(tmp_path)) == ["one", "three", "two"]
    assert retsu.get_queue(queue).stats.ready == 0
    logs = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    started = next(entry for entry in logs if entry["message"] == "worker started")
    assert started["queue"] == queue and started["consumer"].count(":") == 2
    assert any(entry["message"] == "worker stopped" for entry in logs)


@pytest.mark.real_server
def test_sigint_lets_the_running_handler_finish_and_releases_the_rest(
    tmp_path: Path, server: RealServer, retsu: Client
) -> None:
    queue = retsu.create_queue(unique("cli"), visibility_timeout_seconds=60).name
    retsu.enqueue_batch(queue, ["a", "b", "c"])

    process = _worker(tmp_path, server, "jobs:slow", "--queue", queue, "--prefetch", "3")
    try:
        _wait_for(lambda: "started a" in _lines(tmp_path) or process.poll() is not None)
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=20)
    finally:
        process.kill()

    assert process.returncode == 0, output
    assert _lines(tmp_path) == ["started a", "finished a"]
    stats = retsu.get_queue(queue).stats
    assert (stats.ready, stats.in_flight) == (2, 0)


@pytest.mark.real_server
def test_sigterm_mid_drain_acknowledges_every_handled_message_and_releases_the_rest(
    tmp_path: Path, server: RealServer, retsu: Client
) -> None:
    # The default prefetch fetches batches ahead of a fast handler: SIGTERM then finds
    # messages running, waiting in the buffer, on their way and acknowledged but unsent.
    queue = retsu.create_queue(unique("cli"), visibility_timeout_seconds=60).name
    for start in range(0, 2000, 100):
        retsu.enqueue_batch(queue, [f"m{i}" for i in range(start, start + 100)])

    process = _worker(tmp_path, server, "jobs:record", "--queue", queue, "--concurrency", "10")
    try:
        _wait_for(lambda: len(_lines(tmp_path)) >= 300 or process.poll() is not None)
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    finally:
        process.kill()

    assert process.returncode == 0, output
    handled = _lines(tmp_path)
    assert len(set(handled)) == len(handled) >= 300
    stats = retsu.get_queue(queue).stats
    # Every handled message acknowledged, every other one back on the queue at once.
    assert (stats.ready, stats.in_flight) == (2000 - len(handled), 0), output


@pytest.mark.real_server
def test_an_unknown_queue_exits_1(tmp_path: Path, server: RealServer) -> None:
    process = _worker(tmp_path, server, "jobs:record", "--queue", unique("missing"))
    output, _ = process.communicate(timeout=20)

    assert process.returncode == 1
    assert "queue_not_found" in output


def test_handler_specs_are_resolved_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "jobs_spec.py").write_text(HANDLERS.replace("jobs", "jobs_spec"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HANDLED_FILE", str(tmp_path / "x"))
    monkeypatch.setattr(sys, "path", list(sys.path))

    assert load_handler("jobs_spec:Handlers.nested").__name__ == "nested"
    for bad in ("jobs_spec", "jobs_spec:missing", "jobs_spec:not_callable", "no_such_mod:f"):
        with pytest.raises(ValueError):
            load_handler(bad)


def test_a_bad_handler_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["no_such_module:handler", "--queue", "q"])
    assert exit_.value.code == 2
    assert "cannot import" in capsys.readouterr().err
