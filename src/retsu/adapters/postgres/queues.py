"""Queue metadata on PostgreSQL: create, read, change, list, purge, delete.

Every change writes its audit row in the same transaction. A change whose connection
breaks before COMMIT is sent runs again on a fresh connection; one that breaks while
committing is not repeated (the caller gets DatabaseUnavailable): a second run would
write a second audit row, or answer queue_already_exists for the caller's own queue.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from retsu.adapters.postgres.audit_log import audit_insert
from retsu.adapters.postgres.counters import (
    COMPLETED,
    GROUPS_LEFT,
    REMOVED_BY_COUNTER,
    UNCOUNT_REMOVED,
    groups_left_parameters,
    uncount_parameters,
)
from retsu.adapters.postgres.database import Database
from retsu.adapters.postgres.errors import UNIQUE_VIOLATION, sqlstate
from retsu.adapters.postgres.tables import (
    MessageState,
    idempotency_key,
    queue,
    queue_dead_letter_message,
    queue_message,
)
from retsu.domain.audit import AuditEntry
from retsu.domain.errors import QueueAlreadyExists
from retsu.domain.pagination import QueuePosition
from retsu.domain.queue import KEEP, Queue, QueueSettings, QueueSettingsUpdate, RateLimit

# Operator bulk changes (purge, delete, redrives) give way to message traffic this many
# times before answering 503 busy (see Database.yielding): about 4 s in all (each try waits
# at most 200 ms for a lock, then 50 ms more than the last pause), well inside an HTTP
# client's patience.
OPERATOR_ATTEMPTS = 10

_DELETE_ROLLUP = sa.text("DELETE FROM queue_state_rollup WHERE queue_id = :queue_id")

# Purge: every live message of the queue (completed ones are history and stay: SPEC §3.11);
# what was removed (not zero: an enqueue that commits meanwhile keeps its count) leaves its
# lanes, then comes off the counters (counters.py says why in separate statements).
_PURGE = sa.text(
    f"""
    WITH removed AS (
        DELETE FROM queue_message WHERE queue_id = :queue_id AND state <> {COMPLETED}
        RETURNING id, priority, state, group_key
    )
    {REMOVED_BY_COUNTER}
    """
)
_UNCOUNT = sa.text(UNCOUNT_REMOVED)


# What a settings change does beyond the row (SPEC §3.10), in the same transaction, in
# every writer's lock order (message rows, group rows, counter rows):
# A new or changed bucket starts full: the queue's is made again by the next claim, the
# groups' read as full, and heads parked for a token are due at once.
_REFILL_QUEUE_BUCKET = sa.text("DELETE FROM queue_rate_bucket WHERE queue_id = :queue_id")
_UNPARK_HEADS = sa.text(
    f"""
    UPDATE queue_message SET available_after = now()
    WHERE queue_id = :queue_id AND state = {int(MessageState.THROTTLED)}
      AND available_after > now()
    """
)
_REFILL_GROUP_BUCKETS = sa.text(
    "UPDATE queue_group SET tokens = NULL, tokens_at = NULL "
    "WHERE queue_id = :queue_id AND tokens IS NOT NULL"
)
# A raised group_max_in_flight: each lane with room and no pending head gets its next
# message now (lanes otherwise move only when one of their messages does).
_PROMOTE_WAITING = sa.text(
    """
    WITH stuck AS (
        SELECT array_agg(g.group_key ORDER BY g.group_key) AS groups
        FROM queue_group AS g JOIN queue AS q ON q.id = g.queue_id
        WHERE g.queue_id = :queue_id AND g.pending = 0
          AND g.waiting + g.waiting_delayed > 0 AND g.leased < q.group_max_in_flight
    )
    SELECT retsu_group_apply(
        CAST(:queue_id AS uuid), s.groups, array_fill(0, ARRAY[cardinality(s.groups)]),
        array_fill(0, ARRAY[cardinality(s.groups)]), array_fill(0, ARRAY[cardinality(s.groups)]),
        array_fill(0, ARRAY[cardinality(s.groups)]))
    FROM stuck AS s WHERE s.groups IS NOT NULL
    """
)


def _rate(per_second: float | None, burst: int | None) -> RateLimit | None:
    return None if per_second is None or burst is None else RateLimit(per_second, burst)


def settings_columns(settings: QueueSettings | QueueSettingsUpdate) -> dict[str, Any]:
    """The queue table's columns of the settings given (an update: only those it changes;
    a removed rate limit clears both of its columns)."""
    given = settings.as_dict() if isinstance(settings, QueueSettings) else settings.changes()
    columns: dict[str, Any] = {}
    for name, value in given.items():
        if name in ("rate_limit", "group_rate_limit"):
            prefix = "rate" if name == "rate_limit" else "group_rate"
            columns[f"{prefix}_per_second"] = None if value is None else value["per_second"]
            columns[f"{prefix}_burst"] = None if value is None else value["burst"]
        else:
            columns[name] = value
    return columns


def queue_from_row(row: Any) -> Queue:
    return Queue(
        id=row.id,
        name=row.name,
        settings=QueueSettings(
            visibility_timeout_seconds=row.visibility_timeout_seconds,
            max_delivery_attempts=row.max_delivery_attempts,
            default_message_ttl_seconds=row.default_message_ttl_seconds,
            group_max_in_flight=row.group_max_in_flight,
            max_in_flight=row.max_in_flight,
            rate_limit=_rate(row.rate_per_second, row.rate_burst),
            group_rate_limit=_rate(row.group_rate_per_second, row.group_rate_burst),
            completed_retention_seconds=row.completed_retention_seconds,
        ),
        paused=row.paused,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


class PostgresQueues:
    """Implements QueueRepository."""

    def __init__(self, database: Database) -> None:
        self._database = database

    async def add_queue(self, new: Queue, audit: AuditEntry) -> Queue:
        statement = (
            sa.insert(queue)
            .values(
                id=new.id,
                name=new.name,
                **settings_columns(new.settings),
                paused=new.paused,
                created_at=sa.func.now(),
                updated_at=sa.func.now(),
            )
            .returning(*queue.c)
        )

        async def add(connection: AsyncConnection) -> Any:
            # Translated inside the transaction, so the operation's telemetry sees the
            # database's answer ("that name is taken"), not a failure.
            try:
                row = (await connection.execute(statement)).one()
            except IntegrityError as error:
                if sqlstate(error) == UNIQUE_VIOLATION:
                    raise QueueAlreadyExists(new.name) from None
                raise
            await connection.execute(audit_insert(audit))
            return row

        row = await self._database.transaction(add, operation="add_queue")
        return queue_from_row(row)

    async def get_queue(self, queue_id: UUID) -> Queue | None:
        statement = sa.select(*queue.c).where(queue.c.id == queue_id)

        async def read(connection: AsyncConnection) -> Any:
            return (await connection.execute(statement)).one_or_none()

        row = await self._database.read(read, operation="get_queue")
        return None if row is None else queue_from_row(row)

    async def update_queue(
        self, queue_id: UUID, update: QueueSettingsUpdate, audit: AuditEntry
    ) -> Queue | None:
        values: dict[str, Any] = {"updated_at": sa.func.now(), **settings_columns(update)}
        after: list[sa.TextClause] = []
        if update.rate_limit is not KEEP:
            after.append(_REFILL_QUEUE_BUCKET)
        if update.group_rate_limit is not KEEP:
            after += [_UNPARK_HEADS, _REFILL_GROUP_BUCKETS]
        if update.group_max_in_flight is not KEEP:
            after.append(_PROMOTE_WAITING)
        return await self._change_queue(
            queue_id, values, audit, operation="update_queue", after=after
        )

    async def set_paused(self, queue_id: UUID, paused: bool, audit: AuditEntry) -> Queue | None:
        return await self._change_queue(
            queue_id, {"paused": paused, "updated_at": sa.func.now()}, audit, operation="set_paused"
        )

    async def _change_queue(
        self,
        queue_id: UUID,
        values: dict[str, Any],
        audit: AuditEntry,
        *,
        operation: str,
        after: Sequence[sa.TextClause] = (),
    ) -> Queue | None:
        statement = (
            sa.update(queue).where(queue.c.id == queue_id).values(**values).returning(*queue.c)
        )

        async def change(connection: AsyncConnection) -> Any:
            row = (await connection.execute(statement)).one_or_none()
            if row is not None:
                for then in after:
                    await connection.execute(then, {"queue_id": queue_id})
                await connection.execute(audit_insert(audit))
            return row

        row = await self._database.transaction(change, operation=operation)
        return None if row is None else queue_from_row(row)

    async def list_queues(
        self, *, limit: int, after: QueuePosition | None, name: str | None
    ) -> list[Queue]:
        # The name column is COLLATE "C": byte order, walked on its unique index.
        statement = sa.select(*queue.c).order_by(queue.c.name).limit(limit)
        if name is not None:
            statement = statement.where(queue.c.name == name)
        if after is not None:
            statement = statement.where(queue.c.name > after.name)

        async def read(connection: AsyncConnection) -> list[Queue]:
            return [queue_from_row(row) for row in await connection.execute(statement)]

        return await self._database.read(read, operation="list_queues")

    async def purge_queue(self, queue_id: UUID, audit: AuditEntry) -> int | None:
        async def purge(connection: AsyncConnection) -> int | None:
            # KEY SHARE: the queue cannot be deleted under the purge, while enqueues,
            # dequeues and settings changes go on.
            exists = await connection.execute(
                sa.select(queue.c.id).where(queue.c.id == queue_id).with_for_update(key_share=True)
            )
            if exists.one_or_none() is None:
                return None
            removed = list((await connection.execute(_PURGE, {"queue_id": queue_id})).all())
            if removed:
                lanes = groups_left_parameters(queue_id, removed)
                if lanes is not None:
                    await connection.execute(GROUPS_LEFT, lanes)
                await connection.execute(_UNCOUNT, uncount_parameters(queue_id, removed))
            purged = sum(int(row.ready + row.in_flight + row.delayed) for row in removed)
            await connection.execute(audit_insert(audit.with_details(purged=purged)))
            return purged

        return await self._database.yielding(
            purge, operation="purge_queue", attempts=OPERATOR_ATTEMPTS
        )

    async def delete_queue(self, queue_id: UUID, audit: AuditEntry) -> bool:
        async def delete(connection: AsyncConnection) -> bool:
            # Lock the queue first: from here on no enqueue, dead-lettering or redrive of
            # this queue can start (``retsu_enqueue``'s KEY SHARE lock on the row, and the
            # dead letters' foreign-key check, wait, then find it gone).
            row = (
                await connection.execute(
                    sa.select(queue.c.name).where(queue.c.id == queue_id).with_for_update()
                )
            ).one_or_none()
            if row is None:
                return False
            # Messages and dead letters go explicitly, before the queue row (messages have
            # no foreign key to cascade from since migration 0017); then the counter rows.
            messages = await connection.execute(
                sa.delete(queue_message).where(queue_message.c.queue_id == queue_id)
            )
            dead_letters = await connection.execute(
                sa.delete(queue_dead_letter_message).where(
                    queue_dead_letter_message.c.queue_id == queue_id
                )
            )
            await connection.execute(
                sa.delete(idempotency_key).where(idempotency_key.c.queue_id == queue_id)
            )
            await connection.execute(sa.delete(queue).where(queue.c.id == queue_id))
            await connection.execute(_DELETE_ROLLUP, {"queue_id": queue_id})
            await connection.execute(
                audit_insert(
                    audit.with_details(
                        name=row.name,
                        messages=int(messages.rowcount),
                        dead_letters=int(dead_letters.rowcount),
                    )
                )
            )
            return True

        return await self._database.yielding(
            delete, operation="delete_queue", attempts=OPERATOR_ATTEMPTS
        )
