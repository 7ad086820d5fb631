"""The audit log on PostgreSQL: the row every operator change writes, and the listing.

``audit_insert`` is executed by the queue and dead-letter modules inside the
transaction of the change it records, so a change and its audit row commit together.
"""

from __future__ import annotations

from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from retsu.adapters.ids import uuid7
from retsu.adapters.postgres.database import Database
from retsu.adapters.postgres.tables import audit_log
from retsu.domain.audit import AuditAction, AuditEntry, AuditRecord
from retsu.domain.pagination import AuditPosition


def audit_insert(entry: AuditEntry) -> sa.Insert:
    """The row recording ``entry``, stamped with the database clock."""
    return sa.insert(audit_log).values(
        id=uuid7(),
        at=sa.func.now(),
        actor=entry.caller.actor,
        action=entry.action.value,
        target_type=entry.target_type,
        target_id=entry.target_id,
        queue_id=entry.queue_id,
        request_id=entry.caller.request_id,
        details=entry.details,
    )


class PostgresAuditLog:
    """Implements AuditLog."""

    def __init__(self, database: Database) -> None:
        self._database = database

    async def list_audit_records(
        self,
        *,
        limit: int,
        after: AuditPosition | None,
        queue_id: UUID | None,
        action: AuditAction | None,
    ) -> list[AuditRecord]:
        t = audit_log
        statement = (
            sa.select(
                t.c.id,
                t.c.at,
                t.c.actor,
                t.c.action,
                t.c.target_type,
                t.c.target_id,
                t.c.request_id,
                t.c.details,
            )
            .order_by(t.c.at.desc(), t.c.id.desc())
            .limit(limit)
        )
        if queue_id is not None:
            statement = statement.where(t.c.queue_id == queue_id)
        if action is not None:
            statement = statement.where(t.c.action == action.value)
        if after is not None:
            statement = statement.where(
                sa.tuple_(t.c.at, t.c.id)
                < sa.tuple_(
                    sa.bindparam("after_at", after.at, type_=t.c.at.type),
                    sa.bindparam("after_id", after.id, type_=t.c.id.type),
                )
            )

        async def read(connection: AsyncConnection) -> list[AuditRecord]:
            return [
                AuditRecord(
                    id=row.id,
                    at=row.at,
                    actor=row.actor,
                    action=row.action,
                    target_type=row.target_type,
                    target_id=row.target_id,
                    request_id=row.request_id,
                    details=dict(row.details),
                )
                for row in await connection.execute(statement)
            ]

        return await self._database.read(read, operation="list_audit_records")
