"""Queue history on PostgreSQL (SPEC §3.8): the leader's snapshots, the bucketed read,
the 7-day cleanup.

``queue_history`` (migration 0005) has one row per queue per collection. The interval
counts are differences of the cumulative counters in ``queue_state_rollup`` (enqueued,
delivered, acknowledged, dead_lettered, expired: incremented by the statement that made
each change, in its transaction). Each row keeps the cumulative values it saw
(``*_total``) and stores the difference with the queue's latest row, computed in the one
statement that inserts it: the sum of a queue's interval counts is always its latest
totals, whichever leader wrote which row, whatever collections were missed. A queue's
first row counts everything since the queue was created.

The depth columns are what the leader's state read returned just before (the same
refresh); the totals are read by the insert itself.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from retsu.adapters.postgres.database import Database
from retsu.domain.history import HistoryPoint, Throughput
from retsu.domain.state import PriorityState

_ATTEMPTS = 10
_COUNTS = ("enqueued", "delivered", "acknowledged", "dead_lettered", "expired")

# Queues deleted since the state read are skipped: their rows are locked FOR KEY SHARE
# first (what the foreign key takes anyway), so a concurrent delete waits or is seen.
_SNAPSHOT = sa.text(
    """
    WITH depth AS (
        SELECT * FROM unnest(
            CAST(:queue_ids AS uuid[]), CAST(:ready AS bigint[]), CAST(:in_flight AS bigint[]),
            CAST(:delayed AS bigint[]), CAST(:dead_letters AS bigint[])
        ) AS d(queue_id, ready, in_flight, delayed, dead_letters)
    ), live AS (
        SELECT q.id FROM queue AS q
        WHERE q.id IN (SELECT depth.queue_id FROM depth)
        ORDER BY q.id
        FOR KEY SHARE
    ), totals AS (
        SELECT r.queue_id, sum(r.enqueued) AS enqueued, sum(r.delivered) AS delivered,
               sum(r.acknowledged) AS acknowledged, sum(r.dead_lettered) AS dead_lettered,
               sum(r.expired) AS expired
        FROM queue_state_rollup AS r
        WHERE r.queue_id IN (SELECT live.id FROM live)
        GROUP BY r.queue_id
    ), now_totals AS (
        SELECT depth.*, coalesce(t.enqueued, 0) AS enqueued_total,
               coalesce(t.delivered, 0) AS delivered_total,
               coalesce(t.acknowledged, 0) AS acknowledged_total,
               coalesce(t.dead_lettered, 0) AS dead_lettered_total,
               coalesce(t.expired, 0) AS expired_total
        FROM depth JOIN live ON live.id = depth.queue_id
        LEFT JOIN totals AS t ON t.queue_id = depth.queue_id
    )
    INSERT INTO queue_history (
        queue_id, at, ready, in_flight, delayed, dead_letters,
        enqueued, delivered, acknowledged, dead_lettered, expired,
        enqueued_total, delivered_total, acknowledged_total, dead_lettered_total, expired_total)
    SELECT n.queue_id, now(), n.ready, n.in_flight, n.delayed, n.dead_letters,
           n.enqueued_total - coalesce(p.enqueued_total, 0),
           n.delivered_total - coalesce(p.delivered_total, 0),
           n.acknowledged_total - coalesce(p.acknowledged_total, 0),
           n.dead_lettered_total - coalesce(p.dead_lettered_total, 0),
           n.expired_total - coalesce(p.expired_total, 0),
           n.enqueued_total, n.delivered_total, n.acknowledged_total, n.dead_lettered_total,
           n.expired_total
    FROM now_totals AS n
    LEFT JOIN LATERAL (
        SELECT h.enqueued_total, h.delivered_total, h.acknowledged_total,
               h.dead_lettered_total, h.expired_total
        FROM queue_history AS h
        WHERE h.queue_id = n.queue_id
        ORDER BY h.at DESC
        LIMIT 1
    ) AS p ON true
    ON CONFLICT (queue_id, at) DO NOTHING
    """
)

# Epoch-aligned buckets of :width seconds (domain.history.downsample): counts summed, the
# depth and time of each bucket's latest snapshot, per queue. Walks the primary key
# (queue_id, at) once per queue asked for.
_READ = sa.text(
    """
    SELECT h.queue_id, max(h.at) AS at,
           (array_agg(h.ready ORDER BY h.at DESC))[1] AS ready,
           (array_agg(h.in_flight ORDER BY h.at DESC))[1] AS in_flight,
           (array_agg(h.delayed ORDER BY h.at DESC))[1] AS delayed,
           (array_agg(h.dead_letters ORDER BY h.at DESC))[1] AS dead_letters,
           sum(h.enqueued) AS enqueued, sum(h.delivered) AS delivered,
           sum(h.acknowledged) AS acknowledged, sum(h.dead_lettered) AS dead_lettered,
           sum(h.expired) AS expired
    FROM queue_history AS h
    WHERE h.queue_id = ANY (CAST(:queue_ids AS uuid[])) AND h.at >= :since
    GROUP BY h.queue_id, floor(extract(epoch FROM h.at) / :width)
    ORDER BY 1, 2
    """
)

_DELETE_OLD = sa.text(
    """
    WITH doomed AS (
        SELECT queue_id, at FROM queue_history
        WHERE at < now() - make_interval(secs => :age_seconds)
        ORDER BY at
        LIMIT :batch_size
        FOR UPDATE SKIP LOCKED
    )
    DELETE FROM queue_history AS h USING doomed
    WHERE h.queue_id = doomed.queue_id AND h.at = doomed.at
    """
)


async def insert_snapshot(connection: AsyncConnection, state: Sequence[PriorityState]) -> None:
    """One history row per queue of ``state`` (one statement; the caller commits)."""
    depth: dict[UUID, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for p in state:
        row = depth[p.queue_id]
        row[0] += p.ready
        row[1] += p.in_flight
        row[2] += p.delayed
        row[3] += p.dead_letters
    if not depth:
        return
    queue_ids = sorted(depth)
    await connection.execute(
        _SNAPSHOT,
        {
            "queue_ids": queue_ids,
            "ready": [depth[q][0] for q in queue_ids],
            "in_flight": [depth[q][1] for q in queue_ids],
            "delayed": [depth[q][2] for q in queue_ids],
            "dead_letters": [depth[q][3] for q in queue_ids],
        },
    )


class PostgresHistory:
    """Implements QueueHistoryReader and HistoryMaintenance (the leader writes through
    its own session: ``insert_snapshot``)."""

    def __init__(self, database: Database) -> None:
        self._database = database

    async def read_history(
        self, queue_id: UUID, *, since: datetime, bucket_seconds: int
    ) -> list[HistoryPoint]:
        histories = await self._read([queue_id], since, bucket_seconds, "read_history")
        return histories[queue_id]

    async def read_histories(
        self, queue_ids: Sequence[UUID], *, since: datetime, bucket_seconds: int
    ) -> dict[UUID, list[HistoryPoint]]:
        return await self._read(queue_ids, since, bucket_seconds, "read_histories")

    async def _read(
        self, queue_ids: Sequence[UUID], since: datetime, bucket_seconds: int, operation: str
    ) -> dict[UUID, list[HistoryPoint]]:
        histories: dict[UUID, list[HistoryPoint]] = {queue_id: [] for queue_id in queue_ids}
        if not queue_ids:
            return histories
        parameters = {"queue_ids": list(queue_ids), "since": since, "width": float(bucket_seconds)}

        async def read(connection: AsyncConnection) -> dict[UUID, list[HistoryPoint]]:
            for row in (await connection.execute(_READ, parameters)).all():
                histories[row.queue_id].append(
                    HistoryPoint(
                        at=row.at,
                        ready=int(row.ready),
                        in_flight=int(row.in_flight),
                        delayed=int(row.delayed),
                        dead_letters=int(row.dead_letters),
                        counts=Throughput(*(int(getattr(row, name)) for name in _COUNTS)),
                    )
                )
            return histories

        return await self._database.read(read, operation=operation)

    async def delete_history_older_than(self, age_seconds: int, batch_size: int) -> int:
        async def batch(connection: AsyncConnection) -> int:
            result = await connection.execute(
                _DELETE_OLD, {"age_seconds": float(age_seconds), "batch_size": batch_size}
            )
            return int(result.rowcount)

        return await self._database.yielding(
            batch, operation="delete_history_older_than", attempts=_ATTEMPTS, repeatable=True
        )
