"""The repository contract on PostgreSQL.

PostgreSQL's clock is the server's ``now()``, which tests cannot move. Moving every
stored timestamp back by the same amount is the same thing as time moving forward.
Only the rows of the queues a test created are moved, so other tests sharing the
session's database never see time jump.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from uuid import UUID

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from retsu.adapters.postgres.engine import create_engine
from retsu.adapters.postgres.repository import PostgresRepository
from retsu.domain.message import DeadLetter, Priority
from retsu.domain.queue import Queue
from tests.contract.repository_contract import RepositoryContract

pytestmark = pytest.mark.integration

_SHIFT_MESSAGES = sa.text(
    """
    UPDATE queue_message
    SET enqueued_at = enqueued_at - make_interval(secs => :seconds),
        expires_at = expires_at - make_interval(secs => :seconds),
        available_after = available_after - make_interval(secs => :seconds),
        last_delivered_at = last_delivered_at - make_interval(secs => :seconds)
    WHERE queue_id = ANY(CAST(:queue_ids AS uuid[]))
    """
)
_SHIFT_DEAD_LETTERS = sa.text(
    """
    UPDATE queue_dead_letter_message
    SET enqueued_at = enqueued_at - make_interval(secs => :seconds),
        last_delivered_at = last_delivered_at - make_interval(secs => :seconds),
        dead_lettered_at = dead_lettered_at - make_interval(secs => :seconds)
    WHERE queue_id = ANY(CAST(:queue_ids AS uuid[]))
    """
)
_DEAD_LETTERS = sa.text(
    """
    SELECT id, queue_id, payload, priority, delivery_attempts, enqueued_at,
           last_delivered_at, dead_lettered_at, reason
    FROM queue_dead_letter_message
    WHERE queue_id = :queue_id
    ORDER BY dead_lettered_at DESC, enqueue_order DESC
    """
)
_STORED = sa.text("SELECT count(*) FROM queue_message WHERE queue_id = :queue_id")


class _RecordingRepository(PostgresRepository):
    """The adapter under test, noting which queues this test created."""

    def __init__(self, engine: AsyncEngine) -> None:
        super().__init__(engine)
        self.queue_ids: list[UUID] = []

    async def add_queue(self, new: Queue) -> Queue:
        stored = await super().add_queue(new)
        self.queue_ids.append(stored.id)
        return stored


class PostgresHarness:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.repository = _RecordingRepository(engine)

    async def advance(self, seconds: float) -> None:
        parameters = {"seconds": float(seconds), "queue_ids": self.repository.queue_ids}
        async with self.engine.begin() as connection:
            await connection.execute(_SHIFT_MESSAGES, parameters)
            await connection.execute(_SHIFT_DEAD_LETTERS, parameters)

    async def dead_letters(self, queue_id: UUID) -> list[DeadLetter]:
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
            )
            for row in rows
        ]

    async def stored(self, queue_id: UUID) -> int:
        async with self.engine.connect() as connection:
            return int((await connection.execute(_STORED, {"queue_id": queue_id})).scalar_one())


@pytest.fixture(scope="module")
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(database_url, max_connections=4)
    yield engine
    await engine.dispose()


class TestPostgresRepository(RepositoryContract):
    KNOWN_GAPS: dict[str, str] = {}

    @pytest.fixture
    def harness(self, engine: AsyncEngine) -> PostgresHarness:
        return PostgresHarness(engine)
