"""Errors as ``application/problem+json`` (RFC 9457), one shape for every failure.

``{"type":"about:blank","title":<reason phrase>,"status":<int>,"detail":<sentence>,"code":<code>}``

* Domain errors map by family (invalid input 400, not found 404, conflict 409,
  unavailable 503 + ``Retry-After``) and keep their own code and detail.
* Litestar's validation failures (a typed path, query, header or body value it could not
  convert) get the contract's codes: ``invalid_path`` for a path id, the parameter's own
  code for a query or header value (``request_rules.parameter_code``), ``invalid_json`` or
  ``415`` for a missing body.
* Litestar's HTTP exceptions (unknown route, wrong method, body too large…) get the codes
  of the contract.
* A client that went away mid-request is nobody's error: a DEBUG line and status ``499``
  (nginx's "client closed request") in the metrics, never a 500.
* Anything else is ``500 internal_error`` naming the request id, logged with its traceback
  and never shown to the caller.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

import msgspec
from litestar import Request, Response
from litestar.exceptions import HTTPException, InternalServerException, ValidationException
from litestar.types import ExceptionHandlersMap

from retsu.adapters.http.middleware import UNMATCHED_ROUTE, request_id_of
from retsu.adapters.http.request_rules import (
    MAX_BODY_BYTES,
    ClientDisconnected,
    RequestProblem,
    is_json_media_type,
    parameter_code,
    unsupported_media_type,
)
from retsu.domain.errors import Conflict, InvalidInput, NotFound, RetsuError, Unavailable

__all__ = [
    "EXCEPTION_HANDLERS",
    "MAX_BODY_BYTES",
    "PROBLEM_MEDIA_TYPE",
    "Problem",
    "RequestProblem",
    "problem_response",
    "status_of",
]

logger = logging.getLogger("retsu.adapters.http")

PROBLEM_MEDIA_TYPE = "application/problem+json"
# nginx's "client closed request": what the metrics count for a client that went away.
CLIENT_CLOSED_REQUEST = 499
# Litestar's words when its own stream() meets ``http.disconnect`` (ours raise
# ClientDisconnected).
_DISCONNECTED = "client disconnected prematurely"


class Problem(msgspec.Struct, gc=False):
    """An error answer (RFC 9457); ``code`` is the stable, machine-readable part."""

    type: str
    title: str
    status: int
    detail: str
    code: str


_encoder = msgspec.json.Encoder()
_TITLES = {s.value: s.phrase for s in HTTPStatus}
_TITLES[CLIENT_CLOSED_REQUEST] = "Client Closed Request"


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


def status_of(error: type[RetsuError]) -> int:
    """The HTTP status of a domain error family."""
    if issubclass(error, InvalidInput):
        return 400
    if issubclass(error, NotFound):
        return 404
    if issubclass(error, Conflict):
        return 409
    if issubclass(error, Unavailable):
        return 503
    return 500


# -- handlers ---------------------------------------------------------------------


def _request_problem(request: Request[Any, Any, Any], exc: Exception) -> Response[bytes]:
    assert isinstance(exc, RequestProblem)
    return problem_response(exc.status, exc.code, exc.detail)


def _domain_error(request: Request[Any, Any, Any], exc: Exception) -> Response[bytes]:
    assert isinstance(exc, RetsuError)
    status = status_of(type(exc))
    if status == 500:
        return _unexpected(request, exc)
    if isinstance(exc, Unavailable):
        return problem_response(
            status, exc.code, exc.detail, {"retry-after": str(exc.retry_after_seconds)}
        )
    return problem_response(status, exc.code, exc.detail)


# Which failure a request with several wrong parts is answered with: the path first (the
# resource does not even exist), then its parameters, then its body.
_SOURCE_ORDER = {"path": 0, "query": 1, "header": 2, "cookie": 3, "body": 4}


def _validation_error(request: Request[Any, Any, Any], exc: Exception) -> Response[bytes]:
    """Litestar could not convert a typed value: answer the contract's code for it."""
    assert isinstance(exc, ValidationException)
    errors = (
        [e for e in exc.extra or () if isinstance(e, dict)] if isinstance(exc.extra, list) else []
    )
    if not errors:
        return problem_response(400, "invalid_json", "The request does not fit this route.")
    first = min(errors, key=lambda e: _SOURCE_ORDER.get(str(e.get("source")), 5))
    key = str(first.get("key", ""))
    source = first.get("source")
    message = str(first.get("message", "invalid value"))
    if source == "path":
        return problem_response(400, "invalid_path", f"{key} in the path must be a UUID.")
    if source in ("query", "header", "cookie"):
        return problem_response(400, parameter_code(key), f"{key}: {message}.")
    # The body: it is decoded strictly before this point (request_rules.JsonRequest), so
    # what is left is a missing body on a route that needs one.
    content_type = request.headers.get("content-type")
    if content_type is None or not is_json_media_type(content_type.encode("latin-1")):
        return _request_problem(request, unsupported_media_type())
    if key == "data":
        return problem_response(400, "invalid_json", "This route needs a JSON object body.")
    return problem_response(400, "invalid_json", f"The request body does not fit: {message}.")


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
        if isinstance(exc, InternalServerException) and exc.detail == _DISCONNECTED:
            return _client_disconnected(request)
        return _unexpected(request, exc)
    code, detail = _HTTP_CODES.get(status, ("bad_request", "The request is malformed."))
    headers = dict(exc.headers or {})
    if status == 405:
        method = request.scope.get("method", "")
        detail = f"Method {method} is not allowed on this route."
        # The same sorted list an OPTIONS on this path answers (routes.options_handlers).
        allowed = headers.pop("Allow", "") or headers.pop("allow", "")
        headers["allow"] = ", ".join(sorted(m.strip() for m in allowed.split(",") if m.strip()))
    return problem_response(status, code, detail, headers or None)


def _client_disconnected(
    request: Request[Any, Any, Any], exc: Exception | None = None
) -> Response[bytes]:
    """The client went away mid-body: no one will read an answer, and it is not our fault.

    The answer is still sent (the server drops it), so the metrics count the request once,
    as ``499``.
    """
    scope = request.scope
    logger.debug(
        "Client disconnected during %s %s (request id %s)",
        scope.get("method", "?"),
        scope.get("path_template") or UNMATCHED_ROUTE,
        request_id_of(scope),
    )
    return problem_response(
        CLIENT_CLOSED_REQUEST, "client_closed_request", "The client closed the request."
    )


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
    ClientDisconnected: _client_disconnected,
    RequestProblem: _request_problem,
    RetsuError: _domain_error,
    ValidationException: _validation_error,
    HTTPException: _http_exception,
    Exception: _unexpected,
}
