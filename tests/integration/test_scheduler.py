"""Exactly once per due time, the hard way (SPEC §3.12): schedulers racing over a real
PostgreSQL, real `retsu worker run queue scheduler` processes killed with SIGKILL (one at
a random moment, one while it is provably inside its transaction), a clock that jumps,
and a database restart ridden out.

How a test tells which due time a message stands for: its id (``scheduled_message_id``
carries the due time in its UUIDv7 timestamp). A schedule's messages are right when
(1) no due time appears twice, and (2) each due time after the first is the first due
time after the enqueue of the one before it: a due time is skipped only when it had
already passed by the time the previous one ran (the misfire rule), never lost.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from uuid import UUID

import asyncpg
import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from retsu.adapters.ids import uuid7
from retsu.adapters.postgres.database import Database
from retsu.adapters.postgres.engine import create_engine
from retsu.adapters.postgres.schedules import PostgresSchedules
from retsu.domain.audit import AuditAction, AuditEntry, Caller
from retsu.domain.message import Priority
from retsu.domain.queue import Queue, QueueSettings
from retsu.domain.schedule import (
    MessageTemplate,
    NewSchedule,
    Recurrence,
    due_time_of,
    scheduled_message_id,
)
from tests.conftest import create_database, drop_database
from tests.support.postgres import PostgresStorage, assert_database_message_invariants
from tests.support.processes import RetsuProcess, eventually, free_port, retsu_env
from tests.support.proxy import PostgresProxy
from tests.support.services import PostgresServer
from tests.support.timeshift import plain_url

pytestmark = pytest.mark.integration

SCHEDULER = ["worker", "run", "queue", "scheduler"]


@pytest.fixture
async def database(postgres_server: PostgresServer) -> AsyncIterator[str]:
    url = await create_database(postgres_server)
    yield url
    try:
        await assert_database_message_invariants(url)
    finally:
        await drop_database(postgres_server, url)


@pytest.fixture
async def engine(database: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(database, max_connections=4)
    yield engine
    await engine.dispose()


async def make_queue(storage: PostgresStorage, name: str = "ticks") -> Queue:
    now = datetime.now().astimezone()
    queue = Queue(uuid7(), name, QueueSettings(), False, now, now)
    return await storage.queues.add_queue(
        queue, AuditEntry.of_queue(AuditAction.QUEUE_CREATED, queue.id, Caller())
    )


async def make_schedule(storage: PostgresStorage, queue: Queue, every: int, name: str) -> UUID:
    schedule = NewSchedule(
        id=uuid7(),
        queue_id=queue.id,
        name=name,
        recurrence=Recurrence(every_seconds=every),
        message=MessageTemplate(name, Priority.MEDIUM, 3600),
    )
    audit = AuditEntry.of_schedule(AuditAction.SCHEDULE_CREATED, queue.id, schedule.id, Caller())
    return (await storage.schedules.add_schedule(schedule, audit)).id


@dataclass(frozen=True)
class Stored:
    due: datetime  # to the millisecond, from the id
    enqueued_at: datetime


async def stored_runs(database: str, schedule_id: UUID) -> list[Stored]:
    connection = await asyncpg.connect(plain_url(database))
    try:
        rows = await connection.fetch(
            "SELECT id, enqueued_at FROM queue_message WHERE schedule_id = $1 "
            "ORDER BY enqueue_order",
            schedule_id,
        )
    finally:
        await connection.close()
    return [Stored(due_time_of(row["id"]), row["enqueued_at"]) for row in rows]


def check_exactly_once(runs: list[Stored], first_due: datetime, every: int) -> int:
    """Each due time once, none lost; how many passed while nothing ran (skipped)."""
    dues = [r.due for r in runs]
    assert len(dues) == len(set(dues)), f"a due time enqueued twice: {dues}"
    assert dues == sorted(dues)
    step = timedelta(seconds=every)
    assert dues[0] == _ms(first_due), "the first due time was lost"
    skipped = 0
    grid = first_due
    for previous, current in itertools.pairwise(runs):
        # The first due time after the previous enqueue: the next one on the grid.
        while _ms(grid) <= previous.due or grid <= previous.enqueued_at:
            if _ms(grid) > previous.due:
                skipped += 1
            grid += step
        assert current.due == _ms(grid), (
            f"after the run of {previous.due} at {previous.enqueued_at}, the next due time "
            f"{grid} was lost (found {current.due})"
        )
    return skipped


def _ms(moment: datetime) -> datetime:
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


async def first_due(engine: AsyncEngine, schedule_id: UUID) -> datetime:
    async with engine.connect() as connection:
        from sqlalchemy import text

        created = (
            await connection.execute(
                text("SELECT created_at, every_seconds FROM queue_schedule WHERE id = :id"),
                {"id": schedule_id},
            )
        ).one()
    return created.created_at + timedelta(seconds=created.every_seconds)


# -- in process: runners racing ----------------------------------------------------------


async def test_four_runners_racing_run_each_due_time_of_every_schedule_once(
    database: str, engine: AsyncEngine
) -> None:
    storage = PostgresStorage(engine)
    queue = await make_queue(storage)
    schedules = [await make_schedule(storage, queue, 1, f"s{i}") for i in range(8)]
    # Four runners, each on a pool of its own (as four processes would be).
    engines = [create_engine(database, max_connections=1) for _ in range(4)]
    runners = [PostgresSchedules(Database(e)) for e in engines]
    stop = time.monotonic() + 4
    duplicates = 0

    async def race(runner: PostgresSchedules) -> None:
        nonlocal duplicates
        while time.monotonic() < stop:
            due = await runner.run_due_schedule()
            if due.run is None:
                await asyncio.sleep(min(0.05, max(0.0, due.next_due_in_seconds or 0.05)))
            elif not due.run.enqueued:
                duplicates += 1

    try:
        await asyncio.gather(*(race(r) for r in runners))
    finally:
        for e in engines:
            await e.dispose()
    assert duplicates == 0
    for schedule_id in schedules:
        runs = await stored_runs(database, schedule_id)
        assert len(runs) >= 3
        assert check_exactly_once(runs, await first_due(engine, schedule_id), 1) <= 1


async def test_a_runner_dying_inside_its_transaction_leaves_the_due_time_to_another(
    database: str, engine: AsyncEngine
) -> None:
    """Killed between its statements (the claim done, the enqueue waiting): its session's
    end undoes everything, the row lock included; the next runner runs that due time."""
    storage = PostgresStorage(engine)
    queue = await make_queue(storage)
    schedule_id = await make_schedule(storage, queue, 3600, "hourly")
    holder = await asyncpg.connect(plain_url(database))
    victim = await asyncpg.connect(plain_url(database))
    try:
        await holder.execute("UPDATE queue_schedule SET next_run_at = now() - interval '1 s'")
        due = await holder.fetchval("SELECT next_run_at FROM queue_schedule")
        # The victim runs the transaction by hand, statement by statement, and is killed
        # after the claim (what a SIGKILL between two statements leaves).
        await victim.execute("BEGIN")
        claimed = await victim.fetchval(
            "SELECT id FROM queue_schedule WHERE next_run_at <= now() "
            "ORDER BY next_run_at LIMIT 1 FOR UPDATE SKIP LOCKED"
        )
        assert claimed == schedule_id
        other = PostgresSchedules(Database(engine))
        assert (await other.run_due_schedule()).run is None  # held: skipped, not waited for
        pid = await victim.fetchval("SELECT pg_backend_pid()")
        await holder.execute("SELECT pg_terminate_backend($1)", pid)
        run = None
        deadline = time.monotonic() + 5
        while run is None and time.monotonic() < deadline:
            run = (await other.run_due_schedule()).run
            await asyncio.sleep(0.02)
        assert run is not None and run.due_at == due
        assert run.message_id == scheduled_message_id(schedule_id, due)
        assert [r.due for r in await stored_runs(database, schedule_id)] == [_ms(due)]
    finally:
        await holder.close()
        if not victim.is_closed():
            victim.terminate()


async def test_a_run_wakes_the_long_polls_of_its_queue_when_it_commits(
    database: str, engine: AsyncEngine
) -> None:
    storage = PostgresStorage(engine)
    queue = await make_queue(storage)
    await make_schedule(storage, queue, 3600, "hourly")
    listener = await asyncpg.connect(plain_url(database))
    heard: asyncio.Queue[str] = asyncio.Queue()
    try:
        await listener.add_listener("retsu_messages", lambda *args: heard.put_nowait(args[3]))
        await listener.execute("UPDATE queue_schedule SET next_run_at = now()")
        run = (await PostgresSchedules(Database(engine)).run_due_schedule()).run
        assert run is not None
        assert await asyncio.wait_for(heard.get(), 5) == f"{queue.id}:messages"
    finally:
        await listener.close()


# -- real processes ------------------------------------------------------------------------


def local_ports(pid: int) -> set[int]:
    """The local TCP ports of a process's sockets (Linux /proc; no psutil in CI)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().name
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


class SchedulerProcess:
    def __init__(self, database: str, tmp_path: Path, tag: str) -> None:
        self.port = free_port()
        env = retsu_env(database, WORKER__MANAGEMENT__PORT=str(self.port), LOGGING__FILTER="info")
        self.process = RetsuProcess(SCHEDULER, env, tmp_path / f"scheduler-{tag}.log")
        self.base = f"http://127.0.0.1:{self.port}"

    def ready(self) -> SchedulerProcess:
        self.process.wait_until_ready(f"{self.base}/health/ready")
        return self

    def metrics(self) -> str:
        return httpx.get(f"{self.base}/metrics", timeout=5).text

    def kill(self) -> None:
        self.process.signal(signal.SIGKILL)
        self.process.process.wait(10)

    def stop(self) -> int:
        return self.process.stop()


async def test_two_scheduler_processes_every_second_one_killed_at_random_moment(
    database: str, engine: AsyncEngine, tmp_path: Path
) -> None:
    storage = PostgresStorage(engine)
    queue = await make_queue(storage)
    # Started together (each start costs seconds on a loaded machine).
    first, second = (SchedulerProcess(database, tmp_path, tag) for tag in "ab")
    for process in (first, second):
        process.ready()
    # Made once they run, so no due time passes before a scheduler does.
    schedules = [await make_schedule(storage, queue, 1, f"every-second-{i}") for i in range(3)]
    try:
        await asyncio.sleep(2.5 + random.random())  # racing, every second
        second.kill()  # SIGKILL at a random moment of its loop
        await asyncio.sleep(2)  # the other one goes on alone
        text = await asyncio.to_thread(first.metrics)
        assert 'queue_schedule_runs_total{outcome="enqueued",queue_name="ticks"}' in text
        assert first.stop() == 0
    finally:
        for process in (first, second):
            if process.process.process.poll() is None:
                process.stop()
    skipped_total = 0
    for schedule_id in schedules:
        runs = await stored_runs(database, schedule_id)
        assert len(runs) >= 3
        skipped_total += check_exactly_once(runs, await first_due(engine, schedule_id), 1)
    # A due time is skipped only while no scheduler runs: here, at most a stall of the
    # loaded machine longer than the interval.
    assert skipped_total <= 3


async def test_a_scheduler_killed_inside_its_transaction_commits_nothing(
    database: str, engine: AsyncEngine, tmp_path: Path
) -> None:
    """The scheduler's enqueue is made to wait (the test holds the queue's state counters)
    while it holds the schedule it claimed; SIGKILL then. The other scheduler runs that due
    time, once, as soon as the dead session is gone."""
    storage = PostgresStorage(engine)
    queue = await make_queue(storage)
    schedule_id = await make_schedule(storage, queue, 3600, "hourly")
    holder = await asyncpg.connect(plain_url(database))
    watcher = await asyncpg.connect(plain_url(database))
    started = [SchedulerProcess(database, tmp_path, tag) for tag in ("one", "two")]
    for process in started:
        process.ready()
    try:
        await holder.execute(
            "INSERT INTO queue_state_rollup (queue_id, priority, shard) "
            "SELECT $1, p, s FROM generate_series(1, 3) AS p, generate_series(0, 31) AS s "
            "ON CONFLICT DO NOTHING",
            queue.id,
        )
        await holder.execute("BEGIN")
        await holder.execute(
            "SELECT 1 FROM queue_state_rollup WHERE queue_id = $1 FOR UPDATE", queue.id
        )
        due = await watcher.fetchval(
            "UPDATE queue_schedule SET next_run_at = now() - interval '1 s' WHERE id = $1 "
            "RETURNING next_run_at",
            schedule_id,
        )
        waiting = (
            "SELECT client_port FROM pg_stat_activity WHERE application_name = 'retsu-worker' "
            "AND wait_event_type = 'Lock' AND datname = current_database()"
        )
        deadline = time.monotonic() + 10
        while (port := await watcher.fetchval(waiting)) is None:
            assert time.monotonic() < deadline, "no scheduler reached its enqueue"
            await asyncio.sleep(0.05)
        # Which of the two claimed it: the one whose socket is that session's client end.
        [victim] = [p for p in started if port in local_ports(p.process.process.pid)]
        [survivor] = [p for p in started if p is not victim]
        victim.kill()  # inside its transaction: the schedule claimed, the enqueue waiting
        await asyncio.sleep(0.5)
        # The dead session still holds the schedule (it waits on the counters): skipped.
        assert await stored_runs(database, schedule_id) == []
        await holder.execute("ROLLBACK")  # the dead session gets its lock, then ends
        found: list[Stored] = []
        deadline = time.monotonic() + 10
        while not found and time.monotonic() < deadline:
            found = await stored_runs(database, schedule_id)
            await asyncio.sleep(0.1)
        assert [r.due for r in found] == [_ms(due)]
        await asyncio.sleep(1.5)
        assert len(await stored_runs(database, schedule_id)) == 1
        next_run_at = await watcher.fetchval(
            "SELECT next_run_at FROM queue_schedule WHERE id = $1", schedule_id
        )
        assert next_run_at > found[0].enqueued_at
        assert survivor.stop() == 0
    finally:
        await holder.close()
        await watcher.close()
        for process in started:
            if process.process.process.poll() is None:
                process.stop()


async def test_a_scheduler_rides_out_a_database_restart_and_a_clock_jump(
    database: str, engine: AsyncEngine, tmp_path: Path
) -> None:
    storage = PostgresStorage(engine)
    queue = await make_queue(storage)
    schedule_id = await make_schedule(storage, queue, 1, "every-second")
    proxy = PostgresProxy(database).start()
    scheduler = SchedulerProcess(proxy.url, tmp_path, "restart").ready()
    try:
        await asyncio.sleep(2)
        with proxy.restarting():
            await asyncio.sleep(3)  # down: about three due times pass
            ready = await asyncio.to_thread(httpx.get, f"{scheduler.base}/health/ready", timeout=5)
            assert ready.status_code == 503
        before = len(await stored_runs(database, schedule_id))
        eventually(
            lambda: httpx.get(f"{scheduler.base}/health/ready", timeout=5).status_code == 200,
            10,
            "ready again",
        )
        await asyncio.sleep(2)
        assert len(await stored_runs(database, schedule_id)) >= before + 1  # running again
        # The clock jumps: the schedule's due time is suddenly 20 s in the past.
        connection = await asyncpg.connect(plain_url(database))
        try:
            await connection.execute(
                "UPDATE queue_schedule SET next_run_at = next_run_at - interval '20 s'"
            )
        finally:
            await connection.close()
        await asyncio.sleep(1.5)
        assert scheduler.process.process.poll() is None
        text = scheduler.metrics()
        assert scheduler.stop() == 0
    finally:
        if scheduler.process.process.poll() is None:
            scheduler.stop()
        proxy.close()
    assert 'outcome="missed"' in text  # the outage's and the jump's due times: skipped
    runs = await stored_runs(database, schedule_id)
    dues = [r.due for r in runs]
    assert len(dues) == len(set(dues))  # nothing twice, the jump included
    log = scheduler.process.output()
    assert log.count("run failed") == 1  # one warning for the whole outage
    assert "answers again" in log
