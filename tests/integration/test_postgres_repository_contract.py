"""The repository contract on PostgreSQL.

PostgreSQL's clock is the server's ``now()``, which tests cannot move. Moving every
stored timestamp back by the same amount is the same thing as time moving forward
(``tests/support/timeshift.py``). Only the rows of the queues a test created are moved,
so other tests sharing the session's database never see time jump.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime
from uuid import UUID

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from retsu.adapters.postgres.attempts import read_attempts
from retsu.adapters.postgres.database import Database
from retsu.adapters.postgres.engine import create_engine
from retsu.adapters.postgres.queues import PostgresQueues
from retsu.adapters.postgres.secrets import PostgresServerSecrets
from retsu.domain.audit import AuditEntry
from retsu.domain.errors import QueueNotFound
from retsu.domain.message import DeadLetter, Priority
from retsu.domain.queue import Queue
from tests.contract.repository_contract import (
    RepositoryContract,
    add,
    audit_of,
    message,
    new_queue,
)
from tests.support.postgres import PostgresStorage, assert_message_invariants
from tests.support.timeshift import shift

pytestmark = pytest.mark.integration

_REWIND_SCHEDULE = sa.text("UPDATE queue_schedule SET next_run_at = :at WHERE id = :id")
_DEAD_LETTERS = sa.text(
    """
    SELECT id, queue_id, payload, priority, delivery_attempts, enqueued_at,
           last_delivered_at, dead_lettered_at, reason, group_key, attempts, last_error
    FROM queue_dead_letter_message
    WHERE queue_id = :queue_id
    ORDER BY dead_lettered_at DESC, enqueue_order DESC
    """
)
_STORED = sa.text("SELECT count(*) FROM queue_message WHERE queue_id = :queue_id")
_KEYS = sa.text("SELECT count(*) FROM idempotency_key WHERE queue_id = :queue_id")


class _RecordingQueues(PostgresQueues):
    """The adapter under test, noting which queues this test created."""

    def __init__(self, database: Database) -> None:
        super().__init__(database)
        self.queue_ids: list[UUID] = []

    async def add_queue(self, new: Queue, audit: AuditEntry) -> Queue:
        stored = await super().add_queue(new, audit)
        self.queue_ids.append(stored.id)
        return stored


class PostgresHarness(PostgresStorage):
    def __init__(self, engine: AsyncEngine) -> None:
        super().__init__(engine)
        self.queues = _RecordingQueues(self.database)

    async def advance(self, seconds: float) -> None:
        async with self.engine.connect() as connection:
            raw = await connection.get_raw_connection()
            await shift(raw.driver_connection, seconds, self.queues.queue_ids)

    async def rewind_schedule(self, schedule_id: UUID, next_run_at: datetime) -> None:
        async with self.engine.begin() as connection:
            await connection.execute(_REWIND_SCHEDULE, {"id": schedule_id, "at": next_run_at})

    async def now(self) -> datetime:
        async with self.engine.connect() as connection:
            moment: datetime = (await connection.execute(sa.text("SELECT now()"))).scalar_one()
        return moment

    async def dead_letter_records(self, queue_id: UUID) -> list[DeadLetter]:
        async with self.engine.connect() as connection:
            rows = (await connection.execute(_DEAD_LETTERS, {"queue_id": queue_id})).all()
        return [
            DeadLetter(
                id=row.id,
                queue_id=row.queue_id,
                payload=row.payload,
                priority=Priority(row.priority),
                delivery_attempts=row.delivery_attempts,
                enqueued_at=row.enqueued_at,
                last_delivered_at=row.last_delivered_at,
                dead_lettered_at=row.dead_lettered_at,
                reason=row.reason,
                group=row.group_key,
                attempts=read_attempts(row.attempts),
                last_error=row.last_error,
            )
            for row in rows
        ]

    async def stored(self, queue_id: UUID) -> int:
        async with self.engine.connect() as connection:
            return int((await connection.execute(_STORED, {"queue_id": queue_id})).scalar_one())

    async def idempotency_keys(self, queue_id: UUID) -> int:
        async with self.engine.connect() as connection:
            return int((await connection.execute(_KEYS, {"queue_id": queue_id})).scalar_one())


@pytest.fixture(scope="module")
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(database_url, max_connections=4)
    yield engine
    await engine.dispose()


class TestPostgresRepository(RepositoryContract):
    KNOWN_GAPS: dict[str, str] = {}

    @pytest.fixture
    async def harness(self, engine: AsyncEngine) -> AsyncIterator[PostgresHarness]:
        harness = PostgresHarness(engine)
        yield harness
        await assert_message_invariants(engine, harness.queues.queue_ids)


# -- PostgreSQL only: races, storage details the port cannot see ---------------------


async def _rollup_rows(engine: AsyncEngine, queue_id: UUID) -> int:
    async with engine.connect() as connection:
        return int(
            (
                await connection.execute(
                    sa.text("SELECT count(*) FROM queue_state_rollup WHERE queue_id = :q"),
                    {"q": queue_id},
                )
            ).scalar_one()
        )


async def test_racing_idempotent_enqueues_store_exactly_one_message(engine: AsyncEngine) -> None:
    harness = PostgresHarness(engine)
    repository = harness.messages
    queue = await add(harness, new_queue())
    attempts = [message("raced") for _ in range(20)]
    results = await asyncio.gather(
        *(repository.enqueue_idempotent(queue.id, m, "race-key", b"same") for m in attempts)
    )
    winners = [r for r in results if not r.replayed]
    assert len(winners) == 1
    assert {r.id for r in results} == {winners[0].id}
    assert await harness.stored(queue.id) == 1


async def test_deleting_a_queue_removes_its_state_counters(engine: AsyncEngine) -> None:
    harness = PostgresHarness(engine)
    queue = await add(harness, new_queue())
    await harness.messages.enqueue(queue.id, [message("a"), message("b", Priority.HIGH)])
    assert await _rollup_rows(engine, queue.id) > 0
    assert await harness.queues.delete_queue(queue.id, audit_of(queue.id))
    assert await _rollup_rows(engine, queue.id) == 0


async def test_a_queue_deleted_under_dequeues_and_enqueues_goes_cleanly(
    engine: AsyncEngine,
) -> None:
    """Deletion yields to message traffic: no consumer or producer call fails with
    anything but QueueNotFound, and no counter or row is left behind."""
    harness = PostgresHarness(engine)
    repository = harness.messages
    queue = await add(harness, new_queue())
    await repository.enqueue(queue.id, [message(str(i)) for i in range(200)])
    await repository.dequeue(
        queue.id,
        limit=50,
        visibility_timeout_seconds=1,
        dead_letter_batch_size=100,
    )
    await harness.advance(2)  # 50 exhausted leases: the next dequeues dead-letter them
    stop = asyncio.Event()

    async def traffic(kind: str) -> None:
        while not stop.is_set():
            try:
                if kind == "dequeue":
                    await repository.dequeue(
                        queue.id,
                        limit=5,
                        visibility_timeout_seconds=30,
                        dead_letter_batch_size=10,
                    )
                else:
                    await repository.enqueue(queue.id, [message("more")])
            except QueueNotFound:
                return

    workers = [asyncio.create_task(traffic(k)) for k in ("dequeue", "dequeue", "enqueue")]
    await asyncio.sleep(0.05)
    assert await harness.queues.delete_queue(queue.id, audit_of(queue.id))
    stop.set()
    await asyncio.gather(*workers)  # any other error fails the test
    assert await harness.stored(queue.id) == 0
    assert await harness.dead_letter_records(queue.id) == []
    assert await _rollup_rows(engine, queue.id) == 0


async def test_the_cursor_key_is_the_one_migrate_stored(engine: AsyncEngine) -> None:
    first = PostgresServerSecrets(Database(engine))
    second = PostgresServerSecrets(Database(engine))
    key = await first.cursor_signing_key()
    assert len(key) == 32
    assert await second.cursor_signing_key() == key
    assert await first.cursor_signing_key() is key  # read once per process
