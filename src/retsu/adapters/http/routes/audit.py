"""The audit log: ``GET /v1/audit-log``, newest first."""

from __future__ import annotations

from litestar import get

from retsu.adapters.http.auth import OPERATOR_READ
from retsu.adapters.http.dependencies import Activity, Cursors
from retsu.adapters.http.dto import AuditLogOut, audit_record_out
from retsu.adapters.http.pages import audit_log_page
from retsu.adapters.http.params import DEFAULT_LIMIT, ActionFilter, Cursor, Limit, QueueIdFilter


@get(
    "/v1/audit-log",
    summary="Read the audit log",
    response_description="One page of audit entries, newest first.",
    scopes=OPERATOR_READ,
)
async def read_audit_log(
    activity: Activity,
    cursors: Cursors,
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
    queue_id: QueueIdFilter = None,
    action: ActionFilter = None,
) -> AuditLogOut:
    page = await audit_log_page(
        activity, cursors, limit=limit, cursor=cursor, queue_id=queue_id, action=action
    )
    return AuditLogOut(
        items=[audit_record_out(r) for r in page.items], next_cursor=page.next_cursor
    )


ROUTES = [read_audit_log]
