"""The raw-SQL floor: Retsu's own statements, straight from asyncpg, no HTTP.

The enqueue, claim and delete statements are taken from Retsu's PostgreSQL
repository (its SQLAlchemy ``text()`` objects) and compiled for asyncpg here, so
the floor always runs exactly the SQL that Retsu runs. Each operation is one
statement on a pooled connection with the same session settings as Retsu's
engine; what the floor leaves out is everything around the SQL: HTTP, routing,
validation, the queue lookup, the explicit transaction and the ORM layer.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import asyncpg as asyncpg_dialect

from bench.common import (
    DEFAULT_TTL_SECONDS,
    PRIORITY_VALUES,
    OpError,
    ScenarioPool,
    payload,
    retsu_prefill,
    retsu_prefill_delayed,
    retsu_prefill_grouped,
    retsu_reset,
)
from bench.retsu_system import migrate


@dataclass(frozen=True)
class Compiled:
    sql: str
    order: tuple[str, ...]

    def args(self, **values: Any) -> list[Any]:
        return [values[name] for name in self.order]


def compile_for_asyncpg(statement: sa.TextClause) -> Compiled:
    """``:name`` parameters become ``$n``; ``order`` says which value goes where."""
    compiled = statement.compile(dialect=asyncpg_dialect.dialect())  # type: ignore[no-untyped-call]
    return Compiled(str(compiled), tuple(compiled.positiontup or ()))


@dataclass(frozen=True)
class Statements:
    enqueue: Compiled
    enqueue_one: Compiled
    dequeue: Compiled
    acknowledge: Compiled
    server_settings: dict[str, str]
    dead_letter_batch_size: int
    dead_letter_reason: str

    @classmethod
    def from_retsu(cls) -> Statements:
        from retsu.adapters.postgres import engine, messages
        from retsu.domain import message

        return cls(
            enqueue=compile_for_asyncpg(messages._ENQUEUE),
            enqueue_one=compile_for_asyncpg(messages._ENQUEUE_ONE),
            dequeue=compile_for_asyncpg(messages._DEQUEUE),
            acknowledge=compile_for_asyncpg(messages._ACKNOWLEDGE),
            server_settings={
                **getattr(engine, "SERVER_SETTINGS", {}),
                "application_name": "retsu-bench-floor",
            },
            dead_letter_batch_size=message.DEAD_LETTER_BATCH_SIZE,
            dead_letter_reason=message.REASON_MAX_DELIVERY_ATTEMPTS_EXHAUSTED,
        )


def _new_id() -> uuid.UUID:
    from retsu.adapters.ids import uuid7

    return uuid7()


def _new_ids(count: int) -> list[uuid.UUID]:
    """A batch's ids as Retsu's API makes them (sharing one counter shard)."""
    from retsu.adapters.ids import uuid7_batch

    return uuid7_batch(count)


class FloorOps:
    """One concurrent client of the floor; connections come from the shared pool."""

    def __init__(self, system: FloorSystem) -> None:
        self._pool = system.pool
        self._queue_id = system.queue_id
        self._body = system.payload
        self._batch_size = system.batch_size
        s = system.statements
        self._enqueue_sql = s.enqueue.sql
        self._enqueue = s.enqueue
        self._enqueue_one = s.enqueue_one
        self._dequeue_sql = s.dequeue.sql
        self._ack = s.acknowledge
        self._dequeue_one = s.dequeue.args(
            queue_id=system.queue_id,
            limit=1,
            visibility_timeout=system.visibility_timeout,
            elapsed_batch=s.dead_letter_batch_size,
            reason=s.dead_letter_reason,
            consumer=None,
        )
        self._dequeue_many = s.dequeue.args(
            queue_id=system.queue_id,
            limit=system.batch_size,
            visibility_timeout=system.visibility_timeout,
            elapsed_batch=s.dead_letter_batch_size,
            reason=s.dead_letter_reason,
            consumer=None,
        )
        self._batch_priorities = [PRIORITY_VALUES[i % 3] for i in range(system.batch_size)]

    async def enqueue(self, index: int) -> int:
        # One message: the statement the API sends for one (its values as scalars).
        args = self._enqueue_one.args(
            queue_id=self._queue_id,
            id=_new_id(),
            payload=self._body,
            priority=PRIORITY_VALUES[index % 3],
            ttl=DEFAULT_TTL_SECONDS,
            delay=0,
            group=None,
            schedule_id=None,
        )
        await self._pool.execute(self._enqueue_one.sql, *args)
        return 1

    async def enqueue_batch(self) -> int:
        n = self._batch_size
        args = self._enqueue.args(
            queue_id=self._queue_id,
            ids=_new_ids(n),
            payloads=[self._body] * n,
            priorities=self._batch_priorities,
            ttls=[DEFAULT_TTL_SECONDS] * n,
            delays=[0] * n,
            groups=None,
            schedule_ids=None,
        )
        await self._pool.execute(self._enqueue_sql, *args)
        return n

    async def dequeue(self, limit: int | None) -> Sequence[Any]:
        args = self._dequeue_one if limit is None else self._dequeue_many
        rows = await self._pool.fetch(self._dequeue_sql, *args)
        if not rows or not rows[-1]["queue_found"]:
            raise OpError("dequeue: queue not found")
        return [(row["id"], row["receipt_handle"]) for row in rows if row["id"] is not None]

    async def ack(self, items: Sequence[Any]) -> None:
        args = self._ack.args(
            queue_id=self._queue_id,
            ids=[item[0] for item in items],
            handles=[item[1] for item in items],
            results=None,
        )
        await self._pool.execute(self._ack.sql, *args)

    def close(self) -> None:
        return None


class FloorSystem:
    key = "floor"
    name = "raw-SQL floor (asyncpg)"
    batch_size = 100
    visibility_timeout = 30
    max_attempts = 5

    def __init__(self, database_url: str, *, pool_size: int) -> None:
        self.database_url = database_url
        self.pool_size = pool_size
        self.statements = Statements.from_retsu()
        self.payload = payload()
        self._pools = ScenarioPool(
            database_url, pool_size, server_settings=self.statements.server_settings
        )
        self._sql: asyncpg.Connection | None = None
        self._queue_id: uuid.UUID | None = None
        self._queues = 0

    @property
    def pool(self) -> asyncpg.Pool:
        return self._pools.pool

    async def ready(self) -> None:
        await self._pools.ready()

    async def rest(self) -> None:
        await self._pools.rest()

    @property
    def queue_id(self) -> uuid.UUID:
        assert self._queue_id is not None
        return self._queue_id

    async def start(self) -> None:
        import asyncio

        await asyncio.to_thread(migrate, self.database_url)
        self._sql = await asyncpg.connect(self.database_url)
        await self.ready()  # the runner rests it until its scenario

    async def stop(self) -> None:
        if self._sql is not None:
            await self._sql.close()
            self._sql = None
        await self._pools.rest()

    async def new_queue(self, *, max_in_flight: int | None = None) -> None:
        assert self._sql is not None
        await retsu_reset(self._sql)
        self._queues += 1
        self._queue_id = _new_id()
        await self._sql.execute(
            "INSERT INTO queue (id, name, visibility_timeout_seconds, max_delivery_attempts, "
            "default_message_ttl_seconds, paused, created_at, updated_at, max_in_flight) "
            "VALUES ($1, $2, $3, $4, $5, false, now(), now(), $6)",
            self._queue_id,
            f"bench-{self._queues}",
            self.visibility_timeout,
            self.max_attempts,
            DEFAULT_TTL_SECONDS,
            max_in_flight,
        )

    async def open_ops(self, count: int) -> list[FloorOps]:
        return [FloorOps(self) for _ in range(count)]

    async def analyze(self) -> None:
        assert self._sql is not None
        await self._sql.execute("ANALYZE queue_message")

    async def prefill(self, count: int) -> None:
        assert self._sql is not None
        await retsu_prefill(self._sql, self.queue_id, count, self.payload)

    async def prefill_delayed(self, count: int, seconds: int) -> None:
        assert self._sql is not None
        await retsu_prefill_delayed(self._sql, self.queue_id, count, self.payload, seconds)

    async def prefill_grouped(self, count: int, groups: int) -> None:
        assert self._sql is not None
        await retsu_prefill_grouped(self._sql, self.queue_id, count, groups, self.payload)


# -- the SQL interface (SPEC §3.13) ---------------------------------------------------------

_PRIORITY_NAMES = {3: "HIGH", 2: "MEDIUM", 1: "LOW"}
# What an application runs: the public function, by queue id, in its own transaction (a
# single call is its own transaction; a batch is 100 calls in one, pipelined by asyncpg's
# executemany).
SQL_ENQUEUE = "SELECT retsu.enqueue($1, $2, $3, $4)"


class SqlInterfaceOps(FloorOps):
    """``retsu.enqueue`` from asyncpg, as an application calls it; dequeue and ack as the
    floor's (the SQL interface has no dequeue)."""

    def __init__(self, system: FloorSystem) -> None:
        super().__init__(system)
        self._queue = str(system.queue_id)
        self._batch_args = [
            (self._queue, self._body, _PRIORITY_NAMES[PRIORITY_VALUES[i % 3]], DEFAULT_TTL_SECONDS)
            for i in range(self._batch_size)
        ]

    async def enqueue(self, index: int) -> int:
        priority = _PRIORITY_NAMES[PRIORITY_VALUES[index % 3]]
        await self._pool.fetchval(
            SQL_ENQUEUE, self._queue, self._body, priority, DEFAULT_TTL_SECONDS
        )
        return 1

    async def enqueue_batch(self) -> int:
        async with self._pool.acquire() as connection, connection.transaction():
            await connection.executemany(SQL_ENQUEUE, self._batch_args)
        return self._batch_size


class SqlInterfaceSystem(FloorSystem):
    key = "sql"
    name = "retsu.enqueue (asyncpg)"
    # Enqueue only: the comparison of SPEC §7b is with the floor's enqueue.
    scenarios = ("enqueue-1", "enqueue-100")

    async def open_ops(self, count: int) -> list[FloorOps]:
        return [SqlInterfaceOps(self) for _ in range(count)]
