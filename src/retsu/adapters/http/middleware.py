"""Pure-ASGI middleware around the whole Litestar app (routing, 404/405 and errors included).

* ``RequestIdMiddleware``: every response carries ``x-request-id`` — the caller's when
  it is 1-128 visible ASCII characters (0x21-0x7E), else a fresh one — and the id is
  stored in the scope (``request_id_of``) and in a context variable for logs.
* ``HttpMetricsMiddleware``: counts and times every request by method, route
  *template* (never the raw path; ``unmatched`` when no route matched) and status.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import MutableMapping
from contextvars import ContextVar
from typing import Any, cast

from litestar.enums import ScopeType
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from retsu.adapters.telemetry.metrics import Metrics

REQUEST_ID_HEADER = b"x-request-id"
REQUEST_ID_SCOPE_KEY = "retsu.request_id"
UNMATCHED_ROUTE = "unmatched"

# The request id of the request being answered, for log records.
current_request_id: ContextVar[str | None] = ContextVar("retsu_request_id", default=None)

_VALID_REQUEST_ID = re.compile(rb"[\x21-\x7e]{1,128}")


def request_id_of(scope: Any) -> str:
    """The request id stored by ``RequestIdMiddleware`` (``"-"`` outside one)."""
    return cast("str", scope.get(REQUEST_ID_SCOPE_KEY, "-"))


def new_request_id() -> str:
    return uuid.uuid4().hex


class RequestIdMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP:
            await self.app(scope, receive, send)
            return
        raw: bytes | None = None
        for name, value in scope["headers"]:
            if name == REQUEST_ID_HEADER:
                if _VALID_REQUEST_ID.fullmatch(value) is not None:
                    raw = value
                break
        if raw is None:
            request_id = new_request_id()
            raw = request_id.encode("ascii")
        else:
            request_id = raw.decode("ascii")
        cast("MutableMapping[str, Any]", scope)[REQUEST_ID_SCOPE_KEY] = request_id
        header = (REQUEST_ID_HEADER, raw)

        async def send_with_request_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    h for h in message.get("headers", ()) if h[0].lower() != REQUEST_ID_HEADER
                ]
                headers.append(header)
                message["headers"] = headers
            await send(message)

        token = current_request_id.set(request_id)
        try:
            await self.app(scope, receive, send_with_request_id)
        finally:
            current_request_id.reset(token)


class HttpMetricsMiddleware:
    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP:
            await self.app(scope, receive, send)
            return
        status = 500  # if the app fails before answering, the server answers 500

        async def send_with_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        metrics = self.metrics
        metrics.http_request_started()
        start = time.perf_counter()
        try:
            await self.app(scope, receive, send_with_status)
        finally:
            # The router stores the matched route's template in the scope.
            route = scope.get("path_template") or UNMATCHED_ROUTE
            metrics.http_request_finished(
                scope["method"], route, status, time.perf_counter() - start
            )
