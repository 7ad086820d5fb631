"""Running real `retsu` processes for integration tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

RETSU = [sys.executable, "-m", "retsu.entrypoints.cli"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def retsu_env(database_url: str | None = None, **settings: str) -> dict[str, str]:
    """The current environment minus any RETSU_ variables, plus the given settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RETSU_")}
    env["RETSU_CACHE__DISTRIBUTED__ENABLED"] = "false"
    if database_url is not None:
        env["RETSU_DATABASE__URL"] = database_url
    for key, value in settings.items():
        env[f"RETSU_{key.upper()}"] = value
    return env


def run_retsu(
    args: Sequence[str], env: Mapping[str, str], *, cwd: Path | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*RETSU, *args],
        env=dict(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class RetsuProcess:
    """A background `retsu` process with its output captured to a file."""

    def __init__(
        self, args: Sequence[str], env: Mapping[str, str], log_path: Path, cwd: Path | None = None
    ) -> None:
        self.args = list(args)
        self.log_path = log_path
        self._log = log_path.open("w")
        self.process = subprocess.Popen(
            [*RETSU, *args], env=dict(env), cwd=cwd, stdout=self._log, stderr=subprocess.STDOUT
        )

    def output(self) -> str:
        if not self._log.closed:  # stop() closes it; the file stays readable
            self._log.flush()
        return self.log_path.read_text()

    def wait_until_ready(self, url: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"retsu {self.args} exited early:\n{self.output()}")
            try:
                if httpx.get(url, timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"retsu {self.args} not ready at {url}:\n{self.output()}")

    def signal(self, sig: int = signal.SIGTERM) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)

    def stop(self, timeout: float = 15) -> int:
        self.signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self._log.close()
        return code


def eventually(check: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``check`` until it returns something truthy; returns that value."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.1)
