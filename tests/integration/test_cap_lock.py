"""A queue's ``max_in_flight`` far away costs no serialisation (migration 0014).

Claims of a capped queue take the queue's advisory lock *shared* while the cap is at least
``2M`` away (``M`` = ``max_connections`` × 100, ``retsu_cap_margin``) and leave room for every
claim running beside them; nearer, *exclusive*, exactly as before. The tests hold one
claim's transaction open and show whether a second claim waits for it; move the in-flight
count across the boundary (by writing the rollup's counter, which is what the claim reads)
and show each side takes what the cap allows and no more; race claimers over the boundary
and recount; and show an acknowledgement answers ``wake`` only near the cap, and only when
a long poll waits on the queue.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from uuid import UUID

import asyncpg
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from retsu.adapters.postgres.engine import create_engine
from retsu.domain.message import MessageToStore, Priority, Receipt
from tests.conftest import create_database, drop_database
from tests.integration.test_rollup import assert_rollup_exact, insert_queue
from tests.support.postgres import PostgresStorage
from tests.support.services import PostgresServer
from tests.support.timeshift import plain_url

pytestmark = pytest.mark.integration

CLAIM = "SELECT count(id) FROM retsu_dequeue($1, $2, 600, 100, 'MAX_DELIVERY_ATTEMPTS_EXHAUSTED')"
# The claim's final row says which limit held it back.
THROTTLED = (
    "SELECT throttled FROM retsu_dequeue($1, $2, 600, 100, 'MAX_DELIVERY_ATTEMPTS_EXHAUSTED')"
    " WHERE id IS NULL"
)


@pytest.fixture
async def scratch_url(postgres_server: PostgresServer) -> AsyncIterator[str]:
    url = await create_database(postgres_server)
    yield url
    await drop_database(postgres_server, url)


@pytest.fixture
async def engine(scratch_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(scratch_url, max_connections=12)
    yield engine
    await engine.dispose()


@pytest.fixture
async def connections(scratch_url: str) -> AsyncIterator[list[asyncpg.Connection]]:
    opened = [await asyncpg.connect(plain_url(scratch_url)) for _ in range(2)]
    yield opened
    for connection in opened:
        await connection.close()


async def _margin(connection: asyncpg.Connection) -> int:
    return int(await connection.fetchval("SELECT retsu_cap_margin()"))


async def _queue(engine: AsyncEngine, cap: int | None, messages: int) -> UUID:
    queue_id = await insert_queue(engine, f"capped-{uuid.uuid4().hex[:8]}", max_in_flight=cap)
    batch = [MessageToStore(uuid.uuid4(), "x", Priority.MEDIUM, 3600, 0) for _ in range(messages)]
    for start in range(0, messages, 100):
        await PostgresStorage(engine).messages.enqueue(queue_id, batch[start : start + 100])
    return queue_id


async def _pretend_in_flight(connection: asyncpg.Connection, queue_id: UUID, extra: int) -> None:
    """Add ``extra`` to the in-flight count the claim reads (one counter row), as if that many
    leases were held: the test can then stand anywhere relative to a cap of millions."""
    # By the row's key: a ctid can move under a concurrent claim's update of the row.
    await connection.execute(
        "UPDATE queue_state_rollup SET in_flight = in_flight + $2 WHERE (queue_id, priority, shard)"
        " = (SELECT queue_id, priority, shard FROM queue_state_rollup WHERE queue_id = $1"
        " ORDER BY priority, shard LIMIT 1)",
        queue_id,
        extra,
    )


async def _second_claim_waits(connections: list[asyncpg.Connection], queue_id: UUID) -> bool:
    """Whether a claim waits for another claim's open transaction on the same queue."""
    holder, other = connections
    async with holder.transaction():
        assert await holder.fetchval(CLAIM, queue_id, 1) == 1
        try:
            async with other.transaction():
                await other.execute("SET LOCAL lock_timeout = '1s'")
                await other.fetchval(CLAIM, queue_id, 1)
        except asyncpg.LockNotAvailableError:
            return True
    return False


async def test_far_from_the_cap_claims_do_not_wait_for_each_other(
    engine: AsyncEngine, connections: list[asyncpg.Connection]
) -> None:
    margin = await _margin(connections[0])
    queue_id = await _queue(engine, cap=2 * margin + 10, messages=10)
    assert not await _second_claim_waits(connections, queue_id)


async def test_near_the_cap_claims_run_one_at_a_time(
    engine: AsyncEngine, connections: list[asyncpg.Connection]
) -> None:
    queue_id = await _queue(engine, cap=5, messages=10)
    assert await _second_claim_waits(connections, queue_id)
    margin = await _margin(connections[0])
    # A large cap that the leases have come within 2M of: exclusive as well.
    near = await _queue(engine, cap=2 * margin + 10, messages=10)
    await _pretend_in_flight(connections[0], near, 11)
    assert await _second_claim_waits(connections, near)


async def test_each_mode_takes_what_the_cap_allows_and_no_more(
    engine: AsyncEngine, connections: list[asyncpg.Connection]
) -> None:
    connection = connections[0]
    margin = await _margin(connection)
    cap = 3 * margin
    # Exclusive: 40 below the cap, a claim of 100 gets 40, the next none, and says why.
    queue_id = await _queue(engine, cap=cap, messages=200)
    await _pretend_in_flight(connection, queue_id, cap - 40)
    assert await connection.fetchval(CLAIM, queue_id, 100) == 40
    assert await connection.fetchval(THROTTLED, queue_id, 100) == "max_in_flight"
    # Shared: 2M + 100 away, then 2M away: whole claims (room is left for M beside each).
    shared = await _queue(engine, cap=cap, messages=300)
    await _pretend_in_flight(connection, shared, cap - 2 * margin - 100)
    assert await connection.fetchval(CLAIM, shared, 100) == 100
    assert await connection.fetchval(CLAIM, shared, 100) == 100
    # Exclusive from here on, and exact: 2M − 100 of room, so the claim gets all it asks.
    assert await connection.fetchval(CLAIM, shared, 100) == 100


async def test_a_shared_claim_that_finds_the_cap_near_after_its_lock_takes_only_what_is_safe(
    engine: AsyncEngine, connections: list[asyncpg.Connection]
) -> None:
    """The first read (no lock) chose shared; an exclusive claim then committed leases that
    brought the cap within M: the second read, after the lock, cuts the claim to nothing."""
    exclusive, shared = connections
    margin = await _margin(exclusive)
    cap = 3 * margin
    queue_id = await _queue(engine, cap=cap, messages=10)
    await _pretend_in_flight(exclusive, queue_id, cap - 2 * margin - 50)  # far: shared
    transaction = exclusive.transaction()
    await transaction.start()
    try:
        await _pretend_in_flight(exclusive, queue_id, 100)  # near, in this transaction only
        assert await exclusive.fetchval(CLAIM, queue_id, 1) == 1  # holds the lock exclusive
        waiting = asyncio.create_task(
            shared.fetch(THROTTLED.replace("throttled", "*"), queue_id, 5)
        )
        await asyncio.sleep(0.3)
        # Its first read saw the committed count: shared, so it waits for the lock.
        assert not waiting.done(), waiting.exception() if waiting.done() else None
        await _pretend_in_flight(exclusive, queue_id, margin)  # cap − M + 51 at commit
    finally:
        await transaction.commit()
    rows = await waiting
    assert [row["id"] for row in rows] == [None], rows
    assert rows[0]["throttled"] == "max_in_flight", repr(list(rows[0].items()))
    # Exclusive from now on, exact: M − 51 of room.
    assert await shared.fetchval(CLAIM, queue_id, 5) == 5


async def test_claims_racing_across_the_boundary_never_pass_the_cap_and_count_exactly(
    scratch_url: str, engine: AsyncEngine, connections: list[asyncpg.Connection]
) -> None:
    """Claimers start far from the cap (shared); while they run, leases held elsewhere (the
    pretence) jump to 150 below the cap: every claim after that is exclusive and exact, so
    the queue ends with exactly the cap in flight, never more."""
    connection = connections[0]
    margin = await _margin(connection)
    cap = 3 * margin
    queue_id = await _queue(engine, cap=cap, messages=400)
    before = margin - 100  # 2M + 100 from the cap
    await _pretend_in_flight(connection, queue_id, before)
    repository = PostgresStorage(engine)
    claimed: list[int] = []

    jumped: list[int] = []

    async def claimer() -> None:
        while True:
            result = await repository.messages.dequeue(
                queue_id, limit=7, visibility_timeout_seconds=600, dead_letter_batch_size=10
            )
            if not result.messages:
                return
            claimed.append(len(result.messages))
            if sum(claimed) >= 20 and not jumped:  # the others go on claiming meanwhile
                jumped.append(sum(claimed))
                await _pretend_in_flight(connection, queue_id, 2 * margin - 50)

    await asyncio.gather(*(claimer() for _ in range(8)))
    assert jumped and jumped[0] < 150
    in_flight = await connection.fetchval(
        "SELECT sum(in_flight) FROM queue_state_rollup WHERE queue_id = $1", queue_id
    )
    assert in_flight == cap
    assert sum(claimed) == 150
    await _pretend_in_flight(connection, queue_id, -(before + 2 * margin - 50))
    await assert_rollup_exact(scratch_url)


async def test_an_acknowledgement_wakes_polls_only_when_one_waits_near_the_cap(
    engine: AsyncEngine, connections: list[asyncpg.Connection]
) -> None:
    connection = connections[0]
    margin = await _margin(connection)
    repository = PostgresStorage(engine).messages

    async def acknowledge_one(queue_id: UUID) -> bool:
        result = await repository.dequeue(
            queue_id, limit=1, visibility_timeout_seconds=600, dead_letter_batch_size=10
        )
        (message,) = result.messages
        done = await repository.acknowledge(queue_id, [Receipt(message.id, message.receipt_handle)])
        assert done.removed == 1
        return done.wake

    async def waiting_poll(queue_id: UUID) -> None:  # as an API process registers one
        await connection.execute(
            "INSERT INTO queue_waiter (queue_id, process, seen_at) VALUES ($1, 'test', now())",
            queue_id,
        )

    small = await _queue(engine, cap=5, messages=3)
    assert await acknowledge_one(small) is False  # nobody waits
    await waiting_poll(small)
    assert await acknowledge_one(small) is True
    far = await _queue(engine, cap=4 * margin, messages=2)
    await waiting_poll(far)
    assert await acknowledge_one(far) is False  # a waiting poll, but the cap holds nobody
    await _pretend_in_flight(connection, far, 2 * margin)
    assert await acknowledge_one(far) is True
    # No cap, no lanes: nothing to wake.
    assert await acknowledge_one(await _queue(engine, cap=None, messages=2)) is False
