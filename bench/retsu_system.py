"""Retsu over HTTP, through real `retsu api` process(es) on a database of its own."""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

import asyncpg
import msgspec
import psutil  # type: ignore[import-untyped]

from bench.client import Connection, DeliveredOut, Requests, encode_request, wait_until_ready
from bench.common import (
    OpError,
    payload,
    retsu_prefill,
    retsu_prefill_delayed,
    retsu_prefill_grouped,
    retsu_reset,
)

# How `retsu` is started. BENCH_RETSU_COMMAND (a command line, e.g. a patched
# launcher) lets a proposed change be measured before it lands in src/.
RETSU = shlex.split(os.environ.get("BENCH_RETSU_COMMAND", "")) or [
    sys.executable,
    "-m",
    "retsu.entrypoints.cli",
]


def redis_reachable(url: str) -> bool:
    """True when something answers PING at the Redis URL's host and port."""
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 6379), 1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def retsu_env(database_url: str, **settings: str) -> dict[str, str]:
    """This environment minus any RETSU_ variable, plus the given settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RETSU_")}
    env["RETSU_DATABASE__URL"] = database_url
    for key, value in settings.items():
        env[f"RETSU_{key.upper()}"] = value
    return env


def migrate(database_url: str) -> None:
    done = subprocess.run(
        [*RETSU, "migrate"],
        env=retsu_env(database_url, logging__filter="error"),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"retsu migrate failed ({done.returncode}):\n{done.stderr}")


class RetsuApi:
    """A running `retsu api` (a supervisor and N forked API processes when N > 1)."""

    def __init__(
        self,
        database_url: str,
        *,
        workers: int,
        max_connections: int,
        host: str = "127.0.0.1",
        port: int | None = None,
        redis_url: str | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.database_url = database_url
        self.redis_url = redis_url
        self.workers = workers
        self.host = host
        self.port = port or free_port()
        self.max_connections = max_connections
        self._extra_env = extra_env or {}
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.log_path = Path(tempfile.mkstemp(prefix="retsu-bench-api-", suffix=".log")[1])

    async def start(self, within: float = 60) -> None:
        env = retsu_env(
            self.database_url,
            http__port=str(self.port),
            http__bind_address=self.host,
            http__workers=str(self.workers),
            database__max_connections=str(self.max_connections),
            cache__distributed__enabled="true" if self.redis_url else "false",
            logging__filter="error",
        )
        if self.redis_url:
            env["RETSU_CACHE__DISTRIBUTED__URL"] = self.redis_url
        env.update(self._extra_env)
        # Extra Retsu settings for experiments: BENCH_RETSU_ENV="HTTP__WORKERS=4 ..."
        for item in os.environ.get("BENCH_RETSU_ENV", "").split():
            key, _, value = item.partition("=")
            env[f"RETSU_{key.upper()}"] = value
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(  # noqa: ASYNC220 - returns at once
            [*RETSU, "api"], env=env, stdout=self._log, stderr=subprocess.STDOUT
        )
        try:
            await wait_until_ready(self.host, self.port, "/health/ready", within)
            deadline = time.monotonic() + within
            while len(self.api_pids()) < self.workers:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"only {len(self.api_pids())} API processes started")
                await asyncio.sleep(0.05)
        except BaseException:
            self.stop()
            raise RuntimeError(f"retsu api did not start:\n{self.output()}") from None

    def output(self) -> str:
        if self._log is not None:
            self._log.flush()
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def supervisor_pid(self) -> int | None:
        return self.process.pid if self.process is not None and self.workers > 1 else None

    def api_pids(self) -> list[int]:
        """The processes that serve requests (the forked children when workers > 1)."""
        if self.process is None or self.process.poll() is not None:
            return []
        if self.workers == 1:
            return [self.process.pid]
        try:
            children = psutil.Process(self.process.pid).children()
        except psutil.Error:
            return []
        return [child.pid for child in children if not _helper(child)]

    def connection_spread(self) -> list[int]:
        """How many established client connections each API process holds."""
        counts = []
        for pid in self.api_pids():
            try:
                connections = psutil.Process(pid).net_connections(kind="tcp")
            except psutil.Error:
                continue
            counts.append(
                sum(
                    1
                    for c in connections
                    if c.status == psutil.CONN_ESTABLISHED and c.laddr and c.laddr.port == self.port
                )
            )
        return sorted(counts, reverse=True)

    def stop(self, timeout: float = 30) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None


def _helper(process: psutil.Process) -> bool:
    """multiprocessing's resource tracker, which the spawning supervisor starts too."""
    try:
        return any("resource_tracker" in part for part in process.cmdline())
    except psutil.Error:
        return True


def _balanced(spread: list[int]) -> bool:
    """No API process holds more than 1.5× its fair share of the connections."""
    if len(spread) < 2:
        return True
    return max(spread) <= 1.5 * sum(spread) / len(spread) + 1


class HttpOps:
    """Retsu's message operations on one keep-alive connection."""

    def __init__(self, connection: Connection, requests: Requests, batch_size: int) -> None:
        self._connection = connection
        self._requests = requests
        self._batch_size = batch_size

    async def enqueue(self, index: int) -> int:
        status, body = await self._connection.request(self._requests.enqueue_one[index % 3])
        if status != 201:
            raise OpError(f"enqueue: HTTP {status} {body[:200]!r}")
        return 1

    async def enqueue_batch(self) -> int:
        status, body = await self._connection.request(self._requests.enqueue_batch)
        if status != 201:
            raise OpError(f"enqueue batch: HTTP {status} {body[:200]!r}")
        return self._batch_size

    async def dequeue(self, limit: int | None) -> Sequence[DeliveredOut]:
        requests = self._requests
        if limit is None:
            status, body = await self._connection.request(requests.dequeue_one)
            if status == 204:
                return ()
            if status != 200:
                raise OpError(f"dequeue: HTTP {status} {body[:200]!r}")
            return (requests.one_decoder.decode(body),)
        status, body = await self._connection.request(requests.dequeue_batch)
        if status != 200:
            raise OpError(f"dequeue batch: HTTP {status} {body[:200]!r}")
        return requests.many_decoder.decode(body).messages

    async def ack(self, items: Sequence[Any]) -> None:
        if len(items) == 1:
            item = items[0]
            request = self._requests.ack_one(item.id, item.receipt_handle)
        else:
            request = self._requests.ack_many(items)
        status, body = await self._connection.request(request)
        if status != 204:
            raise OpError(f"acknowledge: HTTP {status} {body[:200]!r}")

    def close(self) -> None:
        self._connection.close()


class RetsuSystem:
    """Retsu through its HTTP API, one fresh queue per scenario."""

    key = "retsu"
    batch_size = 100

    def __init__(
        self,
        database_url: str,
        *,
        workers: int,
        max_connections: int,
        redis_url: str | None = None,
        connect_burst: bool = False,
        pgbouncer_url: str | None = None,
    ) -> None:
        self.connect_burst = connect_burst
        via = ", PgBouncer" if pgbouncer_url else ""
        self.name = f"Retsu HTTP ({workers} proc{', Redis' if redis_url else ''}{via})"
        self.database_url = database_url
        api_url, extra_env = database_url, {}
        if pgbouncer_url is not None:
            # The same database through the pooler; what needs a session stays direct
            # (database.pooler: auto resolves to transaction).
            database = urlsplit(database_url).path
            api_url = urlsplit(pgbouncer_url)._replace(path=database).geturl()
            extra_env = {"RETSU_DATABASE__SESSION_URL": database_url}
        self.api = RetsuApi(
            api_url,
            workers=workers,
            max_connections=max_connections,
            redis_url=redis_url,
            extra_env=extra_env,
        )
        self.payload = payload()
        self.queue_id: uuid.UUID | None = None
        self._sql: asyncpg.Connection | None = None
        self._queues = 0
        self.spread: list[int] | None = None

    async def start(self) -> None:
        await asyncio.to_thread(migrate, self.database_url)
        await self.api.start()
        self._sql = await asyncpg.connect(self.database_url)

    async def stop(self) -> None:
        if self._sql is not None:
            await self._sql.close()
            self._sql = None
        await asyncio.to_thread(self.api.stop)

    async def _post(self, path: str, body: bytes) -> tuple[int, bytes]:
        connection = Connection(self.api.host, self.api.port)
        try:
            return await connection.request(
                encode_request("POST", path, f"{self.api.host}:{self.api.port}", body)
            )
        finally:
            connection.close()

    async def new_queue(self, *, max_in_flight: int | None = None) -> None:
        """An empty queue of its own for the next scenario (earlier messages removed),
        created through the API, with ``max_in_flight`` when given."""
        assert self._sql is not None
        await retsu_reset(self._sql)
        self._queues += 1
        settings: dict[str, Any] = {"name": f"bench-{self._queues}"}
        if max_in_flight is not None:
            settings["max_in_flight"] = max_in_flight
        name = settings["name"]
        status, body = await self._post("/v1/queues", msgspec.json.encode(settings))
        if status != 201:
            raise RuntimeError(f"creating queue {name}: HTTP {status} {body[:300]!r}")
        self.queue_id = uuid.UUID(msgspec.json.decode(body)["id"])

    async def open_ops(self, count: int) -> list[HttpOps]:
        assert self.queue_id is not None
        requests = Requests(
            self.api.host, self.api.port, str(self.queue_id), self.payload, self.batch_size
        )
        for _attempt in range(8):
            connections = await self._connect(count)
            # Earlier connections (a mixed run's producers) count too: the spread is
            # over everything the API processes hold now.
            self.spread = self.api.connection_spread()
            if self.connect_burst or _balanced(self.spread):
                break
            for connection in connections:
                connection.close()
            await asyncio.sleep(0.1)
        return [HttpOps(c, requests, self.batch_size) for c in connections]

    async def _connect(self, count: int) -> list[Connection]:
        connections = [Connection(self.api.host, self.api.port) for _ in range(count)]
        if self.connect_burst:
            await asyncio.gather(*(c.open() for c in connections))
        else:
            # One at a time, 2 ms apart, as a client pool grows. All at once, the API
            # process that wakes first accepts the whole burst from the shared socket
            # (32/0 with two processes); even spaced out, the split is left to chance,
            # so open_ops reconnects until it is even (docs/performance.md).
            for connection in connections:
                await connection.open()
                await asyncio.sleep(0.002)
        await asyncio.sleep(0.05)  # let the API processes accept them
        return connections

    def take_spread(self) -> str | None:
        """'a/b/...': client connections held by each API process at the last open_ops."""
        spread, self.spread = self.spread, None
        return "/".join(str(n) for n in spread) if spread else None

    async def analyze(self) -> None:
        assert self._sql is not None
        await self._sql.execute("ANALYZE queue_message")

    async def prefill(self, count: int) -> None:
        assert self._sql is not None and self.queue_id is not None
        await retsu_prefill(self._sql, self.queue_id, count, self.payload)

    async def prefill_delayed(self, count: int, seconds: int) -> None:
        assert self._sql is not None and self.queue_id is not None
        await retsu_prefill_delayed(self._sql, self.queue_id, count, self.payload, seconds)

    async def prefill_grouped(self, count: int, groups: int) -> None:
        assert self._sql is not None and self.queue_id is not None
        await retsu_prefill_grouped(self._sql, self.queue_id, count, groups, self.payload)

    def api_pids(self) -> list[int]:
        return self.api.api_pids()

    async def ready(self) -> None:
        """Nothing to open: the API processes keep their own pools, as in production."""

    async def rest(self) -> None:
        """Nothing to close (see ``ready``)."""
