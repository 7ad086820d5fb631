"""Errors as ``application/problem+json`` (RFC 9457), one shape for every failure.

``{"type":"about:blank","title":<reason phrase>,"status":<int>,"detail":<sentence>,"code":<code>}``

Domain errors map by family (invalid input 400, not found 404, conflict 409) and
keep their own code and detail; Litestar's HTTP exceptions (unknown route,
wrong method, body too large…) get the codes of the contract; anything else is
``500 internal_error`` naming the request id, logged with its traceback and never
shown to the caller.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

import msgspec
from litestar import Request, Response
from litestar.exceptions import HTTPException
from litestar.types import ExceptionHandlersMap

from retsu.adapters.http.middleware import UNMATCHED_ROUTE, request_id_of
from retsu.domain.errors import Conflict, InvalidInput, NotFound, RetsuError, Unavailable

logger = logging.getLogger("retsu.adapters.http")

PROBLEM_MEDIA_TYPE = "application/problem+json"
MAX_BODY_BYTES = 1024 * 1024  # 1 MiB


class Problem(msgspec.Struct, gc=False):
    type: str
    title: str
    status: int
    detail: str
    code: str


class RequestProblem(Exception):
    """A request the HTTP layer rejects before any use case runs (shape, media type, size, path)."""

    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail


def invalid_json(detail: str) -> RequestProblem:
    return RequestProblem(400, "invalid_json", detail)


_encoder = msgspec.json.Encoder()
_TITLES = {s.value: s.phrase for s in HTTPStatus}


def problem_response(
    status: int, code: str, detail: str, headers: Mapping[str, str] | None = None
) -> Response[bytes]:
    body = _encoder.encode(
        Problem(
            type="about:blank",
            title=_TITLES.get(status, "Error"),
            status=status,
            detail=detail,
            code=code,
        )
    )
    return Response(
        content=body,
        status_code=status,
        media_type=PROBLEM_MEDIA_TYPE,
        headers=dict(headers) if headers else None,
    )


# -- handlers ---------------------------------------------------------------------


def _request_problem(request: Request[Any, Any, Any], exc: Exception) -> Response[bytes]:
    assert isinstance(exc, RequestProblem)
    return problem_response(exc.status, exc.code, exc.detail)


def _domain_error(request: Request[Any, Any, Any], exc: Exception) -> Response[bytes]:
    assert isinstance(exc, RetsuError)
    if isinstance(exc, InvalidInput):
        return problem_response(400, exc.code, exc.detail)
    if isinstance(exc, NotFound):
        return problem_response(404, exc.code, exc.detail)
    if isinstance(exc, Conflict):
        return problem_response(409, exc.code, exc.detail)
    if isinstance(exc, Unavailable):
        return problem_response(
            503, exc.code, exc.detail, {"retry-after": str(exc.retry_after_seconds)}
        )
    return _unexpected(request, exc)


# Codes and sentences for Litestar's own exceptions, by status.
_HTTP_CODES: dict[int, tuple[str, str]] = {
    400: ("bad_request", "The request is malformed."),
    401: ("unauthorized", "Authentication is required."),
    403: ("forbidden", "This credential may not do that."),
    404: ("not_found", "No route matches this path."),
    405: ("method_not_allowed", "This method is not allowed on this route."),
    413: (
        "payload_too_large",
        f"The request body is larger than the limit of {MAX_BODY_BYTES} bytes (1 MiB).",
    ),
    415: ("unsupported_media_type", "The request body must be application/json."),
    429: ("too_many_requests", "Too many requests."),
    503: ("service_unavailable", "The service is unavailable."),
}


def _http_exception(request: Request[Any, Any, Any], exc: Exception) -> Response[bytes]:
    assert isinstance(exc, HTTPException)
    status = exc.status_code
    if status >= 500:
        return _unexpected(request, exc)
    code, detail = _HTTP_CODES.get(status, ("bad_request", "The request is malformed."))
    if status == 405:
        method = request.scope.get("method", "")
        detail = f"Method {method} is not allowed on this route."
    headers = exc.headers or None
    return problem_response(status, code, detail, headers)


def _unexpected(request: Request[Any, Any, Any], exc: Exception) -> Response[bytes]:
    scope = request.scope
    request_id = request_id_of(scope)
    logger.error(
        "Unexpected error answering %s %s (request id %s)",
        scope.get("method", "?"),
        scope.get("path_template") or UNMATCHED_ROUTE,
        request_id,
        exc_info=exc,
        extra={"request_id": request_id},
    )
    return problem_response(
        500,
        "internal_error",
        f"An unexpected error occurred; quote request id {request_id} when reporting it.",
    )


EXCEPTION_HANDLERS: ExceptionHandlersMap = {
    RequestProblem: _request_problem,
    RetsuError: _domain_error,
    HTTPException: _http_exception,
    Exception: _unexpected,
}
