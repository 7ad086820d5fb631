"""The three queue workers as real `retsu worker run` processes over a real database.

Time is moved with advance_database_clock instead of waiting for lifetimes and
retention; only the worker intervals themselves (5 s, the minimum) are waited for.
"""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from uuid import UUID

import asyncpg
import httpx
import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.ext.asyncio import AsyncEngine

from retsu.adapters.postgres.database import Database
from retsu.adapters.postgres.engine import create_engine
from retsu.adapters.postgres.leadership import LOCK_KEY, AdvisoryLockLeadership
from retsu.domain.message import MessageToStore, Priority
from tests.conftest import create_database, drop_database
from tests.support.postgres import PostgresStorage
from tests.support.processes import RetsuProcess, eventually, free_port, retsu_env
from tests.support.proxy import PostgresProxy
from tests.support.services import PostgresServer
from tests.support.timeshift import advance_database_clock, plain_url

pytestmark = pytest.mark.integration

INTERVAL = 5  # seconds: the smallest processing / collection / retry interval allowed
# Waiting for something a worker does once per interval: the interval, plus a margin
# for a loaded two-core machine shared with other test runs.
WITHIN_ONE_INTERVAL = INTERVAL + 5

EXPIRED_CLEANER = ["worker", "run", "queue", "expired-message-cleaner"]
DEAD_LETTER_CLEANER = ["worker", "run", "queue", "dead-letter-message-cleaner"]
COLLECTOR = ["worker", "run", "queue", "state-metrics-collector"]


# -- helpers ---------------------------------------------------------------------------


@pytest.fixture
async def database(postgres_server: PostgresServer) -> AsyncIterator[str]:
    """A database of the test's own: moving its clock disturbs nobody else."""
    url = await create_database(postgres_server)
    yield url
    await drop_database(postgres_server, url)


@pytest.fixture
async def engine(database: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(database, max_connections=2)
    yield engine
    await engine.dispose()


class Worker:
    """A running worker process and its management endpoint."""

    def __init__(self, process: RetsuProcess, port: int) -> None:
        self.process = process
        self.base = f"http://127.0.0.1:{port}"

    def get(self, path: str) -> httpx.Response:
        return httpx.get(self.base + path, timeout=5)

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        text = self.get("/metrics").text
        return {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        }

    def metric(self, name: str, **labels: str) -> float | None:
        return self.metrics().get((name, tuple(sorted(labels.items()))))

    def exports_state(self) -> bool:
        return "queue_messages_ready" in self.get("/metrics").text

    def exit_code(self, timeout: float) -> int:
        return self.process.process.wait(timeout)


@contextmanager
def running_many(
    count: int, args: list[str], database: str, tmp_path: Path, **settings: str
) -> Iterator[list[Worker]]:
    """``count`` processes of one worker, started together, each with its own port."""
    workers = []
    try:
        for _ in range(count):
            port = free_port()
            env = retsu_env(database, WORKER__MANAGEMENT__PORT=str(port), **settings)
            log = tmp_path / f"{args[-1]}-{port}.log"
            workers.append(Worker(RetsuProcess(args, env, log), port))
        for worker in workers:
            worker.process.wait_until_ready(f"{worker.base}/health/ready")
        yield workers
    finally:
        for worker in workers:
            if worker.process.process.poll() is None:
                worker.process.stop()
            else:
                worker.process._log.close()


@contextmanager
def running(args: list[str], database: str, tmp_path: Path, **settings: str) -> Iterator[Worker]:
    with running_many(1, args, database, tmp_path, **settings) as [worker]:
        yield worker


async def insert_queue(engine: AsyncEngine, name: str, *, max_attempts: int = 5) -> UUID:
    queue_id = uuid.uuid4()
    async with engine.begin() as connection:
        await connection.execute(
            sa.text(
                "INSERT INTO queue (id, name, visibility_timeout_seconds, max_delivery_attempts,"
                " default_message_ttl_seconds) VALUES (:id, :name, 30, :attempts, 3600)"
            ),
            {"id": queue_id, "name": name, "attempts": max_attempts},
        )
    return queue_id


def messages(n: int, *, ttl: int = 600, priority: Priority = Priority.MEDIUM) -> list[Any]:
    return [MessageToStore(uuid.uuid4(), "x", priority, ttl, 0) for _ in range(n)]


async def count(database: str, sql: str, *args: Any) -> int:
    connection = await asyncpg.connect(plain_url(database))
    try:
        return int(await connection.fetchval(sql, *args))
    finally:
        await connection.close()


# -- the expired-message cleaner --------------------------------------------------------


async def test_the_expired_cleaner_removes_ready_at_once_and_leased_after_the_lease(
    database: str, engine: AsyncEngine, tmp_path: Path
) -> None:
    queue_id = await insert_queue(engine, "expiring")
    repository = PostgresStorage(engine)
    await repository.messages.enqueue(queue_id, messages(1, ttl=10, priority=Priority.HIGH))
    leased = await repository.messages.dequeue(
        queue_id,
        limit=1,
        visibility_timeout_seconds=60,
        dead_letter_batch_size=100,
    )
    assert len(leased.messages) == 1
    await repository.messages.enqueue(queue_id, messages(3, ttl=10))  # never delivered
    await repository.messages.enqueue(queue_id, messages(2, ttl=3600))  # still alive
    # Idempotency keys: two older than 24 h, one fresh.
    connection = await asyncpg.connect(plain_url(database))
    try:
        await connection.execute(
            "INSERT INTO idempotency_key (queue_id, key, message_id, fingerprint, created_at) "
            "SELECT $1, 'key-' || g, gen_random_uuid(), '\\x00'::bytea, "
            "       now() - make_interval(hours => CASE WHEN g < 3 THEN 25 ELSE 23 END) "
            "FROM generate_series(1, 3) AS g",
            queue_id,
        )
    finally:
        await connection.close()
    await advance_database_clock(database, 11)  # 4 expired; the leased one still leased

    with running(
        EXPIRED_CLEANER,
        database,
        tmp_path,
        WORKER__QUEUE__EXPIRED_MESSAGE_CLEANER__PROCESSING_INTERVAL_SECONDS=str(INTERVAL),
    ) as cleaner:
        # The first batch runs at start: expired ready messages go at once...
        never = eventually(
            lambda: cleaner.metric(
                "queue_messages_expired_total",
                queue_name="expiring",
                delivery_history="never_delivered",
            ),
            WITHIN_ONE_INTERVAL,
            "expired ready messages counted",
        )
        assert never == 3
        assert await count(database, "SELECT count(*) FROM queue_message") == 3
        # ... the old idempotency keys with them, the fresh one stays.
        keys = "SELECT array_agg(key ORDER BY key) FROM idempotency_key"
        assert await count(database, "SELECT count(*) FROM idempotency_key") == 1
        connection = await asyncpg.connect(plain_url(database))
        try:
            assert await connection.fetchval(keys) == ["key-3"]
        finally:
            await connection.close()
        # The expired in-flight message stays while its lease runs...
        assert (
            cleaner.metric(
                "queue_messages_expired_total",
                queue_name="expiring",
                delivery_history="previously_delivered",
            )
            is None
        )
        assert cleaner.get("/health/live").status_code == 200

        # SIGTERM while it rests: it exits 0 at once.
        started = time.monotonic()
        cleaner.process.signal(signal.SIGTERM)
        assert cleaner.exit_code(timeout=10) == 0, cleaner.process.output()
        assert time.monotonic() - started < 5

    # Once its lease has ended, the expired in-flight message goes too (first batch of a
    # new process, rather than waiting out an interval).
    await advance_database_clock(database, 60)
    with running(EXPIRED_CLEANER, database, tmp_path) as cleaner:
        previously = eventually(
            lambda: cleaner.metric(
                "queue_messages_expired_total",
                queue_name="expiring",
                delivery_history="previously_delivered",
            ),
            WITHIN_ONE_INTERVAL,
            "the expired message whose lease ended counted",
        )
        assert previously == 1
        assert await count(database, "SELECT count(*) FROM queue_message") == 2  # the living


# -- the dead-letter cleaner ----------------------------------------------------------------


async def test_the_dead_letter_cleaner_honours_the_retention(
    database: str, engine: AsyncEngine, tmp_path: Path
) -> None:
    queue_id = await insert_queue(engine, "graveyard", max_attempts=1)
    repository = PostgresStorage(engine)

    async def dead_letter(n: int) -> None:
        await repository.messages.enqueue(queue_id, messages(n))
        await repository.messages.dequeue(
            queue_id,
            limit=n,
            visibility_timeout_seconds=1,
            dead_letter_batch_size=100,
        )
        await advance_database_clock(database, 2)
        result = await repository.messages.dequeue(
            queue_id,
            limit=1,
            visibility_timeout_seconds=1,
            dead_letter_batch_size=100,
        )
        assert result.dead_lettered == n

    await dead_letter(4)
    await advance_database_clock(database, 3600 - 30)
    await dead_letter(2)  # 30 s short of the retention when the first four pass it
    await advance_database_clock(database, 60)
    dead = "SELECT count(*) FROM queue_dead_letter_message"
    assert await count(database, dead) == 6

    with running(
        DEAD_LETTER_CLEANER,
        database,
        tmp_path,
        WORKER__QUEUE__DEAD_LETTER_MESSAGE_CLEANER__RETENTION_SECONDS="3600",
        WORKER__QUEUE__DEAD_LETTER_MESSAGE_CLEANER__PROCESSING_INTERVAL_SECONDS=str(INTERVAL),
    ) as cleaner:
        # The first batch runs at start: past the retention only.
        purged = eventually(
            lambda: cleaner.metric(
                "queue_dead_letter_messages_purged_total", queue_name="graveyard"
            ),
            WITHIN_ONE_INTERVAL,
            "old dead letters purged",
        )
        assert purged == 4
        assert await count(database, dead) == 2
        await asyncio.sleep(0.5)
        assert await count(database, dead) == 2  # and nothing more

        started = time.monotonic()
        cleaner.process.signal(signal.SIGTERM)
        assert cleaner.exit_code(timeout=10) == 0, cleaner.process.output()
        assert time.monotonic() - started < 5


# -- the management server ---------------------------------------------------------------------


async def test_a_worker_serves_health_and_metrics_and_is_not_ready_without_its_database(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    database = await create_database(postgres_server)
    try:
        with running(
            EXPIRED_CLEANER,
            database,
            tmp_path,
            WORKER__QUEUE__EXPIRED_MESSAGE_CLEANER__PROCESSING_INTERVAL_SECONDS="3600",
        ) as cleaner:
            assert cleaner.get("/health/live").status_code == 200
            assert cleaner.get("/health/ready").status_code == 200
            metrics = cleaner.get("/metrics")
            assert metrics.status_code == 200
            assert metrics.headers["content-type"].startswith("text/plain")
            assert "http_server_requests_total" in metrics.text
            assert "queue_messages_ready" not in metrics.text  # a cleaner exports no state

            await drop_database(postgres_server, database)  # the database is gone
            response = eventually(
                lambda: (r := cleaner.get("/health/ready")).status_code == 503 and r,
                10,
                "/health/ready answering 503",
            )
            assert response.json()["code"] == "not_ready"
            assert cleaner.get("/health/live").status_code == 200  # alive all the same
            cleaner.process.signal(signal.SIGTERM)
            assert cleaner.exit_code(timeout=10) == 0, cleaner.process.output()
    finally:
        await drop_database(postgres_server, database)


# -- the state-metrics collector ----------------------------------------------------------


COLLECTOR_SETTINGS = {
    "WORKER__QUEUE__STATE_METRICS_COLLECTOR__COLLECTION_INTERVAL_SECONDS": str(INTERVAL),
    "WORKER__QUEUE__STATE_METRICS_COLLECTOR__LEADERSHIP_RETRY_INTERVAL_SECONDS": str(INTERVAL),
}

_LEADER_BACKEND = """
SELECT a.pid FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.classid = $1 AND l.objid = $2
  AND l.objsubid = 2 AND a.application_name = 'retsu-worker'
  AND a.datname = current_database()
"""


def leader_of(*workers: Worker) -> Worker | None:
    leaders = [w for w in workers if w.process.process.poll() is None and w.exports_state()]
    assert len(leaders) <= 1, "two collectors export queue state at once"
    return leaders[0] if leaders else None


async def test_one_collector_leads_and_a_standby_takes_over_whatever_ends_the_leader(
    database: str, engine: AsyncEngine, tmp_path: Path
) -> None:
    queue_id = await insert_queue(engine, "watched")
    await PostgresStorage(engine).messages.enqueue(queue_id, messages(3, priority=Priority.HIGH))
    figures: dict[str, float] = {}

    with running_many(3, COLLECTOR, database, tmp_path, **COLLECTOR_SETTINGS) as collectors:
        # Exactly one leads (its first refresh is immediate); the others are ready standbys.
        leader = eventually(lambda: leader_of(*collectors), INTERVAL, "a leader")
        standbys = [c for c in collectors if c is not leader]
        for priority, ready in (("HIGH", 3), ("MEDIUM", 0), ("LOW", 0)):
            labels = {"queue_name": "watched", "message_priority": priority}
            assert leader.metric("queue_messages_ready", **labels) == ready
            assert leader.metric("queue_messages_in_flight", **labels) == 0
        assert leader.metric("queue_state_collections_total", outcome="success")
        assert leader.metric("queue_state_snapshot_age_seconds") is not None
        for standby in standbys:
            text = standby.get("/metrics").text
            assert "queue_messages_ready" not in text
            assert "queue_state_collections_total" not in text
            assert "http_server_requests_total" in text
            assert standby.get("/health/ready").status_code == 200
        assert leader.get("/health/ready").status_code == 200
        assert "leadership acquired" in leader.process.output()
        assert all("leadership acquired" not in s.process.output() for s in standbys)

        # 1. SIGTERM: the leader exits 0 and releases the lock; a standby takes over.
        stopped = time.monotonic()
        leader.process.signal(signal.SIGTERM)
        assert leader.exit_code(timeout=10) == 0, leader.process.output()
        new_leader = eventually(lambda: leader_of(*standbys), INTERVAL + 6, "a new leader")
        figures["sigterm"] = time.monotonic() - stopped
        [last] = [s for s in standbys if s is not new_leader]

        # 2. kill -9: the kernel closes the socket, PostgreSQL releases the lock.
        killed = time.monotonic()
        new_leader.process.signal(signal.SIGKILL)
        new_leader.exit_code(timeout=10)
        eventually(last.exports_state, INTERVAL + 6, "the last standby taking over")
        figures["kill -9"] = time.monotonic() - killed

        # 3. The leader's own database session dies: its next refresh fails on that very
        #    session, which ends leadership (no stale gauges left behind); the process
        #    keeps running and competes again at its retry interval (SPEC §5).
        pids = await _leader_backends(database)
        assert len(pids) == 1
        await count(
            database, "SELECT count(*) FROM (SELECT pg_terminate_backend($1)) AS t", pids[0]
        )
        terminated = time.monotonic()
        eventually(lambda: not last.exports_state(), INTERVAL + 6, "the lost leader's gauges gone")
        figures["session killed -> gauges gone"] = time.monotonic() - terminated
        eventually(last.exports_state, 2 * INTERVAL + 6, "leading again after the retry interval")
        figures["session killed -> leading again"] = time.monotonic() - terminated
        assert last.process.process.poll() is None, last.process.output()
        assert "leadership lost" in last.process.output()
        assert "refresh failed" not in last.process.output()
        assert last.get("/health/ready").status_code == 200
    print("collector failover (s):", {k: round(v, 2) for k, v in figures.items()})
    assert figures["sigterm"] < INTERVAL + 6
    assert figures["kill -9"] < INTERVAL + 6


# -- riding out killed sessions and a database restart ------------------------------------


async def kill_worker_sessions(database: str) -> int:
    return await count(
        database,
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE datname = current_database() AND application_name = 'retsu-worker'",
    )


async def test_the_cleaners_ride_out_killed_sessions_and_a_database_restart(
    database: str, engine: AsyncEngine, tmp_path: Path
) -> None:
    queue_id = await insert_queue(engine, "restarted")
    storage = PostgresStorage(engine)
    proxy = PostgresProxy(database).start()
    try:
        with (
            running(
                EXPIRED_CLEANER,
                proxy.url,
                tmp_path,
                WORKER__QUEUE__EXPIRED_MESSAGE_CLEANER__PROCESSING_INTERVAL_SECONDS=str(INTERVAL),
            ) as expired,
            running(
                DEAD_LETTER_CLEANER,
                proxy.url,
                tmp_path,
                WORKER__QUEUE__DEAD_LETTER_MESSAGE_CLEANER__PROCESSING_INTERVAL_SECONDS=str(
                    INTERVAL
                ),
            ) as dead_letters,
        ):
            cleaners = (expired, dead_letters)
            # 1. Every session of both cleaners killed while they rest.
            assert await kill_worker_sessions(database) >= 2
            await storage.messages.enqueue(queue_id, messages(2, ttl=1))
            await advance_database_clock(database, 2)
            removed = eventually(
                lambda: expired.metric(
                    "queue_messages_expired_total",
                    queue_name="restarted",
                    delivery_history="never_delivered",
                ),
                WITHIN_ONE_INTERVAL,
                "the expired messages removed after the sessions were killed",
            )
            assert removed == 2
            # 2. The database restarts: down for longer than an interval.
            proxy.down()
            await asyncio.sleep(INTERVAL + 1)
            for cleaner in cleaners:
                assert cleaner.process.process.poll() is None, cleaner.process.output()
                assert cleaner.get("/health/ready").status_code == 503
            proxy.up()
            await storage.messages.enqueue(queue_id, messages(3, ttl=1))
            await advance_database_clock(database, 2)
            eventually(
                lambda: (
                    expired.metric(
                        "queue_messages_expired_total",
                        queue_name="restarted",
                        delivery_history="never_delivered",
                    )
                    == 5
                ),
                WITHIN_ONE_INTERVAL + INTERVAL,
                "the cleaner back at work after the restart",
            )
            for cleaner in cleaners:
                eventually(
                    lambda c=cleaner: c.get("/health/ready").status_code == 200,
                    10,
                    "ready again",
                )
                assert "batch failed" in cleaner.process.output()
                assert "Traceback" not in cleaner.process.output()
                cleaner.process.signal(signal.SIGTERM)
                assert cleaner.exit_code(timeout=10) == 0, cleaner.process.output()
    finally:
        proxy.close()


async def test_leader_and_standby_collectors_ride_out_killed_sessions_and_a_restart(
    database: str, engine: AsyncEngine, tmp_path: Path
) -> None:
    queue_id = await insert_queue(engine, "observed")
    await PostgresStorage(engine).messages.enqueue(queue_id, messages(2))
    proxy = PostgresProxy(database).start()
    try:
        with running_many(2, COLLECTOR, proxy.url, tmp_path, **COLLECTOR_SETTINGS) as collectors:
            eventually(lambda: leader_of(*collectors), INTERVAL, "a leader")
            # 1. Every session killed: the leader's lock session and the standby's pool.
            assert await kill_worker_sessions(database) >= 2
            new_leader = eventually(
                lambda: leader_of(*collectors), 3 * INTERVAL + 6, "a leader again"
            )
            labels = {"queue_name": "observed", "message_priority": "MEDIUM"}
            assert new_leader.metric("queue_messages_ready", **labels) == 2
            # 2. The database restarts.
            proxy.down()
            eventually(lambda: leader_of(*collectors) is None, INTERVAL + 6, "no leader while down")
            await asyncio.sleep(INTERVAL)
            proxy.up()
            eventually(lambda: leader_of(*collectors), 3 * INTERVAL + 6, "a leader after it")
            for collector in collectors:
                assert collector.process.process.poll() is None, collector.process.output()
                assert collector.get("/health/ready").status_code == 200
            for collector in collectors:
                collector.process.signal(signal.SIGTERM)
                assert collector.exit_code(timeout=10) == 0, collector.process.output()
    finally:
        proxy.close()


async def _leader_backends(database: str) -> list[int]:
    connection = await asyncpg.connect(plain_url(database))
    try:
        rows = await connection.fetch(_LEADER_BACKEND, LOCK_KEY[0], LOCK_KEY[1])
    finally:
        await connection.close()
    return [int(row["pid"]) for row in rows]


async def test_the_leader_session_holds_the_lock_reads_on_it_and_is_closed_on_release(
    database: str,
) -> None:
    ours = create_engine(database, max_connections=2, application_name="retsu-worker")
    theirs = create_engine(database, max_connections=2, application_name="retsu-worker")
    try:
        session = await AdvisoryLockLeadership(Database(ours)).try_acquire()
        assert session is not None
        assert await AdvisoryLockLeadership(Database(theirs)).try_acquire() is None  # never waits
        assert theirs.pool.checkedout() == 0  # the standby gave its connection back
        [pid] = await _leader_backends(database)
        # Every state read goes through the locked session itself.
        connection = session._connection
        assert (await connection.execute(sa.text("SELECT pg_backend_pid()"))).scalar() == pid
        # A dead leader is noticed in seconds, not hours.
        idle = (await connection.execute(sa.text("SHOW tcp_keepalives_idle"))).scalar()
        await connection.commit()
        assert idle == "10"
        assert await session.read_state() == []  # no queues yet; the lock is kept
        assert await _leader_backends(database) == [pid]

        await session.release()
        assert await _leader_backends(database) == []
        # The session itself ended (closed, not handed back to the pool with its lock).
        gone = "SELECT count(*) FROM pg_stat_activity WHERE pid = $1"
        for _ in range(50):
            if await count(database, gone, pid) == 0:
                break
            await asyncio.sleep(0.02)
        assert await count(database, gone, pid) == 0
        taken = await AdvisoryLockLeadership(Database(theirs)).try_acquire()
        assert taken is not None
        await taken.release()
    finally:
        await ours.dispose()
        await theirs.dispose()
