"""The audit log: ``GET /v1/audit-log``, newest first."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, get
from litestar.handlers import HTTPRouteHandler

from retsu.adapters.http.dto import AuditLogOut, audit_record_out, json_response
from retsu.adapters.http.query import query_int, query_text, query_uuid
from retsu.adapters.http.services import ApiServices
from retsu.application.list_audit_log import ListAuditLogQuery
from retsu.domain.cursor import DEFAULT_LIST_LIMIT


def audit_routes(services: ApiServices) -> list[HTTPRouteHandler]:
    list_audit_log = services.list_audit_log

    @get("/v1/audit-log")
    async def list_all(request: Request[Any, Any, Any]) -> Response[bytes]:
        page = await list_audit_log(
            ListAuditLogQuery(
                limit=query_int(request, "limit", "invalid_limit", DEFAULT_LIST_LIMIT),
                cursor=query_text(request, "cursor", "invalid_cursor"),
                queue_id=query_uuid(request, "queue_id", "invalid_queue_id"),
                action=query_text(request, "action", "invalid_action"),
            )
        )
        return json_response(
            AuditLogOut(
                items=[audit_record_out(r) for r in page.items], next_cursor=page.next_cursor
            )
        )

    return [list_all]
