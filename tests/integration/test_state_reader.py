"""The PostgreSQL state reader: the same numbers as the in-memory rules, cheaply.

The scripted scenario of tests/unit/test_state_rules.py is played against
PostgreSQL (time moved with advance_database_clock) and ``read_all_queues`` /
``read_queue`` must give what the in-memory ``read_state`` gives. Then the refresh
cost is measured with EXPLAIN (ANALYZE, BUFFERS) over a 100,000-message backlog.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

import asyncpg
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from retsu.adapters.postgres.counters import count_stored
from retsu.adapters.postgres.database import Database
from retsu.adapters.postgres.engine import create_engine
from retsu.adapters.postgres.maintenance import PostgresMaintenance
from retsu.adapters.postgres.state import read_all_queues, read_queue
from retsu.application.clean_expired_messages import CleanExpiredMessages
from retsu.domain.message import MessageToStore, Priority
from retsu.domain.state import PriorityState
from tests.conftest import create_database, drop_database
from tests.support.postgres import PINNED_SETTINGS, PostgresStorage, state_query
from tests.support.services import PostgresServer
from tests.support.timeshift import advance_database_clock, plain_url
from tests.unit.test_state_rules import (
    FIRST_ACT,
    SECOND_ACT,
    as_counts,
    assert_counts,
    play_first_act,
    play_second_act,
)

pytestmark = pytest.mark.integration

# Wall-clock time passes while the scenario runs against a real database.
AGE_TOLERANCE_SECONDS = 3.0


@pytest.fixture
async def scratch_url(postgres_server: PostgresServer) -> AsyncIterator[str]:
    url = await create_database(postgres_server)
    yield url
    await drop_database(postgres_server, url)


@pytest.fixture
async def engine(scratch_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(scratch_url, max_connections=4)
    yield engine
    await engine.dispose()


async def insert_queue(
    engine: AsyncEngine, name: str, *, max_attempts: int = 5, visibility: int = 30
) -> UUID:
    """A queue row written directly (the operator use cases are not under test here)."""
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


class PostgresDriver:
    def __init__(self, url: str, engine: AsyncEngine) -> None:
        self.url = url
        self.engine = engine
        self.repository = PostgresStorage(engine)

    async def add_queue(self, name: str, *, max_attempts: int) -> UUID:
        return await insert_queue(self.engine, name, max_attempts=max_attempts)

    async def send(
        self, queue_id: UUID, priority: Priority, *, ttl: int, delay: int = 0, n: int = 1
    ) -> None:
        await self.repository.messages.enqueue(
            queue_id,
            [MessageToStore(uuid.uuid4(), "x", priority, ttl, delay) for _ in range(n)],
        )

    async def receive(
        self, queue_id: UUID, *, n: int, visibility: int, max_attempts: int
    ) -> tuple[int, int]:
        result = await self.repository.messages.dequeue(
            queue_id,
            limit=n,
            visibility_timeout_seconds=visibility,
            dead_letter_batch_size=100,
        )
        return len(result.messages), result.dead_lettered

    async def later(self, seconds: float) -> None:
        await advance_database_clock(self.url, seconds)

    async def read_state(self) -> list[PriorityState]:
        async with self.engine.connect() as connection:
            return await read_all_queues(connection)

    async def read_queue(self, queue_id: UUID) -> list[PriorityState]:
        async with self.engine.connect() as connection:
            return await read_queue(connection, queue_id)


class NoEvents:
    def expired(self, queue_name: str, delivery_history: str, count: int = 1) -> None: ...

    def dead_letters_purged(self, queue_name: str, count: int = 1) -> None: ...


async def test_the_postgres_reader_counts_exactly_like_the_memory_rules(
    scratch_url: str, engine: AsyncEngine
) -> None:
    d = PostgresDriver(scratch_url, engine)
    q = await play_first_act(d)
    states = await d.read_state()
    assert [(s.queue_name, s.priority) for s in states] == list(FIRST_ACT)
    assert_counts(as_counts(states), FIRST_ACT, age_tolerance=AGE_TOLERANCE_SECONDS)

    # One queue: the same rows as in the full read.
    for name, queue_id in q.items():
        one = await d.read_queue(queue_id)
        assert [(s.queue_name, s.priority) for s in one] == [(name, p) for p in Priority][::-1]
        assert_counts(
            as_counts(one),
            {k: v for k, v in FIRST_ACT.items() if k[0] == name},
            age_tolerance=AGE_TOLERANCE_SECONDS,
        )
    assert await d.read_queue(uuid.uuid4()) == []

    await play_second_act(d)
    assert_counts(as_counts(await d.read_state()), SECOND_ACT, age_tolerance=AGE_TOLERANCE_SECONDS)

    # The cleaner removes only messages that already counted in none.
    cleaned = await CleanExpiredMessages(PostgresMaintenance(Database(engine)), NoEvents())(500)
    assert cleaned.removed == 3
    assert_counts(as_counts(await d.read_state()), SECOND_ACT, age_tolerance=AGE_TOLERANCE_SECONDS)


# -- refresh cost ---------------------------------------------------------------------

BACKLOG = 100_000
LEASED = 5_000  # active leases: in flight, not in transition

_BULK = """
INSERT INTO queue_message
    (id, queue_id, payload, priority, state, enqueued_at, expires_at, available_after,
     delivery_attempts, receipt_handle, last_delivered_at)
SELECT gen_random_uuid(), $1, 'payload', 1 + (g % 3), $3::smallint,
       now() - make_interval(secs => $4) + make_interval(secs => g * 0.001),
       now() + make_interval(secs => $5), now() + make_interval(secs => $6),
       $7, CASE WHEN $3 = 2 THEN gen_random_uuid() END,
       CASE WHEN $3 = 2 THEN now() END
FROM generate_series(1, $2) AS g
"""
# Rows written directly are counted as Retsu's own statements count them.
_BULK = (
    f"WITH stored AS ({_BULK} RETURNING queue_id, id, priority, state), "
    f"{count_stored('stored')} SELECT 1"
)


async def bulk(
    connection: asyncpg.Connection,
    queue_id: UUID,
    n: int,
    *,
    state: int = 1,
    age: float = 60,
    expires_in: float = 86_400,
    available_in: float = -1,
    attempts: int = 0,
) -> None:
    await connection.execute(
        _BULK, queue_id, n, state, float(age), float(expires_in), float(available_in), attempts
    )


def plan_nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = [node]
    for child in node.get("Plans", []):
        nodes.extend(plan_nodes(child))
    return nodes


async def explain(
    engine: AsyncEngine, statement: sa.TextClause, *, pinned: bool = False, **params: Any
) -> dict[str, Any]:
    """EXPLAIN on a connection of Retsu's own engine; ``pinned``: with the planner settings
    migration 0005's functions pin (their statements run with those)."""
    async with engine.begin() as connection:
        if pinned:
            for setting in PINNED_SETTINGS:
                await connection.execute(sa.text(f"SET LOCAL {setting}"))
        text = sa.text(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {statement.text}")
        raw = (await connection.execute(text, params)).scalar_one()
    plan = json.loads(raw) if isinstance(raw, str) else raw
    return dict(plan[0])


def cost_of(plan: dict[str, Any]) -> tuple[int, float, list[str]]:
    root = plan["Plan"]
    blocks = int(root["Shared Hit Blocks"]) + int(root["Shared Read Blocks"])
    seq_scans = [
        n.get("Relation Name", "?") for n in plan_nodes(root) if n["Node Type"] == "Seq Scan"
    ]
    return blocks, float(plan["Execution Time"]), seq_scans


def message_rows_visited(plan: dict[str, Any]) -> int:
    """Rows every scan of queue_message produced or filtered out, over all its loops."""
    return sum(
        (int(n.get("Actual Rows", 0)) + int(n.get("Rows Removed by Filter", 0)))
        * int(n.get("Actual Loops", 1))
        for n in plan_nodes(plan["Plan"])
        if n.get("Relation Name") == "queue_message"
    )


async def test_a_refresh_reads_a_bounded_number_of_blocks_whatever_the_backlog(
    scratch_url: str, engine: AsyncEngine, record_property: Any
) -> None:
    queues = [
        await insert_queue(engine, name, max_attempts=3) for name in ("big", "small-1", "small-2")
    ]
    big = queues[0]

    connection = await asyncpg.connect(plain_url(scratch_url))
    try:
        await bulk(connection, big, BACKLOG, age=300)  # the backlog: ready, deliverable
        # Rows in transition, which the corrections do read:
        await bulk(connection, big, 50, age=400, expires_in=-1)  # expired, still READY
        await bulk(connection, big, 50, age=10, available_in=600, state=3)  # delayed
        await bulk(connection, big, 50, state=2, age=500, available_in=-5, attempts=1)  # elapsed
        await bulk(connection, big, LEASED, state=2, age=500, available_in=30, attempts=1)
        for small in queues[1:]:
            await bulk(connection, small, 10)
        analyzed = await connection.fetchval(
            "SELECT coalesce(last_analyze, last_autoanalyze) IS NOT NULL "
            "FROM pg_stat_user_tables WHERE relname = 'queue_message'"
        )
    finally:
        await connection.close()

    async def measure(label: str) -> tuple[int, float]:
        # The function's own query, planned as the function pins it (EXPLAIN cannot see
        # inside a function call).
        plan = await explain(engine, sa.text(state_query(one_queue=False)), pinned=True)
        blocks, ms, seq_scans = cost_of(plan)
        rows = message_rows_visited(plan)
        print(f"ALL_QUEUES {label}: {blocks} shared blocks, {rows} message rows, {ms:.1f} ms")
        assert "queue_message" not in seq_scans, (label, seq_scans)
        # The counter rows (at most 96 per queue) cost one to two buffer visits each, the
        # 150 rows in transition about one each, and the oldest in-flight age reads every
        # active lease (5,000 here, on ~360 pages); the 100,000-message backlog none.
        assert blocks < 600 + LEASED // 5, (label, blocks)
        # Only rows in transition (150 here), the active leases and a few heads: never the
        # backlog.
        assert rows < 1_000 + LEASED, (label, rows)
        record_property(f"refresh_{label}", f"{blocks} blocks, {rows} rows, {ms:.1f} ms")
        return blocks, ms

    # Statistics as left by the bulk load (autovacuum may or may not have run yet).
    await measure(f"fresh load (analyzed={analyzed})")
    connection = await asyncpg.connect(plain_url(scratch_url))
    try:
        await connection.execute("ANALYZE queue_message")
        await connection.execute("ANALYZE queue_state_rollup")
    finally:
        await connection.close()
    await measure("after ANALYZE")

    plan = await explain(engine, sa.text(state_query(one_queue=True)), pinned=True, queue_id=big)
    blocks, ms, seq_scans = cost_of(plan)
    print(f"ONE_QUEUE big: {blocks} shared blocks, {ms:.1f} ms, seq scans {seq_scans}")
    assert "queue_message" not in seq_scans
    assert blocks < 600

    # And the numbers are right.
    async with engine.connect() as conn:
        states = {(s.queue_name, s.priority): s for s in await read_all_queues(conn)}
    for priority in Priority:
        s = states["big", priority]
        # Expired and delayed READY rows are not ready; elapsed leases with attempts left are.
        assert s.ready == share(BACKLOG, priority) + share(50, priority), s
        assert s.in_flight == share(LEASED, priority), s
        assert s.delayed == share(50, priority), s
        assert s.oldest_ready_age_seconds == pytest.approx(500, abs=AGE_TOLERANCE_SECONDS)
        assert s.oldest_in_flight_age_seconds == pytest.approx(500, abs=AGE_TOLERANCE_SECONDS)
        assert states["small-1", priority].ready == share(10, priority)


def share(n: int, priority: Priority) -> int:
    """How many of generate_series(1, n) got this priority (1 + g % 3)."""
    return sum(1 for g in range(1, n + 1) if 1 + g % 3 == int(priority))
