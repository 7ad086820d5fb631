"""Dead-letter records on PostgreSQL: list, read, redrive (one or many), delete.

Listing is newest first, by (dead_lettered_at, enqueue_order) descending; bulk redrive
takes the exact reverse, oldest first. Redrives and deletions are operator actions:
like purge and delete they give way to message traffic (a dequeue that dead-letters
touches the same state counters), write their audit row in the same transaction, and
are not repeated when their connection breaks while committing (a bulk redrive run
twice would move more records than asked).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from retsu.adapters.postgres.audit_log import audit_insert
from retsu.adapters.postgres.counters import COUNT_NEW_READY, uncount_dead_letters
from retsu.adapters.postgres.database import Database
from retsu.adapters.postgres.queues import OPERATOR_ATTEMPTS
from retsu.adapters.postgres.tables import MessageState, queue_dead_letter_message
from retsu.domain.audit import AuditEntry
from retsu.domain.message import DeadLetter, Priority
from retsu.domain.pagination import DeadLetterPosition

READY = int(MessageState.READY)

# Redrive: the record leaves dead-letter storage and comes back as a fresh message (new id,
# attempts 0, the queue's default lifetime read in the same statement, same priority,
# ``redriven_from`` naming the record), in one statement that also moves the counts. The
# bulk form takes the oldest records first, skipping any another redrive holds, and gives
# them the new ids (and enqueue order) in that order.
_REDRIVE_ONE = sa.text(
    f"""
    WITH moved AS (
        DELETE FROM queue_dead_letter_message
        WHERE queue_id = :queue_id AND id = :message_id
        RETURNING id, queue_id, payload, priority
    ), {uncount_dead_letters("moved")}, stored AS (
        INSERT INTO queue_message
            (id, queue_id, payload, priority, state, enqueued_at, expires_at, available_after,
             delivery_attempts, redriven_from)
        SELECT CAST(:new_id AS uuid), q.id, moved.payload, moved.priority, {READY}, now(),
               now() + make_interval(secs => q.default_message_ttl_seconds), now(), 0, moved.id
        FROM moved JOIN queue AS q ON q.id = :queue_id
        RETURNING id, priority
    )
    SELECT id, priority FROM stored
    """
)
_REDRIVE_MANY = sa.text(
    f"""
    WITH picked AS (
        SELECT id
        FROM queue_dead_letter_message
        WHERE queue_id = :queue_id
        ORDER BY dead_lettered_at, enqueue_order
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    ), moved AS (
        DELETE FROM queue_dead_letter_message AS d
        USING picked
        WHERE d.id = picked.id
        RETURNING d.id, d.queue_id, d.payload, d.priority, d.dead_lettered_at, d.enqueue_order
    ), {uncount_dead_letters("moved")}, numbered AS (
        SELECT id, payload, priority,
               row_number() OVER (ORDER BY dead_lettered_at, enqueue_order) AS n
        FROM moved
    ), stored AS (
        INSERT INTO queue_message
            (id, queue_id, payload, priority, state, enqueued_at, expires_at, available_after,
             delivery_attempts, redriven_from)
        SELECT ids.id, q.id, numbered.payload, numbered.priority, {READY}, now(),
               now() + make_interval(secs => q.default_message_ttl_seconds), now(), 0,
               numbered.id
        FROM numbered
        JOIN unnest(CAST(:ids AS uuid[])) WITH ORDINALITY AS ids(id, n) ON ids.n = numbered.n
        JOIN queue AS q ON q.id = :queue_id
        ORDER BY numbered.n
        RETURNING id, priority, redriven_from
    )
    SELECT id, priority, redriven_from FROM stored
    """
)
# ... then, in the same transaction, the redriven messages are counted (counters.py).
_COUNT_REDRIVEN = sa.text(COUNT_NEW_READY)

_DELETE_ONE = sa.text(
    f"""
    WITH removed AS (
        DELETE FROM queue_dead_letter_message
        WHERE queue_id = :queue_id AND id = :message_id
        RETURNING id, queue_id, priority
    ), {uncount_dead_letters("removed")}
    SELECT count(*) AS removed FROM removed
    """
)

_DEAD_LETTER_COLUMNS = (
    queue_dead_letter_message.c.id,
    queue_dead_letter_message.c.queue_id,
    queue_dead_letter_message.c.payload,
    queue_dead_letter_message.c.priority,
    queue_dead_letter_message.c.delivery_attempts,
    queue_dead_letter_message.c.enqueued_at,
    queue_dead_letter_message.c.last_delivered_at,
    queue_dead_letter_message.c.dead_lettered_at,
    queue_dead_letter_message.c.reason,
    queue_dead_letter_message.c.enqueue_order,
)


async def _redriven(
    connection: AsyncConnection,
    statement: sa.TextClause,
    parameters: dict[str, Any],
    queue_id: UUID,
) -> list[Any]:
    """Run a redrive statement, then count the messages it stored; what it stored."""
    rows = list((await connection.execute(statement, parameters)).all())
    if rows:
        await connection.execute(
            _COUNT_REDRIVEN,
            {
                "queue_id": queue_id,
                "ids": [row.id for row in rows],
                "priorities": [row.priority for row in rows],
            },
        )
    return rows


def _dead_letter_from_row(row: Any) -> DeadLetter:
    return DeadLetter(
        id=row.id,
        queue_id=row.queue_id,
        payload=row.payload,
        priority=Priority(row.priority),
        delivery_attempts=row.delivery_attempts,
        enqueued_at=row.enqueued_at,
        last_delivered_at=row.last_delivered_at,
        dead_lettered_at=row.dead_lettered_at,
        reason=row.reason,
    )


class PostgresDeadLetters:
    """Implements DeadLetterRepository."""

    def __init__(self, database: Database) -> None:
        self._database = database

    async def list_dead_letters(
        self, queue_id: UUID, *, limit: int, after: DeadLetterPosition | None
    ) -> list[tuple[DeadLetter, DeadLetterPosition]]:
        t = queue_dead_letter_message
        statement = (
            sa.select(*_DEAD_LETTER_COLUMNS)
            .where(t.c.queue_id == queue_id)
            .order_by(t.c.dead_lettered_at.desc(), t.c.enqueue_order.desc())
            .limit(limit)
        )
        if after is not None:
            statement = statement.where(
                sa.tuple_(t.c.dead_lettered_at, t.c.enqueue_order)
                < sa.tuple_(
                    sa.bindparam(
                        "after_at", after.dead_lettered_at, type_=t.c.dead_lettered_at.type
                    ),
                    sa.bindparam("after_order", after.enqueue_order, type_=sa.BigInteger),
                )
            )

        async def read(connection: AsyncConnection) -> list[tuple[DeadLetter, DeadLetterPosition]]:
            return [
                (
                    _dead_letter_from_row(row),
                    DeadLetterPosition(row.dead_lettered_at, row.enqueue_order),
                )
                for row in await connection.execute(statement)
            ]

        return await self._database.read(read, operation="list_dead_letters")

    async def get_dead_letter(self, queue_id: UUID, message_id: UUID) -> DeadLetter | None:
        t = queue_dead_letter_message
        statement = sa.select(*_DEAD_LETTER_COLUMNS).where(
            t.c.queue_id == queue_id, t.c.id == message_id
        )

        async def read(connection: AsyncConnection) -> Any:
            return (await connection.execute(statement)).one_or_none()

        row = await self._database.read(read, operation="get_dead_letter")
        return None if row is None else _dead_letter_from_row(row)

    async def redrive_dead_letter(
        self, queue_id: UUID, message_id: UUID, new_id: UUID, audit: AuditEntry
    ) -> bool:
        parameters = {"queue_id": queue_id, "message_id": message_id, "new_id": new_id}

        async def redrive(connection: AsyncConnection) -> bool:
            if not await _redriven(connection, _REDRIVE_ONE, parameters, queue_id):
                return False
            await connection.execute(audit_insert(audit))
            return True

        return await self._database.yielding(
            redrive, operation="redrive_dead_letter", attempts=OPERATOR_ATTEMPTS
        )

    async def redrive_dead_letters(
        self, queue_id: UUID, new_ids: Sequence[UUID], audit: AuditEntry
    ) -> int:
        parameters = {"queue_id": queue_id, "ids": list(new_ids), "limit": len(new_ids)}

        async def redrive(connection: AsyncConnection) -> int:
            stored = await _redriven(connection, _REDRIVE_MANY, parameters, queue_id)
            # The audit row names both ids of every record moved (SPEC §3.6).
            pairs = {str(row.redriven_from): str(row.id) for row in stored}
            await connection.execute(
                audit_insert(audit.with_details(redriven=len(stored), new_message_ids=pairs))
            )
            return len(stored)

        return await self._database.yielding(
            redrive, operation="redrive_dead_letters", attempts=OPERATOR_ATTEMPTS
        )

    async def delete_dead_letter(self, queue_id: UUID, message_id: UUID, audit: AuditEntry) -> bool:
        parameters = {"queue_id": queue_id, "message_id": message_id}

        async def delete(connection: AsyncConnection) -> bool:
            if not (await connection.execute(_DELETE_ONE, parameters)).scalar_one():
                return False
            await connection.execute(audit_insert(audit))
            return True

        return await self._database.yielding(
            delete, operation="delete_dead_letter", attempts=OPERATOR_ATTEMPTS
        )
