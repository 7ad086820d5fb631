"""Problem documents become exceptions per code, with a family fallback for unknown codes."""

from __future__ import annotations

import msgspec
import pytest

from retsu_client import (
    APIError,
    Conflict,
    DatabaseUnavailable,
    Forbidden,
    IdempotencyKeyConflict,
    InvalidRequest,
    MessageNotFound,
    NotFound,
    QueueNotFound,
    ServerError,
    ServiceUnavailable,
    StaleReceiptHandle,
    Unauthorized,
)
from retsu_client.errors import InvalidCursor, RouteNotFound, error_for_code, problem_error


@pytest.mark.parametrize(
    ("code", "status", "cls"),
    [
        ("queue_not_found", 404, QueueNotFound),
        ("message_not_found", 404, MessageNotFound),
        ("not_found", 404, RouteNotFound),
        ("stale_receipt_handle", 409, StaleReceiptHandle),
        ("idempotency_key_conflict", 409, IdempotencyKeyConflict),
        ("unauthorized", 401, Unauthorized),
        ("forbidden", 403, Forbidden),
        ("database_unavailable", 503, DatabaseUnavailable),
        ("invalid_cursor", 400, InvalidCursor),
        # codes this client does not know yet: the class of their status family
        ("invalid_colour", 400, InvalidRequest),
        ("message_gone", 404, NotFound),
        ("lease_taken", 409, Conflict),
        ("overloaded", 503, ServiceUnavailable),
        ("teapot", 418, APIError),
        ("odd", 507, ServerError),
    ],
)
def test_each_code_has_its_class(code: str, status: int, cls: type[APIError]) -> None:
    assert error_for_code(code, status) is cls


def test_a_problem_carries_code_status_detail_request_id_and_retry_after() -> None:
    body = msgspec.json.encode(
        {
            "type": "about:blank",
            "title": "Service Unavailable",
            "status": 503,
            "detail": "The database cannot be reached right now. Retry shortly.",
            "code": "database_unavailable",
        }
    )

    error = problem_error(503, body, request_id="req-7", retry_after=1.0)

    assert isinstance(error, DatabaseUnavailable)
    assert (error.code, error.status, error.request_id, error.retry_after) == (
        "database_unavailable",
        503,
        "req-7",
        1.0,
    )
    assert error.detail.startswith("The database cannot be reached")
    assert error.problem["title"] == "Service Unavailable"
    assert str(error) == f"database_unavailable (503, request id req-7): {error.detail}"


def test_a_body_that_is_not_a_problem_is_not_read_as_one() -> None:
    assert problem_error(502, b"<html>Bad Gateway</html>", request_id=None) is None
    assert problem_error(400, b'["not", "a", "problem"]', request_id=None) is None
