"""The audit log: ``GET /v1/audit-log``, newest first."""

from __future__ import annotations

from litestar import get
from litestar.di import NamedDependency

from retsu.adapters.http.dto import AuditLogOut, audit_record_out
from retsu.adapters.http.params import DEFAULT_LIMIT, ActionFilter, Cursor, Limit, QueueIdFilter
from retsu.application.list_audit_log import ListAuditLog, ListAuditLogQuery


@get(
    "/v1/audit-log",
    summary="Read the audit log",
    response_description="One page of audit entries, newest first.",
)
async def read_audit_log(
    list_audit_log: NamedDependency[ListAuditLog],
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
    queue_id: QueueIdFilter = None,
    action: ActionFilter = None,
) -> AuditLogOut:
    page = await list_audit_log(
        ListAuditLogQuery(limit=limit, cursor=cursor, queue_id=queue_id, action=action)
    )
    return AuditLogOut(
        items=[audit_record_out(r) for r in page.items], next_cursor=page.next_cursor
    )


ROUTES = [read_audit_log]
