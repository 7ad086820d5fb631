"""Consumers on PostgreSQL (SPEC §3.7): the coalesced write, the listing, the cleanup.

``queue_consumer`` (migration 0005) holds one row per queue and consumer name. API
processes never write it per dequeue: each flushes what it saw every 5 s as one
``INSERT … SELECT FROM unnest(…) ON CONFLICT DO UPDATE`` (``application/track_consumers``).
Rows are written in key order, so two processes flushing the same consumers lock them in
the same order and never deadlock; a queue deleted meanwhile is skipped (its row is
locked ``FOR KEY SHARE`` first, like the foreign key would, so a concurrent delete either
waits for the flush or is seen by it).

The list walks ``queue_consumer_seen_idx`` (last_seen_at DESC, queue_id, name), or
``queue_consumer_queue_seen_idx`` for one queue, from the cursor's position: a page costs
``limit`` rows whatever the number of consumers. The health filter is a range of
``last_seen_at`` on the same index.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from retsu.adapters.postgres.database import Database
from retsu.domain.consumer import ConsumerPosition, ConsumerRecord, ConsumerSighting, SeenBetween

_ATTEMPTS = 10

_RECORD = sa.text(
    """
    WITH seen AS (
        SELECT * FROM unnest(
            CAST(:queue_ids AS uuid[]), CAST(:names AS text[]),
            CAST(:firsts AS timestamptz[]), CAST(:lasts AS timestamptz[]),
            CAST(:deliveries AS bigint[])
        ) AS s(queue_id, name, first_seen_at, last_seen_at, deliveries)
    ), live AS (
        SELECT q.id FROM queue AS q
        WHERE q.id IN (SELECT seen.queue_id FROM seen)
        ORDER BY q.id
        FOR KEY SHARE
    )
    INSERT INTO queue_consumer AS c (queue_id, name, first_seen_at, last_seen_at, deliveries)
    SELECT seen.queue_id, seen.name, seen.first_seen_at, seen.last_seen_at, seen.deliveries
    FROM seen JOIN live ON live.id = seen.queue_id
    ORDER BY seen.queue_id, seen.name
    ON CONFLICT (queue_id, name) DO UPDATE
    SET first_seen_at = least(c.first_seen_at, excluded.first_seen_at),
        last_seen_at = greatest(c.last_seen_at, excluded.last_seen_at),
        deliveries = c.deliveries + excluded.deliveries
    """
)

_LIST = """
    SELECT c.queue_id, q.name AS queue_name, c.name, c.first_seen_at, c.last_seen_at,
           c.deliveries
    FROM queue_consumer AS c JOIN queue AS q ON q.id = c.queue_id
    WHERE true {filters}
    ORDER BY c.last_seen_at DESC, c.queue_id, c.name
    LIMIT :limit
"""
# Consumers per queue within a health's bounds (the console's overview): through
# queue_consumer_seen_idx for the healthy ones, the few seen in the last 30 s.
_COUNT = """
    SELECT c.queue_id, count(*) AS consumers
    FROM queue_consumer AS c
    WHERE true {filters}
    GROUP BY c.queue_id
"""
_QUEUE = "AND c.queue_id = :queue_id"
_SINCE = "AND c.last_seen_at >= :since"
_BEFORE = "AND c.last_seen_at < :before"
_AFTER = (
    "AND (c.last_seen_at < :after_at OR (c.last_seen_at = :after_at "
    "AND (c.queue_id, c.name) > (CAST(:after_queue_id AS uuid), CAST(:after_name AS text))))"
)

# Oldest first through queue_consumer_seen_idx; SKIP LOCKED so a flush is never waited on.
_DELETE_UNSEEN = sa.text(
    """
    WITH doomed AS (
        SELECT queue_id, name FROM queue_consumer
        WHERE last_seen_at < now() - make_interval(secs => :age_seconds)
        ORDER BY last_seen_at
        LIMIT :batch_size
        FOR UPDATE SKIP LOCKED
    )
    DELETE FROM queue_consumer AS c USING doomed
    WHERE c.queue_id = doomed.queue_id AND c.name = doomed.name
    """
)


class PostgresConsumers:
    """Implements ConsumerStore and ConsumerMaintenance."""

    def __init__(self, database: Database) -> None:
        self._database = database

    async def record_consumers(self, sightings: Sequence[ConsumerSighting]) -> None:
        if not sightings:
            return
        parameters = {
            "queue_ids": [s.queue_id for s in sightings],
            "names": [s.name for s in sightings],
            "firsts": [s.first_seen_at for s in sightings],
            "lasts": [s.last_seen_at for s in sightings],
            "deliveries": [s.deliveries for s in sightings],
        }

        async def write(connection: AsyncConnection) -> None:
            await connection.execute(_RECORD, parameters)

        # Not repeatable (deliveries are added): a write whose commit may have happened
        # is reported unavailable, and the tracker keeps its counts for the next flush.
        await self._database.transaction(write, operation="record_consumers")

    async def list_consumers(
        self,
        *,
        limit: int,
        after: ConsumerPosition | None,
        queue_id: UUID | None,
        seen: SeenBetween,
    ) -> list[ConsumerRecord]:
        filters: list[str] = []
        parameters: dict[str, Any] = {"limit": limit}
        if queue_id is not None:
            filters.append(_QUEUE)
            parameters["queue_id"] = queue_id
        if seen.since is not None:
            filters.append(_SINCE)
            parameters["since"] = seen.since
        if seen.before is not None:
            filters.append(_BEFORE)
            parameters["before"] = seen.before
        if after is not None:
            filters.append(_AFTER)
            parameters.update(
                after_at=after.last_seen_at, after_queue_id=after.queue_id, after_name=after.name
            )
        statement = sa.text(_LIST.format(filters=" ".join(filters)))

        async def read(connection: AsyncConnection) -> list[ConsumerRecord]:
            rows = (await connection.execute(statement, parameters)).all()
            return [
                ConsumerRecord(
                    queue_id=row.queue_id,
                    queue_name=row.queue_name,
                    name=row.name,
                    first_seen_at=row.first_seen_at,
                    last_seen_at=row.last_seen_at,
                    deliveries=int(row.deliveries),
                )
                for row in rows
            ]

        return await self._database.read(read, operation="list_consumers")

    async def count_consumers(self, *, seen: SeenBetween) -> dict[UUID, int]:
        filters: list[str] = []
        parameters: dict[str, Any] = {}
        if seen.since is not None:
            filters.append(_SINCE)
            parameters["since"] = seen.since
        if seen.before is not None:
            filters.append(_BEFORE)
            parameters["before"] = seen.before
        statement = sa.text(_COUNT.format(filters=" ".join(filters)))

        async def read(connection: AsyncConnection) -> dict[UUID, int]:
            rows = (await connection.execute(statement, parameters)).all()
            return {row.queue_id: int(row.consumers) for row in rows}

        return await self._database.read(read, operation="count_consumers")

    async def delete_consumers_not_seen_for(self, age_seconds: int, batch_size: int) -> int:
        async def batch(connection: AsyncConnection) -> int:
            result = await connection.execute(
                _DELETE_UNSEEN, {"age_seconds": float(age_seconds), "batch_size": batch_size}
            )
            return int(result.rowcount)

        return await self._database.yielding(
            batch, operation="delete_consumers_not_seen_for", attempts=_ATTEMPTS, repeatable=True
        )
