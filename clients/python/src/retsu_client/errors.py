"""Exceptions: one class per problem ``code`` the API answers, grouped by HTTP status.

Match on the class (``except QueueNotFound``) or on ``error.code``; both are stable. A code
this client does not know yet still gets the class of its status family (``InvalidRequest``
for a 400, ``NotFound`` for a 404, ...), so a newer server never breaks an older client.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

__all__ = [
    "APIError",
    "BadRequest",
    "Busy",
    "Conflict",
    "ConnectionFailed",
    "DatabaseUnavailable",
    "DeadLetterNotFound",
    "EmptyQueueUpdate",
    "EmptyScheduleUpdate",
    "Forbidden",
    "IdempotencyKeyConflict",
    "InternalError",
    "InvalidAction",
    "InvalidBatchSize",
    "InvalidCompletedRetention",
    "InvalidConsumer",
    "InvalidCron",
    "InvalidCursor",
    "InvalidDefaultMessageTtl",
    "InvalidDelay",
    "InvalidErrorText",
    "InvalidEverySeconds",
    "InvalidGroup",
    "InvalidGroupMaxInFlight",
    "InvalidHealth",
    "InvalidIdempotencyKey",
    "InvalidJson",
    "InvalidLimit",
    "InvalidMatch",
    "InvalidMaxDeliveryAttempts",
    "InvalidMaxInFlight",
    "InvalidMaxMessages",
    "InvalidMinutes",
    "InvalidPath",
    "InvalidPayload",
    "InvalidPriority",
    "InvalidQueueId",
    "InvalidQueueName",
    "InvalidRateLimit",
    "InvalidReason",
    "InvalidRequest",
    "InvalidResult",
    "InvalidScheduleName",
    "InvalidState",
    "InvalidTimezone",
    "InvalidTtl",
    "InvalidVisibilityTimeout",
    "InvalidWaitSeconds",
    "MessageNotFound",
    "MethodNotAllowed",
    "NotFound",
    "NotReady",
    "PayloadTooLarge",
    "QueueAlreadyExists",
    "QueueNotFound",
    "RetsuError",
    "RouteNotFound",
    "ScheduleAlreadyExists",
    "ScheduleNotFound",
    "ServerError",
    "ServiceUnavailable",
    "StaleReceiptHandle",
    "Unauthorized",
    "UnexpectedResponse",
    "UnsupportedMediaType",
    "error_for_code",
]


class RetsuError(Exception):
    """Base of everything this client raises."""


class ConnectionFailed(RetsuError):
    """No answer: the server could not be reached, or the connection failed mid-request
    (after the retries the call was allowed). ``request_id`` is the id the client sent."""

    def __init__(self, message: str, *, request_id: str | None = None) -> None:
        super().__init__(message)
        self.request_id = request_id


class UnexpectedResponse(RetsuError):
    """An answer that is not what the API documents (not a problem document, a body that
    does not decode) — typically a proxy in between, or a wrong ``base_url``."""

    def __init__(self, message: str, *, status: int, request_id: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.request_id = request_id


class APIError(RetsuError):
    """The API answered with a problem document (``application/problem+json``)."""

    status_code: ClassVar[int] = 0  # the status this class stands for (0: any)
    default_code: ClassVar[str] = ""

    def __init__(
        self,
        detail: str,
        *,
        code: str | None = None,
        status: int | None = None,
        request_id: str | None = None,
        title: str | None = None,
        retry_after: float | None = None,
        problem: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.code = code or self.default_code
        self.status = status or self.status_code
        self.request_id = request_id
        self.title = title
        self.retry_after = retry_after
        self.problem = problem if problem is not None else self.to_problem()

    def to_problem(self) -> dict[str, Any]:
        """The problem document (as the API sent it, or as it would have)."""
        return {
            "type": "about:blank",
            "title": self.title or "",
            "status": self.status,
            "detail": self.detail,
            "code": self.code,
        }

    def __str__(self) -> str:
        where = f", request id {self.request_id}" if self.request_id else ""
        return f"{self.code} ({self.status}{where}): {self.detail}"


# --- 400 ---------------------------------------------------------------------------------


class InvalidRequest(APIError):
    """The request was refused as malformed or out of range (400)."""

    status_code = 400
    default_code = "bad_request"


BadRequest = InvalidRequest


class InvalidJson(InvalidRequest):
    """Body not JSON, unknown field, wrong type, or missing."""

    default_code = "invalid_json"


class InvalidPath(InvalidRequest):
    """A path id is not a UUID."""

    default_code = "invalid_path"


class InvalidQueueName(InvalidRequest):
    """Not a valid queue name."""

    default_code = "invalid_queue_name"


class InvalidVisibilityTimeout(InvalidRequest):
    """visibility_timeout_seconds out of range."""

    default_code = "invalid_visibility_timeout"


class InvalidMaxDeliveryAttempts(InvalidRequest):
    """max_delivery_attempts not 1-100."""

    default_code = "invalid_max_delivery_attempts"


class InvalidDefaultMessageTtl(InvalidRequest):
    """default_message_ttl_seconds out of range."""

    default_code = "invalid_default_message_ttl"


class EmptyQueueUpdate(InvalidRequest):
    """A queue update with no setting."""

    default_code = "empty_queue_update"


class InvalidPayload(InvalidRequest):
    """The payload contains U+0000."""

    default_code = "invalid_payload"


class InvalidPriority(InvalidRequest):
    """Not HIGH, MEDIUM or LOW."""

    default_code = "invalid_priority"


class InvalidTtl(InvalidRequest):
    """ttl_seconds out of range."""

    default_code = "invalid_ttl"


class InvalidDelay(InvalidRequest):
    """delay_seconds out of range or not below the TTL."""

    default_code = "invalid_delay"


class InvalidIdempotencyKey(InvalidRequest):
    """A malformed Idempotency-Key."""

    default_code = "invalid_idempotency_key"


class InvalidBatchSize(InvalidRequest):
    """A batch without 1-100 entries."""

    default_code = "invalid_batch_size"


class InvalidWaitSeconds(InvalidRequest):
    """wait_seconds not 0-20."""

    default_code = "invalid_wait_seconds"


class InvalidMaxMessages(InvalidRequest):
    """max_messages not 1-100."""

    default_code = "invalid_max_messages"


class InvalidLimit(InvalidRequest):
    """limit out of range."""

    default_code = "invalid_limit"


class InvalidCursor(InvalidRequest):
    """A cursor the server did not issue for this list."""

    default_code = "invalid_cursor"


class InvalidQueueId(InvalidRequest):
    """A queue_id filter that is not a UUID."""

    default_code = "invalid_queue_id"


class InvalidAction(InvalidRequest):
    """An unknown audit action filter."""

    default_code = "invalid_action"


class InvalidState(InvalidRequest):
    """Not ready, in_flight or delayed."""

    default_code = "invalid_state"


class InvalidConsumer(InvalidRequest):
    """A malformed Retsu-Consumer header."""

    default_code = "invalid_consumer"


class InvalidHealth(InvalidRequest):
    """Not healthy, stale or offline."""

    default_code = "invalid_health"


class InvalidMinutes(InvalidRequest):
    """minutes out of range."""

    default_code = "invalid_minutes"


class InvalidScheduleName(InvalidRequest):
    """Not a valid schedule name (the queue-name rule)."""

    default_code = "invalid_schedule_name"


class InvalidCron(InvalidRequest):
    """Not a five-field cron expression, or both or neither of cron and every_seconds."""

    default_code = "invalid_cron"


class InvalidEverySeconds(InvalidRequest):
    """every_seconds not 1-2592000."""

    default_code = "invalid_every_seconds"


class InvalidTimezone(InvalidRequest):
    """Not an IANA time zone name."""

    default_code = "invalid_timezone"


class EmptyScheduleUpdate(InvalidRequest):
    """A schedule update with no field."""

    default_code = "empty_schedule_update"


class InvalidGroup(InvalidRequest):
    """A message's ``group`` is not 1–128 visible ASCII characters."""

    default_code = "invalid_group"


class InvalidGroupMaxInFlight(InvalidRequest):
    """``group_max_in_flight`` out of 1–10000."""

    default_code = "invalid_group_max_in_flight"


class InvalidMaxInFlight(InvalidRequest):
    """``max_in_flight`` out of 1–1000000."""

    default_code = "invalid_max_in_flight"


class InvalidRateLimit(InvalidRequest):
    """A ``rate_limit`` or ``group_rate_limit`` out of range."""

    default_code = "invalid_rate_limit"


class InvalidCompletedRetention(InvalidRequest):
    """``completed_retention_seconds`` out of 0–604800."""

    default_code = "invalid_completed_retention"


class InvalidResult(InvalidRequest):
    """An acknowledge's ``result`` over 65,536 characters."""

    default_code = "invalid_result"


class InvalidErrorText(InvalidRequest):
    """A visibility change's ``error`` over 4,096 characters."""

    default_code = "invalid_error"


class InvalidReason(InvalidRequest):
    """A dead-letter ``reason`` filter that is not a reason the server gives."""

    default_code = "invalid_reason"


class InvalidMatch(InvalidRequest):
    """``match`` is not a JSON object."""

    default_code = "invalid_match"


# --- 401, 403, 404, 405, 409, 413, 415 ---------------------------------------------------


class Unauthorized(APIError):
    """No bearer token, or not a valid one (401)."""

    status_code = 401
    default_code = "unauthorized"


class Forbidden(APIError):
    """The token lacks the scope the route needs (403)."""

    status_code = 403
    default_code = "forbidden"


class NotFound(APIError):
    """Something addressed does not exist (404)."""

    status_code = 404
    default_code = "not_found"


class RouteNotFound(NotFound):
    """No route matches the path: usually a wrong ``base_url`` or an older server."""

    default_code = "not_found"


class QueueNotFound(NotFound):
    default_code = "queue_not_found"


class DeadLetterNotFound(NotFound):
    default_code = "dead_letter_not_found"


class MessageNotFound(NotFound):
    default_code = "message_not_found"


class ScheduleNotFound(NotFound):
    default_code = "schedule_not_found"


class MethodNotAllowed(APIError):
    status_code = 405
    default_code = "method_not_allowed"


class Conflict(APIError):
    """The request contradicts the current state (409)."""

    status_code = 409
    default_code = "conflict"


class QueueAlreadyExists(Conflict):
    default_code = "queue_already_exists"


class ScheduleAlreadyExists(Conflict):
    """The queue already has a schedule of that name."""

    default_code = "schedule_already_exists"


class IdempotencyKeyConflict(Conflict):
    """The Idempotency-Key was used in this queue for a different message."""

    default_code = "idempotency_key_conflict"


class StaleReceiptHandle(Conflict):
    """The receipt handle is not the message's current, unexpired delivery."""

    default_code = "stale_receipt_handle"


class PayloadTooLarge(APIError):
    status_code = 413
    default_code = "payload_too_large"


class UnsupportedMediaType(APIError):
    status_code = 415
    default_code = "unsupported_media_type"


# --- 5xx ---------------------------------------------------------------------------------


class ServerError(APIError):
    """The server failed (5xx)."""

    status_code = 500
    default_code = "server_error"


class InternalError(ServerError):
    """An unexpected failure; quote ``request_id`` when reporting it."""

    default_code = "internal_error"


class ServiceUnavailable(ServerError):
    """The service cannot do this right now; the same request may succeed later (503)."""

    status_code = 503
    default_code = "service_unavailable"


class DatabaseUnavailable(ServiceUnavailable):
    default_code = "database_unavailable"


class Busy(ServiceUnavailable):
    """An operator action could not get its locks; nothing was changed."""

    default_code = "busy"


class NotReady(ServiceUnavailable):
    default_code = "not_ready"


_BY_CODE: dict[str, type[APIError]] = {}


def _register(cls: type[APIError]) -> None:
    for sub in cls.__subclasses__():
        if sub.default_code:
            _BY_CODE[sub.default_code] = sub  # a subclass wins over its family class
        _register(sub)


_register(APIError)

_BY_STATUS: dict[int, type[APIError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    413: PayloadTooLarge,
    415: UnsupportedMediaType,
    500: InternalError,
    503: ServiceUnavailable,
}


def error_for_code(code: str, status: int) -> type[APIError]:
    """The class for a problem ``code``; an unknown code gets its status family's class."""
    known = _BY_CODE.get(code)
    if known is not None and (known.status_code == status or known.status_code == 0):
        return known
    family = _BY_STATUS.get(status)
    if family is not None:
        return family
    return ServerError if status >= 500 else APIError


class _Problem(msgspec.Struct):
    status: int | None = None
    code: str | None = None
    detail: str | None = None
    title: str | None = None


_PROBLEM = msgspec.json.Decoder(_Problem)


def problem_error(
    status: int,
    body: bytes,
    *,
    request_id: str | None,
    retry_after: float | None = None,
) -> APIError | None:
    """The exception for a problem document, or None when ``body`` is not one."""
    try:
        problem = _PROBLEM.decode(body)
        raw = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return None
    if not isinstance(raw, dict) or not problem.code:
        return None
    cls = error_for_code(problem.code, status)
    return cls(
        problem.detail or problem.title or problem.code,
        code=problem.code,
        status=status,
        request_id=request_id,
        title=problem.title,
        retry_after=retry_after,
        problem=raw,
    )
