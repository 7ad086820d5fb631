"""Abandoned polls against real `retsu api` processes (SPEC §3.1, issue 23 part 4).

A consumer that stops while its long poll waits closes the connection (its kernel does,
when the process dies). The poll must stop at once, so the next message goes to the
next consumer on its first attempt, not into a dead poll's lease; and what a claim took
for a client that left while the claim ran goes back at once, its attempt not counted.
Neither is a server error: no 5xx in the metrics, no ERROR line in the log.

Two `retsu api` processes on one database, straight to PostgreSQL and behind PgBouncer
(transaction pooling; LISTEN through ``session_url``). The client is a raw socket that
sends the request and closes. To hit "the client left while the claim ran" every time,
the test holds ``LOCK TABLE queue_message IN EXCLUSIVE MODE`` so the claim blocks in
PostgreSQL; it closes the socket once pg_locks shows the claim waiting, then lets go.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import create_database, drop_database
from tests.support.pgbouncer import PgBouncer, find_pgbouncer
from tests.support.processes import RetsuProcess, free_port, retsu_env
from tests.support.services import PostgresServer, require_services
from tests.support.timeshift import plain_url

pytestmark = pytest.mark.integration

DEQUEUE_ROUTE = "/v1/queues/{queue_id}/messages/dequeue"
LEASE = 600  # a swallowed message would sit in flight this long


@dataclass
class Api:
    base: str
    process: RetsuProcess

    def samples(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        text = httpx.get(self.base + "/metrics", timeout=5).text
        return {
            (s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    def dequeue_statuses(self) -> dict[str, float]:
        return {
            dict(labels)["status"]: v
            for (name, labels), v in self.samples().items()
            if name == "http_server_requests_total" and dict(labels)["route"] == DEQUEUE_ROUTE
        }

    def in_progress(self) -> float:
        """Requests being answered, this scrape left out."""
        return self.samples()[("http_server_active_requests", frozenset())] - 1

    def unclaims(self) -> float:
        key = frozenset({("operation", "unclaim"), ("outcome", "success")})
        return self.samples().get(("db_operation_duration_seconds_count", key), 0.0)


@dataclass
class Setup:
    direct_url: str
    a: Api
    b: Api


def _start_api(database_url: str, log: Path, **settings: str) -> Api:
    port = free_port()
    env = retsu_env(
        database_url, http__port=str(port), logging__filter="debug", logging__format="json"
    )
    env.update({f"RETSU_{k.upper()}": v for k, v in settings.items()})
    process = RetsuProcess(["api"], env, log)
    base = f"http://127.0.0.1:{port}"
    try:
        process.wait_until_ready(f"{base}/health/ready", timeout=60)
    except BaseException:
        process.stop()
        raise
    return Api(base, process)


@pytest.fixture(scope="module", params=["direct", "pgbouncer"])
async def setup(
    request: pytest.FixtureRequest,
    postgres_server: PostgresServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Setup]:
    logs = Path(tmp_path_factory.mktemp(f"disconnected-polls-{request.param}"))
    direct = await create_database(postgres_server)
    pgbouncer: PgBouncer | None = None
    settings: dict[str, str] = {}
    url = direct
    if request.param == "pgbouncer":
        try:
            executable = find_pgbouncer()
        except FileNotFoundError as error:
            await drop_database(postgres_server, direct)
            if require_services():
                pytest.fail(f"RETSU_REQUIRE_SERVICES is set but {error}", pytrace=False)
            pytest.skip(str(error))
        pgbouncer = PgBouncer(executable, postgres_server.admin_url, logs / "pgbouncer.log", 4)
        url = pgbouncer.url(direct.rsplit("/", 1)[1])
        settings = {"database__session_url": direct, "database__max_connections": "5"}
    apis: list[Api] = []
    try:
        for name in ("a", "b"):
            apis.append(_start_api(url, logs / f"api-{name}.log", **settings))
        yield Setup(direct, apis[0], apis[1])
    finally:
        codes = [api.process.stop() for api in apis]
        if pgbouncer is not None:
            pgbouncer.stop()
        await drop_database(postgres_server, direct)
    assert codes == [0] * len(apis), [api.process.output() for api in apis]
    for api in apis:
        lines = [json.loads(line) for line in api.process.output().splitlines() if line]
        errors = [line for line in lines if line["level"] in {"ERROR", "CRITICAL"}]
        assert errors == [], errors
    # The abandoned requests (all sent to A): DEBUG lines.
    lines = [json.loads(line) for line in apis[0].process.output().splitlines() if line]
    gone = [line for line in lines if "disconnected" in line["message"].lower()]
    assert gone and {line["level"] for line in gone} == {"DEBUG"}, gone


@pytest.fixture
async def clients(setup: Setup) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    async with (
        httpx.AsyncClient(base_url=setup.a.base, timeout=30) as on_a,
        httpx.AsyncClient(base_url=setup.b.base, timeout=30) as on_b,
    ):
        yield on_a, on_b


@pytest.fixture(autouse=True)
def no_server_errors(setup: Setup) -> Iterator[None]:
    yield
    for api in (setup.a, setup.b):
        statuses = api.dequeue_statuses()
        assert not [s for s in statuses if s.startswith("5")], statuses


async def new_queue(client: httpx.AsyncClient) -> str:
    body = {"name": f"gone-{uuid.uuid4().hex[:12]}", "visibility_timeout_seconds": LEASE}
    response = await client.post("/v1/queues", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def enqueue(client: httpx.AsyncClient, queue_id: str, payload: str) -> None:
    response = await client.post(
        f"/v1/queues/{queue_id}/messages", json={"payload": payload, "priority": "HIGH"}
    )
    assert response.status_code == 201, response.text


async def take_now(client: httpx.AsyncClient, queue_id: str) -> list[tuple[str, int]]:
    """(payload, delivery_attempts) of what a second consumer takes without waiting."""
    response = await client.post(
        f"/v1/queues/{queue_id}/messages/dequeue", json={"max_messages": 10}
    )
    assert response.status_code == 200, response.text
    return [(m["payload"], m["delivery_attempts"]) for m in response.json()["messages"]]


async def send_dequeue(api: Api, queue_id: str, body: dict[str, Any]) -> asyncio.StreamWriter:
    """A dequeue sent on a raw socket, its answer never read (close the writer to leave)."""
    address = urlsplit(api.base)
    _, writer = await asyncio.open_connection(address.hostname, address.port)
    data = json.dumps(body).encode()
    writer.write(
        f"POST /v1/queues/{queue_id}/messages/dequeue HTTP/1.1\r\n"
        f"Host: {address.netloc}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(data)}\r\n\r\n".encode()
        + data
    )
    await writer.drain()
    return writer


async def leave(writer: asyncio.StreamWriter) -> None:
    writer.close()
    await writer.wait_closed()


async def until(check: Any, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while not await asyncio.to_thread(check):
        if loop.time() > deadline:
            raise AssertionError(f"not within 5 s: {what}")
        await asyncio.sleep(0.02)


async def abandon_a_long_poll(api: Api, queue_id: str) -> float:
    """A poll with wait_seconds 20 that waits, then its client goes; the seconds until
    the server had stopped it."""
    writer = await send_dequeue(api, queue_id, {"wait_seconds": 20})
    await until(lambda: api.in_progress() == 1, "the poll is waiting")
    await asyncio.sleep(0.2)  # past its first claim, in its wait
    loop = asyncio.get_running_loop()
    left = loop.time()
    await leave(writer)
    await until(lambda: api.in_progress() == 0, "the abandoned poll stopped")
    return loop.time() - left


async def test_an_abandoned_poll_stops_and_the_next_message_goes_to_the_next_consumer(
    setup: Setup, clients: tuple[httpx.AsyncClient, httpx.AsyncClient]
) -> None:
    on_a, _ = clients
    queue_id = await new_queue(on_a)
    stopped_in = await abandon_a_long_poll(setup.a, queue_id)
    assert stopped_in < 1.0, "at once, not after a re-check or its 20 seconds"
    await enqueue(on_a, queue_id, "next")  # would have woken the abandoned poll
    assert await take_now(on_a, queue_id) == [("next", 1)]
    assert setup.a.dequeue_statuses().get("499", 0) >= 1


async def test_an_abandoned_poll_on_one_process_takes_nothing_enqueued_on_the_other(
    setup: Setup, clients: tuple[httpx.AsyncClient, httpx.AsyncClient]
) -> None:
    on_a, on_b = clients
    queue_id = await new_queue(on_a)
    await abandon_a_long_poll(setup.a, queue_id)
    await enqueue(on_b, queue_id, "next")  # NOTIFY would have woken A's poll
    assert await take_now(on_b, queue_id) == [("next", 1)]


@pytest.mark.parametrize("wait_seconds", [0, 20])
async def test_what_a_claim_took_for_a_client_that_left_meanwhile_goes_back_at_once(
    setup: Setup, clients: tuple[httpx.AsyncClient, httpx.AsyncClient], wait_seconds: int
) -> None:
    on_a, on_b = clients
    queue_id = await new_queue(on_a)
    await enqueue(on_a, queue_id, "first")
    await enqueue(on_a, queue_id, "second")
    unclaims = setup.a.unclaims()
    holder = await asyncpg.connect(plain_url(setup.direct_url))
    try:
        async with holder.transaction():
            await holder.execute("LOCK TABLE queue_message IN EXCLUSIVE MODE")
            body = {"max_messages": 2, "wait_seconds": wait_seconds}
            writer = await send_dequeue(setup.a, queue_id, body)
            await until_the_claim_waits_for_the_lock(holder)
            await leave(writer)
            await asyncio.sleep(0.3)  # the server notices the closed connection
        # The lock is gone: the claim takes both messages for a client that left.
        await until(lambda: setup.a.in_progress() == 0, "the dequeue ended")
    finally:
        await holder.close()
    assert setup.a.unclaims() == unclaims + 1, "the claim's messages were given back"
    # Deliverable again at once (not after the 600 s lease), the attempt not counted.
    assert await take_now(on_b, queue_id) == [("first", 1), ("second", 1)]


async def until_the_claim_waits_for_the_lock(holder: asyncpg.Connection) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while not await holder.fetchval(
        "SELECT count(*) FROM pg_locks AS l JOIN pg_class AS c ON c.oid = l.relation"
        " WHERE c.relname = 'queue_message' AND NOT l.granted"
        " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    ):
        assert loop.time() < deadline, "the claim never waited for the lock"
        await asyncio.sleep(0.02)
