"""Domain errors. Each carries the stable snake_case code that callers see.

The HTTP adapter maps the error *family* (invalid input, not found, conflict)
to a status code; the code itself is decided here, next to the rule.
"""

from __future__ import annotations


class RetsuError(Exception):
    """Base of every error a caller may see; ``code`` is part of the API contract."""

    code: str = "internal_error"

    def __init__(self, detail: str, *, code: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        if code is not None:
            self.code = code


class InvalidInput(RetsuError):
    """A value of the right type that breaks a rule (out of range, bad format)."""


class NotFound(RetsuError):
    """The addressed thing does not exist."""


class Conflict(RetsuError):
    """The request contradicts the current state."""


class QueueNotFound(NotFound):
    code = "queue_not_found"

    def __init__(self, queue_id: object) -> None:
        super().__init__(f"Queue {queue_id} does not exist.")


class DeadLetterNotFound(NotFound):
    code = "dead_letter_not_found"

    def __init__(self, message_id: object) -> None:
        super().__init__(f"Dead letter {message_id} does not exist in this queue.")


class MessageNotFound(NotFound):
    """No live message with this id in the queue (acknowledged, expired, dead-lettered and
    unknown ids alike)."""

    code = "message_not_found"

    def __init__(self, message_id: object) -> None:
        super().__init__(f"Message {message_id} is not a live message of this queue.")


class QueueAlreadyExists(Conflict):
    code = "queue_already_exists"

    def __init__(self, name: str) -> None:
        super().__init__(f"A queue named {name!r} already exists.")


class StaleReceiptHandle(Conflict):
    code = "stale_receipt_handle"

    def __init__(self) -> None:
        super().__init__("The receipt handle is not the message's current, unexpired delivery.")


class IdempotencyKeyConflict(Conflict):
    code = "idempotency_key_conflict"

    def __init__(self) -> None:
        super().__init__(
            "This Idempotency-Key was already used for a different message in this queue."
        )


class Unavailable(RetsuError):
    """The service cannot do this right now; the same request may succeed later.

    Answered as ``503`` with a ``Retry-After`` of ``retry_after_seconds``, so a client
    can tell a passing outage from a bug (a ``500``).
    """

    retry_after_seconds: int = 1


class DatabaseUnavailable(Unavailable):
    """PostgreSQL refused or dropped the connection, is restarting, or no pooled
    connection became free within ``database.acquire_timeout_seconds``."""

    code = "database_unavailable"

    def __init__(self, detail: str = "The database cannot be reached right now.") -> None:
        super().__init__(f"{detail} Retry shortly.")


class Busy(Unavailable):
    """An operator action could not get its locks while consumers kept them busy."""

    code = "busy"

    def __init__(self) -> None:
        super().__init__(
            "The queue is too busy to take this change right now (its rows stayed locked); "
            "retry shortly."
        )
