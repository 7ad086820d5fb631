"""The audit log in memory (``AuditLog``): the twin of ``adapters/postgres/audit_log.py``."""

from __future__ import annotations

from uuid import UUID

from retsu.adapters.memory.tables import (
    MemoryTables,
)
from retsu.domain.audit import AuditAction, AuditRecord
from retsu.domain.pagination import AuditPosition


class AuditLogPart(MemoryTables):
    """Implements AuditLog over the tables."""

    async def list_audit_records(
        self,
        *,
        limit: int,
        after: AuditPosition | None,
        queue_id: UUID | None,
        action: AuditAction | None,
    ) -> list[AuditRecord]:
        chosen = sorted(
            (
                r
                for r, about in self._audit
                if (queue_id is None or about == queue_id)
                and (action is None or r.action == action.value)
                and (after is None or (r.at, r.id) < (after.at, after.id))
            ),
            key=lambda r: (r.at, r.id),
            reverse=True,
        )
        return chosen[:limit]
