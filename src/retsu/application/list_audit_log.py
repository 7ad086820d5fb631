"""Use case: read the audit log, newest first, a page at a time."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from retsu.application.ports import AuditLog, ServerSecrets
from retsu.domain.audit import AuditAction, AuditRecord
from retsu.domain.cursor import (
    DEFAULT_LIST_LIMIT,
    LIST_LIMIT,
    AuditPosition,
    CursorKind,
    Page,
    open_cursor,
    seal_cursor,
)


@dataclass(frozen=True, slots=True)
class ListAuditLogQuery:
    limit: int = DEFAULT_LIST_LIMIT
    cursor: str | None = None
    queue_id: UUID | None = None
    # An action name; anything else is invalid_action.
    action: str | None = None


class ListAuditLog:
    def __init__(self, audit_log: AuditLog, secrets: ServerSecrets) -> None:
        self._audit_log = audit_log
        self._secrets = secrets

    async def __call__(self, query: ListAuditLogQuery) -> Page[AuditRecord]:
        limit = LIST_LIMIT.check(query.limit)
        action = None if query.action is None else AuditAction.parse(query.action)
        # A cursor is bound to its filters: one from another filter is invalid_cursor.
        scope = [
            None if query.queue_id is None else str(query.queue_id),
            None if action is None else action.value,
        ]
        after = None
        if query.cursor is not None:
            key = await self._secrets.cursor_signing_key()
            after = AuditPosition.read(open_cursor(key, CursorKind.AUDIT_LOG, scope, query.cursor))
        records = await self._audit_log.list_audit_records(
            limit=limit + 1, after=after, queue_id=query.queue_id, action=action
        )
        next_cursor = None
        if len(records) > limit:
            records = records[:limit]
            key = await self._secrets.cursor_signing_key()
            last = records[-1]
            position = AuditPosition(last.at, last.id).seal()
            next_cursor = seal_cursor(key, CursorKind.AUDIT_LOG, scope, position)
        return Page(records, next_cursor)
