"""Grouped claims and acknowledgements on one statement (migration 0015): lanes of one
lease each, no cap, no bucket (SPEC §3.10, §7b "groups").

The fast statements must do exactly what the general path does: which path a call takes,
concurrent claims that never deliver two messages of one group at once nor break a
group's enqueue order, an acknowledgement racing claims and enqueues that promotes exactly
one next head (and a lane changed after the acknowledgement's snapshot handed to the
general code), delayed members, and counters (``queue_state_rollup``, ``queue_group``)
equal to a recount from the rows after all of it.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from tests.conftest import create_database, drop_database
from tests.integration.test_rollup import assert_rollup_exact
from tests.support.services import PostgresServer
from tests.support.timeshift import plain_url

pytestmark = pytest.mark.integration

ENQUEUE = (
    "SELECT * FROM retsu_enqueue($1, $2::uuid[], $3::text[], $4::smallint[], $5::int[], "
    "$6::int[], $7::text[])"
)
CLAIM = (
    "SELECT id, payload, group_key, receipt_handle, dead_lettered "
    "FROM retsu_dequeue($1, $2, 30, 100, 'test', 'fast-path')"
)
ACK = "SELECT removed, wake FROM retsu_acknowledge($1, $2::uuid[], $3::uuid[])"
RELEASE = "SELECT changed FROM retsu_change_visibility($1, $2, $3, 0)"
# With one lease per lane, every live member of a group but its oldest is waiting.
OUT_OF_ORDER = """
SELECT h.group_key, h.payload
FROM queue_message AS h
WHERE h.queue_id = $1 AND h.group_key IS NOT NULL AND h.state IN (1, 2, 3, 7)
  AND EXISTS (SELECT 1 FROM queue_message AS o
              WHERE o.queue_id = h.queue_id AND o.group_key = h.group_key
                AND o.state <> 6 AND o.enqueue_order < h.enqueue_order)
"""


@pytest.fixture
async def url(postgres_server: PostgresServer) -> AsyncIterator[str]:
    url = await create_database(postgres_server)
    yield url
    await drop_database(postgres_server, url)


async def connect(url: str) -> asyncpg.Connection:
    return await asyncpg.connect(plain_url(url))


async def new_queue(
    connection: asyncpg.Connection,
    *,
    group_max_in_flight: int = 1,
    max_attempts: int = 5,
    group_rate: float | None = None,
) -> uuid.UUID:
    queue_id = uuid.uuid4()
    await connection.execute(
        "INSERT INTO queue (id, name, visibility_timeout_seconds, max_delivery_attempts, "
        "default_message_ttl_seconds, group_max_in_flight, group_rate_per_second, "
        "group_rate_burst) VALUES ($1, $2, 30, $3, 3600, $4, $5, $6)",
        queue_id,
        f"q-{queue_id}",
        max_attempts,
        group_max_in_flight,
        group_rate,
        None if group_rate is None else 1,
    )
    return queue_id


async def enqueue(
    connection: asyncpg.Connection,
    queue_id: uuid.UUID,
    groups: list[str | None],
    *,
    payloads: list[str] | None = None,
    delays: list[int] | None = None,
    priorities: list[int] | None = None,
) -> list[uuid.UUID]:
    ids = [uuid.uuid4() for _ in groups]
    n = len(groups)
    row = await connection.fetchrow(
        ENQUEUE,
        queue_id,
        ids,
        payloads or [str(i) for i in range(n)],
        priorities or [2] * n,
        [None] * n,
        delays or [0] * n,
        groups,
    )
    assert row["queue_found"] and row["invalid_delay_at"] is None
    return ids


async def claim(connection: asyncpg.Connection, queue_id: uuid.UUID, limit: int = 1) -> list[Any]:
    rows = await connection.fetch(CLAIM, queue_id, limit)
    return [r for r in rows if r["id"] is not None]


async def ack(connection: asyncpg.Connection, queue_id: uuid.UUID, rows: list[Any]) -> Any:
    return await connection.fetchrow(
        ACK, queue_id, [r["id"] for r in rows], [r["receipt_handle"] for r in rows]
    )


async def calls(connection: asyncpg.Connection) -> dict[str, int]:
    rows = await connection.fetch(
        "SELECT funcname, calls FROM pg_stat_xact_user_functions "
        "WHERE funcname IN ('retsu_claim_flow', 'retsu_claim_lanes', 'retsu_group_apply')"
    )
    return {r["funcname"]: int(r["calls"]) for r in rows}


async def assert_lanes_in_order(connection: asyncpg.Connection, queue_id: uuid.UUID) -> None:
    assert await connection.fetch(OUT_OF_ORDER, queue_id) == []


async def test_lanes_of_one_lease_claim_and_acknowledge_without_the_general_path(
    url: str,
) -> None:
    connection = await connect(url)
    try:
        await connection.execute("SET track_functions = 'pl'")
        fast = await new_queue(connection)
        wide = await new_queue(connection, group_max_in_flight=2)
        for queue_id in (fast, wide):
            await enqueue(connection, queue_id, ["a", "a", "b", None, "a"])
        async with connection.transaction():
            before = await calls(connection)
            got = await claim(connection, fast, 10)
            # One head per lane, the ungrouped one, in delivery order (wait keys 1, 3, 4).
            assert [(r["payload"], r["group_key"]) for r in got] == [
                ("0", "a"),
                ("2", "b"),
                ("3", None),
            ]
            result = await ack(connection, fast, got)
            assert (result["removed"], result["wake"]) == (3, True)
            after = await calls(connection)
        assert after.get("retsu_claim_lanes", 0) == before.get("retsu_claim_lanes", 0) + 1
        assert after.get("retsu_claim_flow", 0) == before.get("retsu_claim_flow", 0)
        assert after.get("retsu_group_apply", 0) == before.get("retsu_group_apply", 0)
        # Lane a's next member is its head; b is gone.
        lanes = await connection.fetch(
            "SELECT group_key, leased, pending, waiting FROM queue_group "
            "WHERE queue_id = $1 ORDER BY 1",
            fast,
        )
        assert [tuple(r) for r in lanes] == [("a", 0, 1, 1), ("b", 0, 0, 0)]
        async with connection.transaction():
            before = await calls(connection)
            # The general path: lane a gives its head and its next member.
            got = await claim(connection, wide, 10)
            assert sorted(r["payload"] for r in got) == ["0", "1", "2", "3"]
            after = await calls(connection)
        assert after.get("retsu_claim_flow", 0) == before.get("retsu_claim_flow", 0) + 1
        await assert_lanes_in_order(connection, fast)
    finally:
        await connection.close()
    await assert_rollup_exact(url)


async def test_concurrent_consumers_never_hold_two_of_a_group_nor_break_its_order(
    url: str,
) -> None:
    setup = await connect(url)
    groups = [f"g{i}" for i in range(12)]
    try:
        queue_id = await new_queue(setup)
        rng = random.Random(24)
        order: dict[str | None, list[str]] = defaultdict(list)
        batch: list[str | None] = []
        for i in range(240):
            group = rng.choice([*groups, None])
            batch.append(group)
            order[group].append(str(i))
        await enqueue(
            setup,
            queue_id,
            batch,
            payloads=[str(i) for i in range(len(batch))],
            priorities=[rng.choice((1, 2, 3)) if g is None else 2 for g in batch],
        )
    finally:
        await setup.close()

    clock = 0
    held: dict[str, tuple[int, str]] = {}  # group -> (claimed at, payload)
    violations: list[str] = []
    delivered: dict[str | None, list[str]] = defaultdict(list)
    acked: list[str] = []

    async def consumer(seed: int) -> None:
        nonlocal clock
        rng = random.Random(seed)
        connection = await connect(url)
        try:
            idle = 0
            while idle < 20:
                rows = await claim(connection, queue_id, rng.choice((1, 1, 3)))
                if not rows:
                    idle += 1
                    await asyncio.sleep(0.01)
                    continue
                idle = 0
                for row in rows:
                    group = row["group_key"]
                    delivered[group].append(row["payload"])
                    if group is not None:
                        if group in held:
                            violations.append(f"{group}: {held[group]} and {row['payload']}")
                        clock += 1
                        held[group] = (clock, row["payload"])
                await asyncio.sleep(rng.random() * 0.005)
                keep = []
                for row in rows:
                    if rng.random() < 0.15:
                        # Released: an ended lease, claimed again (a grouped one stays in
                        # its lane, leased).
                        if row["group_key"] is not None:
                            held.pop(row["group_key"], None)
                        assert await connection.fetchval(
                            RELEASE, queue_id, row["id"], row["receipt_handle"]
                        )
                    else:
                        keep.append(row)
                for row in keep:
                    if row["group_key"] is not None:
                        held.pop(row["group_key"], None)
                if keep:
                    result = await ack(connection, queue_id, keep)
                    assert result["removed"] == len(keep)
                    acked.extend(r["payload"] for r in keep)
        finally:
            await connection.close()

    await asyncio.wait_for(asyncio.gather(*(consumer(s) for s in range(6))), 120)
    assert violations == []
    assert sorted(acked, key=int) == [str(i) for i in range(240)]
    for group in groups:
        # Deliveries of a lane follow its enqueue order (a released one comes again first).
        sequence = [int(p) for p in delivered[group]]
        assert sequence == sorted(sequence), group
        assert sorted(set(delivered[group]), key=int) == order[group]
    await assert_rollup_exact(url)


async def _waiting(connection: asyncpg.Connection, pid: int) -> None:
    """Until the backend ``pid`` waits for a lock."""
    for _ in range(500):
        if await connection.fetchval(
            "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1", pid
        ):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"backend {pid} never waited for a lock")


async def ack_counting(
    connection: asyncpg.Connection, queue_id: uuid.UUID, rows: list[Any]
) -> tuple[Any, int]:
    """An acknowledgement, and how many times it called retsu_group_apply."""
    async with connection.transaction():
        await connection.execute("SET LOCAL track_functions = 'pl'")
        before = (await calls(connection)).get("retsu_group_apply", 0)
        result = await ack(connection, queue_id, rows)
        return result, (await calls(connection)).get("retsu_group_apply", 0) - before


async def test_an_enqueue_committed_after_the_acknowledgements_snapshot_is_promoted(
    url: str,
) -> None:
    """The acknowledgement's snapshot predates the lane's new member: the lane changed, so
    the statement leaves the lane to the general code, which sees the member."""
    blocker, acker, producer = [await connect(url) for _ in range(3)]
    try:
        queue_id = await new_queue(blocker)
        await enqueue(blocker, queue_id, ["g"])
        (lease,) = await claim(blocker, queue_id)
        for _ in range(3):
            transaction = blocker.transaction()
            await transaction.start()
            await blocker.execute(
                "SELECT 1 FROM queue_group WHERE queue_id = $1 AND group_key = 'g' FOR UPDATE",
                queue_id,
            )
            adding = asyncio.ensure_future(enqueue(producer, queue_id, ["g"], payloads=["new"]))
            await _waiting(blocker, producer.get_server_pid())
            acking = asyncio.ensure_future(ack_counting(acker, queue_id, [lease]))
            await _waiting(blocker, acker.get_server_pid())
            await transaction.commit()
            await adding
            result, general = await acking
            assert (result["removed"], result["wake"]) == (1, True)
            assert general == 1  # retsu_group_apply: the general code took the lane
            (lease,) = await claim(blocker, queue_id)
            assert lease["payload"] == "new"
            await assert_lanes_in_order(blocker, queue_id)
    finally:
        for connection in (blocker, acker, producer):
            await connection.close()
    await assert_rollup_exact(url)


async def test_an_acknowledgement_racing_claims_promotes_exactly_one_next_head(
    url: str,
) -> None:
    connections = [await connect(url) for _ in range(6)]
    try:
        queue_id = await new_queue(connections[0])
        await enqueue(connections[0], queue_id, ["g"] * 30 + ["h"] * 30)
        leases = await claim(connections[0], queue_id, 2)
        assert {r["group_key"] for r in leases} == {"g", "h"}
        for _ in range(25):
            claims = [claim(c, queue_id, 2) for c in connections[1:]]
            results = await asyncio.gather(ack(connections[0], queue_id, leases), *claims)
            assert results[0]["removed"] == 2
            got = [r for rows in results[1:] for r in rows]
            # Each lane gave at most its one next head, whoever claimed it.
            assert len({r["group_key"] for r in got}) == len(got)
            leases = got + await claim(connections[0], queue_id, 2 - len(got))
            assert sorted(r["group_key"] for r in leases) == ["g", "h"]
            await assert_lanes_in_order(connections[0], queue_id)
    finally:
        for connection in connections:
            await connection.close()
    await assert_rollup_exact(url)


async def test_a_delayed_member_becomes_the_head_when_its_delay_ends(url: str) -> None:
    connection = await connect(url)
    try:
        queue_id = await new_queue(connection)
        await enqueue(connection, queue_id, ["g", "g", "g"], delays=[0, 1, 600])
        (first,) = await claim(connection, queue_id)
        await asyncio.sleep(1.2)
        # The acknowledgement promotes the member whose own delay ended: READY (counted
        # ready now, not delayed) ...
        result, general = await ack_counting(connection, queue_id, [first])
        assert (result["wake"], general) == (True, 0)
        await assert_rollup_exact(url)
        (second,) = await claim(connection, queue_id)
        assert second["payload"] == "1"
        # ... and the one whose delay runs: DELAYED, the lane's head until then.
        result, general = await ack_counting(connection, queue_id, [second])
        assert (result["wake"], general) == (True, 0)
        state = await connection.fetchval(
            "SELECT state FROM queue_message WHERE queue_id = $1 AND payload = '2'", queue_id
        )
        assert state == 3
        assert await claim(connection, queue_id) == []
        await assert_lanes_in_order(connection, queue_id)
    finally:
        await connection.close()
    await assert_rollup_exact(url)


async def test_an_exhausted_grouped_lease_goes_to_dead_letters_and_its_lane_moves_on(
    url: str,
) -> None:
    connection = await connect(url)
    try:
        queue_id = await new_queue(connection, max_attempts=1)
        await enqueue(connection, queue_id, ["g", "g", None])
        first, plain = await claim(connection, queue_id, 2)
        assert (first["payload"], plain["payload"]) == ("0", "2")
        assert await connection.fetchval(RELEASE, queue_id, first["id"], first["receipt_handle"])
        # The general path's claim: the exhausted lease goes to dead letters and the lane's
        # next member becomes its head, for the next claim.
        rows = await connection.fetch(CLAIM, queue_id, 5)
        assert [r["payload"] for r in rows if r["id"] is not None] == []
        assert rows[-1]["dead_lettered"] == 1
        assert [r["payload"] for r in await claim(connection, queue_id, 5)] == ["1"]
        await assert_lanes_in_order(connection, queue_id)
    finally:
        await connection.close()
    await assert_rollup_exact(url)


async def test_a_head_of_a_lane_narrowed_to_one_lease_goes_back_to_waiting(url: str) -> None:
    """Lanes of two leases narrowed to one: a lane with a lease and a head keeps the lease
    and its head waits; another lane's head is claimed in its place."""
    connection = await connect(url)
    try:
        queue_id = await new_queue(connection, group_max_in_flight=2)
        await enqueue(connection, queue_id, ["g", "g", "g", "h"])
        (lease,) = await claim(connection, queue_id)
        assert lease["payload"] == "0"
        await connection.execute("UPDATE queue SET group_max_in_flight = 1 WHERE id = $1", queue_id)
        assert [r["payload"] for r in await claim(connection, queue_id, 5)] == ["3"]
        lanes = await connection.fetch(
            "SELECT group_key, leased, pending, waiting FROM queue_group "
            "WHERE queue_id = $1 ORDER BY 1",
            queue_id,
        )
        assert [tuple(r) for r in lanes] == [("g", 1, 0, 2), ("h", 1, 0, 0)]
        await ack(connection, queue_id, [lease])
        assert [r["payload"] for r in await claim(connection, queue_id, 5)] == ["1"]
        await assert_lanes_in_order(connection, queue_id)
    finally:
        await connection.close()
    await assert_rollup_exact(url)
