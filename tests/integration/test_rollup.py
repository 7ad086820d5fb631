"""The sharded state rollup stays exact under a randomized, concurrent workload.

After enqueues (plain, batched, idempotent), dequeues, acknowledgements, releases,
dead-lettering, expiry and dead-letter retention (the cleaners running concurrently),
redrives, dead-letter deletions, purges and a lowered attempts limit, the rollup summed per
queue and priority — and per shard — equals a full COUNT over the message and dead-letter
tables, and its cumulative counts equal what the workload saw happen. Also: a retry moves
no physical count, a counter never goes negative (the transaction fails instead), and the
migrations count what was stored before them.
"""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar
from uuid import UUID

import asyncpg
import pytest
import sqlalchemy as sa
from alembic import command
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from retsu.adapters.postgres.database import Database
from retsu.adapters.postgres.engine import create_engine
from retsu.adapters.postgres.errors import sqlstate
from retsu.adapters.postgres.maintenance import PostgresMaintenance
from retsu.adapters.postgres.migrations import alembic_config
from retsu.adapters.system import Uuid7Generator
from retsu.domain.audit import AuditAction, AuditEntry, Caller
from retsu.domain.browsing import BrowseState
from retsu.domain.errors import IdempotencyKeyConflict
from retsu.domain.message import MessageToStore, Priority, Receipt
from retsu.domain.queue import QueueSettingsUpdate
from retsu.domain.search import Search
from tests.conftest import create_database, drop_database
from tests.support.postgres import PostgresStorage
from tests.support.services import PostgresServer
from tests.support.timeshift import advance_database_clock, plain_url

pytestmark = pytest.mark.integration

T = TypeVar("T")
CALLER = Caller(actor="rollup-test", request_id="rollup")

SHARD = "(get_byte(uuid_send(id), 15) & 31)"

# The physical states each counter counts (migration 0009): a waiting or parked grouped
# message as ready (1, 4, 7), a waiting one whose delay runs as delayed (3, 5), completed (6).
_PHYSICAL = """
    (state IN (1, 4, 7))::int AS ready, (state = 2)::int AS in_flight,
    (state IN (3, 5))::int AS delayed, 0 AS dead_letters, (state = 6)::int AS completed
"""
ROLLUP_BY_SHARD = """
SELECT queue_id, priority, shard, sum(ready) AS ready, sum(in_flight) AS in_flight,
       sum(delayed) AS delayed, sum(dead_letters) AS dead_letters, sum(completed) AS completed
FROM queue_state_rollup GROUP BY 1, 2, 3
"""
COUNTS_BY_SHARD = f"""
SELECT queue_id, priority, shard, sum(ready) AS ready, sum(in_flight) AS in_flight,
       sum(delayed) AS delayed, sum(dead_letters) AS dead_letters, sum(completed) AS completed
FROM (
    SELECT queue_id, priority, {SHARD} AS shard, {_PHYSICAL}
    FROM queue_message
    UNION ALL
    SELECT queue_id, priority, {SHARD}, 0, 0, 0, 1, 0 FROM queue_dead_letter_message
) AS physical
GROUP BY 1, 2, 3
"""
ROLLUP_BY_PRIORITY = """
SELECT queue_id, priority, sum(ready) AS ready, sum(in_flight) AS in_flight,
       sum(delayed) AS delayed, sum(dead_letters) AS dead_letters, sum(completed) AS completed
FROM queue_state_rollup GROUP BY 1, 2
"""
COUNTS_BY_PRIORITY = f"""
SELECT queue_id, priority, sum(ready) AS ready, sum(in_flight) AS in_flight,
       sum(delayed) AS delayed, sum(dead_letters) AS dead_letters, sum(completed) AS completed
FROM (
    SELECT queue_id, priority, {_PHYSICAL} FROM queue_message
    UNION ALL
    SELECT queue_id, priority, 0, 0, 0, 1, 0 FROM queue_dead_letter_message
) AS physical
GROUP BY 1, 2
"""
# Lanes (SPEC §3.10): each group row's counters equal its members by state, a group holds at
# most one pending head, and the rollup's groups count equals the groups with a live message.
LANES_DIFFERING = """
SELECT coalesce(g.queue_id, m.queue_id) AS queue_id, coalesce(g.group_key, m.group_key) AS g,
       (g.leased, g.pending, g.waiting, g.waiting_delayed) AS stored,
       (m.leased, m.pending, m.waiting, m.waiting_delayed) AS counted
FROM (SELECT * FROM queue_group WHERE leased + pending + waiting + waiting_delayed > 0) AS g
FULL JOIN (
    SELECT queue_id, group_key, count(*) FILTER (WHERE state = 2) AS leased,
           count(*) FILTER (WHERE state IN (1, 3, 7)) AS pending,
           count(*) FILTER (WHERE state = 4) AS waiting,
           count(*) FILTER (WHERE state = 5) AS waiting_delayed
    FROM queue_message WHERE group_key IS NOT NULL AND state <> 6
    GROUP BY 1, 2
) AS m ON m.queue_id = g.queue_id AND m.group_key = g.group_key
WHERE (g.leased, g.pending, g.waiting, g.waiting_delayed)
      IS DISTINCT FROM (m.leased, m.pending, m.waiting, m.waiting_delayed)
"""
GROUPS_DIFFERING = """
SELECT q.id, coalesce(r.groups, 0) AS stored, coalesce(m.groups, 0) AS counted
FROM queue AS q
LEFT JOIN (SELECT queue_id, sum(groups) AS groups FROM queue_state_rollup GROUP BY 1) AS r
    ON r.queue_id = q.id
LEFT JOIN (SELECT queue_id, count(DISTINCT group_key) AS groups FROM queue_message
           WHERE group_key IS NOT NULL AND state <> 6 GROUP BY 1) AS m ON m.queue_id = q.id
WHERE coalesce(r.groups, 0) <> coalesce(m.groups, 0)
"""
# A lane with room and no pending head but waiting members would never move again.
STUCK_LANES = """
SELECT g.queue_id, g.group_key FROM queue_group AS g JOIN queue AS q ON q.id = g.queue_id
WHERE g.pending = 0 AND g.waiting + g.waiting_delayed > 0 AND g.leased < q.group_max_in_flight
"""
CUMULATIVE = """
SELECT coalesce(sum(enqueued), 0) AS enqueued, coalesce(sum(delivered), 0) AS delivered,
       coalesce(sum(acknowledged), 0) AS acknowledged,
       coalesce(sum(dead_lettered), 0) AS dead_lettered, coalesce(sum(expired), 0) AS expired
FROM queue_state_rollup
"""

Counts = tuple[int, ...]  # ready, in flight, delayed, dead letters[, completed]


def _table(rows: list[asyncpg.Record], key: int) -> dict[tuple[Any, ...], Counts]:
    """Rows keyed by their first ``key`` columns; all-zero counters left out."""
    table = {}
    for row in rows:
        counts: Counts = (
            int(row["ready"]),
            int(row["in_flight"]),
            int(row["delayed"]),
            int(row["dead_letters"]),
        )
        if int(row["completed"]):
            counts += (int(row["completed"]),)
        if any(counts):
            table[tuple(row)[:key]] = counts
    return table


async def cumulative_counts(url: str) -> dict[str, int]:
    connection = await asyncpg.connect(plain_url(url))
    try:
        return {k: int(v) for k, v in (await connection.fetchrow(CUMULATIVE)).items()}
    finally:
        await connection.close()


async def assert_rollup_exact(url: str) -> dict[tuple[Any, ...], Counts]:
    connection = await asyncpg.connect(plain_url(url))
    try:
        async with connection.transaction(isolation="repeatable_read"):  # one snapshot
            rollup = _table(await connection.fetch(ROLLUP_BY_PRIORITY), 2)
            counted = _table(await connection.fetch(COUNTS_BY_PRIORITY), 2)
            rollup_shards = _table(await connection.fetch(ROLLUP_BY_SHARD), 3)
            counted_shards = _table(await connection.fetch(COUNTS_BY_SHARD), 3)
            negative = await connection.fetchval(
                "SELECT count(*) FROM queue_state_rollup "
                "WHERE ready < 0 OR in_flight < 0 OR delayed < 0 OR dead_letters < 0"
            )
            lanes = [tuple(row) for row in await connection.fetch(LANES_DIFFERING)]
            groups = [tuple(row) for row in await connection.fetch(GROUPS_DIFFERING)]
            stuck = [tuple(row) for row in await connection.fetch(STUCK_LANES)]
    finally:
        await connection.close()
    assert lanes == [], lanes
    assert groups == [], groups
    assert stuck == [], stuck
    differing = {
        k: (rollup.get(k), counted.get(k))
        for k in set(rollup) | set(counted)
        if rollup.get(k) != counted.get(k)
    }
    assert rollup == counted, differing
    assert rollup_shards == counted_shards
    assert negative == 0
    return counted


async def insert_queue(
    engine: AsyncEngine,
    name: str,
    *,
    max_attempts: int = 5,
    visibility: int = 30,
    group_max_in_flight: int = 1,
    max_in_flight: int | None = None,
    completed_retention: int = 0,
) -> UUID:
    queue_id = uuid.uuid4()
    async with engine.begin() as connection:
        await connection.execute(
            sa.text(
                "INSERT INTO queue (id, name, visibility_timeout_seconds, max_delivery_attempts,"
                " default_message_ttl_seconds, group_max_in_flight, max_in_flight,"
                " completed_retention_seconds) VALUES (:id, :name, :visibility, :attempts,"
                " 3600, :group_max, :cap, :kept)"
            ),
            {
                "id": queue_id,
                "name": name,
                "visibility": visibility,
                "attempts": max_attempts,
                "group_max": group_max_in_flight,
                "cap": max_in_flight,
                "kept": completed_retention,
            },
        )
    return queue_id


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


class Workload:
    """Random queue traffic through the real repository and cleaner."""

    def __init__(self, engine: AsyncEngine, queues: dict[UUID, int], rng: random.Random) -> None:
        self.repository = PostgresStorage(engine)
        self.maintenance = PostgresMaintenance(Database(engine))
        self.queues = queues  # id -> max delivery attempts
        self.grouped: set[UUID] = set()  # queues whose messages may have a group
        self.rng = rng
        self.ops: Counter[str] = Counter()

    def _message(self, queue_id: UUID | None = None) -> MessageToStore:
        rng = self.rng
        ttl = rng.choice((8, 25, 600, 600))
        delay = rng.choice((0, 0, 0, 5)) if ttl > 5 else 0
        # Lanes: a few groups per grouped queue, some messages of no group among them.
        group = (
            rng.choice(("g1", "g2", "g3", "g4", None))
            if queue_id is not None and queue_id in self.grouped
            else None
        )
        payload = json.dumps({"n": rng.randint(0, 3), "pad": "p" * rng.randint(1, 40)})
        return MessageToStore(uuid.uuid4(), payload, rng.choice(list(Priority)), ttl, delay, group)

    async def _deadlock_tolerant(self, kind: str, operation: Awaitable[T]) -> T | None:
        """The repository retries a transaction PostgreSQL aborted as a deadlock victim,
        so no deadlock may reach a caller; the maintenance cleaner (which gives up on
        a lock after 200 ms and retries its batch) is the only other writer here."""
        return await operation

    async def enqueue(self) -> None:
        queue_id = self.rng.choice(list(self.queues))
        n = self.rng.choice((1, 1, 2, 5, 20))
        messages = [self._message(queue_id) for _ in range(n)]
        await self._deadlock_tolerant(
            "enqueue", self.repository.messages.enqueue(queue_id, messages)
        )
        self.ops["batch enqueue" if n > 1 else "enqueue"] += 1
        self.ops["enqueued"] += n

    async def enqueue_idempotent(self) -> None:
        queue_id = self.rng.choice(list(self.queues))
        message = self._message(queue_id)
        key = f"key-{self.rng.randint(1, 20)}"
        try:
            result = await self.repository.messages.enqueue_idempotent(
                queue_id, message, key, message.payload.encode().ljust(32, b"-")
            )
        except IdempotencyKeyConflict:
            self.ops["idempotency conflict"] += 1
            return
        if result.replayed:
            self.ops["idempotent replay"] += 1
        else:
            self.ops["enqueued"] += 1
            self.ops["idempotent enqueue"] += 1

    async def release(self) -> None:
        queue_id = self.rng.choice(list(self.queues))
        result = await self.repository.messages.dequeue(
            queue_id, limit=1, visibility_timeout_seconds=60, dead_letter_batch_size=100
        )
        self.ops["dead-lettered"] += result.dead_lettered
        self.ops["delivered"] += len(result.messages)
        for m in result.messages:
            if await self.repository.messages.change_visibility(
                queue_id, Receipt(m.id, m.receipt_handle), 0
            ):
                self.ops["released"] += 1

    async def operate(self) -> None:
        """An operator action: redrive (one or some), delete a dead letter, purge, or
        lower (or raise) a queue's attempts limit."""
        queue_id = self.rng.choice(list(self.queues))
        roll = self.rng.random()
        if roll < 0.1:
            await self._limit(queue_id)
            return
        if roll < 0.15:  # a bulk delete: what a search selects, in any state
            await self._delete_selected(queue_id)
            return
        if roll < 0.3:  # an operator deletes a message it browsed, in whatever state
            await self._delete_a_message(queue_id)
            return
        if roll < 0.35:
            purged = await self.repository.queues.purge_queue(
                queue_id, AuditEntry.of_queue(AuditAction.QUEUE_PURGED, queue_id, CALLER)
            )
            self.ops["purged"] += purged or 0
            return
        if roll < 0.55:
            audit = AuditEntry.of_queue(AuditAction.DEAD_LETTER_REDRIVEN, queue_id, CALLER)
            moved = await self.repository.dead_letters.redrive_dead_letters(
                queue_id, [uuid.uuid4() for _ in range(self.rng.randint(1, 5))], audit
            )
            self.ops["redriven"] += moved
            self.ops["enqueued"] += moved
            return
        page = (
            await self.repository.dead_letters.list_dead_letters(queue_id, limit=3, after=None)
        ).items
        if not page:
            return
        dead, _ = self.rng.choice(page)
        audit = AuditEntry.of_dead_letter(
            AuditAction.DEAD_LETTER_DELETED, queue_id, dead.id, CALLER
        )
        if roll < 0.8:
            if await self.repository.dead_letters.redrive_dead_letter(
                queue_id, dead.id, uuid.uuid4(), audit
            ):
                self.ops["redriven"] += 1
                self.ops["enqueued"] += 1
        elif await self.repository.dead_letters.delete_dead_letter(queue_id, dead.id, audit):
            self.ops["dead letters deleted"] += 1

    async def _delete_a_message(self, queue_id: UUID) -> None:
        batch = await self.repository.browser.list_messages(
            queue_id, state=None, priority=None, limit=5, after=None
        )
        if not batch.messages:
            return
        chosen = self.rng.choice(batch.messages)
        audit = AuditEntry.of_message(AuditAction.MESSAGE_DELETED, queue_id, chosen.id, CALLER)
        if await self.repository.browser.delete_message(queue_id, chosen.id, audit):
            self.ops["messages deleted"] += 1

    async def _delete_selected(self, queue_id: UUID) -> None:
        search = Search(
            group=self.rng.choice(("g1", "g2", None)), match={"n": self.rng.randint(0, 3)}
        )
        state = self.rng.choice((None, BrowseState.READY, BrowseState.IN_FLIGHT))
        audit = AuditEntry.of_queue(AuditAction.MESSAGE_DELETED, queue_id, CALLER)
        deleted = await self.repository.browser.delete_messages(
            queue_id, state=state, search=search, limit=self.rng.choice((1, 5)), audit=audit
        )
        self.ops["messages deleted in bulk"] += deleted

    async def _limit(self, queue_id: UUID) -> None:
        if queue_id in self.grouped and self.rng.random() < 0.5:
            await self.change_lanes(queue_id)
            return
        limit = self.rng.choice((1, 2, 3, 5))
        await self.repository.queues.update_queue(
            queue_id,
            QueueSettingsUpdate(max_delivery_attempts=limit),
            AuditEntry.of_queue(AuditAction.QUEUE_UPDATED, queue_id, CALLER),
        )
        self.queues[queue_id] = limit
        self.ops["limit changed"] += 1

    async def dequeue_and_maybe_ack(self) -> None:
        queue_id = self.rng.choice(list(self.queues))
        result = await self._deadlock_tolerant(
            "dequeue",
            self.repository.messages.dequeue(
                queue_id,
                limit=self.rng.choice((1, 3, 10)),
                visibility_timeout_seconds=self.rng.choice((5, 5, 60)),
                dead_letter_batch_size=self.rng.choice((2, 100)),
            ),
        )
        if result is None:
            return
        self.ops["dequeue"] += 1
        self.ops["dead-lettered"] += result.dead_lettered
        self.ops["delivered"] += len(result.messages)
        acked = [m for m in result.messages if self.rng.random() < 0.5]
        if acked:
            receipts = [Receipt(m.id, m.receipt_handle, result="done") for m in acked]
            removed = await self._deadlock_tolerant(
                "acknowledge", self.repository.messages.acknowledge(queue_id, receipts)
            )
            self.ops["acknowledged"] += 0 if removed is None else removed.removed
        rest = [m for m in result.messages if m not in acked]
        if rest and self.rng.random() < 0.2:
            # Their response never reached the consumer: back at once, uncounted.
            taken = await self.repository.messages.unclaim(
                queue_id, [Receipt(m.id, m.receipt_handle) for m in rest]
            )
            self.ops["unclaimed"] += taken
            self.ops["delivered"] -= taken

    async def clean(self) -> None:
        removed = await self.maintenance.delete_expired_messages(self.rng.choice((3, 50)))
        self.ops["expired"] += sum(group.count for group in removed)
        self.ops["completed cleaned"] += await self.maintenance.delete_completed_messages(50)

    async def purge_dead_letters(self) -> None:
        removed = await self.maintenance.delete_dead_letters_older_than(3600, 10)
        self.ops["dead letters purged"] += sum(group.count for group in removed)

    async def change_lanes(self, queue_id: UUID) -> None:
        """Lanes widen and narrow: a raised limit frees waiting messages at once."""
        await self.repository.queues.update_queue(
            queue_id,
            QueueSettingsUpdate(group_max_in_flight=self.rng.choice((1, 2, 4))),
            AuditEntry.of_queue(AuditAction.QUEUE_UPDATED, queue_id, CALLER),
        )
        self.ops["lanes changed"] += 1

    async def delete_one_in_bulk(self, queue_id: UUID) -> None:
        """One message that a bulk delete's search finds, deleted by it."""
        marker = MessageToStore(uuid.uuid4(), '{"n": 99}', Priority.LOW, 600, 0)
        await self.repository.messages.enqueue(queue_id, [marker])
        self.ops["enqueue"] += 1
        self.ops["enqueued"] += 1
        audit = AuditEntry.of_queue(AuditAction.MESSAGE_DELETED, queue_id, CALLER)
        deleted = await self.repository.browser.delete_messages(
            queue_id, state=None, search=Search(match={"n": 99}), limit=5, audit=audit
        )
        assert deleted == 1
        self.ops["messages deleted in bulk"] += deleted

    async def exhaust_one_message(self, scratch_url: str, queue_id: UUID) -> UUID:
        """One message into a queue that allows a single delivery, delivered, its lease
        run out, and dead-lettered by the next dequeue; returns its id."""
        message = MessageToStore(uuid.uuid4(), "last", Priority.MEDIUM, 600, 0)
        await self.repository.messages.enqueue(queue_id, [message])
        self.ops["enqueue"] += 1
        self.ops["enqueued"] += 1
        for expected_delivered, expected_dead in ((1, 0), (0, 1)):
            result = await self.repository.messages.dequeue(
                queue_id, limit=1, visibility_timeout_seconds=5, dead_letter_batch_size=100
            )
            assert (len(result.messages), result.dead_lettered) == (
                expected_delivered,
                expected_dead,
            )
            self.ops["delivered"] += len(result.messages)
            self.ops["dead-lettered"] += result.dead_lettered
            await advance_database_clock(scratch_url, 6)
        return message.id

    async def redrive_and_delete(self, queue_id: UUID, redrive: UUID, delete: UUID) -> None:
        assert await self.repository.dead_letters.redrive_dead_letter(
            queue_id,
            redrive,
            uuid.uuid4(),
            AuditEntry.of_dead_letter(AuditAction.DEAD_LETTER_REDRIVEN, queue_id, redrive, CALLER),
        )
        self.ops["redriven"] += 1
        self.ops["enqueued"] += 1
        assert await self.repository.dead_letters.delete_dead_letter(
            queue_id,
            delete,
            AuditEntry.of_dead_letter(AuditAction.DEAD_LETTER_DELETED, queue_id, delete, CALLER),
        )
        self.ops["dead letters deleted"] += 1

    async def burst(self, actors: int, steps: int) -> None:
        """``actors`` concurrent tasks, each doing ``steps`` random operations."""

        async def actor() -> None:
            for _ in range(steps):
                roll = self.rng.random()
                if roll < 0.3:
                    await self.enqueue()
                elif roll < 0.35:
                    await self.enqueue_idempotent()
                elif roll < 0.75:
                    await self.dequeue_and_maybe_ack()
                elif roll < 0.8:
                    await self.release()
                elif roll < 0.88:
                    await self.clean()
                elif roll < 0.92:
                    await self.purge_dead_letters()
                else:
                    await self.operate()

        await asyncio.gather(*(actor() for _ in range(actors)))


async def test_the_rollup_equals_a_full_count_after_a_random_concurrent_workload(
    scratch_url: str, engine: AsyncEngine
) -> None:
    rng = random.Random(20261129)
    lanes = await insert_queue(engine, "lanes", max_attempts=2, completed_retention=20)
    wide = await insert_queue(engine, "wide", group_max_in_flight=3, max_in_flight=12)
    queues = {
        await insert_queue(engine, "once", max_attempts=1): 1,
        await insert_queue(engine, "twice", max_attempts=2): 2,
        await insert_queue(engine, "often", max_attempts=5): 5,
        lanes: 2,
        wide: 5,
    }
    work = Workload(engine, queues, rng)
    work.grouped = {lanes, wide}
    # Start with a backlog, so the dequeuers have something to fight over.
    await asyncio.gather(*(work.enqueue() for _ in range(30)))
    await assert_rollup_exact(scratch_url)

    async def assert_exact() -> None:
        await assert_rollup_exact(scratch_url)
        # What happened, as the rollup's cumulative counts say (the queue history's source).
        assert await cumulative_counts(scratch_url) == {
            "enqueued": work.ops["enqueued"],
            "delivered": work.ops["delivered"],
            "acknowledged": work.ops["acknowledged"],
            "dead_lettered": work.ops["dead-lettered"],
            "expired": work.ops["expired"],
        }

    for round_ in range(5):
        await work.burst(actors=12, steps=15)
        await assert_exact()
        # Leases end (retries, exhausted messages to dead-letter), delays end, some expire.
        await advance_database_clock(scratch_url, rng.choice((6, 10, 30)))
        await work.burst(actors=12, steps=10)
        await assert_exact()
        if round_ == 2:
            await advance_database_clock(scratch_url, 3601)  # dead letters past retention

    # The random traffic may have redriven, deleted or purged every dead letter it made, so
    # three more are made on purpose: one is redriven, one deleted, and the retention purge
    # below must count the third.
    last = await insert_queue(engine, "last", max_attempts=1)
    dead = [await work.exhaust_one_message(scratch_url, last) for _ in range(3)]
    await work.redrive_and_delete(last, dead[0], dead[1])
    # How the actors interleave varies from run to run, and with it which kinds of change
    # the random traffic made: the two it can miss are made once more on purpose.
    await work.change_lanes(wide)
    await work.delete_one_in_bulk(last)
    await assert_exact()

    # Everything expires; the cleaners empty the store; every counter is back to zero.
    await advance_database_clock(scratch_url, 4000)
    while expired := sum(g.count for g in await work.maintenance.delete_expired_messages(500)):
        work.ops["expired"] += expired
    while cleaned := await work.maintenance.delete_completed_messages(500):
        work.ops["completed cleaned"] += cleaned
    while purged := sum(
        g.count for g in await work.maintenance.delete_dead_letters_older_than(3600, 500)
    ):
        work.ops["dead letters purged"] += purged
    assert await assert_rollup_exact(scratch_url) == {}
    await assert_exact()

    print("workload:", dict(work.ops))
    for kind in (
        "enqueue",
        "batch enqueue",
        "idempotent enqueue",
        "dequeue",
        "delivered",
        "acknowledged",
        "released",
        "redriven",
        "dead letters deleted",
        "messages deleted",
        "messages deleted in bulk",
        "purged",
        "limit changed",
        "lanes changed",
        "unclaimed",
        "completed cleaned",
    ):
        assert work.ops[kind] > 0, kind
    assert work.ops["dead-lettered"] > 0
    assert work.ops["expired"] > 0
    assert work.ops["dead letters purged"] > 0


async def test_a_batch_enqueue_writes_the_counter_rows_of_one_shard(
    scratch_url: str, engine: AsyncEngine
) -> None:
    # The API's batch ids share their counter shard (adapters/ids.py), so concurrent batch
    # enqueues to one queue rarely wait on each other's counter row locks.
    queue_id = await insert_queue(engine, "batches")
    repository = PostgresStorage(engine)
    ids = Uuid7Generator().new_ids(100)
    await repository.messages.enqueue(
        queue_id, [MessageToStore(i, "x", list(Priority)[n % 3], 600, 0) for n, i in enumerate(ids)]
    )
    connection = await asyncpg.connect(plain_url(scratch_url))
    try:
        rows = await connection.fetch(
            "SELECT shard, sum(ready) AS ready FROM queue_state_rollup WHERE queue_id = $1 "
            "GROUP BY shard",
            queue_id,
        )
    finally:
        await connection.close()
    assert [(row["shard"], row["ready"]) for row in rows] == [(ids[0].int & 0x1F, 100)]
    await assert_rollup_exact(scratch_url)


async def test_a_retry_moves_no_physical_count_and_counts_one_more_delivery(
    scratch_url: str, engine: AsyncEngine
) -> None:
    queue_id = await insert_queue(engine, "retry", max_attempts=3)
    repository = PostgresStorage(engine)
    await repository.messages.enqueue(
        queue_id, [MessageToStore(uuid.uuid4(), "x", Priority.HIGH, 600, 0)]
    )

    async def dequeue() -> int:
        result = await repository.messages.dequeue(
            queue_id,
            limit=1,
            visibility_timeout_seconds=5,
            dead_letter_batch_size=100,
        )
        [message] = result.messages
        return message.delivery_attempts

    assert await dequeue() == 1  # READY -> IN_FLIGHT: the counters move
    assert await assert_rollup_exact(scratch_url) == {(queue_id, 3): (0, 1, 0, 0)}
    await advance_database_clock(scratch_url, 6)
    assert await dequeue() == 2  # IN_FLIGHT -> IN_FLIGHT: a retry, claimed directly
    assert await assert_rollup_exact(scratch_url) == {(queue_id, 3): (0, 1, 0, 0)}
    assert (await cumulative_counts(scratch_url))["delivered"] == 2


async def test_a_counter_that_would_go_negative_fails_the_transaction(
    scratch_url: str, engine: AsyncEngine
) -> None:
    queue_id = await insert_queue(engine, "negative")
    repository = PostgresStorage(engine)
    ids = [uuid.uuid4(), uuid.uuid4()]
    await repository.messages.enqueue(
        queue_id, [MessageToStore(i, "x", Priority.LOW, 600, 0) for i in ids]
    )
    connection = await asyncpg.connect(plain_url(scratch_url))
    try:
        # A counter row that says zero while its message exists...
        shard = await connection.fetchval(
            f"SELECT {SHARD} FROM queue_message WHERE id = $1", ids[0]
        )
        await connection.execute(
            "UPDATE queue_state_rollup SET ready = 0 "
            "WHERE queue_id = $1 AND priority = 1 AND shard = $2",
            queue_id,
            shard,
        )
    finally:
        await connection.close()
    # ... makes the purge that would take it below zero fail as a whole.
    with pytest.raises(DBAPIError) as failure:
        await repository.queues.purge_queue(
            queue_id, AuditEntry.of_queue(AuditAction.QUEUE_PURGED, queue_id, CALLER)
        )
    assert sqlstate(failure.value) == "23514"  # check_violation
    connection = await asyncpg.connect(plain_url(scratch_url))
    try:
        assert await connection.fetchval("SELECT count(*) FROM queue_message") == 2
    finally:
        await connection.close()


async def test_the_migrations_count_rows_stored_before_them(
    postgres_server: PostgresServer,
) -> None:
    url = await create_database(postgres_server, migrate=False)
    try:
        await asyncio.to_thread(command.upgrade, alembic_config(url), "0001")
        connection = await asyncpg.connect(plain_url(url))
        try:
            # Nothing but raw rows: no trigger may count them (there are none yet; and
            # user triggers are disabled in case a later revision of 0001 adds some).
            await connection.execute("ALTER TABLE queue_message DISABLE TRIGGER USER")
            await connection.execute("ALTER TABLE queue_dead_letter_message DISABLE TRIGGER USER")
            queues = []
            for name in ("left", "right"):
                queue_id = uuid.uuid4()
                await connection.execute(
                    "INSERT INTO queue (id, name, visibility_timeout_seconds, "
                    "max_delivery_attempts, default_message_ttl_seconds) "
                    "VALUES ($1, $2, 30, 5, 3600)",
                    queue_id,
                    name,
                )
                queues.append(queue_id)
            await connection.execute(
                """
                INSERT INTO queue_message
                    (id, queue_id, payload, priority, state, enqueued_at, expires_at,
                     available_after, delivery_attempts, receipt_handle)
                SELECT gen_random_uuid(), ($1::uuid[])[1 + g % 2], 'x', 1 + g % 3,
                       CASE WHEN g % 5 = 0 THEN 2 ELSE 1 END, now(), now() + interval '1 h',
                       CASE WHEN g % 5 = 0 OR g % 5 = 1 THEN now() + interval '10 min'
                            ELSE now() END,
                       CASE WHEN g % 5 = 0 THEN 1 ELSE 0 END,
                       CASE WHEN g % 5 = 0 THEN gen_random_uuid() END
                FROM generate_series(1, 3000) AS g
                """,
                queues,
            )
            await connection.execute(
                """
                INSERT INTO queue_dead_letter_message
                    (id, queue_id, enqueue_order, payload, priority, delivery_attempts,
                     enqueued_at, dead_lettered_at, reason)
                SELECT gen_random_uuid(), ($1::uuid[])[1 + g % 2], g, 'x', 1 + g % 3, 5,
                       now(), now(), 'MAX_DELIVERY_ATTEMPTS_EXHAUSTED'
                FROM generate_series(1, 700) AS g
                """,
                queues,
            )
            await connection.execute("ALTER TABLE queue_message ENABLE TRIGGER USER")
            await connection.execute("ALTER TABLE queue_dead_letter_message ENABLE TRIGGER USER")
        finally:
            await connection.close()

        await asyncio.to_thread(command.upgrade, alembic_config(url), "head")

        # 0002 counted them; 0005 made the never-delivered ones inside their delay DELAYED.
        counts = await assert_rollup_exact(url)
        assert sum(c[0] for c in counts.values()) == 1800
        assert sum(c[1] for c in counts.values()) == 600
        assert sum(c[2] for c in counts.values()) == 600
        assert sum(c[3] for c in counts.values()) == 700
        assert len(counts) == 6  # two queues, three priorities each

        # And from here on the statements keep it exact.
        engine = create_engine(url, max_connections=2)
        try:
            repository = PostgresStorage(engine)
            await repository.messages.enqueue(
                queues[0], [MessageToStore(uuid.uuid4(), "x", Priority.HIGH, 60, 0)]
            )
            result = await repository.messages.dequeue(
                queues[1],
                limit=10,
                visibility_timeout_seconds=30,
                dead_letter_batch_size=10,
            )
            assert len(result.messages) == 10
        finally:
            await engine.dispose()
        after = await assert_rollup_exact(url)
        assert sum(c[0] for c in after.values()) == 1800 + 1 - 10
        assert sum(c[1] for c in after.values()) == 600 + 10
    finally:
        await drop_database(postgres_server, url)


async def test_concurrent_dequeues_that_dead_letter_never_fail_with_a_deadlock(
    scratch_url: str, engine: AsyncEngine
) -> None:
    queue_id = await insert_queue(engine, "contended", max_attempts=1)
    repository = PostgresStorage(engine)

    def messages(n: int) -> list[MessageToStore]:
        return [MessageToStore(uuid.uuid4(), "x", Priority(1 + i % 3), 600, 0) for i in range(n)]

    await repository.messages.enqueue(queue_id, messages(600))
    for _ in range(6):
        await repository.messages.dequeue(
            queue_id,
            limit=100,
            visibility_timeout_seconds=1,
            dead_letter_batch_size=100,
        )
    await advance_database_clock(scratch_url, 2)  # 600 exhausted leases to dead-letter
    await repository.messages.enqueue(queue_id, messages(300))
    failures: Counter[str] = Counter()
    failed = asyncio.Event()  # the first failure ends the run: each deadlock costs 1 s

    async def consumer() -> None:
        while not failed.is_set():
            try:
                result = await repository.messages.dequeue(
                    queue_id,
                    limit=3,
                    visibility_timeout_seconds=600,
                    dead_letter_batch_size=3,
                )
            except DBAPIError as error:
                failures[sqlstate(error) or "?"] += 1
                failed.set()
                return
            if not result.messages and not result.dead_lettered:
                return

    await asyncio.gather(*(consumer() for _ in range(10)))
    await assert_rollup_exact(scratch_url)
    assert failures == {}, f"dequeue failed: {dict(failures)}"
