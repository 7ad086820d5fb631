"""Dead-letter records on PostgreSQL: list and search, read, redrive (one, many, or those a
search selects), delete (one, or those a search selects).

Listing is newest first, by (dead_lettered_at, enqueue_order) descending; bulk redrive
takes the exact reverse, oldest first. A search (SPEC §3.11: priority, group, ``match``,
reason) is checked on the rows the list's index walk examines — at most
``BROWSE_SCAN_BUDGET`` per page, so a page may come back short with a place to resume.

Redrives and deletions are operator actions: like purge and delete they give way to
message traffic (a dequeue that dead-letters touches the same state counters), write their
audit row in the same transaction, and are not repeated when their connection breaks while
committing (a bulk redrive run twice would move more records than asked). A redriven
record goes back through ``retsu_enqueue`` (migration 0009), the enqueue's own path: into
its group's lane when it had one, counted as enqueued. Its statements run in every
writer's lock order — the records, then group rows (the enqueue), then counter rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from retsu.adapters.postgres.attempts import read_attempts
from retsu.adapters.postgres.audit_log import audit_insert
from retsu.adapters.postgres.bulk import in_batches
from retsu.adapters.postgres.counters import uncount_dead_letters
from retsu.adapters.postgres.database import Database
from retsu.adapters.postgres.queues import OPERATOR_ATTEMPTS
from retsu.adapters.postgres.search import search_parameters
from retsu.domain.audit import AuditEntry
from retsu.domain.browsing import BROWSE_SCAN_BUDGET
from retsu.domain.message import DeadLetter, Priority
from retsu.domain.pagination import DeadLetterPosition, Found
from retsu.domain.search import EVERYTHING, Search

_COLUMNS = (
    "d.id, d.queue_id, d.payload, d.priority, d.delivery_attempts, d.enqueued_at, "
    "d.last_delivered_at, d.dead_lettered_at, d.reason, d.enqueue_order, d.group_key, "
    "d.attempts, d.last_error"
)

# A search's conditions on a record ``d`` (each NULL parameter admits everything).
_SEARCHED = """
    (CAST(:priority AS smallint) IS NULL OR d.priority = :priority)
    AND (CAST(:group AS text) IS NULL OR d.group_key = :group)
    AND (CAST(:reason AS text) IS NULL OR d.reason = :reason)
    AND (CAST(:match AS jsonb) IS NULL OR retsu_jsonb(d.payload) @> CAST(:match AS jsonb))
"""
_AFTER = """
    (CAST(:after_at AS timestamptz) IS NULL
     OR (d.dead_lettered_at, d.enqueue_order) < (:after_at, :after_order))
"""

# A page: the newest records after the position, examining at most the budget; then the
# oldest examined (where a page the budget ended resumes), flagged ``examined_last``.
_LIST = sa.text(
    f"""
    WITH examined AS (
        SELECT {_COLUMNS} FROM queue_dead_letter_message AS d
        WHERE d.queue_id = :queue_id AND {_AFTER}
        ORDER BY d.dead_lettered_at DESC, d.enqueue_order DESC
        LIMIT :budget
    ), found AS (
        SELECT d.*, false AS examined_last FROM examined AS d
        WHERE {_SEARCHED}
        ORDER BY d.dead_lettered_at DESC, d.enqueue_order DESC
        LIMIT :limit
    )
    SELECT * FROM found
    UNION ALL
    (SELECT d.*, true FROM examined AS d
     WHERE (SELECT count(*) FROM examined) = :budget
     ORDER BY d.dead_lettered_at, d.enqueue_order
     LIMIT 1)
    """
)

_GET = sa.text(
    f"SELECT {_COLUMNS} FROM queue_dead_letter_message AS d "
    "WHERE d.queue_id = :queue_id AND d.id = :message_id"
)

# Redrive, part one: the records leave dead-letter storage (oldest first for a bulk
# redrive, skipping any another redrive holds) and come back with what the enqueue needs.
_TAKE_ONE = sa.text(
    """
    DELETE FROM queue_dead_letter_message AS d
    WHERE d.queue_id = :queue_id AND d.id = :message_id
    RETURNING d.id, d.payload, d.priority, d.group_key, d.dead_lettered_at, d.enqueue_order
    """
)
_TAKE_MANY = sa.text(
    f"""
    WITH picked AS (
        SELECT d.id FROM queue_dead_letter_message AS d
        WHERE d.queue_id = :queue_id AND {_SEARCHED}
        ORDER BY d.dead_lettered_at, d.enqueue_order
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    )
    DELETE FROM queue_dead_letter_message AS d
    USING picked
    WHERE d.id = picked.id
    RETURNING d.id, d.payload, d.priority, d.group_key, d.dead_lettered_at, d.enqueue_order
    """
)
# Part two: back as fresh messages (attempts 0, the queue's default lifetime, same priority
# and group, ``redriven_from`` naming the record) — the enqueue's own function.
_ENQUEUE = sa.text(
    "SELECT queue_found FROM retsu_enqueue(CAST(:queue_id AS uuid), CAST(:ids AS uuid[]), "
    "CAST(:payloads AS text[]), CAST(:priorities AS smallint[]), CAST(:ttls AS integer[]), "
    "CAST(:delays AS integer[]), CAST(:groups AS text[]), NULL, CAST(:sources AS uuid[]))"
)
# Part three: the records come off the dead-letter counters.
_UNCOUNT_TAKEN = sa.text(
    """
    UPDATE queue_state_rollup AS c
    SET dead_letters = c.dead_letters - d.n
    FROM (
        SELECT u.priority, retsu_shard(u.id) AS shard, count(*) AS n
        FROM unnest(CAST(:ids AS uuid[]), CAST(:priorities AS smallint[])) AS u(id, priority)
        GROUP BY 1, 2 ORDER BY 1, 2
    ) AS d
    WHERE c.queue_id = :queue_id AND c.priority = d.priority AND c.shard = d.shard
    """
)

_COUNT = sa.text(
    f"""
    SELECT count(*) FROM (
        SELECT 1 FROM queue_dead_letter_message AS d
        WHERE d.queue_id = :queue_id AND {_SEARCHED}
        LIMIT :limit
    ) AS n
    """
)

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
_DELETE_MANY = sa.text(
    f"""
    WITH doomed AS (
        SELECT d.id FROM queue_dead_letter_message AS d
        WHERE d.queue_id = :queue_id AND {_SEARCHED}
        ORDER BY d.dead_lettered_at, d.enqueue_order
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    ), removed AS (
        DELETE FROM queue_dead_letter_message AS d USING doomed
        WHERE d.id = doomed.id
        RETURNING d.id, d.queue_id, d.priority
    ), {uncount_dead_letters("removed")}
    SELECT count(*) AS removed FROM removed
    """
)


def _dead_letter_from_row(row: Any) -> DeadLetter:
    attempts = read_attempts(row.attempts)
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
        group=row.group_key,
        attempts=attempts,
        last_error=row.last_error,
    )


async def _redrive(
    connection: AsyncConnection, queue_id: UUID, taken: list[Any], new_ids: Sequence[UUID]
) -> list[tuple[Any, UUID]]:
    """Parts two and three of a redrive for the records ``taken``, oldest first, given
    ``new_ids`` in that order; each record with its new id."""
    taken = sorted(taken, key=lambda row: (row.dead_lettered_at, row.enqueue_order))
    moved = list(zip(taken, new_ids, strict=False))
    if not moved:
        return []
    await connection.execute(
        _ENQUEUE,
        {
            "queue_id": queue_id,
            "ids": [new_id for _, new_id in moved],
            "payloads": [row.payload for row, _ in moved],
            "priorities": [row.priority for row, _ in moved],
            "ttls": [None] * len(moved),
            "delays": [0] * len(moved),
            "groups": [row.group_key for row, _ in moved],
            "sources": [row.id for row, _ in moved],
        },
    )
    await connection.execute(
        _UNCOUNT_TAKEN,
        {
            "queue_id": queue_id,
            "ids": [row.id for row, _ in moved],
            "priorities": [row.priority for row, _ in moved],
        },
    )
    return moved


class PostgresDeadLetters:
    """Implements DeadLetterRepository."""

    def __init__(self, database: Database, *, budget: int = BROWSE_SCAN_BUDGET) -> None:
        self._database = database
        self._budget = budget

    async def list_dead_letters(
        self,
        queue_id: UUID,
        *,
        limit: int,
        after: DeadLetterPosition | None,
        search: Search = EVERYTHING,
    ) -> Found[DeadLetter, DeadLetterPosition]:
        parameters = {
            "queue_id": queue_id,
            "limit": limit,
            # Without a search every examined record is found: the limit bounds the walk.
            "budget": self._budget if search != EVERYTHING else limit,
            "after_at": None if after is None else after.dead_lettered_at,
            "after_order": None if after is None else after.enqueue_order,
            **search_parameters(search),
        }

        async def read(connection: AsyncConnection) -> list[Any]:
            return list((await connection.execute(_LIST, parameters)).all())

        rows = await self._database.read(read, operation="list_dead_letters")
        found = [
            (
                _dead_letter_from_row(row),
                DeadLetterPosition(row.dead_lettered_at, row.enqueue_order),
            )
            for row in rows
            if not row.examined_last
        ]
        resume = None
        if len(found) < limit and search != EVERYTHING:
            last = [row for row in rows if row.examined_last]
            if last:
                resume = DeadLetterPosition(last[0].dead_lettered_at, last[0].enqueue_order)
        return Found(found, resume)

    async def get_dead_letter(self, queue_id: UUID, message_id: UUID) -> DeadLetter | None:
        parameters = {"queue_id": queue_id, "message_id": message_id}

        async def read(connection: AsyncConnection) -> Any:
            return (await connection.execute(_GET, parameters)).one_or_none()

        row = await self._database.read(read, operation="get_dead_letter")
        return None if row is None else _dead_letter_from_row(row)

    async def redrive_dead_letter(
        self, queue_id: UUID, message_id: UUID, new_id: UUID, audit: AuditEntry
    ) -> bool:
        parameters = {"queue_id": queue_id, "message_id": message_id}

        async def redrive(connection: AsyncConnection) -> bool:
            taken = list((await connection.execute(_TAKE_ONE, parameters)).all())
            if not await _redrive(connection, queue_id, taken, [new_id]):
                return False
            await connection.execute(audit_insert(audit))
            return True

        return await self._database.yielding(
            redrive, operation="redrive_dead_letter", attempts=OPERATOR_ATTEMPTS
        )

    async def redrive_dead_letters(
        self,
        queue_id: UUID,
        new_ids: Sequence[UUID],
        audit: AuditEntry,
        search: Search = EVERYTHING,
    ) -> int:
        parameters = {"queue_id": queue_id, "limit": len(new_ids), **search_parameters(search)}

        async def redrive(connection: AsyncConnection) -> int:
            taken = list((await connection.execute(_TAKE_MANY, parameters)).all())
            moved = await _redrive(connection, queue_id, taken, new_ids)
            # The audit row names both ids of every record moved (SPEC §3.6).
            pairs = {str(row.id): str(new_id) for row, new_id in moved}
            await connection.execute(
                audit_insert(audit.with_details(redriven=len(moved), new_message_ids=pairs))
            )
            return len(moved)

        return await self._database.yielding(
            redrive, operation="redrive_dead_letters", attempts=OPERATOR_ATTEMPTS
        )

    async def count_dead_letters(self, queue_id: UUID, search: Search, limit: int) -> int:
        parameters = {"queue_id": queue_id, "limit": limit, **search_parameters(search)}

        async def read(connection: AsyncConnection) -> int:
            return int((await connection.execute(_COUNT, parameters)).scalar_one())

        return await self._database.read(read, operation="count_dead_letters")

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

    async def delete_dead_letters(
        self, queue_id: UUID, search: Search, limit: int, audit: AuditEntry
    ) -> int:
        async def take(connection: AsyncConnection, n: int) -> int:
            parameters = {"queue_id": queue_id, "limit": n, **search_parameters(search)}
            return int((await connection.execute(_DELETE_MANY, parameters)).scalar_one())

        return await in_batches(
            self._database,
            take,
            limit=limit,
            audit=audit,
            counted_as="deleted",
            operation="delete_dead_letters",
        )
