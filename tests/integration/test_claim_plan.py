"""The claim's plan does not depend on statistics, and its cost does not grow with the
backlog, the messages in flight or the delayed messages at the head of the queue (SPEC §6).

The claim runs inside ``retsu_dequeue`` (migrations 0005, 0009: its fast path) with its
planner settings pinned and as a generic plan. EXPLAIN cannot look inside a function call,
so the test prepares the function's own claim statement with those settings and explains the
generic plan, on a freshly loaded backlog whose statistics still describe an empty table
(the situation that once made the planner sort every candidate row on every dequeue), and
again after ANALYZE."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from tests.conftest import create_database, drop_database
from tests.support.postgres import HOT_PATH_MIGRATION, PINNED_SETTINGS
from tests.support.services import PostgresServer
from tests.support.timeshift import plain_url

pytestmark = pytest.mark.integration

BACKLOG = 100_000
DELAYED_AT_HEAD = 30_000
IN_FLIGHT = 5_000

# Rows as the enqueue and claim functions write them, counted as they count them.
_LOAD = """
WITH stored AS (
    INSERT INTO queue_message
        (id, queue_id, payload, priority, state, enqueued_at, expires_at, available_after,
         delivery_attempts, receipt_handle, last_delivered_at)
    SELECT gen_random_uuid(), $1, repeat('x', 512), $3::smallint, $4::smallint, now(),
           now() + interval '1 day', now() + make_interval(secs => $5), $6,
           CASE WHEN $4 = 2 THEN gen_random_uuid() END, CASE WHEN $4 = 2 THEN now() END
    FROM generate_series(1, $2) AS g
    RETURNING queue_id, id, priority, state
)
INSERT INTO queue_state_rollup AS c (queue_id, priority, shard, ready, in_flight, delayed)
SELECT queue_id, priority, retsu_shard(id), count(*) FILTER (WHERE state = 1),
       count(*) FILTER (WHERE state = 2), count(*) FILTER (WHERE state = 3)
FROM stored GROUP BY 1, 2, 3
ON CONFLICT (queue_id, priority, shard) DO UPDATE
SET ready = c.ready + excluded.ready, in_flight = c.in_flight + excluded.in_flight,
    delayed = c.delayed + excluded.delayed
"""


def claim_statement() -> str:
    """The claim statement inside ``retsu_dequeue``, its variables made parameters."""
    body = HOT_PATH_MIGRATION.DEQUEUE
    statement = body[body.index("FOR r IN") + len("FOR r IN") : body.index("\n    LOOP")]
    for name, number in (
        ("p_queue_id", 1),
        ("p_limit", 2),
        ("v_visibility", 3),
        ("p_batch", 4),
        ("p_reason", 5),
        ("v_max", 6),
        ("p_consumer", 7),
    ):
        statement = re.sub(rf"\b{name}\b", f"${number}", statement)
    return statement


def plan_nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = [node]
    for child in node.get("Plans", []):
        nodes.extend(plan_nodes(child))
    return nodes


@pytest.fixture
async def loaded(postgres_server: PostgresServer) -> AsyncIterator[tuple[str, uuid.UUID]]:
    url = await create_database(postgres_server)
    connection = await asyncpg.connect(plain_url(url))
    queue_id = uuid.uuid4()
    try:
        await connection.execute(
            "INSERT INTO queue (id, name, visibility_timeout_seconds, max_delivery_attempts, "
            "default_message_ttl_seconds) VALUES ($1, 'big', 30, 5, 86400)",
            queue_id,
        )
        # Delayed HIGH messages ahead of everything, the ready backlog (LOW), leases.
        await connection.execute(_LOAD, queue_id, DELAYED_AT_HEAD, 3, 3, 3600.0, 0)
        await connection.execute(_LOAD, queue_id, BACKLOG, 1, 1, 0.0, 0)
        await connection.execute(_LOAD, queue_id, IN_FLIGHT, 2, 2, 600.0, 1)
        yield url, queue_id
    finally:
        await connection.close()
        await drop_database(postgres_server, url)


async def explain_claim(url: str, queue_id: uuid.UUID, limit: int) -> dict[str, Any]:
    connection = await asyncpg.connect(plain_url(url))
    try:
        async with connection.transaction():
            for setting in PINNED_SETTINGS:
                await connection.execute(f"SET LOCAL {setting}")
            await connection.execute(
                f"PREPARE claim (uuid, integer, integer, integer, text, integer, text) AS "
                f"{claim_statement()}"
            )
            raw = await connection.fetchval(
                "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "
                f"EXECUTE claim ('{queue_id}', {limit}, 30, 100, 'test', 5, 'bench')"
            )
            plan = json.loads(raw)[0]
            raise _RollBack(plan)
    except _RollBack as rolled_back:
        return rolled_back.plan
    finally:
        await connection.close()


class _RollBack(Exception):
    def __init__(self, plan: dict[str, Any]) -> None:
        super().__init__("roll back")
        self.plan = plan


@pytest.mark.parametrize("limit", [1, 100])
async def test_a_claim_reads_a_bounded_number_of_buffers_before_and_after_analyze(
    loaded: tuple[str, uuid.UUID], limit: int, record_property: Any
) -> None:
    url, queue_id = loaded
    for label in ("fresh load", "after ANALYZE"):
        plan = await explain_claim(url, queue_id, limit)
        root = plan["Plan"]
        blocks = int(root["Shared Hit Blocks"]) + int(root["Shared Read Blocks"])
        nodes = plan_nodes(root)
        scans = {
            n.get("Index Name") or n["Node Type"]
            for n in nodes
            if n.get("Relation Name") == "queue_message"
        }
        rows_read = sum(
            (int(n.get("Actual Rows", 0)) + int(n.get("Rows Removed by Filter", 0)))
            * int(n.get("Actual Loops", 1))
            for n in nodes
            if n.get("Relation Name") == "queue_message"
        )
        print(f"claim of {limit}, {label}: {blocks} blocks, {rows_read} message rows, {scans}")
        record_property(f"claim_{limit}_{label}", f"{blocks} blocks, {rows_read} rows")
        assert "Seq Scan" not in scans and "Bitmap Heap Scan" not in scans, scans
        # The ready index is walked in order and stops after `limit` rows; the delayed
        # HIGH rows at the head and the leases are never visited (each of their indexes is
        # probed for ended delays and leases, and has none).
        assert rows_read <= 3 * limit + 10, (label, rows_read)
        # Measured 44 for one message, ~1,850 for 100: each claimed row is rewritten with
        # its primary-key, enqueue-order and lease index entries (about 18 buffers); the
        # 135,000 other rows cost nothing.
        assert blocks < 60 + 25 * limit, (label, blocks)
        connection = await asyncpg.connect(plain_url(url))
        try:
            await connection.execute("ANALYZE queue_message")
        finally:
            await connection.close()
