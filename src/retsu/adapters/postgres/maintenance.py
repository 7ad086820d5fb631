"""Bulk removals for the cleaners, one bounded transaction per batch.

Rows are locked in a fixed order (expiry, then id) with SKIP LOCKED, so several
cleaner replicas split the work between them instead of waiting on each other.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from retsu.adapters.postgres.tables import MessageState
from retsu.domain.maintenance import (
    NEVER_DELIVERED,
    PREVIOUSLY_DELIVERED,
    ExpiredMessages,
    PurgedDeadLetters,
)

_DELETE_EXPIRED = sa.text(
    f"""
    WITH doomed AS (
        SELECT id FROM queue_message
        WHERE expires_at <= now()
          AND (state = {int(MessageState.READY)} OR available_after <= now())
        ORDER BY expires_at, id
        LIMIT :batch_size
        FOR UPDATE SKIP LOCKED
    ), deleted AS (
        DELETE FROM queue_message AS m USING doomed
        WHERE m.id = doomed.id
        RETURNING m.queue_id, m.delivery_attempts > 0 AS previously_delivered
    )
    SELECT q.name, deleted.previously_delivered, count(*) AS removed
    FROM deleted JOIN queue AS q ON q.id = deleted.queue_id
    GROUP BY q.name, deleted.previously_delivered
    """
)

_DELETE_OLD_DEAD_LETTERS = sa.text(
    """
    WITH doomed AS (
        SELECT id FROM queue_dead_letter_message
        WHERE dead_lettered_at < now() - make_interval(secs => :retention_seconds)
        ORDER BY dead_lettered_at, id
        LIMIT :batch_size
        FOR UPDATE SKIP LOCKED
    ), deleted AS (
        DELETE FROM queue_dead_letter_message AS d USING doomed
        WHERE d.id = doomed.id
        RETURNING d.queue_id
    )
    SELECT q.name, count(*) AS removed
    FROM deleted JOIN queue AS q ON q.id = deleted.queue_id
    GROUP BY q.name
    """
)


class PostgresMaintenance:
    """Implements MessageMaintenance."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def delete_expired_messages(self, batch_size: int) -> list[ExpiredMessages]:
        async with self._engine.begin() as connection:
            rows = (await connection.execute(_DELETE_EXPIRED, {"batch_size": batch_size})).all()
        return [
            ExpiredMessages(
                queue_name=row.name,
                delivery_history=PREVIOUSLY_DELIVERED
                if row.previously_delivered
                else NEVER_DELIVERED,
                count=int(row.removed),
            )
            for row in rows
        ]

    async def delete_dead_letters_older_than(
        self, retention_seconds: int, batch_size: int
    ) -> list[PurgedDeadLetters]:
        async with self._engine.begin() as connection:
            rows = (
                await connection.execute(
                    _DELETE_OLD_DEAD_LETTERS,
                    {"retention_seconds": float(retention_seconds), "batch_size": batch_size},
                )
            ).all()
        return [PurgedDeadLetters(queue_name=row.name, count=int(row.removed)) for row in rows]
