"""The minimal floor: the smallest correct PostgreSQL queue, straight from asyncpg.

The physical limit of a PostgreSQL queue on this machine (SPEC §7b), so every run shows
how far Retsu's own statements are from it. One table, one index, no triggers, no
counters, no queue row, one queue per database:

* enqueue: one ``INSERT`` (one row, or 100 through ``unnest``), committed durably;
* claim: ``UPDATE … FROM (SELECT … ORDER BY priority DESC, id LIMIT n FOR UPDATE SKIP
  LOCKED)``: the head of the index in delivery order, leased for 30 s (the lease column is
  not indexed, so the update is HOT);
* acknowledge: ``DELETE`` by key, only while the lease handed out is still the row's (its
  lease end is the receipt: a redelivery gets another one).

Claims and deletes commit with ``synchronous_commit`` off, as Retsu's do (a claim or an
acknowledgement lost in a crash is a redelivery), enqueues durably, as Retsu's do: the
same durability, so the ratio compares work, not guarantees. What it does not do, and
Retsu does: exact statistics, several queues, a pause gate, delivery attempts and dead
letters, expiry, receipt handles that cannot be guessed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg

from bench.common import PRIORITY_VALUES, ScenarioPool, payload

SCHEMA = """
CREATE TABLE minimal_message (
    id bigint GENERATED ALWAYS AS IDENTITY,
    priority smallint NOT NULL,
    payload text NOT NULL,
    lease_until timestamptz  -- NULL: ready
);
-- The one index: delivery order. Acknowledgements find their row through it too.
CREATE UNIQUE INDEX minimal_message_order ON minimal_message (priority DESC, id);
"""

ENQUEUE_ONE = "INSERT INTO minimal_message (priority, payload) VALUES ($1, $2)"
ENQUEUE_MANY = (
    "INSERT INTO minimal_message (priority, payload) "
    "SELECT * FROM unnest($1::smallint[], $2::text[])"
)
# The same commit rule as Retsu's claim: asynchronous for this transaction only.
CLAIM = """
WITH durability AS (SELECT set_config('synchronous_commit', 'off', true))
UPDATE minimal_message AS m SET lease_until = now() + interval '30 seconds'
FROM (
    SELECT priority, id FROM minimal_message
    WHERE lease_until IS NULL OR lease_until <= now()
    ORDER BY priority DESC, id
    LIMIT $1
    FOR UPDATE SKIP LOCKED
) AS c, durability
WHERE m.priority = c.priority AND m.id = c.id
RETURNING m.priority, m.id, m.payload, m.lease_until
"""
ACKNOWLEDGE = """
WITH durability AS (SELECT set_config('synchronous_commit', 'off', true))
DELETE FROM minimal_message AS m
USING unnest($1::smallint[], $2::bigint[], $3::timestamptz[]) AS a(priority, id, lease),
      durability
WHERE m.priority = a.priority AND m.id = a.id AND m.lease_until = a.lease
"""
PREFILL = """
INSERT INTO minimal_message (priority, payload)
SELECT (ARRAY[3, 2, 1])[1 + i % 3]::smallint, $1 FROM generate_series(1, $2::integer) AS i
"""
PREFILL_DELAYED = """
INSERT INTO minimal_message (priority, payload, lease_until)
SELECT 3, $1, now() + make_interval(secs => $3) FROM generate_series(1, $2::integer)
"""


class MinimalOps:
    def __init__(self, system: MinimalSystem) -> None:
        self._pool = system.pool
        self._body = system.payload
        n = system.batch_size
        self._batch = ([PRIORITY_VALUES[i % 3] for i in range(n)], [system.payload] * n)
        self._batch_size = n

    async def enqueue(self, index: int) -> int:
        await self._pool.execute(ENQUEUE_ONE, PRIORITY_VALUES[index % 3], self._body)
        return 1

    async def enqueue_batch(self) -> int:
        await self._pool.execute(ENQUEUE_MANY, *self._batch)
        return self._batch_size

    async def dequeue(self, limit: int | None) -> Sequence[Any]:
        rows = await self._pool.fetch(CLAIM, limit or 1)
        return [(row["priority"], row["id"], row["lease_until"]) for row in rows]

    async def ack(self, items: Sequence[Any]) -> None:
        await self._pool.execute(
            ACKNOWLEDGE,
            [item[0] for item in items],
            [item[1] for item in items],
            [item[2] for item in items],
        )

    def close(self) -> None:
        return None


class MinimalSystem:
    key = "minimal"
    name = "minimal floor (1 index, asyncpg)"
    batch_size = 100

    def __init__(self, database_url: str, *, pool_size: int) -> None:
        self.database_url = database_url
        self.pool_size = pool_size
        self.payload = payload()
        self._pools = ScenarioPool(
            database_url, pool_size, server_settings={"application_name": "retsu-bench-minimal"}
        )
        self._sql: asyncpg.Connection | None = None

    @property
    def pool(self) -> asyncpg.Pool:
        return self._pools.pool

    async def ready(self) -> None:
        await self._pools.ready()

    async def rest(self) -> None:
        await self._pools.rest()

    async def start(self) -> None:
        self._sql = await asyncpg.connect(self.database_url)
        await self._sql.execute(SCHEMA)
        await self.ready()  # the runner rests it until its scenario

    async def stop(self) -> None:
        await self._pools.rest()
        if self._sql is not None:
            await self._sql.close()
            self._sql = None

    async def new_queue(self) -> None:
        assert self._sql is not None
        await self._sql.execute("DELETE FROM minimal_message")
        await self._sql.execute("VACUUM minimal_message")

    async def open_ops(self, count: int) -> list[MinimalOps]:
        return [MinimalOps(self) for _ in range(count)]

    async def analyze(self) -> None:
        assert self._sql is not None
        await self._sql.execute("ANALYZE minimal_message")

    async def prefill(self, count: int) -> None:
        assert self._sql is not None
        await self._sql.execute(PREFILL, self.payload, count)

    async def prefill_delayed(self, count: int, seconds: int) -> None:
        assert self._sql is not None
        await self._sql.execute(PREFILL_DELAYED, self.payload, count, float(seconds))
