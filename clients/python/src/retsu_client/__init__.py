"""Python client for Retsu: ``Client`` / ``AsyncClient`` for the HTTP API, ``Worker`` to
consume a queue with a handler, ``retsu_client.testing`` (extra ``testing``) to run the
server in process for tests.

    from retsu_client import Client

    with Client("http://127.0.0.1:2424", token="...") as retsu:
        retsu.enqueue_json("emails", {"to": "ada@example.com"}, priority="HIGH")
"""

from __future__ import annotations

from retsu_client._version import __version__
from retsu_client.aio import AsyncClient
from retsu_client.client import Client
from retsu_client.errors import (
    APIError,
    Busy,
    Conflict,
    ConnectionFailed,
    DatabaseUnavailable,
    DeadLetterNotFound,
    Forbidden,
    IdempotencyKeyConflict,
    InternalError,
    InvalidRequest,
    MessageNotFound,
    NotFound,
    QueueAlreadyExists,
    QueueNotFound,
    RetsuError,
    ScheduleAlreadyExists,
    ScheduleNotFound,
    ServerError,
    ServiceUnavailable,
    StaleReceiptHandle,
    Unauthorized,
    UnexpectedResponse,
)
from retsu_client.models import (
    UNSET,
    Attempt,
    AttemptOutcome,
    AuditEntry,
    Consumer,
    ConsumerHealth,
    DeadLetter,
    Enqueued,
    Group,
    GroupState,
    History,
    HistoryPoint,
    Message,
    MessageState,
    NewMessage,
    Page,
    Priority,
    Queue,
    QueueDetails,
    QueueStats,
    RateLimit,
    Schedule,
    ScheduleMessage,
    StoredMessage,
)
from retsu_client.retry import RetryPolicy
from retsu_client.worker import RetryLater, Worker

__all__ = [
    "UNSET",
    "APIError",
    "AsyncClient",
    "Attempt",
    "AttemptOutcome",
    "AuditEntry",
    "Busy",
    "Client",
    "Conflict",
    "ConnectionFailed",
    "Consumer",
    "ConsumerHealth",
    "DatabaseUnavailable",
    "DeadLetter",
    "DeadLetterNotFound",
    "Enqueued",
    "Forbidden",
    "Group",
    "GroupState",
    "History",
    "HistoryPoint",
    "IdempotencyKeyConflict",
    "InternalError",
    "InvalidRequest",
    "Message",
    "MessageNotFound",
    "MessageState",
    "NewMessage",
    "NotFound",
    "Page",
    "Priority",
    "Queue",
    "QueueAlreadyExists",
    "QueueDetails",
    "QueueNotFound",
    "QueueStats",
    "RateLimit",
    "RetryLater",
    "RetryPolicy",
    "RetsuError",
    "Schedule",
    "ScheduleAlreadyExists",
    "ScheduleMessage",
    "ScheduleNotFound",
    "ServerError",
    "ServiceUnavailable",
    "StaleReceiptHandle",
    "StoredMessage",
    "Unauthorized",
    "UnexpectedResponse",
    "Worker",
    "__version__",
]
