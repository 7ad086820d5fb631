"""The scale-out topology of SPEC §10, for real: Debian's PgBouncer in transaction mode.

Two `retsu api` processes and both cleaners reach PostgreSQL through PgBouncer
(``pool_mode = transaction``, fewer server sessions than clients, so the processes
really share sessions); what needs a session — the APIs' LISTEN connections, the two
state-metrics collectors' advisory lock — goes straight to PostgreSQL through
``database.session_url``. The collectors' own ``database.url`` is PgBouncer too: were
their lock taken through it, a server session lent to both would make both leaders.

The end-to-end lifecycle runs through both API processes: enqueue on one, a long poll
on the other woken within 100 ms, dead-lettering, redrive, pause, stats equal to
count(*), the expired cleaner's batches through the pooler, and collector failover when
the leader is killed.
"""

from __future__ import annotations

import asyncio
import signal
import statistics
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import create_database, drop_database
from tests.support.pgbouncer import PgBouncer, find_pgbouncer
from tests.support.processes import RetsuProcess, eventually, free_port, retsu_env
from tests.support.services import PostgresServer, require_services
from tests.support.timeshift import plain_url

pytestmark = pytest.mark.integration

INTERVAL = "5"  # the smallest worker intervals allowed: a run sees several cycles
WAKE_TRIALS = 8


@dataclass
class Role:
    process: RetsuProcess
    base: str

    def get(self, path: str) -> httpx.Response:
        return httpx.get(self.base + path, timeout=5)

    def metric(self, name: str, **labels: str) -> float | None:
        for family in text_string_to_metric_families(self.get("/metrics").text):
            for sample in family.samples:
                if sample.name == name and sample.labels == labels:
                    return float(sample.value)
        return None

    def alive(self) -> bool:
        return self.process.process.poll() is None

    def leads(self) -> bool:
        return self.alive() and "queue_messages_ready" in self.get("/metrics").text


@dataclass
class Topology:
    direct_url: str
    pooled_url: str
    pgbouncer: PgBouncer
    apis: list[Role]
    collectors: list[Role]
    cleaners: list[Role]


def _pgbouncer() -> str:
    try:
        return find_pgbouncer()
    except FileNotFoundError as error:
        if require_services():
            pytest.fail(f"RETSU_REQUIRE_SERVICES is set but {error}", pytrace=False)
        pytest.skip(str(error))


def _start(args: list[str], env: dict[str, str], log: Path, base: str) -> Role:
    role = Role(RetsuProcess(args, env, log), base)
    try:
        role.process.wait_until_ready(f"{base}/health/ready", timeout=60)
    except BaseException:
        role.process.stop()
        raise
    return role


@pytest.fixture(scope="module")
async def topology(
    postgres_server: PostgresServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Topology]:
    executable = _pgbouncer()
    logs = Path(tmp_path_factory.mktemp("pgbouncer-topology"))
    direct = await create_database(postgres_server)  # migrated straight, not via the pooler
    name = direct.rsplit("/", 1)[1]
    # Four server sessions for two API pools of five, two cleaners and two collectors.
    pgbouncer = PgBouncer(executable, postgres_server.admin_url, logs / "pgbouncer.log", 4)
    pooled = pgbouncer.url(name)
    started: list[Role] = []
    try:
        apis = []
        for index in (1, 2):
            port = free_port()
            env = retsu_env(
                pooled,
                database__session_url=direct,  # pooler: auto -> transaction
                database__max_connections="5",
                http__port=str(port),
            )
            apis.append(_start(["api"], env, logs / f"api-{index}.log", f"http://127.0.0.1:{port}"))
            started.append(apis[-1])

        def worker(name: str, index: int, **settings: str) -> Role:
            port = free_port()
            env = retsu_env(
                pooled,
                database__max_connections="2",
                worker__management__port=str(port),
                **settings,
            )
            role = _start(
                ["worker", "run", "queue", name],
                env,
                logs / f"{name}-{index}.log",
                f"http://127.0.0.1:{port}",
            )
            started.append(role)
            return role

        collectors = [
            worker(
                "state-metrics-collector",
                index,
                database__session_url=direct,
                worker__queue__state_metrics_collector__collection_interval_seconds=INTERVAL,
                worker__queue__state_metrics_collector__leadership_retry_interval_seconds=INTERVAL,
            )
            for index in (1, 2)
        ]
        cleaners = [
            worker(
                "expired-message-cleaner",
                1,
                database__pooler="transaction",  # no session_url: told outright
                worker__queue__expired_message_cleaner__processing_interval_seconds=INTERVAL,
            ),
            worker(
                "dead-letter-message-cleaner",
                1,
                database__pooler="transaction",
                worker__queue__dead_letter_message_cleaner__processing_interval_seconds=INTERVAL,
            ),
        ]
        yield Topology(direct, pooled, pgbouncer, apis, collectors, cleaners)
    finally:
        for role in started:
            if role.alive():
                role.process.stop()
        pgbouncer.stop()
        await drop_database(postgres_server, direct)
    # Nothing any process logged may be a statement that outlived its transaction.
    for role in started:
        output = role.process.output()
        assert "prepared statement" not in output, output
        assert "unsupported startup parameter" not in output, output


@pytest.fixture(scope="module")
async def clients(topology: Topology) -> AsyncIterator[tuple[httpx.AsyncClient, ...]]:
    async with (
        httpx.AsyncClient(base_url=topology.apis[0].base, timeout=30) as a,
        httpx.AsyncClient(base_url=topology.apis[1].base, timeout=30) as b,
    ):
        yield a, b


async def new_queue(client: httpx.AsyncClient, **settings: Any) -> str:
    body = {"name": f"pgb-{uuid.uuid4().hex[:12]}", **settings}
    response = await client.post("/v1/queues", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def enqueue(client: httpx.AsyncClient, queue_id: str, payload: str, **extra: Any) -> str:
    response = await client.post(
        f"/v1/queues/{queue_id}/messages", json={"payload": payload, "priority": "HIGH", **extra}
    )
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def dequeue(client: httpx.AsyncClient, queue_id: str, **body: Any) -> list[dict[str, Any]]:
    response = await client.post(
        f"/v1/queues/{queue_id}/messages/dequeue", json={"max_messages": 10, **body}
    )
    assert response.status_code == 200, response.text
    return list(response.json()["messages"])


async def stored_counts(url: str, queue_id: str) -> dict[str, int]:
    """What PostgreSQL holds, counted row by row (not from the rollup)."""
    connection = await asyncpg.connect(plain_url(url))
    try:
        row = await connection.fetchrow(
            """
            SELECT
              count(*) FILTER (
                WHERE m.state = 1
                   OR (m.state = 2 AND m.available_after <= now()
                       AND m.delivery_attempts < q.max_delivery_attempts)
                   OR (m.state = 3 AND m.available_after <= now())) AS ready,
              count(*) FILTER (WHERE m.state = 2 AND m.available_after > now()) AS in_flight,
              count(*) FILTER (WHERE m.state = 3 AND m.available_after > now()) AS delayed,
              (SELECT count(*) FROM queue_dead_letter_message WHERE queue_id = $1)
                AS dead_letters
            FROM queue_message AS m JOIN queue AS q ON q.id = m.queue_id
            WHERE m.queue_id = $1 AND m.expires_at > now()
            """,
            uuid.UUID(queue_id),
        )
    finally:
        await connection.close()
    assert row is not None
    return {key: int(row[key]) for key in ("ready", "in_flight", "delayed", "dead_letters")}


async def stats(client: httpx.AsyncClient, queue_id: str) -> dict[str, int]:
    response = await client.get(f"/v1/queues/{queue_id}")
    assert response.status_code == 200, response.text
    found = response.json()["stats"]
    return {key: int(found[key]) for key in ("ready", "in_flight", "delayed", "dead_letters")}


# -- the lifecycle through both API processes ---------------------------------------------


def pgbouncer_show(pgbouncer: PgBouncer, what: str) -> list[dict[str, str]]:
    """``SHOW <what>`` on PgBouncer's admin console (it speaks only the simple query
    protocol: psql), as rows by column name."""
    done = subprocess.run(
        ["psql", "-A", "-F", "|", "-c", f"SHOW {what}", pgbouncer.url("pgbouncer")],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    header, *rows = [line.split("|") for line in done.stdout.splitlines()[:-1]]
    return [dict(zip(header, row, strict=True)) for row in rows]


def pgbouncer_transactions(pgbouncer: PgBouncer, database: str) -> int:
    """Transactions PgBouncer has passed to ``database`` so far."""
    (row,) = [r for r in pgbouncer_show(pgbouncer, "STATS") if r["database"] == database]
    return int(row["total_xact_count"])


async def test_the_apis_reach_postgres_through_pgbouncer_with_sessions_only_for_listen(
    topology: Topology, clients: tuple[httpx.AsyncClient, ...]
) -> None:
    a, b = clients
    name = topology.direct_url.rsplit("/", 1)[1]
    before = pgbouncer_transactions(topology.pgbouncer, name)
    queue_id = await new_queue(a)
    await asyncio.gather(*(enqueue(c, queue_id, f"m{i}") for i, c in enumerate([a, b] * 10)))
    assert len(await dequeue(b, queue_id, max_messages=100)) == 20
    assert pgbouncer_transactions(topology.pgbouncer, name) >= before + 22
    # Straight to PostgreSQL: the two LISTEN connections and the collectors' sessions.
    direct = await asyncpg.connect(plain_url(topology.direct_url))
    try:
        names = [
            r["application_name"]
            for r in await direct.fetch(
                "SELECT application_name FROM pg_stat_activity WHERE datname = $1 "
                "AND pid <> pg_backend_pid()",
                name,
            )
        ]
    finally:
        await direct.close()
    assert names.count("retsu-api-listen") == 2, names
    # PgBouncer opens at most its pool size of server sessions (4) for everything else.
    assert len(names) - 2 - names.count("retsu-worker") <= 4, names


async def test_an_enqueue_on_one_api_wakes_a_long_poll_on_the_other_within_100_ms(
    clients: tuple[httpx.AsyncClient, ...],
) -> None:
    a, b = clients
    queue_id = await new_queue(a)
    latencies = []
    for trial in range(WAKE_TRIALS):
        poll = asyncio.create_task(
            b.post(f"/v1/queues/{queue_id}/messages/dequeue", json={"wait_seconds": 10})
        )
        await asyncio.sleep(0.3)  # the poll reached B and waits
        assert not poll.done()
        message_id = await enqueue(a, queue_id, f"wake-{trial}")
        created = time.perf_counter()
        answer = await poll
        answered = time.perf_counter()
        assert answer.status_code == 200, answer.text
        assert answer.json()["id"] == message_id
        latencies.append(answered - created)
        ack = await b.post(
            f"/v1/queues/{queue_id}/messages/{message_id}/acknowledge",
            json={"receipt_handle": answer.json()["receipt_handle"]},
        )
        assert ack.status_code == 204, ack.text
    ms = sorted(round(s * 1000, 1) for s in latencies)
    print(f"\nwake-up through PgBouncer, A's 201 -> B's 200: {ms} ms")
    assert statistics.median(latencies) < 0.100, ms
    assert max(latencies) < 0.300, ms


async def test_dead_letters_redrive_pause_and_exact_stats_across_both_apis(
    topology: Topology, clients: tuple[httpx.AsyncClient, ...]
) -> None:
    a, b = clients
    queue_id = await new_queue(a, max_delivery_attempts=1, visibility_timeout_seconds=1)
    ids = [await enqueue(c, queue_id, f"poison-{i}") for i, c in enumerate([a, b, a])]
    # The only attempt each message has, taken through B and never acknowledged.
    assert {m["id"] for m in await dequeue(b, queue_id)} == set(ids)
    assert await stats(a, queue_id) == await stored_counts(topology.direct_url, queue_id)
    await asyncio.sleep(1.2)  # the leases end
    # The next claim through A finds them exhausted and moves them to dead letters.
    assert await dequeue(a, queue_id) == []
    listed = (await b.get(f"/v1/queues/{queue_id}/dead-letters")).json()
    assert sorted(d["payload"] for d in listed["items"]) == ["poison-0", "poison-1", "poison-2"]
    assert await stats(b, queue_id) == {"ready": 0, "in_flight": 0, "delayed": 0, "dead_letters": 3}
    assert await stats(a, queue_id) == await stored_counts(topology.direct_url, queue_id)

    # Pause through A: a poll through B finds nothing, though messages are ready.
    paused = await a.post(f"/v1/queues/{queue_id}/pause")
    assert paused.status_code == 200 and paused.json()["paused"] is True
    redriven = await b.post(f"/v1/queues/{queue_id}/dead-letters/redrive", json={"limit": 2})
    assert redriven.status_code == 200 and redriven.json() == {"redriven": 2}, redriven.text
    assert await dequeue(b, queue_id, wait_seconds=1) == []
    counts = await stats(a, queue_id)
    assert counts == {"ready": 2, "in_flight": 0, "delayed": 0, "dead_letters": 1}
    assert counts == await stored_counts(topology.direct_url, queue_id)

    # Resume through B: a poll waiting on A is woken and gets the redriven messages.
    poll = asyncio.create_task(
        a.post(
            f"/v1/queues/{queue_id}/messages/dequeue",
            json={"wait_seconds": 10, "max_messages": 10, "visibility_timeout_seconds": 60},
        )
    )
    await asyncio.sleep(0.3)
    assert not poll.done()
    resumed_at = time.perf_counter()
    assert (await b.post(f"/v1/queues/{queue_id}/resume")).status_code == 200
    answer = await poll
    print(f"\nresume -> poll answered in {(time.perf_counter() - resumed_at) * 1000:.0f} ms")
    delivered = answer.json()["messages"]
    assert sorted(m["payload"] for m in delivered) == ["poison-0", "poison-1"]
    assert await stats(b, queue_id) == {"ready": 0, "in_flight": 2, "delayed": 0, "dead_letters": 1}
    for message in delivered:
        ack = await b.post(
            f"/v1/queues/{queue_id}/messages/{message['id']}/acknowledge",
            json={"receipt_handle": message["receipt_handle"]},
        )
        assert ack.status_code == 204
    final = await stats(a, queue_id)
    assert final == {"ready": 0, "in_flight": 0, "delayed": 0, "dead_letters": 1}
    assert final == await stored_counts(topology.direct_url, queue_id)


async def test_the_expired_cleaner_runs_its_batches_through_the_pooler(
    topology: Topology, clients: tuple[httpx.AsyncClient, ...]
) -> None:
    a, _ = clients
    queue_id = await new_queue(a)
    for i in range(3):
        await enqueue(a, queue_id, f"short-{i}", ttl_seconds=1)
    deadline = time.monotonic() + 20
    while await _rows(topology.direct_url, queue_id) > 0:
        assert time.monotonic() < deadline, "the expired messages were not deleted in 20 s"
        await asyncio.sleep(0.2)
    cleaner = topology.cleaners[0]
    expired = sum(
        sample.value
        for family in text_string_to_metric_families(cleaner.get("/metrics").text)
        for sample in family.samples
        if sample.name == "queue_messages_expired_total"
    )
    assert expired >= 3, cleaner.get("/metrics").text
    assert cleaner.get("/health/ready").status_code == 200


async def _rows(url: str, queue_id: str) -> int:
    connection = await asyncpg.connect(plain_url(url))
    try:
        return int(
            await connection.fetchval(
                "SELECT count(*) FROM queue_message WHERE queue_id = $1", uuid.UUID(queue_id)
            )
        )
    finally:
        await connection.close()


# -- the collectors: one leads on the direct session, the other takes over ---------------


def _leader(collectors: list[Role]) -> Role | None:
    leaders = [c for c in collectors if c.leads()]
    assert len(leaders) <= 1, "two collectors export queue state at once"
    return leaders[0] if leaders else None


async def test_one_collector_leads_on_its_session_and_the_other_takes_over_when_it_is_killed(
    topology: Topology, clients: tuple[httpx.AsyncClient, ...]
) -> None:
    a, _ = clients
    queue_id = await new_queue(a)
    name = (await a.get(f"/v1/queues/{queue_id}")).json()["name"]
    for i in range(4):
        await enqueue(a, queue_id, f"counted-{i}")
    collectors = topology.collectors

    def counted_by_leader() -> Role | None:
        leader = _leader(collectors)
        if leader is None:
            return None
        ready = leader.metric("queue_messages_ready", queue_name=name, message_priority="HIGH")
        return leader if ready == 4 else None

    leader = await asyncio.to_thread(eventually, counted_by_leader, 30, "a leader counting 4")
    (standby,) = [c for c in collectors if c is not leader]
    assert "queue_messages_ready" not in standby.get("/metrics").text
    # The lock is held by a direct session: one backend of the leader's own, not PgBouncer's.
    direct = await asyncpg.connect(plain_url(topology.direct_url))
    try:
        holders = await direct.fetch(
            "SELECT a.pid, a.application_name FROM pg_locks l "
            "JOIN pg_stat_activity a USING (pid) WHERE l.locktype = 'advisory' AND l.granted "
            # This test's database only: the server is shared with other test runs.
            "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
    finally:
        await direct.close()
    assert [h["application_name"] for h in holders] == ["retsu-worker"], holders
    # ... and not one of PgBouncer's server sessions.
    lent = {int(r["remote_pid"]) for r in pgbouncer_show(topology.pgbouncer, "SERVERS")}
    assert holders[0]["pid"] not in lent, (holders, lent)

    leader.process.signal(signal.SIGKILL)
    killed_at = time.monotonic()
    leader.process.process.wait(10)
    await asyncio.to_thread(eventually, counted_by_leader, 30, "the standby leading")
    print(f"\ncollector failover after SIGKILL: {time.monotonic() - killed_at:.1f} s")
    assert _leader(collectors) is standby
    assert "leadership acquired" in standby.process.output()


def test_the_api_refuses_a_transaction_pooler_without_a_session_url(
    topology: Topology, tmp_path: Path
) -> None:
    env = retsu_env(topology.pooled_url, database__pooler="transaction")
    process = RetsuProcess(["api"], env, tmp_path / "refused.log")
    assert process.process.wait(60) == 2  # a configuration error
    output = process.output()
    assert "long polling (LISTEN) needs database.session_url" in output, output
    process.stop()


def test_without_being_told_the_startup_settings_are_refused_with_a_hint(
    topology: Topology, tmp_path: Path
) -> None:
    env = retsu_env(topology.pooled_url)  # pooler: auto, no session_url -> none
    process = RetsuProcess(
        ["worker", "run", "queue", "expired-message-cleaner"], env, tmp_path / "x"
    )
    assert process.process.wait(60) == 1
    output = process.output()
    assert "unsupported startup parameter" in output and "database.pooler" in output, output
    process.stop()


async def test_no_session_setting_leaks_onto_the_pooled_server_sessions(
    topology: Topology, clients: tuple[httpx.AsyncClient, ...]
) -> None:
    """asyncpg's type introspection switches JIT off for the session and back, in
    statements of their own; through the pooler those would land on different server
    sessions (engine.py, ``_learn_types``). Every server session still has the server's
    own setting."""
    a, b = clients
    queue_id = await new_queue(a)
    for client in (a, b):  # every pooled connection has run the hot statements
        await asyncio.gather(*(enqueue(client, queue_id, "x") for _ in range(10)))
        await dequeue(client, queue_id, max_messages=100)
    direct = await asyncpg.connect(plain_url(topology.direct_url))
    try:
        expected = await direct.fetchval("SELECT current_setting('jit')")
    finally:
        await direct.close()
    pooled = [
        await asyncpg.connect(plain_url(topology.pooled_url), statement_cache_size=0)
        for _ in range(4)
    ]
    try:
        # Four transactions open at once: four distinct server sessions (the pool's size).
        transactions = [c.transaction() for c in pooled]
        for transaction in transactions:
            await transaction.start()
        seen = [await c.fetchval("SELECT current_setting('jit')") for c in pooled]
        for transaction in transactions:
            await transaction.rollback()
    finally:
        for connection in pooled:
            await connection.close()
    assert seen == [expected] * 4, seen
