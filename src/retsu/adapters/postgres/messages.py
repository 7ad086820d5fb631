"""Queue messages on PostgreSQL: enqueue, claim, acknowledge, change visibility.

Times come from the database clock (``now()``), never from the API host. The four hot
statements run through ``Database.hot``: one statement, one round trip, each its own
transaction on the pooled asyncpg connection. Whether a statement may run again after
its connection broke while it was running (its reply lost, so it may have committed):

* enqueue: no. Without an idempotency key nothing tells a repeat from a new message,
  so the caller gets DatabaseUnavailable (503: it may retry with a key).
* dequeue: yes. A lost claim leaves a lease that simply times out and the message is
  delivered again: the at-least-once delivery a consumer already handles. Messages it
  moved to dead-letter storage moved in the same transaction, exactly once.
* acknowledge: yes. A second run finds the message gone and deletes nothing.
* change visibility: yes. A second run sets the same lease end a moment later (after a
  release to 0 it finds the lease over and answers "not the current delivery").
* idempotent enqueue: yes. Its key makes a repeat find the first run's message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

import asyncpg
import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from retsu.adapters.postgres.database import Database, HotStatement
from retsu.adapters.postgres.errors import FOREIGN_KEY_VIOLATION, sqlstate
from retsu.adapters.postgres.tables import MessageState, queue
from retsu.domain.errors import IdempotencyKeyConflict, QueueNotFound
from retsu.domain.idempotency import IDEMPOTENCY_KEY_RETENTION_SECONDS, IdempotentEnqueued
from retsu.domain.message import (
    REASON_MAX_DELIVERY_ATTEMPTS_EXHAUSTED,
    DeliveredMessage,
    DequeueResult,
    MessageToStore,
    Priority,
    Receipt,
)
from retsu.domain.receipt import parse_receipt_handle

READY = int(MessageState.READY)
IN_FLIGHT = int(MessageState.IN_FLIGHT)

# Claims, acknowledgements and visibility changes commit without waiting for their WAL
# flush (synchronous_commit = off for that one statement's own transaction; the
# setting is read at commit, before a local setting ends). A PostgreSQL crash can
# lose the last few hundred milliseconds of them, and then the message is simply
# delivered again: exactly what at-least-once delivery already promises a consumer
# (a lost acknowledgement means a redelivery, a lost claim a fresh delivery; nothing
# is lost and no message is stored twice). Enqueues, idempotency keys, redrives and
# every operator action stay fully durable. Measured: ~+10-30 % dequeue+ack
# throughput on these machines, whose commits wait on a slow fsync (docs/performance.md).
_RELAXED_COMMIT = "set_config('synchronous_commit', 'off', true) AS relaxed_commit"

_ENQUEUE = sa.text(
    f"""
    INSERT INTO queue_message
        (id, queue_id, payload, priority, state, enqueued_at, expires_at, available_after,
         delivery_attempts)
    SELECT m.id, :queue_id, m.payload, m.priority, {READY}, now(),
           now() + make_interval(secs => m.ttl), now() + make_interval(secs => m.delay), 0
    FROM unnest(CAST(:ids AS uuid[]), CAST(:payloads AS text[]), CAST(:priorities AS smallint[]),
                CAST(:ttls AS integer[]), CAST(:delays AS integer[]))
         WITH ORDINALITY AS m(id, payload, priority, ttl, delay, ordinality)
    ORDER BY m.ordinality
    """
)

# One statement, so one round trip and one transaction:
#  * exhausted: a bounded batch of elapsed leases with no attempts left (of unexpired
#    messages: expired ones belong to the expired-message cleaner) moves to
#    dead-letter storage (dead, buried) before anything is claimed;
#  * retryable: a bounded batch of elapsed leases with attempts left, scanned
#    separately so exhausted leases never crowd them out: an exhausted message never
#    hides a deliverable one;
#  * these compete with the head of the ready part of the order index (ready) in
#    priority/FIFO order (chosen); winners get a fresh lease and receipt handle
#    (claimed); retryable losers become physically READY again (requeued), so the
#    next dequeue finds them in their FIFO place in the order index.
# Every scan takes row locks with SKIP LOCKED: concurrent dequeues never get the
# same delivery and never wait for each other.
_DEQUEUE = sa.text(
    f"""
    WITH exhausted AS (
        SELECT id, priority
        FROM queue_message
        WHERE queue_id = :queue_id AND state = {IN_FLIGHT}
          AND available_after <= now() AND expires_at > now()
          AND delivery_attempts >= :max_attempts
        ORDER BY available_after, enqueue_order
        LIMIT :elapsed_batch
        FOR UPDATE SKIP LOCKED
    ), retryable AS (
        SELECT id, priority, enqueue_order
        FROM queue_message
        WHERE queue_id = :queue_id AND state = {IN_FLIGHT}
          AND available_after <= now() AND expires_at > now()
          AND delivery_attempts < :max_attempts
        ORDER BY available_after, enqueue_order
        LIMIT :elapsed_batch
        FOR UPDATE SKIP LOCKED
    ), ready AS (
        SELECT id, priority, enqueue_order
        FROM queue_message
        WHERE queue_id = :queue_id AND state = {READY}
          AND available_after <= now() AND expires_at > now()
        ORDER BY priority DESC, enqueue_order
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    ), counters AS (
        -- Every rollup counter row this statement's triggers will write, locked now in
        -- key order: the claim, requeue, removal and dead-letter triggers then find
        -- them already held, so this statement takes its counter locks in one ordered
        -- pass, like every other writer, and cannot deadlock with them.
        SELECT 1
        FROM queue_state_rollup AS r
        WHERE r.queue_id = :queue_id
          AND (r.priority, r.shard) IN (
              SELECT touched.priority, (get_byte(uuid_send(touched.id), 15) & 31)::smallint
              FROM (
                  SELECT id, priority FROM exhausted
                  UNION ALL SELECT id, priority FROM retryable
                  UNION ALL SELECT id, priority FROM ready
              ) AS touched
          )
        ORDER BY r.priority, r.shard
        FOR UPDATE
    ), chosen AS (
        SELECT id FROM (
            SELECT id, priority, enqueue_order FROM ready
            UNION ALL
            SELECT id, priority, enqueue_order FROM retryable
        ) AS candidate
        ORDER BY priority DESC, enqueue_order
        LIMIT :limit
    ), claimed AS (
        UPDATE queue_message AS m
        SET state = {IN_FLIGHT},
            delivery_attempts = m.delivery_attempts + 1,
            receipt_handle = gen_random_uuid(),
            available_after = now() + make_interval(secs => :visibility_timeout),
            last_delivered_at = now()
        FROM chosen
        WHERE m.id = chosen.id
        RETURNING m.id, m.payload, m.priority, m.receipt_handle, m.delivery_attempts,
                  m.enqueued_at, m.enqueue_order
    ), requeued AS (
        UPDATE queue_message AS m
        SET state = {READY}
        FROM retryable
        WHERE m.id = retryable.id AND m.id NOT IN (SELECT id FROM chosen)
        RETURNING m.id
    ), dead AS (
        DELETE FROM queue_message AS m
        USING exhausted
        WHERE m.id = exhausted.id
        RETURNING m.id, m.queue_id, m.enqueue_order, m.payload, m.priority,
                  m.delivery_attempts, m.enqueued_at, m.last_delivered_at
    ), buried AS (
        INSERT INTO queue_dead_letter_message
            (id, queue_id, enqueue_order, payload, priority, delivery_attempts, enqueued_at,
             last_delivered_at, dead_lettered_at, reason)
        SELECT id, queue_id, enqueue_order, payload, priority, delivery_attempts, enqueued_at,
               last_delivered_at, now(), :reason
        FROM dead
        RETURNING 1
    )
    SELECT claimed.*, counts.dead_lettered,
           EXISTS (SELECT 1 FROM queue WHERE id = :queue_id) AS queue_exists,
           (SELECT count(*) FROM counters) AS counters_locked,
           {_RELAXED_COMMIT},
           -- Only when nothing was claimed (the subquery is an InitPlan, evaluated on
           -- first use, so a successful claim never runs it): seconds until the next
           -- delay or lease of the queue ends, two index probes. A long poll sleeps
           -- until then instead of polling (docs/long-polling.md).
           CASE WHEN claimed.id IS NULL THEN CAST(EXTRACT(epoch FROM (
               SELECT min(upcoming.at) FROM (
                   (SELECT available_after AS at FROM queue_message
                    WHERE queue_id = :queue_id AND state = {READY} AND delivery_attempts = 0
                      AND available_after > enqueued_at AND available_after > now()
                    ORDER BY available_after LIMIT 1)
                   UNION ALL
                   (SELECT available_after FROM queue_message
                    WHERE queue_id = :queue_id AND state = {IN_FLIGHT} AND available_after > now()
                    ORDER BY available_after LIMIT 1)
               ) AS upcoming
           ) - now()) AS double precision) END AS next_available_in
    FROM (SELECT count(*) AS dead_lettered FROM buried) AS counts
    LEFT JOIN claimed ON true
    """
)

# The existence check rides along: another process's name cache may still know a
# queue that is gone, and then the answer must be queue_not_found, not 204.
_ACKNOWLEDGE = sa.text(
    f"""
    WITH removed AS (
        DELETE FROM queue_message AS m
        USING unnest(CAST(:ids AS uuid[]), CAST(:handles AS uuid[])) AS r(id, handle)
        WHERE m.id = r.id AND m.queue_id = :queue_id AND m.state = {IN_FLIGHT}
          AND m.receipt_handle = r.handle AND m.available_after > now()
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM removed) AS removed,
           EXISTS (SELECT 1 FROM queue WHERE id = :queue_id) AS queue_exists,
           {_RELAXED_COMMIT}
    """
)


# Idempotent enqueue, the first statement: claim the key (a new row, or one older than
# the retention the cleaner has not removed yet) and, only if claimed, insert the
# message — one statement, in the caller's transaction. A concurrent claimer of the
# same key waits here for the other transaction (ON CONFLICT), then finds it taken.
_ENQUEUE_IDEMPOTENT = sa.text(
    f"""
    WITH claimed AS (
        INSERT INTO idempotency_key AS k (queue_id, key, message_id, fingerprint, created_at)
        VALUES (:queue_id, :key, :id, :fingerprint, now())
        ON CONFLICT (queue_id, key) DO UPDATE
        SET message_id = excluded.message_id, fingerprint = excluded.fingerprint,
            created_at = excluded.created_at
        WHERE k.created_at <= now() - make_interval(secs => CAST(:retention AS integer))
        RETURNING k.message_id
    ), stored AS (
        INSERT INTO queue_message
            (id, queue_id, payload, priority, state, enqueued_at, expires_at, available_after,
             delivery_attempts)
        SELECT claimed.message_id, CAST(:queue_id AS uuid), CAST(:payload AS text),
               CAST(:priority AS smallint), {READY}, now(),
               now() + make_interval(secs => CAST(:ttl AS integer)),
               now() + make_interval(secs => CAST(:delay AS integer)), 0
        FROM claimed
        RETURNING id
    )
    SELECT count(*) AS stored FROM stored
    """
)
# ... and when the key was taken: the winner's row, read with a fresh snapshot (a new
# statement), so a winner that committed while we waited is seen.
_IDEMPOTENCY_KEY = sa.text(
    "SELECT message_id, fingerprint FROM idempotency_key WHERE queue_id = :queue_id AND key = :key"
)

_CHANGE_VISIBILITY = sa.text(
    f"""
    WITH changed AS (
        UPDATE queue_message
        SET available_after = now() + make_interval(secs => :timeout)
        WHERE id = :id AND queue_id = :queue_id AND state = {IN_FLIGHT}
          AND receipt_handle = :handle AND available_after > now()
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM changed) AS changed,
           EXISTS (SELECT 1 FROM queue WHERE id = :queue_id) AS queue_exists,
           {_RELAXED_COMMIT}
    """
)

_HOT_ENQUEUE = HotStatement(_ENQUEUE)
_HOT_DEQUEUE = HotStatement(_DEQUEUE)
_HOT_ACKNOWLEDGE = HotStatement(_ACKNOWLEDGE)
_HOT_CHANGE_VISIBILITY = HotStatement(_CHANGE_VISIBILITY)

# Never a receipt handle Retsu hands out (they are random v4 UUIDs).
_NO_HANDLE = UUID(int=0)


class PostgresMessages:
    """Implements MessageRepository."""

    def __init__(self, database: Database) -> None:
        self._database = database

    async def enqueue(self, queue_id: UUID, messages: Sequence[MessageToStore]) -> None:
        parameters = {
            "queue_id": queue_id,
            "ids": [m.id for m in messages],
            "payloads": [m.payload for m in messages],
            "priorities": [int(m.priority) for m in messages],
            "ttls": [m.ttl_seconds for m in messages],
            "delays": [m.delay_seconds for m in messages],
        }

        try:
            await self._database.hot(_HOT_ENQUEUE, parameters, repeatable=False)
        except asyncpg.ForeignKeyViolationError:
            raise QueueNotFound(queue_id) from None

    async def dequeue(
        self,
        queue_id: UUID,
        *,
        limit: int,
        visibility_timeout_seconds: int,
        max_delivery_attempts: int,
        dead_letter_batch_size: int,
    ) -> DequeueResult:
        parameters = {
            "queue_id": queue_id,
            "limit": limit,
            "visibility_timeout": float(visibility_timeout_seconds),
            "max_attempts": max_delivery_attempts,
            "elapsed_batch": dead_letter_batch_size,
            "reason": REASON_MAX_DELIVERY_ATTEMPTS_EXHAUSTED,
        }

        rows = await self._database.hot(_HOT_DEQUEUE, parameters, repeatable=True)
        first = rows[0]
        if not first["queue_exists"]:
            raise QueueNotFound(queue_id)
        claimed = sorted(
            (row for row in rows if row["id"] is not None),
            key=lambda row: (-row["priority"], row["enqueue_order"]),
        )
        return DequeueResult(
            messages=[
                DeliveredMessage(
                    id=row["id"],
                    payload=row["payload"],
                    priority=Priority(row["priority"]),
                    receipt_handle=str(row["receipt_handle"]),
                    delivery_attempts=row["delivery_attempts"],
                    enqueued_at=row["enqueued_at"],
                )
                for row in claimed
            ],
            dead_lettered=int(first["dead_lettered"]),
            next_available_in_seconds=None if claimed else first["next_available_in"],
        )

    async def enqueue_idempotent(
        self, queue_id: UUID, message: MessageToStore, key: str, fingerprint: bytes
    ) -> IdempotentEnqueued:
        parameters = {
            "queue_id": queue_id,
            "key": key,
            "id": message.id,
            "fingerprint": fingerprint,
            "retention": IDEMPOTENCY_KEY_RETENTION_SECONDS,
            "payload": message.payload,
            "priority": int(message.priority),
            "ttl": message.ttl_seconds,
            "delay": message.delay_seconds,
        }

        async def claim(connection: AsyncConnection) -> tuple[bool, Any]:
            """(stored, the key's row when another message holds it)."""
            stored = (await connection.execute(_ENQUEUE_IDEMPOTENT, parameters)).scalar()
            if stored:
                return True, None
            known = await connection.execute(_IDEMPOTENCY_KEY, {"queue_id": queue_id, "key": key})
            return False, known.one_or_none()

        # A key can vanish between the two statements (the cleaner, or the queue being
        # deleted): then the claim is simply tried again.
        for _ in range(3):
            try:
                stored, known = await self._database.transaction(claim, repeatable=True)
            except DBAPIError as error:
                if sqlstate(error) == FOREIGN_KEY_VIOLATION:
                    raise QueueNotFound(queue_id) from None
                raise
            if stored:
                return IdempotentEnqueued(message.id, replayed=False)
            if known is not None:
                if bytes(known.fingerprint) != fingerprint:
                    raise IdempotencyKeyConflict()
                return IdempotentEnqueued(known.message_id, replayed=True)
            if not await self._queue_exists(queue_id):
                raise QueueNotFound(queue_id)
        raise RuntimeError("the Idempotency-Key kept vanishing; try again")

    async def _queue_exists(self, queue_id: UUID) -> bool:
        statement = sa.select(queue.c.id).where(queue.c.id == queue_id)

        async def read(connection: AsyncConnection) -> bool:
            return (await connection.execute(statement)).one_or_none() is not None

        return await self._database.read(read)

    async def change_visibility(
        self, queue_id: UUID, receipt: Receipt, visibility_timeout_seconds: int
    ) -> bool:
        # A handle that is not even a UUID is simply not the current delivery; the
        # statement still runs (matching nothing) so a missing queue is reported.
        handle = parse_receipt_handle(receipt.receipt_handle) or _NO_HANDLE
        parameters = {
            "queue_id": queue_id,
            "id": receipt.message_id,
            "handle": handle,
            "timeout": float(visibility_timeout_seconds),
        }

        (row,) = await self._database.hot(_HOT_CHANGE_VISIBILITY, parameters, repeatable=True)
        if not row["queue_exists"]:
            raise QueueNotFound(queue_id)
        return int(row["changed"]) == 1

    async def acknowledge(self, queue_id: UUID, receipts: Sequence[Receipt]) -> int:
        ids: list[UUID] = []
        handles: list[UUID] = []
        for receipt in receipts:
            handle = parse_receipt_handle(receipt.receipt_handle)
            if handle is not None:  # a handle that is not even a UUID is simply stale
                ids.append(receipt.message_id)
                handles.append(handle)
        parameters = {"queue_id": queue_id, "ids": ids, "handles": handles}

        (row,) = await self._database.hot(_HOT_ACKNOWLEDGE, parameters, repeatable=True)
        if not row["queue_exists"]:
            raise QueueNotFound(queue_id)
        return int(row["removed"])
