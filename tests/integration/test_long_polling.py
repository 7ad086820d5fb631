"""Long polling across real processes: two `retsu api` processes on one database.

A poll waiting on process A must wake when a message becomes available through
process B (PostgreSQL NOTIFY reaches every API process), cost the database about one
query a second while idle, end empty after wait_seconds, and be answered empty at
once on SIGTERM. Latency figures are printed (run with -s to see them).
"""

from __future__ import annotations

import asyncio
import signal
import statistics
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import httpx
import pytest

from retsu.adapters.postgres.hosts import libpq_url
from tests.conftest import create_database, drop_database
from tests.support.processes import RetsuProcess, free_port, retsu_env
from tests.support.services import PostgresServer

pytestmark = pytest.mark.integration

TRIALS = 12


@dataclass
class Api:
    base: str
    process: RetsuProcess


@pytest.fixture(scope="module")
async def lp_database(postgres_server: PostgresServer) -> AsyncIterator[str]:
    url = await create_database(postgres_server)
    yield url
    await drop_database(postgres_server, url)


def start_api(database_url: str, log_dir: Path, name: str, **settings: str) -> Api:
    port = free_port()
    env = retsu_env(database_url, http__port=str(port), **settings)
    process = RetsuProcess(["api"], env, log_dir / f"{name}.log")
    base = f"http://127.0.0.1:{port}"
    try:
        process.wait_until_ready(f"{base}/health/ready")
    except BaseException:
        process.stop()
        raise
    return Api(base, process)


@pytest.fixture(scope="module")
def apis(lp_database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Api, Api]]:
    log_dir = Path(tmp_path_factory.mktemp("long-polling"))
    a = start_api(lp_database, log_dir, "a")
    try:
        b = start_api(lp_database, log_dir, "b")
    except BaseException:
        a.process.stop()
        raise
    try:
        yield a, b
    finally:
        codes = (a.process.stop(), b.process.stop())
        assert codes == (0, 0), a.process.output() + b.process.output()


@pytest.fixture
async def clients(apis: tuple[Api, Api]) -> AsyncIterator[tuple[httpx.AsyncClient, ...]]:
    a, b = apis
    async with (
        httpx.AsyncClient(base_url=a.base, timeout=30) as on_a,
        httpx.AsyncClient(base_url=b.base, timeout=30) as on_b,
    ):
        yield on_a, on_b


async def new_queue(client: httpx.AsyncClient) -> str:
    response = await client.post("/v1/queues", json={"name": f"lp-{uuid.uuid4().hex[:12]}"})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def enqueue(client: httpx.AsyncClient, queue_id: str, payload: str, **extra: Any) -> str:
    response = await client.post(
        f"/v1/queues/{queue_id}/messages", json={"payload": payload, "priority": "HIGH", **extra}
    )
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


@dataclass
class Answer:
    response: httpx.Response
    at: float  # perf_counter() when the response arrived


async def timed_poll(client: httpx.AsyncClient, queue_id: str, **body: Any) -> Answer:
    response = await client.post(f"/v1/queues/{queue_id}/messages/dequeue", json=body)
    return Answer(response, time.perf_counter())


def summary(name: str, seconds: list[float]) -> str:
    ms = sorted(s * 1000 for s in seconds)
    p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
    return (
        f"{name}: n={len(ms)} p50={statistics.median(ms):.1f} ms p95={p95:.1f} ms "
        f"max={ms[-1]:.1f} ms min={ms[0]:.1f} ms"
    )


async def wake_latencies(
    on_a: httpx.AsyncClient, on_b: httpx.AsyncClient, queue_id: str, trials: int
) -> tuple[list[float], list[float]]:
    """One waiting poll on A per trial, woken by an enqueue through B: seconds from B's
    201 to A's 200 (0 when A answered first), and from sending B's request to A's 200."""
    after_201, after_request = [], []
    for trial in range(trials):
        poll = asyncio.create_task(timed_poll(on_a, queue_id, wait_seconds=10))
        await asyncio.sleep(0.3)  # the poll reached A and waits
        assert not poll.done(), poll.result().response.text
        requested = time.perf_counter()
        message_id = await enqueue(on_b, queue_id, f"trial-{trial}")
        created = time.perf_counter()
        answer = await poll
        assert answer.response.status_code == 200, answer.response.text
        assert answer.response.json()["id"] == message_id
        after_201.append(max(0.0, answer.at - created))
        after_request.append(answer.at - requested)
    return after_201, after_request


async def test_an_enqueue_through_one_process_wakes_a_poll_waiting_on_the_other(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    on_a, on_b = clients
    queue_id = await new_queue(on_b)
    latencies, from_request = await wake_latencies(on_a, on_b, queue_id, TRIALS)
    print("\n" + summary("wake-up latency, B's 201 -> A's 200", latencies))
    print(summary("B's request sent -> A's 200 (includes the enqueue)", from_request))
    assert statistics.median(latencies) < 0.100, summary("latency", latencies)
    assert max(latencies) < 0.300, summary("latency", latencies)


async def test_an_enqueue_through_the_same_process_wakes_its_own_poll(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    on_a, _ = clients
    queue_id = await new_queue(on_a)
    latencies, _ = await wake_latencies(on_a, on_a, queue_id, 3)
    print("\n" + summary("same process, 201 -> 200", latencies))
    assert max(latencies) < 0.300


async def test_a_dead_letter_redrive_through_one_process_wakes_a_poll_on_the_other(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    on_a, on_b = clients
    response = await on_b.post(
        "/v1/queues",
        json={
            "name": f"lp-{uuid.uuid4().hex[:12]}",
            "visibility_timeout_seconds": 1,
            "max_delivery_attempts": 1,
        },
    )
    queue_id = response.json()["id"]
    await enqueue(on_b, queue_id, "poison")
    assert (await on_b.post(f"/v1/queues/{queue_id}/messages/dequeue")).status_code == 200
    await asyncio.sleep(1.1)  # the lease ends; the next dequeue dead-letters it
    assert (await on_b.post(f"/v1/queues/{queue_id}/messages/dequeue")).status_code == 204
    (dead,) = (await on_b.get(f"/v1/queues/{queue_id}/dead-letters")).json()["items"]
    poll = asyncio.create_task(timed_poll(on_a, queue_id, wait_seconds=10))
    await asyncio.sleep(0.3)
    redriven = await on_b.post(f"/v1/queues/{queue_id}/dead-letters/{dead['id']}/redrive")
    at = time.perf_counter()
    assert redriven.status_code == 201, redriven.text
    answer = await poll
    assert answer.response.json()["id"] == redriven.json()["id"]
    print(f"\nredrive -> poll answered in {max(0.0, answer.at - at) * 1000:.1f} ms")
    assert answer.at - at < 0.300


async def test_an_acknowledgement_through_one_process_frees_the_cap_for_a_poll_on_the_other(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    """A poll held back by ``max_in_flight`` wakes when a lease is freed elsewhere: the
    acknowledgement answers ``wake`` because a poll waits (its ``queue_waiter`` row) and the
    cap is near (migration 0014), well before the poll's one-second re-check."""
    on_a, on_b = clients
    response = await on_b.post(
        "/v1/queues", json={"name": f"lp-{uuid.uuid4().hex[:12]}", "max_in_flight": 1}
    )
    queue_id = response.json()["id"]
    await enqueue(on_b, queue_id, "first")
    second = await enqueue(on_b, queue_id, "second")
    held = (await on_b.post(f"/v1/queues/{queue_id}/messages/dequeue")).json()
    for trial in range(3):
        poll = asyncio.create_task(timed_poll(on_a, queue_id, wait_seconds=10))
        await asyncio.sleep(0.5)  # waiting, and registered in queue_waiter
        assert not poll.done(), poll.result().response.text
        acked = await on_b.post(
            f"/v1/queues/{queue_id}/messages/{held['id']}/acknowledge",
            json={"receipt_handle": held["receipt_handle"]},
        )
        at = time.perf_counter()
        assert acked.status_code == 204, acked.text
        answer = await poll
        assert answer.response.status_code == 200, answer.response.text
        print(f"\nack -> capped poll answered in {max(0.0, answer.at - at) * 1000:.1f} ms")
        assert answer.at - at < 0.300
        held = answer.response.json()
        if trial == 0:
            assert held["id"] == second
        await enqueue(on_b, queue_id, f"more-{trial}")


async def test_a_poll_that_finds_nothing_ends_empty_after_wait_seconds(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    on_a, _ = clients
    queue_id = await new_queue(on_a)
    started = time.perf_counter()
    bare = await timed_poll(on_a, queue_id, wait_seconds=1)
    bare_took = bare.at - started
    assert bare.response.status_code == 204 and bare.response.content == b""
    assert 0.95 <= bare_took < 1.5, bare_took
    started = time.perf_counter()
    listed = await timed_poll(on_a, queue_id, wait_seconds=2, max_messages=10)
    listed_took = listed.at - started
    assert (listed.response.status_code, listed.response.json()) == (200, {"messages": []})
    assert 1.95 <= listed_took < 2.5, listed_took
    print(f"\nempty waits: 1 s -> 204 after {bare_took:.3f} s; 2 s -> [] after {listed_took:.3f} s")


async def test_a_paused_queue_holds_a_poll_until_resumed_through_the_other_process(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    on_a, on_b = clients
    queue_id = await new_queue(on_b)
    assert (await on_b.post(f"/v1/queues/{queue_id}/pause")).status_code == 200
    message_id = await enqueue(on_b, queue_id, "held")
    poll = asyncio.create_task(timed_poll(on_a, queue_id, wait_seconds=10))
    await asyncio.sleep(1.5)
    assert not poll.done(), poll.result().response.text
    resumed = await on_b.post(f"/v1/queues/{queue_id}/resume")
    at = time.perf_counter()
    assert resumed.status_code == 200, resumed.text
    answer = await poll
    assert answer.response.status_code == 200, answer.response.text
    assert answer.response.json()["id"] == message_id
    print(f"\nresume -> poll answered in {max(0.0, answer.at - at) * 1000:.1f} ms")
    assert answer.at - at < 0.300


async def test_with_the_shared_cache_on_a_resume_still_wakes_the_poll_at_once(
    lp_database: str, redis_url: str, tmp_path: Path
) -> None:
    """The resume's NOTIFY can arrive before the resuming process has written the
    shared cache: the woken poll may still read "paused" and looks again 0.1 s later."""
    cache = {"cache__distributed__enabled": "true", "cache__distributed__url": redis_url}
    a = start_api(lp_database, tmp_path, "cached-a", **cache)
    try:
        b = start_api(lp_database, tmp_path, "cached-b", **cache)
    except BaseException:
        a.process.stop()
        raise
    resume_latencies = []
    try:
        async with (
            httpx.AsyncClient(base_url=a.base, timeout=30) as on_a,
            httpx.AsyncClient(base_url=b.base, timeout=30) as on_b,
        ):
            queue_id = await new_queue(on_b)
            for trial in range(3):
                assert (await on_b.post(f"/v1/queues/{queue_id}/pause")).status_code == 200
                message_id = await enqueue(on_b, queue_id, f"held-{trial}")
                poll = asyncio.create_task(timed_poll(on_a, queue_id, wait_seconds=10))
                await asyncio.sleep(1.2)
                assert not poll.done(), poll.result().response.text
                resumed = await on_b.post(f"/v1/queues/{queue_id}/resume")
                at = time.perf_counter()
                assert resumed.status_code == 200, resumed.text
                answer = await poll
                assert answer.response.json()["id"] == message_id
                resume_latencies.append(max(0.0, answer.at - at))
    finally:
        codes = (a.process.stop(), b.process.stop())
    assert codes == (0, 0), a.process.output() + b.process.output()
    print("\n" + summary("shared cache on: resume -> poll answered", resume_latencies))
    assert max(resume_latencies) < 0.300


async def test_a_released_lease_and_an_ending_delay_wake_a_waiting_poll(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    on_a, on_b = clients
    queue_id = await new_queue(on_b)
    message_id = await enqueue(on_b, queue_id, "lease")
    first = (await on_b.post(f"/v1/queues/{queue_id}/messages/dequeue")).json()
    poll = asyncio.create_task(timed_poll(on_a, queue_id, wait_seconds=10))
    await asyncio.sleep(0.5)
    released = await on_b.post(
        f"/v1/queues/{queue_id}/messages/{message_id}/visibility",
        json={"receipt_handle": first["receipt_handle"], "visibility_timeout_seconds": 0},
    )
    at = time.perf_counter()
    assert released.status_code == 204, released.text
    answer = await poll
    assert answer.response.json()["delivery_attempts"] == 2
    release_latency = max(0.0, answer.at - at)

    delayed_id = await enqueue(on_b, queue_id, "later", delay_seconds=2)
    enqueued = time.perf_counter()
    answer = await timed_poll(on_a, queue_id, wait_seconds=10)
    assert answer.response.json()["id"] == delayed_id
    delay_seen_after = answer.at - enqueued
    print(
        f"\nvisibility 0 -> poll answered in {release_latency * 1000:.1f} ms; "
        f"a 2 s delay was delivered {delay_seen_after:.3f} s after its 201"
    )
    assert release_latency < 0.300
    assert 1.9 <= delay_seen_after < 2.3


class CountingProxy:
    """A TCP proxy in front of PostgreSQL that counts the statements clients run.

    The database's own counters do not fit: ``pg_stat_database`` is flushed by each
    backend up to 10 s late and also counts autovacuum's transactions. This counts the
    protocol messages instead: every Execute (extended protocol: each prepared
    statement run) and every simple Query that is not transaction control. It answers
    an SSL request with "no" itself, so the stream stays readable.
    """

    SSL_REQUEST, GSSENC_REQUEST = 80877103, 80877104
    CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "START TRANSACTION")

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self.statements = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self._target)
            await asyncio.gather(
                self._client_to_server(reader, writer, upstream_writer),
                self._copy(upstream_reader, writer),
            )
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _client_to_server(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        upstream: asyncio.StreamWriter,
    ) -> None:
        try:
            while True:  # startup: untyped messages; refuse SSL/GSS encryption ourselves
                header = await reader.readexactly(4)
                body = await reader.readexactly(int.from_bytes(header, "big") - 4)
                if int.from_bytes(body[:4], "big") in (self.SSL_REQUEST, self.GSSENC_REQUEST):
                    writer.write(b"N")
                    await writer.drain()
                    continue
                upstream.write(header + body)
                break
            while True:
                kind = await reader.readexactly(1)
                header = await reader.readexactly(4)
                body = await reader.readexactly(int.from_bytes(header, "big") - 4)
                if kind == b"E":
                    self.statements += 1
                elif kind == b"Q":
                    query = body.rstrip(b"\0").decode().strip().upper()
                    if not query.startswith(self.CONTROL):
                        self.statements += 1
                upstream.write(kind + header + body)
                await upstream.drain()
        finally:
            upstream.close()

    @staticmethod
    async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.close()


def claims_counted(metrics_text: str) -> float:
    """dequeue operations the process ran (db_operation_duration_seconds_count)."""
    total = 0.0
    for line in metrics_text.splitlines():
        if line.startswith("db_operation_duration_seconds_count{") and (
            'operation="dequeue"' in line
        ):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def test_an_idle_waiter_costs_the_database_about_one_query_a_second(
    lp_database: str, tmp_path: Path
) -> None:
    parts = urlsplit(lp_database)
    proxy = CountingProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    proxied = parts._replace(netloc=f"{parts.username}@127.0.0.1:{await proxy.start()}")
    # In a thread: the proxy runs on this event loop and must serve while the API starts.
    api = await asyncio.to_thread(start_api, proxied.geturl(), tmp_path, "proxied")
    try:
        async with httpx.AsyncClient(base_url=api.base, timeout=30) as client:
            queue_id = await new_queue(client)
            await asyncio.sleep(0.5)
            claims = claims_counted((await client.get("/metrics")).text)
            statements = proxy.statements
            wait_seconds = 10
            answer = await timed_poll(client, queue_id, wait_seconds=wait_seconds)
            assert answer.response.status_code == 204
            await asyncio.sleep(0.2)
            statements = proxy.statements - statements
            claims = claims_counted((await client.get("/metrics")).text) - claims
    finally:
        code = await asyncio.to_thread(api.process.stop)
        await proxy.close()
    assert code == 0, api.process.output()
    print(
        f"\none idle {wait_seconds} s poll: {statements} statements reached PostgreSQL "
        f"({statements / wait_seconds:.2f}/s), {claims:.0f} of them claims"
    )
    assert statements / wait_seconds <= 1.5
    # One claim a second, the first one, and one more once the process has registered the
    # queue in queue_waiter (its first wait: adapters/postgres/notifications.py).
    assert claims <= wait_seconds + 2


async def test_a_lost_listen_connection_falls_back_to_rechecks_then_reconnects(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
    lp_database: str,
    postgres_server: PostgresServer,
) -> None:
    on_a, on_b = clients
    queue_id = await new_queue(on_b)
    database = lp_database.rsplit("/", 1)[1].split("?", 1)[0]
    admin = await asyncpg.connect(libpq_url(postgres_server.admin_url))
    try:
        listeners = """
            SELECT pid FROM pg_stat_activity
            WHERE datname = $1 AND application_name = 'retsu-api-listen'
        """
        pids = [row["pid"] for row in await admin.fetch(listeners, database)]
        assert len(pids) == 2, pids  # one per API process
        poll = asyncio.create_task(timed_poll(on_a, queue_id, wait_seconds=10))
        await asyncio.sleep(0.3)
        for pid in pids:
            await admin.execute("SELECT pg_terminate_backend($1)", pid)
        message_id = await enqueue(on_b, queue_id, "during-the-outage")
        sent = time.perf_counter()
        answer = await poll
        assert answer.response.json()["id"] == message_id
        outage_latency = answer.at - sent
        assert outage_latency < 1.3  # the one-second re-check at worst

        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            now_listening = [row["pid"] for row in await admin.fetch(listeners, database)]
            if len(now_listening) == 2 and not set(now_listening) & set(pids):
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the API processes did not LISTEN again")
    finally:
        await admin.close()
    latencies, _ = await wake_latencies(on_a, on_b, queue_id, 3)
    print(
        f"\nlisten connections killed: woken after {outage_latency * 1000:.0f} ms; "
        f"after reconnecting: {summary('latency', latencies)}"
    )
    assert max(latencies) < 0.300


async def test_sigterm_answers_waiting_polls_empty_and_the_process_exits_0(
    lp_database: str, tmp_path: Path
) -> None:
    api = start_api(lp_database, tmp_path, "c")
    try:
        async with httpx.AsyncClient(base_url=api.base, timeout=30) as client:
            queue_id = await new_queue(client)
            bare = asyncio.create_task(timed_poll(client, queue_id, wait_seconds=20))
            listed = asyncio.create_task(
                timed_poll(client, queue_id, wait_seconds=20, max_messages=5)
            )
            await asyncio.sleep(0.5)
            assert not bare.done() and not listed.done()
            api.process.signal(signal.SIGTERM)
            signalled = time.perf_counter()
            bare_answer, listed_answer = await asyncio.gather(bare, listed)
            assert bare_answer.response.status_code == 204
            assert listed_answer.response.status_code == 200
            assert listed_answer.response.json() == {"messages": []}
            answered_after = max(bare_answer.at, listed_answer.at) - signalled
        code = await asyncio.to_thread(api.process.process.wait, 15)
        exited_after = time.perf_counter() - signalled
    finally:
        api.process.stop()
    print(
        f"\nSIGTERM: polls answered after {answered_after * 1000:.0f} ms, "
        f"process exited {code} after {exited_after:.2f} s"
    )
    assert code == 0, api.process.output()
    assert answered_after < 0.5
    assert exited_after < 5
