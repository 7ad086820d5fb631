"""Storage across killed sessions and database restarts (SPEC §3.1, issue 9).

Sessions are killed with ``pg_terminate_backend`` in the test's own database only, by
application name; a restart is played by a TCP proxy in front of the server (every
connection cut, new ones refused for a while) — the shared server itself is never
restarted. What must hold: a connection the server dropped is never used again; a
statement whose connection broke runs once more on a fresh one when that cannot store
anything twice; an unreachable database is DatabaseUnavailable; service comes back
without restarting anything.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import asyncpg
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from retsu.adapters.ids import uuid7
from retsu.adapters.postgres.engine import check_database, create_engine
from retsu.adapters.postgres.notifications import PostgresMessageSignals
from retsu.domain.audit import AuditAction, AuditEntry, Caller
from retsu.domain.errors import DatabaseUnavailable
from retsu.domain.message import MessageToStore, Priority, Receipt
from retsu.domain.queue import Queue, QueueSettings
from tests.conftest import create_database, drop_database
from tests.support.postgres import PostgresStorage, set_read_only
from tests.support.processes import free_port
from tests.support.proxy import PostgresProxy
from tests.support.services import PostgresServer
from tests.support.timeshift import plain_url

pytestmark = pytest.mark.integration

CALLER = Caller(actor="restart-test", request_id="restart-test")


@pytest.fixture(scope="module")
async def database(postgres_server: PostgresServer) -> AsyncIterator[str]:
    """This module's own database: killing its sessions disturbs nobody else."""
    url = await create_database(postgres_server)
    yield url
    await drop_database(postgres_server, url)


@pytest.fixture
def application_name() -> str:
    return f"retsu-restart-{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def engine(database: str, application_name: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(
        database, max_connections=10, acquire_timeout_seconds=5, application_name=application_name
    )
    yield engine
    await engine.dispose()


async def kill_sessions(database: str, application_name: str) -> int:
    """Terminate this database's sessions of ``application_name``; how many."""
    admin = await asyncpg.connect(plain_url(database))
    try:
        killed = await admin.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name = $1",
            application_name,
        )
    finally:
        await admin.close()
    await asyncio.sleep(0.1)  # the killed sessions' sockets close on the client side
    return int(killed)


async def session_pids(database: str, application_name: str) -> list[int]:
    admin = await asyncpg.connect(plain_url(database))
    try:
        rows = await admin.fetch(
            "SELECT pid FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name = $1",
            application_name,
        )
    finally:
        await admin.close()
    return [int(row["pid"]) for row in rows]


async def open_connections(engine: AsyncEngine, count: int) -> None:
    """Make the pool hold ``count`` connections (all checked out at once, then back)."""
    connections = [await engine.connect() for _ in range(count)]
    for connection in connections:
        await connection.execute(sa.text("SELECT 1"))
        await connection.close()


def new_queue() -> Queue:
    now = datetime.now(UTC)
    return Queue(
        id=uuid7(),
        name=f"restart-{uuid.uuid4().hex[:12]}",
        settings=QueueSettings(),
        paused=False,
        created_at=now,
        updated_at=now,
    )


def created(queue: Queue) -> AuditEntry:
    return AuditEntry.of_queue(AuditAction.QUEUE_CREATED, queue.id, CALLER)


def message(payload: str = "x") -> MessageToStore:
    return MessageToStore(uuid7(), payload, Priority.MEDIUM, 3600, 0)


async def add_queue(storage: PostgresStorage) -> Queue:
    queue = new_queue()
    return await storage.queues.add_queue(queue, created(queue))


async def stored(database: str, queue_id: UUID) -> int:
    admin = await asyncpg.connect(plain_url(database))
    try:
        return int(
            await admin.fetchval("SELECT count(*) FROM queue_message WHERE queue_id = $1", queue_id)
        )
    finally:
        await admin.close()


async def every_operation(storage: PostgresStorage) -> None:
    """One call of every kind of statement: the hot ones, reads, transactions."""
    queue = await add_queue(storage)
    await storage.messages.enqueue(queue.id, [message("a"), message("b")])
    taken = await storage.messages.dequeue(
        queue.id,
        limit=2,
        visibility_timeout_seconds=30,
        dead_letter_batch_size=10,
    )
    first, second = taken.messages
    assert await storage.messages.change_visibility(
        queue.id, Receipt(first.id, first.receipt_handle), 60
    )
    acknowledged = await storage.messages.acknowledge(
        queue.id, [Receipt(m.id, m.receipt_handle) for m in (first, second)]
    )
    assert acknowledged.removed == 2
    replay = await storage.messages.enqueue_idempotent(queue.id, message(), "key", b"fp")
    assert replay.replayed is False
    assert await storage.queues.get_queue(queue.id) is not None
    assert await storage.queues.list_queues(limit=1, after=None, name=queue.name)
    assert len(await storage.state.read_state(queue.id)) == 3
    found = await storage.dead_letters.list_dead_letters(queue.id, limit=5, after=None)
    assert found.items == []
    assert await storage.audit_log.list_audit_records(
        limit=1, after=None, queue_id=queue.id, action=None
    )
    assert await storage.queues.purge_queue(queue.id, created(queue)) == 1
    await storage.maintenance.delete_expired_messages(10)
    assert len(await storage.secrets.cursor_signing_key()) == 32


# -- killed sessions ------------------------------------------------------------------


async def test_after_every_pooled_session_was_killed_the_next_calls_all_succeed(
    engine: AsyncEngine, database: str, application_name: str
) -> None:
    storage = PostgresStorage(engine)
    queue = await add_queue(storage)
    await open_connections(engine, 10)
    assert await kill_sessions(database, application_name) == 10
    # Nothing was in flight, so nothing fails: each dead connection is replaced at
    # checkout — the hot path first (it runs on the driver, no SQLAlchemy in between).
    for _ in range(10):
        await storage.messages.enqueue(queue.id, [message()])
    assert await stored(database, queue.id) == 10
    await open_connections(engine, 10)
    assert await kill_sessions(database, application_name) == 10
    for _ in range(3):
        await every_operation(storage)
    await check_database(engine)


async def test_with_one_session_in_ten_killed_no_call_ever_fails(
    engine: AsyncEngine, database: str, application_name: str
) -> None:
    storage = PostgresStorage(engine)
    queue = await add_queue(storage)
    await open_connections(engine, 10)
    [victim, *_] = await session_pids(database, application_name)
    admin = await asyncpg.connect(plain_url(database))
    try:
        await admin.execute("SELECT pg_terminate_backend($1)", victim)
    finally:
        await admin.close()
    await asyncio.sleep(0.1)
    # The pool hands its connections out in turn: 40 calls meet the dead one 4 times.
    for i in range(20):
        await storage.messages.enqueue(queue.id, [message(str(i))])
        result = await storage.messages.dequeue(
            queue.id,
            limit=1,
            visibility_timeout_seconds=30,
            dead_letter_batch_size=10,
        )
        [delivered] = result.messages
        receipt = Receipt(delivered.id, delivered.receipt_handle)
        assert (await storage.messages.acknowledge(queue.id, [receipt])).removed == 1
    assert await stored(database, queue.id) == 0


class Blocker:
    """An admin transaction holding a lock, so that a statement of the storage waits on
    it: the storage's session can then be killed while the statement is running."""

    def __init__(self, database: str) -> None:
        self._database = database
        self._connection: Any = None
        self._transaction: Any = None

    async def hold(self, sql: str, *args: Any) -> None:
        self._connection = await asyncpg.connect(plain_url(self._database))
        self._transaction = self._connection.transaction()
        await self._transaction.start()
        await self._connection.execute(sql, *args)

    async def release(self, *, commit: bool = False) -> None:
        if commit:
            await self._transaction.commit()
        else:
            await self._transaction.rollback()
        await self._connection.close()


async def kill_while_waiting(
    database: str, application_name: str, call: Callable[[], Awaitable[Any]], blocker: Blocker
) -> asyncio.Task[Any]:
    """Start ``call``, wait until its statement waits on the blocker's lock, kill its
    session; the task of the call (still running: maybe retrying)."""
    task = asyncio.create_task(call())
    admin = await asyncpg.connect(plain_url(database))
    try:
        for _ in range(200):
            pid = await admin.fetchval(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                "AND application_name = $1 AND wait_event_type = 'Lock'",
                application_name,
            )
            if pid is not None:
                break
            await asyncio.sleep(0.02)
        else:
            raise AssertionError("the statement never waited on the lock")
        await admin.execute("SELECT pg_terminate_backend($1)", pid)
    finally:
        await admin.close()
    return task


async def test_an_acknowledgement_cut_off_mid_statement_runs_again_on_a_fresh_connection(
    engine: AsyncEngine, database: str, application_name: str
) -> None:
    storage = PostgresStorage(engine)
    queue = await add_queue(storage)
    await storage.messages.enqueue(queue.id, [message()])
    [delivered] = (
        await storage.messages.dequeue(
            queue.id,
            limit=1,
            visibility_timeout_seconds=60,
            dead_letter_batch_size=10,
        )
    ).messages
    blocker = Blocker(database)
    await blocker.hold("SELECT 1 FROM queue_message WHERE id = $1 FOR UPDATE", delivered.id)
    receipt = Receipt(delivered.id, delivered.receipt_handle)
    task = await kill_while_waiting(
        database,
        application_name,
        lambda: storage.messages.acknowledge(queue.id, [receipt]),
        blocker,
    )
    await asyncio.sleep(0.2)  # the second run waits on the same lock
    assert not task.done()
    await blocker.release()
    assert (await task).removed == 1  # acknowledged once, by the second run
    assert await stored(database, queue.id) == 0


async def test_an_enqueue_cut_off_mid_statement_is_never_run_twice(
    engine: AsyncEngine, database: str, application_name: str
) -> None:
    storage = PostgresStorage(engine)
    queue = await add_queue(storage)
    blocker = Blocker(database)
    # The enqueue's foreign-key check waits for the queue row's lock.
    await blocker.hold("SELECT 1 FROM queue WHERE id = $1 FOR UPDATE", queue.id)
    task = await kill_while_waiting(
        database,
        application_name,
        lambda: storage.messages.enqueue(queue.id, [message("once")]),
        blocker,
    )
    with pytest.raises(DatabaseUnavailable):
        await task  # it may have committed as far as Retsu can tell: not repeated
    await blocker.release()
    assert await stored(database, queue.id) == 0
    await storage.messages.enqueue(queue.id, [message("next")])  # the pool is fine
    assert await stored(database, queue.id) == 1


async def test_a_transaction_cut_off_before_its_commit_runs_again(
    engine: AsyncEngine, database: str, application_name: str
) -> None:
    storage = PostgresStorage(engine)
    queue = new_queue()
    blocker = Blocker(database)
    # The same name, inserted and not yet committed: the add waits on the unique index.
    await blocker.hold(
        "INSERT INTO queue (id, name, visibility_timeout_seconds, max_delivery_attempts,"
        " default_message_ttl_seconds) VALUES ($1, $2, 30, 5, 3600)",
        uuid.uuid4(),
        queue.name,
    )
    task = await kill_while_waiting(
        database, application_name, lambda: storage.queues.add_queue(queue, created(queue)), blocker
    )
    await asyncio.sleep(0.2)
    await blocker.release()  # the other insert rolls back: the name is free
    added = await task
    assert added.id == queue.id
    assert await storage.queues.list_queues(limit=5, after=None, name=queue.name) == [added]
    audit = await storage.audit_log.list_audit_records(
        limit=5, after=None, queue_id=queue.id, action=None
    )
    assert len(audit) == 1  # the killed run committed nothing


# -- a read-only server ----------------------------------------------------------------


async def test_a_read_only_server_is_unavailable_and_none_of_its_sessions_is_kept(
    engine: AsyncEngine, database: str, application_name: str
) -> None:
    storage = PostgresStorage(engine)
    queue = await add_queue(storage)
    await storage.messages.enqueue(queue.id, [message()])
    [delivered] = (
        await storage.messages.dequeue(
            queue.id, limit=1, visibility_timeout_seconds=60, dead_letter_batch_size=10
        )
    ).messages
    await set_read_only(database, True)
    try:
        await open_connections(engine, 4)
        await kill_sessions(database, application_name)  # the pool reconnects: read-only
        # Reads are served; every write is DatabaseUnavailable (503), never the driver's
        # "cannot execute ... in a read-only transaction" (a 500).
        assert await storage.queues.get_queue(queue.id) is not None
        writes: list[Callable[[], Awaitable[Any]]] = [
            lambda: storage.messages.enqueue(queue.id, [message()]),
            lambda: storage.messages.acknowledge(
                queue.id, [Receipt(delivered.id, delivered.receipt_handle)]
            ),
            lambda: add_queue(storage),
            lambda: storage.queues.purge_queue(queue.id, created(queue)),
        ]
        for write in writes:
            with pytest.raises(DatabaseUnavailable):
                await write()
    finally:
        await set_read_only(database, False)
    # Writable again (the new primary): the sessions that refused writes were discarded,
    # not pooled again, so the very next write succeeds.
    await storage.messages.enqueue(queue.id, [message("after")])
    receipt = Receipt(delivered.id, delivered.receipt_handle)
    assert (await storage.messages.acknowledge(queue.id, [receipt])).removed == 1
    assert await stored(database, queue.id) == 1


# -- an unreachable database ----------------------------------------------------------


async def test_a_refused_database_is_database_unavailable_for_every_operation() -> None:
    engine = create_engine(
        f"postgresql://postgres@127.0.0.1:{free_port()}/nowhere", acquire_timeout_seconds=5
    )
    storage = PostgresStorage(engine)
    queue_id = uuid7()
    calls: list[Callable[[], Awaitable[Any]]] = [
        lambda: storage.messages.enqueue(queue_id, [message()]),
        lambda: storage.messages.dequeue(
            queue_id,
            limit=1,
            visibility_timeout_seconds=30,
            dead_letter_batch_size=10,
        ),
        lambda: storage.messages.acknowledge(queue_id, []),
        lambda: storage.queues.get_queue(queue_id),
        lambda: add_queue(storage),
        lambda: storage.queues.purge_queue(queue_id, created(new_queue())),
        lambda: storage.state.read_state(queue_id),
        lambda: storage.maintenance.delete_expired_messages(10),
        lambda: storage.leadership.try_acquire(),
        lambda: storage.secrets.cursor_signing_key(),
    ]
    try:
        for call in calls:
            with pytest.raises(DatabaseUnavailable):
                await call()
        with pytest.raises(OSError):
            await check_database(engine)  # readiness fails
    finally:
        await engine.dispose()


async def test_an_exhausted_pool_is_database_unavailable_after_the_acquire_timeout(
    database: str,
) -> None:
    engine = create_engine(database, max_connections=1, acquire_timeout_seconds=0.5)
    storage = PostgresStorage(engine)
    try:
        held = await engine.connect()
        try:
            started = asyncio.get_running_loop().time()
            with pytest.raises(DatabaseUnavailable):
                await storage.queues.get_queue(uuid7())
            with pytest.raises(DatabaseUnavailable):
                await storage.messages.acknowledge(uuid7(), [])
            assert asyncio.get_running_loop().time() - started >= 1.0
        finally:
            await held.close()
        assert await storage.queues.get_queue(uuid7()) is None  # free again: served
    finally:
        await engine.dispose()


async def test_across_a_restart_calls_fail_only_while_it_is_down_then_resume(
    database: str,
) -> None:
    proxy = PostgresProxy(database).start()
    engine = create_engine(proxy.url, max_connections=4, acquire_timeout_seconds=5)
    storage = PostgresStorage(engine)
    try:
        await open_connections(engine, 4)
        queue = await add_queue(storage)
        with proxy.restarting():
            with pytest.raises(DatabaseUnavailable):
                await storage.messages.enqueue(queue.id, [message()])
            with pytest.raises(DatabaseUnavailable):
                await storage.queues.get_queue(queue.id)
            with pytest.raises(OSError):
                await check_database(engine)
        # Back: no restart of anything, no failed call.
        await every_operation(storage)
        await storage.messages.enqueue(queue.id, [message()])
        await check_database(engine)
    finally:
        await engine.dispose()
        proxy.close()


# -- the LISTEN connection ------------------------------------------------------------


async def wait_for(condition: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        await asyncio.sleep(0.01)


async def queue_row(database: str) -> uuid.UUID:
    """A queue of the database (a waiting poll's queue_waiter row names a real queue, and
    an announcement reaches another process only through that row)."""
    connection = await asyncpg.connect(plain_url(database))
    try:
        queue_id = uuid7()
        await connection.execute(
            "INSERT INTO queue (id, name, visibility_timeout_seconds, max_delivery_attempts, "
            "default_message_ttl_seconds, paused, created_at, updated_at) "
            "VALUES ($1, $2, 30, 5, 3600, false, now(), now())",
            queue_id,
            f"listen-{queue_id}",
        )
    finally:
        await connection.close()
    return queue_id


async def test_a_killed_listen_session_reconnects_and_wakes_its_waiters(
    database: str, application_name: str
) -> None:
    listener = PostgresMessageSignals(database, application_name=application_name)
    announcer = PostgresMessageSignals(database, application_name=f"{application_name}-other")
    await listener.start()
    await announcer.start()
    queue_id = await queue_row(database)
    try:
        with listener.watch(queue_id) as waiting:
            # A first wait registers the queue (queue_waiter), then is woken to claim once
            # more (adapters/postgres/notifications.py).
            assert await waiting.wait(5) is True
            wait = asyncio.create_task(waiting.wait(30))
            await asyncio.sleep(0.05)
            assert await kill_sessions(database, application_name) == 1
            # Reconnected: the waiting poll is woken to look again (a notification may
            # have been missed while nobody listened).
            await asyncio.wait_for(wait, 5)
            assert wait.result() is True
        assert listener.connections == 2 and listener.listening
        for _ in range(3):
            with listener.watch(queue_id) as watch:
                started = asyncio.get_running_loop().time()
                announcer.announce(queue_id)
                assert await watch.wait(5) is True
                assert asyncio.get_running_loop().time() - started < 0.1
    finally:
        await listener.stop()
        await announcer.stop()


async def test_the_listen_connection_rides_out_a_restart_with_backoff(database: str) -> None:
    proxy = PostgresProxy(database).start()
    listener = PostgresMessageSignals(
        proxy.url, reconnect_initial_seconds=0.05, reconnect_max_seconds=0.5
    )
    announcer = PostgresMessageSignals(database, application_name="retsu-restart-announcer")
    await listener.start()
    await announcer.start()
    queue_id = await queue_row(database)
    try:
        assert listener.listening
        attempts = proxy.connections
        with listener.watch(queue_id) as waiting:
            # A first wait registers the queue (queue_waiter), then is woken to claim once
            # more (adapters/postgres/notifications.py).
            assert await waiting.wait(5) is True
            wait = asyncio.create_task(waiting.wait(30))
            proxy.down()
            await wait_for(lambda: not listener.listening, 5, "the loss noticed")
            await asyncio.sleep(1.0)  # refused all along: it keeps trying, backing off
            assert not wait.done()
            proxy.up()
            await asyncio.wait_for(wait, 5)  # reconnected: the waiter looks again
        await wait_for(lambda: listener.listening, 5, "listening again")
        assert proxy.connections > attempts
        with listener.watch(queue_id) as watch:
            started = asyncio.get_running_loop().time()
            announcer.announce(queue_id)
            assert await watch.wait(5) is True
            assert asyncio.get_running_loop().time() - started < 0.1
    finally:
        await listener.stop()
        await announcer.stop()
        proxy.close()
