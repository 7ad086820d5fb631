"""A real `retsu api` across killed sessions, a database restart and a read-only server (SPEC
§3.1, issues 9 and 23).

No restart of Retsu, no readiness probe to reset anything: after sessions are killed
every later request succeeds; while the database is down routes answer
``503 database_unavailable`` with ``Retry-After`` and ``/health/ready`` answers 503;
once it is back, service resumes by itself. The restart is played by a TCP proxy in
front of the shared server (which is never restarted).
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from tests.conftest import create_database, drop_database
from tests.support.postgres import set_read_only
from tests.support.processes import RetsuProcess, free_port, retsu_env
from tests.support.proxy import PostgresProxy
from tests.support.services import PostgresServer
from tests.support.timeshift import plain_url

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
async def database(postgres_server: PostgresServer) -> AsyncIterator[str]:
    url = await create_database(postgres_server)
    yield url
    await drop_database(postgres_server, url)


@pytest.fixture(scope="module")
def proxy(database: str) -> Iterator[PostgresProxy]:
    proxy = PostgresProxy(database).start()
    yield proxy
    proxy.close()


@pytest.fixture(scope="module")
def api(proxy: PostgresProxy, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    env = retsu_env(proxy.url, HTTP__PORT=str(port), DATABASE__MAX_CONNECTIONS="10")
    process = RetsuProcess(["api"], env, Path(tmp_path_factory.mktemp("api")) / "api.log")
    base = f"http://127.0.0.1:{port}"
    try:
        process.wait_until_ready(f"{base}/health/ready")
        yield base
    finally:
        assert process.stop() == 0, process.output()


@pytest.fixture
async def client(api: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=api, timeout=30) as http:
        yield http


async def new_queue(client: httpx.AsyncClient) -> str:
    response = await client.post("/v1/queues", json={"name": f"r-{uuid.uuid4().hex[:12]}"})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def round_trip(client: httpx.AsyncClient, queue_id: str) -> list[int]:
    """Enqueue, dequeue, change visibility, acknowledge, read the queue: the statuses."""
    sent = await client.post(
        f"/v1/queues/{queue_id}/messages", json={"payload": "p", "priority": "MEDIUM"}
    )
    taken = await client.post(f"/v1/queues/{queue_id}/messages/dequeue")
    statuses = [sent.status_code, taken.status_code]
    if taken.status_code == 200:
        body = taken.json()
        path = f"/v1/queues/{queue_id}/messages/{body['id']}"
        receipt = {"receipt_handle": body["receipt_handle"]}
        visibility = await client.post(
            f"{path}/visibility", json={**receipt, "visibility_timeout_seconds": 60}
        )
        acknowledged = await client.post(f"{path}/acknowledge", json=receipt)
        statuses += [visibility.status_code, acknowledged.status_code]
    statuses.append((await client.get(f"/v1/queues/{queue_id}")).status_code)
    return statuses


async def kill_api_sessions(database: str, *, limit: int) -> int:
    """Terminate up to ``limit`` of the API's pooled sessions."""
    admin = await asyncpg.connect(plain_url(database))
    try:
        killed = await admin.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM ("
            "  SELECT pid FROM pg_stat_activity"
            "  WHERE datname = current_database() AND application_name = 'retsu-api'"
            "  LIMIT $1) AS victims",
            limit,
        )
    finally:
        await admin.close()
    await asyncio.sleep(0.2)
    return int(killed)


@pytest.mark.parametrize("killed", [1, 10], ids=["one-session-in-ten", "every-session"])
async def test_after_its_sessions_are_killed_every_request_still_succeeds(
    client: httpx.AsyncClient, database: str, killed: int
) -> None:
    queue_id = await new_queue(client)
    # Fill the pool: ten requests at once hold ten connections.
    await asyncio.gather(*(round_trip(client, queue_id) for _ in range(10)))
    assert await kill_api_sessions(database, limit=killed) >= 1
    for _ in range(30):  # nothing was in flight: not one request fails
        assert await round_trip(client, queue_id) == [201, 200, 204, 204, 200]
    assert (await client.get("/health/ready")).status_code == 200


async def test_while_the_database_is_down_routes_answer_503_then_resume_by_themselves(
    client: httpx.AsyncClient, proxy: PostgresProxy
) -> None:
    queue_id = await new_queue(client)
    assert await round_trip(client, queue_id) == [201, 200, 204, 204, 200]
    with proxy.restarting():
        sent = await client.post(
            f"/v1/queues/{queue_id}/messages", json={"payload": "p", "priority": "MEDIUM"}
        )
        assert sent.status_code == 503, sent.text
        assert sent.headers["content-type"].startswith("application/problem+json")
        assert sent.json()["code"] == "database_unavailable"
        assert int(sent.headers["retry-after"]) >= 1
        taken = await client.post(f"/v1/queues/{queue_id}/messages/dequeue")
        assert taken.status_code == 503 and taken.json()["code"] == "database_unavailable"
        listed = await client.get("/v1/queues")
        assert listed.status_code == 503 and listed.json()["code"] == "database_unavailable"
        assert (await client.get("/health/ready")).status_code == 503
        metrics = (await client.get("/metrics")).text
        assert 'status="503"' in metrics
    # Back: the very next requests succeed, without restarting Retsu.
    assert await round_trip(client, queue_id) == [201, 200, 204, 204, 200]
    assert (await client.get("/health/ready")).status_code == 200


async def test_sessions_killed_under_concurrent_load_cost_503s_never_a_500(
    client: httpx.AsyncClient, database: str
) -> None:
    """Issue 23: 16 concurrent loops, every API session killed again and again. A killed
    idle session left asyncpg refusing the next statement ("cannot switch to state 12;
    another operation (2) is in progress"), and closing a connection the server had just
    dropped raised from SQLAlchemy's rollback: both were 500s."""
    queue_id = await new_queue(client)
    statuses: Counter[int] = Counter()
    stop = asyncio.Event()

    async def loop() -> None:
        while not stop.is_set():
            statuses.update(await round_trip(client, queue_id))

    loops = [asyncio.create_task(loop()) for _ in range(16)]
    try:
        for _ in range(12):
            await asyncio.sleep(0.3)
            await kill_api_sessions(database, limit=100)
    finally:
        stop.set()
        await asyncio.gather(*loops)
    assert set(statuses) <= {200, 201, 204, 503}, statuses
    assert statuses[201] > 20, statuses  # the load did run between the kills
    assert await round_trip(client, queue_id) == [201, 200, 204, 204, 200]
    metrics = (await client.get("/metrics")).text
    assert 'status="500"' not in metrics


async def test_a_read_only_server_answers_503_and_writes_resume_as_soon_as_it_is_writable(
    client: httpx.AsyncClient, database: str
) -> None:
    """A connection that lands on a read-only server (a standby, a demoted old primary, a
    virtual IP pointing at one right after a failover) is unusable: writes answer 503
    database_unavailable with Retry-After, reads are served, and no session that refused
    a write is used again."""
    queue_id = await new_queue(client)
    await set_read_only(database, True)
    try:
        await kill_api_sessions(database, limit=100)  # the pool reconnects: read-only
        sent = await client.post(
            f"/v1/queues/{queue_id}/messages", json={"payload": "p", "priority": "MEDIUM"}
        )
        assert sent.status_code == 503, sent.text
        assert sent.json()["code"] == "database_unavailable"
        assert int(sent.headers["retry-after"]) >= 1
        added = await client.post("/v1/queues", json={"name": f"r-{uuid.uuid4().hex[:12]}"})
        assert added.status_code == 503 and added.json()["code"] == "database_unavailable"
        assert (await client.get(f"/v1/queues/{queue_id}")).status_code == 200
    finally:
        await set_read_only(database, False)
    assert await round_trip(client, queue_id) == [201, 200, 204, 204, 200]
