"""The PostgreSQL repository: queues and messages, one transaction per change.

Times come from the database clock (``now()``), never from the API host.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from retsu.adapters.postgres.errors import (
    FOREIGN_KEY_VIOLATION,
    UNIQUE_VIOLATION,
    sqlstate,
)
from retsu.adapters.postgres.tables import MessageState, queue
from retsu.domain.errors import QueueAlreadyExists, QueueNotFound
from retsu.domain.message import (
    REASON_MAX_DELIVERY_ATTEMPTS_EXHAUSTED,
    DeliveredMessage,
    DequeueResult,
    MessageToStore,
    Priority,
    Receipt,
)
from retsu.domain.queue import Queue, QueueSettings, QueueSettingsUpdate
from retsu.domain.receipt import parse_receipt_handle

READY = int(MessageState.READY)
IN_FLIGHT = int(MessageState.IN_FLIGHT)

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
        SELECT id
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
           EXISTS (SELECT 1 FROM queue WHERE id = :queue_id) AS queue_exists
    FROM (SELECT count(*) AS dead_lettered FROM buried) AS counts
    LEFT JOIN claimed ON true
    """
)

_ACKNOWLEDGE = sa.text(
    f"""
    DELETE FROM queue_message AS m
    USING unnest(CAST(:ids AS uuid[]), CAST(:handles AS uuid[])) AS r(id, handle)
    WHERE m.id = r.id AND m.queue_id = :queue_id AND m.state = {IN_FLIGHT}
      AND m.receipt_handle = r.handle AND m.available_after > now()
    """
)


def _queue_from_row(row: Any) -> Queue:
    return Queue(
        id=row.id,
        name=row.name,
        settings=QueueSettings(
            visibility_timeout_seconds=row.visibility_timeout_seconds,
            max_delivery_attempts=row.max_delivery_attempts,
            default_message_ttl_seconds=row.default_message_ttl_seconds,
        ),
        paused=row.paused,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


class PostgresRepository:
    """Implements QueueRepository and MessageRepository on PostgreSQL."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    # -- queues ---------------------------------------------------------------

    async def add_queue(self, new: Queue) -> Queue:
        statement = (
            sa.insert(queue)
            .values(
                id=new.id,
                name=new.name,
                visibility_timeout_seconds=new.settings.visibility_timeout_seconds,
                max_delivery_attempts=new.settings.max_delivery_attempts,
                default_message_ttl_seconds=new.settings.default_message_ttl_seconds,
                paused=new.paused,
                created_at=sa.func.now(),
                updated_at=sa.func.now(),
            )
            .returning(*queue.c)
        )
        try:
            async with self._engine.begin() as connection:
                row = (await connection.execute(statement)).one()
        except IntegrityError as error:
            if sqlstate(error) == UNIQUE_VIOLATION:
                raise QueueAlreadyExists(new.name) from None
            raise
        return _queue_from_row(row)

    async def get_queue(self, queue_id: UUID) -> Queue | None:
        async with self._engine.connect() as connection:
            row = (
                await connection.execute(sa.select(*queue.c).where(queue.c.id == queue_id))
            ).one_or_none()
        return None if row is None else _queue_from_row(row)

    async def update_queue(self, queue_id: UUID, update: QueueSettingsUpdate) -> Queue | None:
        values: dict[str, Any] = {"updated_at": sa.func.now()}
        if update.visibility_timeout_seconds is not None:
            values["visibility_timeout_seconds"] = update.visibility_timeout_seconds
        if update.max_delivery_attempts is not None:
            values["max_delivery_attempts"] = update.max_delivery_attempts
        if update.default_message_ttl_seconds is not None:
            values["default_message_ttl_seconds"] = update.default_message_ttl_seconds
        statement = (
            sa.update(queue).where(queue.c.id == queue_id).values(**values).returning(*queue.c)
        )
        async with self._engine.begin() as connection:
            row = (await connection.execute(statement)).one_or_none()
        return None if row is None else _queue_from_row(row)

    # -- messages -------------------------------------------------------------

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
            async with self._engine.begin() as connection:
                await connection.execute(_ENQUEUE, parameters)
        except DBAPIError as error:
            if sqlstate(error) == FOREIGN_KEY_VIOLATION:
                raise QueueNotFound(queue_id) from None
            raise

    async def dequeue(
        self,
        queue_id: UUID,
        *,
        limit: int,
        visibility_timeout_seconds: int,
        max_delivery_attempts: int,
        dead_letter_batch_size: int,
    ) -> DequeueResult:
        async with self._engine.begin() as connection:
            rows = (
                await connection.execute(
                    _DEQUEUE,
                    {
                        "queue_id": queue_id,
                        "limit": limit,
                        "visibility_timeout": float(visibility_timeout_seconds),
                        "max_attempts": max_delivery_attempts,
                        "elapsed_batch": dead_letter_batch_size,
                        "reason": REASON_MAX_DELIVERY_ATTEMPTS_EXHAUSTED,
                    },
                )
            ).all()
        if not rows[0].queue_exists:
            raise QueueNotFound(queue_id)
        dead_lettered = int(rows[0].dead_lettered)
        claimed = sorted(
            (row for row in rows if row.id is not None),
            key=lambda row: (-row.priority, row.enqueue_order),
        )
        return DequeueResult(
            messages=[
                DeliveredMessage(
                    id=row.id,
                    payload=row.payload,
                    priority=Priority(row.priority),
                    receipt_handle=str(row.receipt_handle),
                    delivery_attempts=row.delivery_attempts,
                    enqueued_at=row.enqueued_at,
                )
                for row in claimed
            ],
            dead_lettered=dead_lettered,
        )

    async def acknowledge(self, queue_id: UUID, receipts: Sequence[Receipt]) -> int:
        ids: list[UUID] = []
        handles: list[UUID] = []
        for receipt in receipts:
            handle = parse_receipt_handle(receipt.receipt_handle)
            if handle is not None:  # a handle that is not even a UUID is simply stale
                ids.append(receipt.message_id)
                handles.append(handle)
        if not ids:
            return 0
        async with self._engine.begin() as connection:
            result = await connection.execute(
                _ACKNOWLEDGE, {"queue_id": queue_id, "ids": ids, "handles": handles}
            )
        return int(result.rowcount)
