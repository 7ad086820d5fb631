"""Test support for retsu-client: a real `retsu` server started for the session, the fake,
and one `Target` interface over both so a contract test is written once.

Nothing here imports the server's code: the server runs as a subprocess
(`python -m retsu.entrypoints.cli`, the checkout installed in this environment), and its
database is created and dropped with asyncpg (installed with the server).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from retsu_client import AsyncClient, Client, RetryPolicy
from retsu_client.testing import FAKE_URL, Clock, FakeRetsu, FakeToken, ManualClock

CLIENT_SRC = Path(__file__).resolve().parents[1] / "src"
RETSU = [sys.executable, "-m", "retsu.entrypoints.cli"]
DEFAULT_POSTGRES = "postgresql://postgres@127.0.0.1:5432/postgres"

ADMIN, MESSAGES, READ = "admin-secret", "messages-secret", "read-secret"
TOKENS = {"admin": ADMIN, "messages": MESSAGES, "read": READ}
# Tests retry fast: a real outage is not what they are about.
TEST_RETRY = RetryPolicy(max_attempts=3, base_delay=0.05, max_delay=0.2, deadline=5)


def require_services() -> bool:
    return os.environ.get("RETSU_REQUIRE_SERVICES", "").lower() in ("1", "true", "yes", "on")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _reachable(url: str) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 5432), 1):
            return True
    except OSError:
        return False


def _asyncpg_url(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


async def _admin(url: str, statement: str) -> None:
    import asyncpg  # type: ignore[import-untyped, unused-ignore]

    connection = await asyncpg.connect(_asyncpg_url(url))
    try:
        await connection.execute(statement)
    finally:
        await connection.close()


def _run_in_thread(coro: Any) -> None:
    """asyncio.run in a thread of its own: safe whether or not a loop runs here."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            asyncio.run(coro)
        except BaseException as error:
            errors.append(error)

    import threading

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]


def server_env(database_url: str, **settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RETSU_")}
    env["RETSU_DATABASE__URL"] = database_url
    env["RETSU_CACHE__DISTRIBUTED__ENABLED"] = "false"
    env["RETSU_LOGGING__FILTER"] = "warn"
    for key, value in settings.items():
        env[f"RETSU_{key.upper()}"] = value
    return env


def _tokens_json(scopes: list[str]) -> str:
    return json.dumps([{"name": name, "secret": TOKENS[name], "scopes": [name]} for name in scopes])


@dataclass
class RealServer:
    """A `retsu api` on a fresh database of its own."""

    url: str
    database_url: str
    admin_url: str
    env: dict[str, str]
    process: subprocess.Popen[bytes]
    log_path: Path
    has_read_scope: bool
    extra: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def start_collector(self, log_dir: Path) -> None:
        """The state-metrics collector: the history snapshots of SPEC §3.8 come from it."""
        env = dict(self.env)
        env["RETSU_WORKER__MANAGEMENT__PORT"] = str(free_port())
        env["RETSU_WORKER__QUEUE__STATE_METRICS_COLLECTOR__COLLECTION_INTERVAL_SECONDS"] = "5"
        log = (log_dir / "collector.log").open("wb")
        self.extra.append(
            subprocess.Popen(
                [*RETSU, "worker", "run", "queue", "state-metrics-collector"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )

    def start_scheduler(self, log_dir: Path) -> None:
        """The scheduler (SPEC §3.12): schedules' messages are enqueued by it."""
        env = dict(self.env)
        env["RETSU_WORKER__MANAGEMENT__PORT"] = str(free_port())
        log = (log_dir / "scheduler.log").open("wb")
        self.extra.append(
            subprocess.Popen(
                [*RETSU, "worker", "run", "queue", "scheduler"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )

    def stop(self) -> None:
        for process in [*self.extra, self.process]:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in [*self.extra, self.process]:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        _run_in_thread(
            _admin(self.admin_url, f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)')
        )

    @property
    def db_name(self) -> str:
        return urlsplit(self.database_url).path.lstrip("/")


def start_real_server(log_dir: Path) -> RealServer | str:
    """A running server, or the reason there cannot be one."""
    if importlib.util.find_spec("retsu") is None:
        return "the retsu server is not installed here (pip install -e . at the repository root)"
    if importlib.util.find_spec("asyncpg") is None:
        return "asyncpg (a server dependency) is not installed"
    admin_url = os.environ.get("RETSU_TEST_POSTGRES_URL", DEFAULT_POSTGRES)
    if not _reachable(admin_url):
        return f"no PostgreSQL at {admin_url} (set RETSU_TEST_POSTGRES_URL)"
    name = f"retsu_client_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    try:
        _run_in_thread(_admin(admin_url, f'CREATE DATABASE "{name}"'))
    except Exception as error:
        return f"cannot create a database on {admin_url}: {error!r}"
    database_url = urlsplit(admin_url)._replace(path=f"/{name}").geturl()
    port = free_port()
    base = {"http__port": str(port), "auth__enabled": "true"}

    def migrate(scopes: list[str]) -> subprocess.CompletedProcess[str]:
        env = server_env(database_url, **base, auth__tokens=_tokens_json(scopes))
        return subprocess.run(
            [*RETSU, "migrate"], env=env, capture_output=True, text=True, timeout=120, check=False
        )

    # The `read` scope arrives with the operator API (issue 11): use it when the server
    # accepts it, so those tests need no change once it lands.
    scopes = ["admin", "messages", "read"]
    done = migrate(scopes)
    if done.returncode != 0:  # today: "unknown scope 'read' (expected admin or messages)"
        scopes = ["admin", "messages"]
        done = migrate(scopes)
    if done.returncode != 0:
        _run_in_thread(_admin(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        return f"retsu migrate failed: {done.stdout}{done.stderr}"
    env = server_env(database_url, **base, auth__tokens=_tokens_json(scopes))
    log_path = log_dir / "retsu-api.log"
    log = log_path.open("wb")
    process = subprocess.Popen([*RETSU, "api"], env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    server = RealServer(url, database_url, admin_url, env, process, log_path, "read" in scopes)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            server.stop()
            return f"retsu api exited early:\n{server.output()}"
        try:
            if httpx.get(f"{url}/health/ready", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    server.stop()
    return f"retsu api did not become ready:\n{server.output()}"


@dataclass
class Target:
    """Where a contract test runs: the fake (manual clock) or the real server."""

    kind: str
    url: str
    fake: FakeRetsu | None = None
    server: RealServer | None = None
    clients: list[Client] = field(default_factory=list)

    @property
    def is_fake(self) -> bool:
        return self.fake is not None

    def transport(self) -> httpx.BaseTransport | None:
        return None if self.fake is None else self.fake.transport()

    def client(self, token: str | None = "admin", **kwargs: Any) -> Client:
        kwargs.setdefault("retry", TEST_RETRY)
        if "transport" not in kwargs and self.fake is not None:
            kwargs["transport"] = self.fake.transport()
        client = Client(self.url, token=TOKENS[token] if token else "", **kwargs)
        self.clients.append(client)
        return client

    def async_client(self, token: str | None = "admin", **kwargs: Any) -> AsyncClient:
        """Use it as ``async with``."""
        kwargs.setdefault("retry", TEST_RETRY)
        if "transport" not in kwargs and self.fake is not None:
            kwargs["transport"] = self.fake.transport()
        return AsyncClient(self.url, token=TOKENS[token] if token else "", **kwargs)

    def sleep(self, seconds: float) -> None:
        """Let time pass: the fake's clock jumps, the real server is waited for."""
        if self.fake is not None and isinstance(self.fake.clock, ManualClock):
            self.fake.clock.advance(seconds)
        else:
            time.sleep(seconds)

    def eventually(
        self, check: Callable[[], Any], timeout: float = 10.0, step: float = 0.25
    ) -> Any:
        """Poll ``check`` until it returns something truthy (time passes on either side)."""
        waited = 0.0
        while True:
            result = check()
            if result:
                return result
            if waited >= timeout:
                raise AssertionError(f"condition not met within {timeout}s: last {result!r}")
            self.sleep(step)
            waited += step

    def close(self) -> None:
        for client in self.clients:
            client.close()
        if self.fake is not None:
            self.fake.close()


def fake_target(clock: Clock | None = None) -> Target:
    tokens = [FakeToken(name, secret, [name]) for name, secret in TOKENS.items()]
    # A manual clock that starts at the present, as a real server's does: the contract
    # tests compare the times they are given with the test's own.
    clock = clock if clock is not None else ManualClock(datetime.now(UTC))
    fake = FakeRetsu(clock=clock, tokens=tokens)
    return Target("fake", FAKE_URL, fake=fake)


def unique(prefix: str = "q") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


class Spy(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """Passes requests through and keeps them, to count calls and read headers."""

    def __init__(self, inner: httpx.BaseTransport | httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.requests: list[httpx.Request] = []

    def paths(self, suffix: str) -> list[httpx.Request]:
        return [r for r in self.requests if r.url.path.endswith(suffix)]

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(self.inner, httpx.BaseTransport)
        self.requests.append(request)
        return self.inner.handle_request(request)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(self.inner, httpx.AsyncBaseTransport)
        self.requests.append(request)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        if isinstance(self.inner, httpx.AsyncBaseTransport):
            await self.inner.aclose()


def async_inner(target: Target) -> httpx.AsyncBaseTransport:
    """The network transport of a target, for wrapping (async side)."""
    return target.fake.transport() if target.fake is not None else httpx.AsyncHTTPTransport()


class DropAfterSend(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """Forwards a request and then, for the first ``drops`` matching requests, throws the
    answer away and raises a connection error: the server did the work (committed), the
    client never heard. Exactly what a retry must survive without doing it twice."""

    def __init__(
        self,
        inner: httpx.BaseTransport | httpx.AsyncBaseTransport,
        match: Callable[[httpx.Request], bool],
        drops: int = 1,
    ) -> None:
        self.inner = inner
        self.match = match
        self.drops = drops
        self.sent: list[httpx.Request] = []

    def _drop(self, request: httpx.Request) -> bool:
        self.sent.append(request)
        if self.drops > 0 and self.match(request):
            self.drops -= 1
            return True
        return False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(self.inner, httpx.BaseTransport)
        response = self.inner.handle_request(request)
        response.read()
        if self._drop(request):
            response.close()
            raise httpx.ReadError("connection reset after the request was sent", request=request)
        return response

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(self.inner, httpx.AsyncBaseTransport)
        response = await self.inner.handle_async_request(request)
        await response.aread()
        if self._drop(request):
            await response.aclose()
            raise httpx.ReadError("connection reset after the request was sent", request=request)
        return response

    def close(self) -> None:
        if isinstance(self.inner, httpx.BaseTransport):
            self.inner.close()
