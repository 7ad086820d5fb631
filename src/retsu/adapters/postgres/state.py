"""Reading exact queue state: the rollup plus index-bounded time corrections.

The counting is the server-side function ``retsu_queue_state`` (migrations 0005, 0009): the
rollup's physical counts corrected, through one index each, for what time changed without a
write (expired READY rows, READY rows a lowered attempts limit left with none, ended leases,
ended delays), plus the kept completed messages and the groups with a live message
(migration 0009; counted on one priority's row of each queue). No part reads the backlog
itself; its cost grows with the number of queues and of rows in transition, not with the
number of messages stored."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from retsu.adapters.postgres.database import Database
from retsu.domain.message import Priority
from retsu.domain.state import PriorityState

# The counting itself is the server-side function of migration 0005 (its plans pinned, so
# they do not depend on statistics and survive transaction pooling).
ALL_QUEUES = sa.text("SELECT * FROM retsu_queue_state(NULL)")
ONE_QUEUE = sa.text("SELECT * FROM retsu_queue_state(:queue_id)")
# Several queues in one round trip: the one-queue function per id, in the order given.
SOME_QUEUES = sa.text(
    "SELECT s.* FROM unnest(CAST(:queue_ids AS uuid[])) WITH ORDINALITY AS q(id, o) "
    "CROSS JOIN LATERAL retsu_queue_state(q.id) AS s ORDER BY q.o, s.priority DESC"
)


def _rows_to_state(rows: Sequence[Any]) -> list[PriorityState]:
    return [
        PriorityState(
            queue_id=row.queue_id,
            queue_name=row.queue_name,
            priority=Priority(row.priority),
            ready=max(int(row.ready), 0),
            in_flight=max(int(row.in_flight), 0),
            delayed=int(row.delayed),
            dead_letters=int(row.dead_letters),
            oldest_ready_age_seconds=max(float(row.oldest_ready_age_seconds), 0.0),
            oldest_in_flight_age_seconds=max(float(row.oldest_in_flight_age_seconds), 0.0),
            completed=int(row.completed),
            groups=int(row.groups),
        )
        for row in rows
    ]


async def read_all_queues(connection: AsyncConnection) -> list[PriorityState]:
    """Every queue, all three priorities each (zeros included). One statement, one snapshot."""
    return _rows_to_state((await connection.execute(ALL_QUEUES)).all())


async def read_queue(connection: AsyncConnection, queue_id: UUID) -> list[PriorityState]:
    """One queue's three priorities; empty when the queue does not exist."""
    return _rows_to_state((await connection.execute(ONE_QUEUE, {"queue_id": queue_id})).all())


class PostgresQueueState:
    """Implements QueueStateReader (``GET /v1/queues/{id}``); the collector reads every
    queue through its leader session instead (``leadership.py``)."""

    def __init__(self, database: Database) -> None:
        self._database = database

    async def read_state(self, queue_id: UUID) -> list[PriorityState]:
        async def read(connection: AsyncConnection) -> list[PriorityState]:
            return await read_queue(connection, queue_id)

        return await self._database.read(read, operation="read_state")

    async def read_states(self, queue_ids: Sequence[UUID]) -> list[PriorityState]:
        if not queue_ids:
            return []

        async def read(connection: AsyncConnection) -> list[PriorityState]:
            rows = (await connection.execute(SOME_QUEUES, {"queue_ids": list(queue_ids)})).all()
            return _rows_to_state(rows)

        return await self._database.read(read, operation="read_states")
