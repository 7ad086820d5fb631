"""Reading exact queue state from the rollup plus index-bounded time corrections.

The rollup gives physical READY / IN_FLIGHT / dead-letter counts per queue and
priority without touching messages. Time turns some of those into something else
without a write, so each correction reads only the rows in that transition, each
through an index: expired ready rows (expiry index), ready rows still inside their
delay (delayed index), elapsed leases (lease index, per queue). The oldest ages
come from the first qualifying row in delivery order (order index). No query
here reads the backlog itself; its cost grows with the number of queues and of
rows in transition, not with the number of messages stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from retsu.adapters.postgres.database import Database
from retsu.domain.message import Priority
from retsu.domain.state import PriorityState

# Plans must not depend on statistics: right after a bulk load the table has none,
# the planner falls back to default selectivities and (measured) walked the whole
# READY backlog to count 50 expired rows, and sorted every active lease to find the
# oldest one. So each part is written so that only its intended index can serve it:
#  * expired: a MATERIALIZED walk of queue_message_expiry_idx in expiry order (no
#    other index has expires_at, and no outer condition can be pushed into it);
#  * delayed: the partial queue_message_delayed_idx, whose predicate it repeats;
#  * elapsed: the partial queue_message_lease_idx, per queue;
#  * heads: queue_message_order_idx in delivery order, LIMIT 1. Their time tests are
#    written as ``col + interval '0' <op> now()`` on purpose: an expression is a
#    filter, never an index condition, so no index on those columns can look like a
#    cheaper start than the ordered walk that stops at the first qualifying row.
_STATE = """
WITH scope AS (
    SELECT id, name, max_delivery_attempts FROM queue {queue_filter}
), rollup AS (
    SELECT r.queue_id, r.priority, sum(r.ready) AS ready, sum(r.in_flight) AS in_flight,
           sum(r.dead_letters) AS dead_letters
    FROM scope JOIN queue_state_rollup AS r ON r.queue_id = scope.id
    GROUP BY r.queue_id, r.priority
), expired AS MATERIALIZED (
    SELECT queue_id, priority, state
    FROM queue_message
    WHERE expires_at <= now()
    ORDER BY expires_at
), expired_ready AS (
    SELECT queue_id, priority, count(*) AS n
    FROM expired
    WHERE state = 1 {expired_filter}
    GROUP BY queue_id, priority
), delayed AS (
    SELECT m.queue_id, m.priority, count(*) AS n
    FROM queue_message AS m
    WHERE m.state = 1 AND m.delivery_attempts = 0 AND m.available_after > m.enqueued_at
      AND m.available_after > now() {message_filter}
    GROUP BY m.queue_id, m.priority
), elapsed AS (
    SELECT m.queue_id, m.priority, count(*) AS n,
           count(*) FILTER (WHERE m.retryable) AS retryable,
           min(m.enqueued_at) FILTER (WHERE m.retryable) AS oldest_retryable
    FROM scope CROSS JOIN LATERAL (
        SELECT queue_id, priority, enqueued_at,
               expires_at > now() AND delivery_attempts < scope.max_delivery_attempts AS retryable
        FROM queue_message
        WHERE queue_id = scope.id AND state = 2 AND available_after <= now()
    ) AS m
    GROUP BY m.queue_id, m.priority
), heads AS (
    SELECT scope.id AS queue_id, p.priority,
        (SELECT enqueued_at FROM queue_message
         WHERE queue_id = scope.id AND state = 1 AND priority = p.priority
           AND available_after + interval '0' <= now() AND expires_at + interval '0' > now()
         ORDER BY enqueue_order LIMIT 1) AS oldest_ready,
        (SELECT enqueued_at FROM queue_message
         WHERE queue_id = scope.id AND state = 2 AND priority = p.priority
           AND available_after + interval '0' > now()
         ORDER BY enqueue_order LIMIT 1) AS oldest_in_flight
    FROM scope CROSS JOIN (VALUES (1::smallint), (2::smallint), (3::smallint)) AS p(priority)
)
SELECT scope.id AS queue_id, scope.name AS queue_name, heads.priority,
       coalesce(r.ready, 0) - coalesce(x.n, 0) - coalesce(d.n, 0) + coalesce(e.retryable, 0)
           AS ready,
       coalesce(r.in_flight, 0) - coalesce(e.n, 0) AS in_flight,
       coalesce(d.n, 0) AS delayed,
       coalesce(r.dead_letters, 0) AS dead_letters,
       coalesce(extract(epoch FROM now() - least(heads.oldest_ready, e.oldest_retryable)), 0)
           AS oldest_ready_age_seconds,
       coalesce(extract(epoch FROM now() - heads.oldest_in_flight), 0)
           AS oldest_in_flight_age_seconds
FROM scope
JOIN heads ON heads.queue_id = scope.id
LEFT JOIN rollup AS r ON r.queue_id = scope.id AND r.priority = heads.priority
LEFT JOIN expired_ready AS x ON x.queue_id = scope.id AND x.priority = heads.priority
LEFT JOIN delayed AS d ON d.queue_id = scope.id AND d.priority = heads.priority
LEFT JOIN elapsed AS e ON e.queue_id = scope.id AND e.priority = heads.priority
ORDER BY scope.name, heads.priority DESC
"""

ALL_QUEUES = sa.text(_STATE.format(queue_filter="", expired_filter="", message_filter=""))
ONE_QUEUE = sa.text(
    _STATE.format(
        queue_filter="WHERE id = :queue_id",
        expired_filter="AND queue_id = :queue_id",
        message_filter="AND m.queue_id = :queue_id",
    )
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

        return await self._database.read(read)
