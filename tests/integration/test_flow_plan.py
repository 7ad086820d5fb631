"""The general claim path (groups, caps, token buckets: ``retsu_claim_flow``, migration
0009) costs the same whatever the number of groups, the messages per group or the throttled
backlog (SPEC §3.10 "Cost").

EXPLAIN cannot show the plans inside a PL/pgSQL function, but ``EXPLAIN (ANALYZE,
BUFFERS)`` of the call counts every buffer the function's statements touch: the test
compares a claim on 1,000 groups with one on 100,000 groups (each group a head and a
backlog behind it), a lane of 100,000 messages, and 100,000 heads parked by the group rate
limit. The loads write rows as the functions would, counted as they count them.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from tests.conftest import create_database, drop_database
from tests.support.postgres import buffers_touched
from tests.support.services import PostgresServer
from tests.support.timeshift import plain_url

pytestmark = pytest.mark.integration

# ``groups`` lanes of ``per_group`` messages: the first READY (its head; THROTTLED, parked for
# an hour, with ``parked``), the rest WAITING; lane rows and counters to match.
_LOAD = """
WITH lanes AS (
    INSERT INTO queue_group (queue_id, group_key, pending, waiting, head_key)
    SELECT $1, 'g' || g, 1, $3 - 1, g FROM generate_series(1, $2) AS g
    RETURNING group_key, head_key
), stored AS (
    INSERT INTO queue_message
        (id, queue_id, payload, priority, state, enqueued_at, expires_at, available_after,
         delivery_attempts, group_key, wait_key)
    SELECT gen_random_uuid(), $1, '{"n": 1}', 2,
           CASE WHEN i > 1 THEN 4 WHEN $4 THEN 7 ELSE 1 END, now(), now() + interval '1 day',
           CASE WHEN i = 1 AND $4 THEN now() + interval '1 hour' ELSE now() END, 0,
           l.group_key, CASE WHEN i = 1 THEN l.head_key END
    FROM lanes AS l CROSS JOIN generate_series(1, $3) AS i
    ORDER BY l.head_key, i
    RETURNING id, priority
)
INSERT INTO queue_state_rollup AS c (queue_id, priority, shard, ready, groups)
SELECT $1, s.priority, retsu_shard(s.id), count(*), 0 FROM stored AS s GROUP BY 2, 3
ON CONFLICT (queue_id, priority, shard) DO UPDATE SET ready = c.ready + excluded.ready
"""
_QUEUE = (
    "INSERT INTO queue (id, name, visibility_timeout_seconds, max_delivery_attempts, "
    "default_message_ttl_seconds, group_max_in_flight, group_rate_per_second, "
    "group_rate_burst) VALUES ($1, $2, 30, 5, 86400, 1, $3, $4)"
)


@pytest.fixture(scope="module")
async def loaded(postgres_server: PostgresServer) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    url = await create_database(postgres_server)
    connection = await asyncpg.connect(plain_url(url))
    queues: dict[str, Any] = {}
    try:
        for name, groups, per_group, rate in (
            ("few", 1_000, 3, None),
            ("many", 100_000, 3, None),
            ("one-lane", 1, 100_000, None),
            ("parked", 100_000, 1, 1.0),
        ):
            queue_id = uuid.uuid4()
            await connection.execute(_QUEUE, queue_id, name, rate, None if rate is None else 1)
            await connection.execute(_LOAD, queue_id, groups, per_group, rate is not None)
            queues[name] = queue_id
        await connection.execute("ANALYZE")
        yield url, queues
    finally:
        await connection.close()
        await drop_database(postgres_server, url)


_CLAIMED = "SELECT count(*) FROM queue_message WHERE queue_id = $1 AND state = 2"
_READY = "SELECT count(*) FROM queue_message WHERE queue_id = $1 AND state = 1"


def _claim(queue_id: uuid.UUID, limit: int) -> str:
    return f"SELECT * FROM retsu_dequeue('{queue_id}', {limit}, 30, 100, 'test', 'plan')"


async def claim_blocks(url: str, queue_id: uuid.UUID, limit: int) -> tuple[int, int]:
    """Buffers one claim touches, and how many messages it claimed (rolled back)."""
    connection = await asyncpg.connect(plain_url(url))
    try:
        call = _claim(queue_id, limit)
        return await buffers_touched(
            connection, call, then=_CLAIMED, then_args=[queue_id], warm=[call]
        )
    finally:
        await connection.close()


@pytest.mark.parametrize("limit", [1, 10])
async def test_a_claim_costs_the_same_on_a_thousand_or_a_hundred_thousand_groups(
    loaded: tuple[str, dict[str, Any]], limit: int, record_property: Any
) -> None:
    url, queues = loaded
    few, claimed_few = await claim_blocks(url, queues["few"], limit)
    many, claimed_many = await claim_blocks(url, queues["many"], limit)
    lane, claimed_lane = await claim_blocks(url, queues["one-lane"], limit)
    print(f"claim of {limit}: 1k groups {few}, 100k groups {many}, one lane of 100k {lane}")
    record_property(f"flow_claim_{limit}", f"{few} / {many} / {lane} blocks")
    assert (claimed_few, claimed_many, claimed_lane) == (limit, limit, 1)
    # Each claimed row costs a few dozen buffers (its own row and index entries, its group
    # row, the next message promoted); nothing grows with the groups or the backlog.
    assert many <= few * 1.5 + 50, (few, many)
    assert lane <= 200 + 60 * limit, lane


async def test_a_throttled_backlog_costs_a_claim_nothing(
    loaded: tuple[str, dict[str, Any]], record_property: Any
) -> None:
    """100,000 heads parked until their group's next token: the claim finds none due."""
    url, queues = loaded
    blocks, claimed = await claim_blocks(url, queues["parked"], 10)
    print(f"claim on 100k parked heads: {blocks} blocks")
    record_property("flow_claim_parked", f"{blocks} blocks")
    assert claimed == 0
    assert blocks < 200, blocks


async def ack_blocks(url: str, queue_id: uuid.UUID, limit: int) -> tuple[int, int]:
    """Buffers one acknowledgement of ``limit`` fresh claims touches (migration 0015's one
    statement: the deletion, each lane's next member promoted, the group rows and counters),
    and how many heads it left READY (rolled back)."""
    claim = _claim(queue_id, limit)
    ack = (
        f"SELECT * FROM retsu_acknowledge('{queue_id}', "
        "(SELECT array_agg(id) FROM queue_message WHERE queue_id = $1 AND state = 2), "
        "(SELECT array_agg(receipt_handle) FROM queue_message "
        "WHERE queue_id = $1 AND state = 2))"
    )
    connection = await asyncpg.connect(plain_url(url))
    try:
        return await buffers_touched(
            connection,
            ack,
            queue_id,
            then=_READY,
            then_args=[queue_id],
            warm=[claim, ack.replace("$1", f"'{queue_id}'")],
            before=[claim],
        )
    finally:
        await connection.close()


@pytest.mark.parametrize("limit", [1, 10])
async def test_an_acknowledgement_costs_the_same_on_a_thousand_or_a_hundred_thousand_groups(
    loaded: tuple[str, dict[str, Any]], limit: int, record_property: Any
) -> None:
    url, queues = loaded
    few, heads_few = await ack_blocks(url, queues["few"], limit)
    many, heads_many = await ack_blocks(url, queues["many"], limit)
    lane, heads_lane = await ack_blocks(url, queues["one-lane"], limit)
    print(f"ack of {limit}: 1k groups {few}, 100k groups {many}, one lane of 100k {lane}")
    record_property(f"flow_ack_{limit}", f"{few} / {many} / {lane} blocks")
    # Every lane acknowledged got its next member as its head again.
    assert (heads_few, heads_many, heads_lane) == (1_000, 100_000, 1)
    # Each acknowledged message costs its row, its group row, the next member's row and
    # their index entries (the array subqueries of the call read the leases too); nothing
    # grows with the groups or the backlog.
    assert many <= few * 1.5 + 50, (few, many)
    assert lane <= 100 + 40 * limit, lane
