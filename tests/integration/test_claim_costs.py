"""What migration 0016 took out of the fast path's claim (SPEC §7 "every hot-path query uses
an index"): a walk of the whole primary key to promote candidates, and an attempt-closing
function run through the SQL function executor on every claim.

A claim that makes ended delays or ended leases READY costs the same on a small table and
a large one. The fast path's claim promotes the candidates it does not deliver. Its plan
used to find them by walking ``queue_message_pkey`` from the oldest id, so a claim
promoting the newest messages (ended delays: UUIDv7 ids sort by time) read every message
in the table. Each
table here holds ``older`` READY messages first, then 50 delayed by one second; once the
delays end, one claim of one message delivers the oldest READY message and promotes the 50.
``EXPLAIN (ANALYZE, BUFFERS)`` of the call counts every buffer its statements touch.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from retsu.adapters.ids import uuid7_batch
from tests.conftest import create_database, drop_database
from tests.support.postgres import buffers_touched
from tests.support.services import PostgresServer
from tests.support.timeshift import plain_url

pytestmark = pytest.mark.integration

_QUEUE = (
    "INSERT INTO queue (id, name, visibility_timeout_seconds, max_delivery_attempts, "
    "default_message_ttl_seconds) VALUES ($1, 'promotions', 30, 5, 86400)"
)
_ENQUEUE = (
    "SELECT queue_found, invalid_delay_at FROM retsu_enqueue($1, $2, $3, $4, $5, $6, NULL, NULL)"
)
_PROMOTED = 50


async def _enqueue(
    connection: asyncpg.Connection, queue_id: uuid.UUID, count: int, delay: int
) -> None:
    for start in range(0, count, 5_000):
        n = min(5_000, count - start)
        row = await connection.fetchrow(
            _ENQUEUE, queue_id, uuid7_batch(n), ['{"n": 1}'] * n, [2] * n, [86_400] * n, [delay] * n
        )
        assert row["queue_found"] and row["invalid_delay_at"] is None


async def _promoting_claim(url: str, older: int) -> tuple[int, int]:
    """Buffers one claim touches that delivers one message and promotes 50 ended delays,
    and how many READY messages it left (rolled back)."""
    connection = await asyncpg.connect(plain_url(url))
    try:
        queue_id = uuid.uuid4()
        await connection.execute(_QUEUE, queue_id)
        await _enqueue(connection, queue_id, older, 0)
        await _enqueue(connection, queue_id, _PROMOTED, 1)
        await connection.execute("ANALYZE queue_message")
        await asyncio.sleep(1.2)  # the delays end
        call = f"SELECT * FROM retsu_dequeue('{queue_id}', 1, 30, 100, 'test', 'plan')"
        ready = "SELECT count(*) FROM queue_message WHERE queue_id = $1 AND state = 1"
        return await buffers_touched(
            connection, call, then=ready, then_args=[queue_id], warm=[call]
        )
    finally:
        await connection.close()


@pytest.fixture
async def two_databases(postgres_server: PostgresServer) -> AsyncIterator[tuple[str, str]]:
    small = await create_database(postgres_server)
    large = await create_database(postgres_server)
    try:
        yield small, large
    finally:
        await drop_database(postgres_server, small)
        await drop_database(postgres_server, large)


async def test_a_claim_promoting_ended_delays_costs_the_same_on_a_large_table(
    two_databases: tuple[str, str], record_property: Any
) -> None:
    small_url, large_url = two_databases
    small, ready_small = await _promoting_claim(small_url, 1_000)
    large, ready_large = await _promoting_claim(large_url, 100_000)
    print(f"promoting claim: 1k older messages {small} blocks, 100k older {large}")
    record_property("promoting_claim", f"{small} / {large} blocks")
    # One delivered, the 50 ended delays READY beside the rest.
    assert (ready_small, ready_large) == (1_000 - 1 + _PROMOTED, 100_000 - 1 + _PROMOTED)
    # Each promoted row costs its own row and index entries (a few dozen buffers); nothing
    # grows with the table. (Before migration 0016: 176,850 buffers on 200,000 messages.)
    assert large <= small * 1.5 + 100, (small, large)


async def test_the_claim_and_acknowledgement_run_no_sql_function_through_the_executor(
    two_databases: tuple[str, str],
) -> None:
    """The attempt record's SQL functions are inlined into the statements that call them:
    ``pg_stat_user_functions`` (``track_functions = all``) counts only the calls PostgreSQL
    could not inline, each of which parses and plans the function's body again."""
    connection = await asyncpg.connect(plain_url(two_databases[0]))
    try:
        await connection.execute("SET track_functions = 'all'")
        queue_id = uuid.uuid4()
        await connection.execute(_QUEUE, queue_id)
        await _enqueue(connection, queue_id, 20, 0)
        claim = f"SELECT * FROM retsu_dequeue('{queue_id}', 1, 30, 100, 'test', 'me')"
        for _ in range(10):
            rows = await connection.fetch(claim)
            await connection.fetch(
                "SELECT * FROM retsu_acknowledge($1, $2, $3, NULL)",
                queue_id,
                [rows[0]["id"]],
                [rows[0]["receipt_handle"]],
            )
        last = (await connection.fetch(claim))[0]
        await connection.execute("SELECT pg_stat_force_next_flush()")
        called = dict(
            await connection.fetch(
                "SELECT funcname, calls FROM pg_stat_user_functions "
                "WHERE funcname IN ('retsu_close_attempt', 'retsu_new_attempt', 'retsu_shard')"
            )
        )
        recorded = await connection.fetchval(
            "SELECT attempts FROM queue_message WHERE id = $1", last["id"]
        )
    finally:
        await connection.close()
    assert called == {}, called
    # The claim still recorded its attempt (SPEC §3.11): number 1, by consumer "me".
    attempt = json.loads(recorded)
    assert [(a["n"], a["c"]) for a in attempt] == [(1, "me")], attempt
