"""The sharded state rollup stays exact under a randomized, concurrent workload.

After enqueues, batch enqueues, dequeues, acknowledgements, dead-lettering and
expiry (with the cleaner running concurrently), the rollup summed per queue and
priority — and per shard — equals a full COUNT over the message and dead-letter
tables. Also: a retry-only update writes no rollup row, a counter never goes
negative (the transaction fails instead), and migration 0002 backfills what was
stored before it.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar
from uuid import UUID

import asyncpg
import pytest
import sqlalchemy as sa
from alembic import command
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from retsu.adapters.postgres.database import Database
from retsu.adapters.postgres.engine import create_engine
from retsu.adapters.postgres.errors import sqlstate
from retsu.adapters.postgres.maintenance import PostgresMaintenance
from retsu.adapters.postgres.migrations import alembic_config
from retsu.domain.message import MessageToStore, Priority, Receipt
from tests.conftest import create_database, drop_database
from tests.support.postgres import PostgresStorage
from tests.support.services import PostgresServer
from tests.support.timeshift import advance_database_clock, plain_url

pytestmark = pytest.mark.integration

T = TypeVar("T")

SHARD = "(get_byte(uuid_send(id), 15) & 31)"

ROLLUP_BY_SHARD = """
SELECT queue_id, priority, shard, sum(ready) AS ready, sum(in_flight) AS in_flight,
       sum(dead_letters) AS dead_letters
FROM queue_state_rollup GROUP BY 1, 2, 3
"""
COUNTS_BY_SHARD = f"""
SELECT queue_id, priority, shard, sum(ready) AS ready, sum(in_flight) AS in_flight,
       sum(dead_letters) AS dead_letters
FROM (
    SELECT queue_id, priority, {SHARD} AS shard,
           (state = 1)::int AS ready, (state = 2)::int AS in_flight, 0 AS dead_letters
    FROM queue_message
    UNION ALL
    SELECT queue_id, priority, {SHARD}, 0, 0, 1 FROM queue_dead_letter_message
) AS physical
GROUP BY 1, 2, 3
"""
ROLLUP_BY_PRIORITY = """
SELECT queue_id, priority, sum(ready) AS ready, sum(in_flight) AS in_flight,
       sum(dead_letters) AS dead_letters
FROM queue_state_rollup GROUP BY 1, 2
"""
COUNTS_BY_PRIORITY = """
SELECT queue_id, priority, sum(ready) AS ready, sum(in_flight) AS in_flight,
       sum(dead_letters) AS dead_letters
FROM (
    SELECT queue_id, priority, count(*) FILTER (WHERE state = 1) AS ready,
           count(*) FILTER (WHERE state = 2) AS in_flight, 0 AS dead_letters
    FROM queue_message GROUP BY 1, 2
    UNION ALL
    SELECT queue_id, priority, 0, 0, count(*) FROM queue_dead_letter_message GROUP BY 1, 2
) AS physical
GROUP BY 1, 2
"""


def _table(rows: list[asyncpg.Record], key: int) -> dict[tuple[Any, ...], tuple[int, int, int]]:
    """Rows keyed by their first ``key`` columns; all-zero counters left out."""
    table = {}
    for row in rows:
        counts = (int(row["ready"]), int(row["in_flight"]), int(row["dead_letters"]))
        if counts != (0, 0, 0):
            table[tuple(row)[:key]] = counts
    return table


async def assert_rollup_exact(url: str) -> dict[tuple[Any, ...], tuple[int, int, int]]:
    connection = await asyncpg.connect(plain_url(url))
    try:
        async with connection.transaction(isolation="repeatable_read"):  # one snapshot
            rollup = _table(await connection.fetch(ROLLUP_BY_PRIORITY), 2)
            counted = _table(await connection.fetch(COUNTS_BY_PRIORITY), 2)
            rollup_shards = _table(await connection.fetch(ROLLUP_BY_SHARD), 3)
            counted_shards = _table(await connection.fetch(COUNTS_BY_SHARD), 3)
            negative = await connection.fetchval(
                "SELECT count(*) FROM queue_state_rollup "
                "WHERE ready < 0 OR in_flight < 0 OR dead_letters < 0"
            )
    finally:
        await connection.close()
    assert rollup == counted
    assert rollup_shards == counted_shards
    assert negative == 0
    return counted


async def insert_queue(
    engine: AsyncEngine, name: str, *, max_attempts: int = 5, visibility: int = 30
) -> UUID:
    queue_id = uuid.uuid4()
    async with engine.begin() as connection:
        await connection.execute(
            sa.text(
                "INSERT INTO queue (id, name, visibility_timeout_seconds, max_delivery_attempts,"
                " default_message_ttl_seconds) VALUES (:id, :name, :visibility, :attempts, 3600)"
            ),
            {"id": queue_id, "name": name, "visibility": visibility, "attempts": max_attempts},
        )
    return queue_id


@pytest.fixture
async def scratch_url(postgres_server: PostgresServer) -> AsyncIterator[str]:
    url = await create_database(postgres_server)
    yield url
    await drop_database(postgres_server, url)


@pytest.fixture
async def engine(scratch_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(scratch_url, max_connections=12)
    yield engine
    await engine.dispose()


class Workload:
    """Random queue traffic through the real repository and cleaner."""

    def __init__(self, engine: AsyncEngine, queues: dict[UUID, int], rng: random.Random) -> None:
        self.repository = PostgresStorage(engine)
        self.maintenance = PostgresMaintenance(Database(engine))
        self.queues = queues  # id -> max delivery attempts
        self.rng = rng
        self.ops: Counter[str] = Counter()

    def _message(self) -> MessageToStore:
        rng = self.rng
        ttl = rng.choice((8, 25, 600, 600))
        delay = rng.choice((0, 0, 0, 5)) if ttl > 5 else 0
        return MessageToStore(
            uuid.uuid4(), "p" * rng.randint(1, 40), rng.choice(list(Priority)), ttl, delay
        )

    async def _deadlock_tolerant(self, kind: str, operation: Awaitable[T]) -> T | None:
        """The repository retries a transaction PostgreSQL aborted as a deadlock victim,
        so no deadlock may reach a caller; the maintenance cleaner (which gives up on
        a lock after 200 ms and retries its batch) is the only other writer here."""
        return await operation

    async def enqueue(self) -> None:
        queue_id = self.rng.choice(list(self.queues))
        n = self.rng.choice((1, 1, 2, 5, 20))
        messages = [self._message() for _ in range(n)]
        await self._deadlock_tolerant(
            "enqueue", self.repository.messages.enqueue(queue_id, messages)
        )
        self.ops["batch enqueue" if n > 1 else "enqueue"] += 1

    async def dequeue_and_maybe_ack(self) -> None:
        queue_id = self.rng.choice(list(self.queues))
        result = await self._deadlock_tolerant(
            "dequeue",
            self.repository.messages.dequeue(
                queue_id,
                limit=self.rng.choice((1, 3, 10)),
                visibility_timeout_seconds=self.rng.choice((5, 5, 60)),
                max_delivery_attempts=self.queues[queue_id],
                dead_letter_batch_size=self.rng.choice((2, 100)),
            ),
        )
        if result is None:
            return
        self.ops["dequeue"] += 1
        self.ops["dead-lettered"] += result.dead_lettered
        self.ops["delivered"] += len(result.messages)
        acked = [m for m in result.messages if self.rng.random() < 0.5]
        if acked:
            receipts = [Receipt(m.id, m.receipt_handle) for m in acked]
            removed = await self._deadlock_tolerant(
                "acknowledge", self.repository.messages.acknowledge(queue_id, receipts)
            )
            self.ops["acknowledged"] += removed or 0

    async def clean(self) -> None:
        removed = await self.maintenance.delete_expired_messages(self.rng.choice((3, 50)))
        self.ops["expired"] += sum(group.count for group in removed)

    async def purge_dead_letters(self) -> None:
        removed = await self.maintenance.delete_dead_letters_older_than(3600, 10)
        self.ops["dead letters purged"] += sum(group.count for group in removed)

    async def burst(self, actors: int, steps: int) -> None:
        """``actors`` concurrent tasks, each doing ``steps`` random operations."""

        async def actor() -> None:
            for _ in range(steps):
                roll = self.rng.random()
                if roll < 0.35:
                    await self.enqueue()
                elif roll < 0.85:
                    await self.dequeue_and_maybe_ack()
                elif roll < 0.95:
                    await self.clean()
                else:
                    await self.purge_dead_letters()

        await asyncio.gather(*(actor() for _ in range(actors)))


async def test_the_rollup_equals_a_full_count_after_a_random_concurrent_workload(
    scratch_url: str, engine: AsyncEngine
) -> None:
    rng = random.Random(20261129)
    queues = {
        await insert_queue(engine, "once", max_attempts=1): 1,
        await insert_queue(engine, "twice", max_attempts=2): 2,
        await insert_queue(engine, "often", max_attempts=5): 5,
    }
    work = Workload(engine, queues, rng)
    # Start with a backlog, so the dequeuers have something to fight over.
    await asyncio.gather(*(work.enqueue() for _ in range(30)))
    await assert_rollup_exact(scratch_url)

    for round_ in range(5):
        await work.burst(actors=12, steps=15)
        await assert_rollup_exact(scratch_url)
        # Leases end (retries, exhausted messages to dead-letter), delays end, some expire.
        await advance_database_clock(scratch_url, rng.choice((6, 10, 30)))
        await work.burst(actors=12, steps=10)
        await assert_rollup_exact(scratch_url)
        if round_ == 2:
            await advance_database_clock(scratch_url, 3601)  # dead letters past retention

    # Everything expires; the cleaners empty the store; every counter is back to zero.
    await advance_database_clock(scratch_url, 4000)
    while sum(g.count for g in await work.maintenance.delete_expired_messages(500)):
        pass
    while sum(g.count for g in await work.maintenance.delete_dead_letters_older_than(3600, 500)):
        pass
    assert await assert_rollup_exact(scratch_url) == {}

    print("workload:", dict(work.ops))
    for kind in ("enqueue", "batch enqueue", "dequeue", "delivered", "acknowledged"):
        assert work.ops[kind] > 0, kind
    assert work.ops["dead-lettered"] > 0
    assert work.ops["expired"] > 0
    assert work.ops["dead letters purged"] > 0


async def test_a_retry_only_reclaim_writes_no_rollup_row(
    scratch_url: str, engine: AsyncEngine
) -> None:
    queue_id = await insert_queue(engine, "retry", max_attempts=3)
    repository = PostgresStorage(engine)
    await repository.messages.enqueue(
        queue_id, [MessageToStore(uuid.uuid4(), "x", Priority.HIGH, 600, 0)]
    )

    async def dequeue() -> int:
        result = await repository.messages.dequeue(
            queue_id,
            limit=1,
            visibility_timeout_seconds=5,
            max_delivery_attempts=3,
            dead_letter_batch_size=100,
        )
        [message] = result.messages
        return message.delivery_attempts

    assert await dequeue() == 1  # READY -> IN_FLIGHT: the counters move
    await advance_database_clock(scratch_url, 6)

    connection = await asyncpg.connect(plain_url(scratch_url))
    try:
        versions = "SELECT shard, xmin::text, ctid::text FROM queue_state_rollup ORDER BY shard"
        before = await connection.fetch(versions)
        assert await dequeue() == 2  # IN_FLIGHT -> IN_FLIGHT: a retry, claimed directly
        after = await connection.fetch(versions)
    finally:
        await connection.close()
    assert [tuple(r) for r in after] == [tuple(r) for r in before]  # no row version written
    counts = await assert_rollup_exact(scratch_url)
    assert counts == {(queue_id, 3): (0, 1, 0)}


async def test_a_counter_that_would_go_negative_fails_the_transaction(
    scratch_url: str, engine: AsyncEngine
) -> None:
    queue_id = await insert_queue(engine, "negative")
    repository = PostgresStorage(engine)
    ids = [uuid.uuid4(), uuid.uuid4()]
    await repository.messages.enqueue(
        queue_id, [MessageToStore(i, "x", Priority.LOW, 600, 0) for i in ids]
    )
    connection = await asyncpg.connect(plain_url(scratch_url))
    try:
        shard_of = f"SELECT {SHARD} FROM queue_message WHERE id = $1"
        # A counter row that says zero while its message exists...
        shard = await connection.fetchval(shard_of, ids[0])
        await connection.execute(
            "UPDATE queue_state_rollup SET ready = 0 "
            "WHERE queue_id = $1 AND priority = 1 AND shard = $2",
            queue_id,
            shard,
        )
        with pytest.raises(asyncpg.exceptions.CheckViolationError):
            await connection.execute("DELETE FROM queue_message WHERE id = $1", ids[0])
        # ... and a counter row that is missing altogether.
        shard = await connection.fetchval(shard_of, ids[1])
        await connection.execute(
            "DELETE FROM queue_state_rollup WHERE queue_id = $1 AND priority = 1 AND shard = $2",
            queue_id,
            shard,
        )
        with pytest.raises(asyncpg.exceptions.CheckViolationError):
            await connection.execute("DELETE FROM queue_message WHERE id = $1", ids[1])
        # Both deletes were rolled back with their failed counter update.
        assert await connection.fetchval("SELECT count(*) FROM queue_message") == 2
    finally:
        await connection.close()


async def test_migration_0002_backfills_rows_stored_before_it(
    postgres_server: PostgresServer,
) -> None:
    url = await create_database(postgres_server, migrate=False)
    try:
        await asyncio.to_thread(command.upgrade, alembic_config(url), "0001")
        connection = await asyncpg.connect(plain_url(url))
        try:
            # Nothing but raw rows: no trigger may count them (there are none yet; and
            # user triggers are disabled in case a later revision of 0001 adds some).
            await connection.execute("ALTER TABLE queue_message DISABLE TRIGGER USER")
            await connection.execute("ALTER TABLE queue_dead_letter_message DISABLE TRIGGER USER")
            queues = []
            for name in ("left", "right"):
                queue_id = uuid.uuid4()
                await connection.execute(
                    "INSERT INTO queue (id, name, visibility_timeout_seconds, "
                    "max_delivery_attempts, default_message_ttl_seconds) "
                    "VALUES ($1, $2, 30, 5, 3600)",
                    queue_id,
                    name,
                )
                queues.append(queue_id)
            await connection.execute(
                """
                INSERT INTO queue_message
                    (id, queue_id, payload, priority, state, enqueued_at, expires_at,
                     available_after, delivery_attempts, receipt_handle)
                SELECT gen_random_uuid(), ($1::uuid[])[1 + g % 2], 'x', 1 + g % 3,
                       CASE WHEN g % 5 = 0 THEN 2 ELSE 1 END, now(), now() + interval '1 h',
                       CASE WHEN g % 5 = 0 THEN now() + interval '10 min' ELSE now() END,
                       CASE WHEN g % 5 = 0 THEN 1 ELSE 0 END,
                       CASE WHEN g % 5 = 0 THEN gen_random_uuid() END
                FROM generate_series(1, 3000) AS g
                """,
                queues,
            )
            await connection.execute(
                """
                INSERT INTO queue_dead_letter_message
                    (id, queue_id, enqueue_order, payload, priority, delivery_attempts,
                     enqueued_at, dead_lettered_at, reason)
                SELECT gen_random_uuid(), ($1::uuid[])[1 + g % 2], g, 'x', 1 + g % 3, 5,
                       now(), now(), 'MAX_DELIVERY_ATTEMPTS_EXHAUSTED'
                FROM generate_series(1, 700) AS g
                """,
                queues,
            )
            await connection.execute("ALTER TABLE queue_message ENABLE TRIGGER USER")
            await connection.execute("ALTER TABLE queue_dead_letter_message ENABLE TRIGGER USER")
        finally:
            await connection.close()

        await asyncio.to_thread(command.upgrade, alembic_config(url), "head")

        counts = await assert_rollup_exact(url)
        assert sum(c[0] for c in counts.values()) == 2400
        assert sum(c[1] for c in counts.values()) == 600
        assert sum(c[2] for c in counts.values()) == 700
        assert len(counts) == 6  # two queues, three priorities each

        # And from here on the triggers keep it exact.
        engine = create_engine(url, max_connections=2)
        try:
            repository = PostgresStorage(engine)
            await repository.messages.enqueue(
                queues[0], [MessageToStore(uuid.uuid4(), "x", Priority.HIGH, 60, 0)]
            )
            result = await repository.messages.dequeue(
                queues[1],
                limit=10,
                visibility_timeout_seconds=30,
                max_delivery_attempts=5,
                dead_letter_batch_size=10,
            )
            assert len(result.messages) == 10
        finally:
            await engine.dispose()
        after = await assert_rollup_exact(url)
        assert sum(c[0] for c in after.values()) == 2400 + 1 - 10
        assert sum(c[1] for c in after.values()) == 600 + 10
    finally:
        await drop_database(postgres_server, url)


async def test_concurrent_dequeues_that_dead_letter_never_fail_with_a_deadlock(
    scratch_url: str, engine: AsyncEngine
) -> None:
    queue_id = await insert_queue(engine, "contended", max_attempts=1)
    repository = PostgresStorage(engine)

    def messages(n: int) -> list[MessageToStore]:
        return [MessageToStore(uuid.uuid4(), "x", Priority(1 + i % 3), 600, 0) for i in range(n)]

    await repository.messages.enqueue(queue_id, messages(600))
    for _ in range(6):
        await repository.messages.dequeue(
            queue_id,
            limit=100,
            visibility_timeout_seconds=1,
            max_delivery_attempts=1,
            dead_letter_batch_size=100,
        )
    await advance_database_clock(scratch_url, 2)  # 600 exhausted leases to dead-letter
    await repository.messages.enqueue(queue_id, messages(300))
    failures: Counter[str] = Counter()
    failed = asyncio.Event()  # the first failure ends the run: each deadlock costs 1 s

    async def consumer() -> None:
        while not failed.is_set():
            try:
                result = await repository.messages.dequeue(
                    queue_id,
                    limit=3,
                    visibility_timeout_seconds=600,
                    max_delivery_attempts=1,
                    dead_letter_batch_size=3,
                )
            except DBAPIError as error:
                failures[sqlstate(error) or "?"] += 1
                failed.set()
                return
            if not result.messages and not result.dead_lettered:
                return

    await asyncio.gather(*(consumer() for _ in range(10)))
    await assert_rollup_exact(scratch_url)
    assert failures == {}, f"dequeue failed: {dict(failures)}"
