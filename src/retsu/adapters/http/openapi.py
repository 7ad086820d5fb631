"""The OpenAPI 3.1 document of the API, served at ``GET /openapi.json``.

Handlers read raw bodies (``body.py``) and query strings (``query.py``) to keep the
contract's error codes, so Litestar's own schema generation would see neither bodies
nor parameters. The document is built here instead, generically from the app's
registered routes:

* every HTTP route of the app becomes an operation (Litestar's automatic ``OPTIONS``
  excepted); path parameters come from the route template and are UUIDs;
* what a template cannot tell — summary, query parameters, request body, success
  responses and the route's own error codes — comes from ``OPERATIONS``, keyed by
  ``(method, template)``; a route missing there is still listed (marked undocumented,
  and a unit test fails until it is described);
* errors every route of a kind can return are added structurally: ``invalid_path`` for a
  path ID, ``queue_not_found`` under ``/v1/queues/{queue_id}``, ``invalid_json`` /
  ``payload_too_large`` / ``unsupported_media_type`` with a body, ``unauthorized`` and (for
  admin routes) ``forbidden`` under ``/v1``, ``internal_error`` everywhere;
* the required scope comes from the same rule the auth middleware applies
  (``auth.required_scope``);
* bodies' JSON Schemas are generated from the msgspec Structs of ``dto.py`` and refined
  with the domain's ranges (the same constants the use cases check).

Every error is ``application/problem+json`` (the ``Problem`` schema); each error response
lists, in its description, the ``code`` values the route can answer with that status.

The document is built once per app, on first request, and served without auth.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Final

import msgspec
from litestar import Litestar, Request, Response, get
from litestar.handlers import HTTPRouteHandler
from litestar.routes import HTTPRoute

from retsu import __version__
from retsu.adapters.http import dto
from retsu.adapters.http.auth import ADMIN, MESSAGES, REALM, required_scope
from retsu.adapters.http.problems import MAX_BODY_BYTES, PROBLEM_MEDIA_TYPE, Problem
from retsu.domain.audit import AuditAction
from retsu.domain.cursor import DEFAULT_LIST_LIMIT, LIST_LIMIT
from retsu.domain.dequeue import MAX_MESSAGES, WAIT_SECONDS
from retsu.domain.message import (
    DEFAULT_REDRIVE_LIMIT,
    MESSAGE_DELAY,
    MESSAGE_TTL,
    REDRIVE_LIMIT,
    VISIBILITY_CHANGE,
    Priority,
)
from retsu.domain.queue import (
    DEFAULT_MAX_DELIVERY_ATTEMPTS,
    DEFAULT_MESSAGE_TTL,
    DEFAULT_MESSAGE_TTL_SECONDS,
    DEFAULT_VISIBILITY_TIMEOUT_SECONDS,
    MAX_DELIVERY_ATTEMPTS,
    NAME_MAX_LENGTH,
    VISIBILITY_TIMEOUT,
)
from retsu.domain.ranges import IntRange

__all__ = [
    "OPENAPI_PATH",
    "OPERATIONS",
    "build_document",
    "document_operations",
    "openapi_routes",
    "plain_template",
]

OPENAPI_PATH: Final = "/openapi.json"
OPENAPI_VERSION: Final = "3.1.0"
JSON: Final = "application/json"
_SCHEMA_REF: Final = "#/components/schemas/{name}"
_MAX_BATCH: Final = 100
_QUEUE_NAME_PATTERN: Final = r"^[a-z0-9]([a-z0-9._-]*[a-z0-9])?$"

# --- what a route is -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reply:
    """A success response: ``schema`` is a msgspec Struct (or a JSON Schema), None = no body."""

    description: str
    schema: type[msgspec.Struct] | Mapping[str, Any] | None = None
    media_type: str = JSON
    headers: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Query:
    name: str
    schema: Mapping[str, Any]
    description: str
    code: str  # the problem code of a bad value


@dataclass(frozen=True, slots=True)
class Operation:
    summary: str
    tag: str
    replies: Mapping[int, Reply]
    description: str = ""
    body: type[msgspec.Struct] | None = None
    body_required: bool = True
    query: Sequence[Query] = ()
    headers: Sequence[Mapping[str, Any]] = ()
    # status → codes this route answers besides the structural ones
    errors: Mapping[int, Sequence[str]] = field(default_factory=dict)


# --- parameters -----------------------------------------------------------------------


def _range(rule: IntRange, default: int | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer", "minimum": rule.low, "maximum": rule.high}
    if default is not None:
        schema["default"] = default
    return schema


LIMIT = Query(
    "limit",
    _range(LIST_LIMIT, DEFAULT_LIST_LIMIT),
    f"Page size, {LIST_LIMIT.low}–{LIST_LIMIT.high} (default {DEFAULT_LIST_LIMIT}).",
    LIST_LIMIT.code,
)
CURSOR = Query(
    "cursor",
    {"type": "string", "minLength": 1},
    "The `next_cursor` of the previous page; opaque, validated fully by the server.",
    "invalid_cursor",
)
NAME_FILTER = Query(
    "name",
    {"type": "string", "maxLength": NAME_MAX_LENGTH, "pattern": _QUEUE_NAME_PATTERN},
    "Only the queue with exactly this name.",
    "invalid_queue_name",
)
QUEUE_FILTER = Query(
    "queue_id",
    {"type": "string", "format": "uuid"},
    "Only the entries about this queue.",
    "invalid_queue_id",
)
ACTION_FILTER = Query(
    "action",
    {"type": "string", "enum": [action.value for action in AuditAction]},
    "Only the entries of this action.",
    "invalid_action",
)

IDEMPOTENCY_KEY: Final[Mapping[str, Any]] = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": (
        "1–128 visible ASCII characters, scoped to the queue and remembered for 24 h. "
        "A repeat with the same message answers `200` with the original id and "
        "`idempotent-replayed: true`; the same key with another message is "
        "`409 idempotency_key_conflict`. Otherwise `400 invalid_idempotency_key`."
    ),
    "schema": {"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[!-~]+$"},
}
NO_IDEMPOTENCY_KEY: Final[Mapping[str, Any]] = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": "Not accepted on this route: any value is `400 invalid_idempotency_key`.",
    "schema": {"type": "string"},
}
REPLAYED: Final[Mapping[str, Any]] = {
    "idempotent-replayed": {
        "description": "`true` when this answers a repeat of an earlier request.",
        "schema": {"type": "string", "enum": ["true"]},
    }
}

# --- the routes -----------------------------------------------------------------------

Q = "/v1/queues"
QID = "/v1/queues/{queue_id}"
DL = QID + "/dead-letters"

_QUEUE_SETTINGS_CODES: Final = (
    VISIBILITY_TIMEOUT.code,
    MAX_DELIVERY_ATTEMPTS.code,
    DEFAULT_MESSAGE_TTL.code,
)
_MESSAGE_CODES: Final = (
    "invalid_payload",
    "invalid_priority",
    MESSAGE_TTL.code,
    MESSAGE_DELAY.code,
)

_MESSAGE_OR_MESSAGES: Final[Mapping[str, Any]] = {
    "oneOf": [
        {"$ref": _SCHEMA_REF.format(name="MessageOut")},
        {"$ref": _SCHEMA_REF.format(name="MessagesOut")},
    ]
}

OPERATIONS: Final[Mapping[tuple[str, str], Operation]] = {
    ("POST", Q): Operation(
        "Create a queue",
        "queues",
        {201: Reply("The new queue.", dto.QueueOut)},
        body=dto.CreateQueueBody,
        errors={
            400: ("invalid_queue_name", *_QUEUE_SETTINGS_CODES),
            409: ("queue_already_exists",),
        },
        description="Writes the audit entry `queue.created`.",
    ),
    ("GET", Q): Operation(
        "List queues",
        "queues",
        {200: Reply("One page of queues, ordered by name in byte order.", dto.QueuesOut)},
        query=(LIMIT, CURSOR, NAME_FILTER),
    ),
    ("GET", QID): Operation(
        "Get a queue with its statistics",
        "queues",
        {
            200: Reply(
                "The queue and its exact counts at the time of the request.", dto.QueueWithStatsOut
            )
        },
    ),
    ("PATCH", QID): Operation(
        "Change a queue's settings",
        "queues",
        {200: Reply("The whole queue after the change.", dto.QueueOut)},
        body=dto.UpdateQueueBody,
        errors={400: ("empty_queue_update", *_QUEUE_SETTINGS_CODES)},
        description="Any subset of the three settings; a name never changes. "
        "Writes the audit entry `queue.updated`.",
    ),
    ("DELETE", QID): Operation(
        "Delete a queue",
        "queues",
        {204: Reply("Deleted, with its messages and dead letters.")},
        description="Writes the audit entry `queue.deleted`.",
    ),
    ("POST", QID + "/pause"): Operation(
        "Pause a queue",
        "queues",
        {200: Reply("The paused queue.", dto.QueueOut)},
        description="While paused, enqueue, acknowledge and visibility changes still work; "
        "dequeue finds nothing. Writes the audit entry `queue.paused`.",
    ),
    ("POST", QID + "/resume"): Operation(
        "Resume a queue",
        "queues",
        {200: Reply("The resumed queue.", dto.QueueOut)},
        description="Writes the audit entry `queue.resumed`.",
    ),
    ("POST", QID + "/purge"): Operation(
        "Purge a queue",
        "queues",
        {200: Reply("How many live messages were removed (dead letters stay).", dto.PurgedOut)},
        description="Writes the audit entry `queue.purged`.",
    ),
    ("POST", QID + "/messages"): Operation(
        "Enqueue a message",
        "messages",
        {
            201: Reply("The new message's id.", dto.IdOut),
            200: Reply(
                "A repeat of an earlier request with the same Idempotency-Key and message: "
                "the original id.",
                dto.IdOut,
                headers=REPLAYED,
            ),
        },
        body=dto.MessageBody,
        headers=(IDEMPOTENCY_KEY,),
        errors={
            400: (*_MESSAGE_CODES, "invalid_idempotency_key"),
            409: ("idempotency_key_conflict",),
        },
        description="`invalid_delay` also when the delay is not shorter than the lifetime.",
    ),
    ("POST", QID + "/messages/batch"): Operation(
        "Enqueue 1–100 messages at once",
        "messages",
        {201: Reply("The new ids, in request order.", dto.IdsOut)},
        body=dto.BatchEnqueueBody,
        headers=(NO_IDEMPOTENCY_KEY,),
        errors={400: ("invalid_batch_size", *_MESSAGE_CODES, "invalid_idempotency_key")},
        description="All or nothing: one invalid entry rejects the batch with its index "
        "in `detail`.",
    ),
    ("POST", QID + "/messages/dequeue"): Operation(
        "Take the next message(s)",
        "messages",
        {
            200: Reply(
                'Without `max_messages`: one message; with it: `{"messages": [...]}` '
                "(possibly empty).",
                _MESSAGE_OR_MESSAGES,
            ),
            204: Reply("Without `max_messages`: nothing deliverable within `wait_seconds`."),
        },
        body=dto.DequeueBody,
        body_required=False,
        errors={
            400: (WAIT_SECONDS.code, VISIBILITY_TIMEOUT.code, MAX_MESSAGES.code),
        },
        description="Highest priority first, FIFO within a priority. The body is optional.",
    ),
    ("POST", QID + "/messages/{message_id}/acknowledge"): Operation(
        "Acknowledge a message",
        "messages",
        {204: Reply("Done — also when already removed, stale or timed out (idempotent).")},
        body=dto.AcknowledgeBody,
    ),
    ("POST", QID + "/messages/acknowledge"): Operation(
        "Acknowledge 1–100 messages",
        "messages",
        {204: Reply("Done, with the single acknowledge's rule per entry.")},
        body=dto.BatchAcknowledgeBody,
        errors={400: ("invalid_batch_size",)},
    ),
    ("POST", QID + "/messages/{message_id}/visibility"): Operation(
        "Change a delivery's visibility timeout",
        "messages",
        {204: Reply("The lease now ends that many seconds from now (0 = release now).")},
        body=dto.VisibilityBody,
        errors={400: (VISIBILITY_CHANGE.code,), 409: ("stale_receipt_handle",)},
    ),
    ("GET", DL): Operation(
        "List dead letters",
        "dead letters",
        {200: Reply("One page of dead letters, newest first.", dto.DeadLettersOut)},
        query=(LIMIT, CURSOR),
    ),
    ("GET", DL + "/{message_id}"): Operation(
        "Get a dead letter",
        "dead letters",
        {200: Reply("The dead letter.", dto.DeadLetterOut)},
        errors={404: ("dead_letter_not_found",)},
    ),
    ("DELETE", DL + "/{message_id}"): Operation(
        "Delete a dead letter",
        "dead letters",
        {204: Reply("Deleted.")},
        errors={404: ("dead_letter_not_found",)},
        description="Writes the audit entry `dead_letter.deleted`.",
    ),
    ("POST", DL + "/{message_id}/redrive"): Operation(
        "Redrive a dead letter",
        "dead letters",
        {201: Reply("The id of the fresh message put back on the queue.", dto.IdOut)},
        errors={404: ("dead_letter_not_found",)},
        description="Same payload and priority, attempts 0, the queue's default lifetime; "
        "the record is removed in the same transaction. Writes `dead_letter.redriven`.",
    ),
    ("POST", DL + "/redrive"): Operation(
        "Redrive dead letters in bulk",
        "dead letters",
        {200: Reply("How many were redriven, oldest first.", dto.RedrivenOut)},
        body=dto.RedriveBody,
        body_required=False,
        errors={400: (REDRIVE_LIMIT.code,)},
        description=f"`limit` {REDRIVE_LIMIT.low}–{REDRIVE_LIMIT.high} "
        f"(default {DEFAULT_REDRIVE_LIMIT}). Writes `dead_letter.redriven`.",
    ),
    ("GET", "/v1/audit-log"): Operation(
        "Read the audit log",
        "audit",
        {200: Reply("One page of audit entries, newest first.", dto.AuditLogOut)},
        query=(LIMIT, CURSOR, QUEUE_FILTER, ACTION_FILTER),
    ),
    ("GET", "/health/live"): Operation(
        "Liveness",
        "health",
        {200: Reply("The process is up.", dto.StatusOut)},
    ),
    ("GET", "/health/ready"): Operation(
        "Readiness",
        "health",
        {200: Reply("Ready to serve (PostgreSQL answers).", dto.StatusOut)},
        errors={503: ("not_ready",)},
    ),
    ("GET", "/metrics"): Operation(
        "Prometheus metrics",
        "health",
        {
            200: Reply(
                "Prometheus text exposition format.",
                {"type": "string"},
                media_type="text/plain",
            )
        },
    ),
    ("GET", OPENAPI_PATH): Operation(
        "This OpenAPI document",
        "health",
        {200: Reply("The OpenAPI 3.1 document.", {"type": "object"})},
    ),
}

# Domain ranges and shapes the Structs do not carry: (Struct, field) → JSON Schema refinements.
_FIELD_RULES: Final[Mapping[tuple[str, str], Mapping[str, Any]]] = {
    ("CreateQueueBody", "name"): {
        "minLength": 1,
        "maxLength": NAME_MAX_LENGTH,
        "pattern": _QUEUE_NAME_PATTERN,
        "description": "1–64 characters of a-z 0-9 . _ -, starting and ending with a letter "
        "or digit (else `invalid_queue_name`).",
    },
    ("CreateQueueBody", "visibility_timeout_seconds"): {
        **_range(VISIBILITY_TIMEOUT, DEFAULT_VISIBILITY_TIMEOUT_SECONDS),
        "code": VISIBILITY_TIMEOUT.code,
    },
    ("CreateQueueBody", "max_delivery_attempts"): {
        **_range(MAX_DELIVERY_ATTEMPTS, DEFAULT_MAX_DELIVERY_ATTEMPTS),
        "code": MAX_DELIVERY_ATTEMPTS.code,
    },
    ("CreateQueueBody", "default_message_ttl_seconds"): {
        **_range(DEFAULT_MESSAGE_TTL, DEFAULT_MESSAGE_TTL_SECONDS),
        "code": DEFAULT_MESSAGE_TTL.code,
    },
    ("UpdateQueueBody", "visibility_timeout_seconds"): {
        **_range(VISIBILITY_TIMEOUT),
        "code": VISIBILITY_TIMEOUT.code,
    },
    ("UpdateQueueBody", "max_delivery_attempts"): {
        **_range(MAX_DELIVERY_ATTEMPTS),
        "code": MAX_DELIVERY_ATTEMPTS.code,
    },
    ("UpdateQueueBody", "default_message_ttl_seconds"): {
        **_range(DEFAULT_MESSAGE_TTL),
        "code": DEFAULT_MESSAGE_TTL.code,
    },
    ("MessageBody", "payload"): {
        "description": "Any text without the NUL character U+0000 (else `invalid_payload`).",
    },
    ("MessageBody", "priority"): {
        "enum": [p.name for p in sorted(Priority, reverse=True)],
        "description": "Else `invalid_priority`.",
    },
    ("MessageBody", "ttl_seconds"): {
        **_range(MESSAGE_TTL),
        "code": MESSAGE_TTL.code,
        "description": "The message's lifetime; default: the queue's "
        "`default_message_ttl_seconds`.",
    },
    ("MessageBody", "delay_seconds"): {
        **_range(MESSAGE_DELAY, 0),
        "code": MESSAGE_DELAY.code,
        "description": "Deliverable only after this delay; must be shorter than the lifetime.",
    },
    ("BatchEnqueueBody", "messages"): {
        "minItems": 1,
        "maxItems": _MAX_BATCH,
        "description": "Else `invalid_batch_size`.",
    },
    ("BatchAcknowledgeBody", "messages"): {
        "minItems": 1,
        "maxItems": _MAX_BATCH,
        "description": "Else `invalid_batch_size`.",
    },
    ("DequeueBody", "wait_seconds"): {
        **_range(WAIT_SECONDS, 0),
        "code": WAIT_SECONDS.code,
        "description": "Long-poll up to this many seconds for a message.",
    },
    ("DequeueBody", "visibility_timeout_seconds"): {
        **_range(VISIBILITY_TIMEOUT),
        "code": VISIBILITY_TIMEOUT.code,
        "description": "Overrides the queue's visibility timeout for these deliveries.",
    },
    ("DequeueBody", "max_messages"): {
        **_range(MAX_MESSAGES),
        "code": MAX_MESSAGES.code,
        "description": 'Present: answer `{"messages": [...]}` with up to this many.',
    },
    ("VisibilityBody", "visibility_timeout_seconds"): {
        **_range(VISIBILITY_CHANGE),
        "code": VISIBILITY_CHANGE.code,
        "description": "The lease ends this many seconds from now; 0 releases it.",
    },
    ("RedriveBody", "limit"): {
        **_range(REDRIVE_LIMIT, DEFAULT_REDRIVE_LIMIT),
        "code": REDRIVE_LIMIT.code,
    },
    ("MessageOut", "priority"): {"enum": [p.name for p in sorted(Priority, reverse=True)]},
    ("DeadLetterOut", "priority"): {"enum": [p.name for p in sorted(Priority, reverse=True)]},
    ("AuditRecordOut", "action"): {"enum": [action.value for action in AuditAction]},
    ("MessageOut", "receipt_handle"): {"description": "Opaque; valid for this delivery only."},
    ("Problem", "type"): {"const": "about:blank"},
    ("Problem", "code"): {"description": "Stable snake_case error code."},
}

# --- building ---------------------------------------------------------------------------

_PARAM: Final = re.compile(r"\{(\w+)(?::\w+)?\}")


def plain_template(path: str) -> str:
    """``/v1/queues/{queue_id:str}`` → ``/v1/queues/{queue_id}`` (OpenAPI's spelling)."""
    return _PARAM.sub(lambda match: "{" + match.group(1) + "}", path)


def document_operations(app: Litestar) -> list[tuple[str, str]]:
    """Every ``(METHOD, plain template)`` the document describes: all of the app's HTTP
    routes, without Litestar's automatic ``OPTIONS`` handlers."""
    found: set[tuple[str, str]] = set()
    for route in app.routes:
        if not isinstance(route, HTTPRoute):
            continue
        for handler in route.route_handlers:
            if handler.include_in_schema is False:
                continue
            for method in handler.http_methods:
                found.add((method, plain_template(route.path)))
    return sorted(found, key=lambda item: (item[1], item[0]))


def _codes(statuses: dict[int, list[str]], status: int, *codes: str) -> None:
    listed = statuses.setdefault(status, [])
    listed.extend(code for code in codes if code not in listed)


def _error_codes(method: str, path: str, op: Operation | None) -> dict[int, list[str]]:
    statuses: dict[int, list[str]] = {}
    if "{" in path:
        _codes(statuses, 400, "invalid_path")
    for query in op.query if op else ():
        _codes(statuses, 400, query.code)
    if op is not None and op.body is not None:
        _codes(statuses, 400, "invalid_json")
    for status, codes in (op.errors if op else {}).items():
        _codes(statuses, status, *codes)
    scope = required_scope(method, path)
    if scope is not None:
        _codes(statuses, 401, "unauthorized")
        if scope == ADMIN:
            _codes(statuses, 403, "forbidden")
    if path.startswith(QID):
        _codes(statuses, 404, "queue_not_found")
    if op is not None and op.body is not None:
        _codes(statuses, 413, "payload_too_large")
        _codes(statuses, 415, "unsupported_media_type")
    _codes(statuses, 500, "internal_error")
    return dict(sorted(statuses.items()))


_ERROR_TEXT: Final[Mapping[int, str]] = {
    400: "Bad request",
    401: "No valid bearer token (only with `auth.enabled`)",
    403: "The token lacks the `admin` scope (only with `auth.enabled`)",
    404: "Not found",
    409: "Conflict",
    413: f"Body larger than {MAX_BODY_BYTES} bytes",
    415: "Body not sent as application/json",
    500: "Unexpected failure; `detail` names the request id",
    503: "Not ready",
}


def _problem_response(status: int, codes: Sequence[str]) -> dict[str, Any]:
    listed = ", ".join(f"`{code}`" for code in codes)
    response: dict[str, Any] = {
        "description": f"{_ERROR_TEXT.get(status, 'Error')}. Codes: {listed}.",
        "headers": {"x-request-id": {"$ref": "#/components/headers/RequestId"}},
        "content": {
            PROBLEM_MEDIA_TYPE: {
                "schema": {"$ref": _SCHEMA_REF.format(name="Problem")},
                "example": {
                    "type": "about:blank",
                    "title": HTTPStatus(status).phrase,
                    "status": status,
                    "detail": "A sentence about what went wrong.",
                    "code": codes[0],
                },
            }
        },
    }
    if status == 401:
        response["headers"]["www-authenticate"] = {
            "description": f'`Bearer realm="{REALM}"`, with `error="invalid_token"` for an '
            'unknown token and `error="invalid_request"` for a malformed one.',
            "schema": {"type": "string"},
        }
    return response


def _schema_of(value: type[msgspec.Struct] | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(value, type):
        return {"$ref": _SCHEMA_REF.format(name=value.__name__)}
    return dict(value)


def _operation_id(method: str, path: str) -> str:
    words = [w.strip("{}").replace("-", "_") for w in path.split("/") if w and w != "v1"]
    return "_".join([method.lower(), *words])


def _scope_text(scope: str | None) -> str:
    if scope is None:
        return "Open: no token needed, even with auth enabled."
    if scope == MESSAGES:
        return "Scope: `messages` or `admin` (with `auth.enabled`)."
    return "Scope: `admin` (with `auth.enabled`)."


def _operation(method: str, path: str, op: Operation | None) -> dict[str, Any]:
    scope = required_scope(method, path)
    errors = _error_codes(method, path, op)
    error_lines = "; ".join(
        f"{status}: {', '.join(f'`{c}`' for c in codes)}" for status, codes in errors.items()
    )
    intro = op.description if op and op.description else ""
    if op is None:
        intro = "Undocumented route."
    description = "\n\n".join(
        part for part in (intro, _scope_text(scope), f"Errors — {error_lines}.") if part
    )
    parameters: list[dict[str, Any]] = [
        {"$ref": f"#/components/parameters/{name}"} for name in _PARAM.findall(path)
    ]
    for query in op.query if op else ():
        parameters.append(
            {
                "name": query.name,
                "in": "query",
                "required": False,
                "description": f"{query.description} Else `400 {query.code}`.",
                "schema": dict(query.schema),
            }
        )
    parameters.extend(dict(header) for header in (op.headers if op else ()))
    parameters.append({"$ref": "#/components/parameters/RequestId"})

    responses: dict[str, Any] = {}
    for status, reply in sorted((op.replies if op else {200: Reply("Success.")}).items()):
        response: dict[str, Any] = {
            "description": reply.description,
            "headers": {
                "x-request-id": {"$ref": "#/components/headers/RequestId"},
                **{name: dict(header) for name, header in reply.headers.items()},
            },
        }
        if reply.schema is not None:
            response["content"] = {reply.media_type: {"schema": _schema_of(reply.schema)}}
        responses[str(status)] = response
    for status, codes in errors.items():
        responses[str(status)] = _problem_response(status, codes)

    operation: dict[str, Any] = {
        "operationId": _operation_id(method, path),
        "summary": op.summary if op else f"{method} {path}",
        "description": description,
        "tags": [op.tag if op else "other"],
        "parameters": parameters,
        "responses": responses,
        "security": [] if scope is None else [{"bearer": []}],
        "x-retsu-scope": scope or "open",
        "x-retsu-error-codes": {str(status): codes for status, codes in errors.items()},
    }
    if op is not None and op.body is not None:
        operation["requestBody"] = {
            "required": op.body_required,
            "description": "JSON (`content-type: application/json`), at most 1 MiB; unknown "
            "fields, wrong types and missing required fields are `400 invalid_json`; "
            "`null` for an optional field means absent."
            + ("" if op.body_required else " The body is optional."),
            "content": {JSON: {"schema": _schema_of(op.body)}},
        }
    return operation


def _refine(components: dict[str, Any]) -> None:
    """Apply the domain's ranges and formats the Structs do not carry."""
    for (struct, name), rule in _FIELD_RULES.items():
        schema = components.get(struct, {}).get("properties", {}).get(name)
        if schema is None:
            continue
        rule = dict(rule)
        code = rule.pop("code", None)
        description = rule.pop("description", None)
        target = schema
        if "anyOf" in schema:  # `int | None`: refine the non-null branch
            target = next(s for s in schema["anyOf"] if s.get("type") != "null")
            if "default" in rule and schema.get("default") is None:
                schema.pop("default", None)
        target.update(rule)
        text = description or ""
        if code and not description:
            text = f"Else `{code}`."
        elif code:
            text = f"{text} Else `{code}`."
        if text:
            schema["description"] = text


def _add_datetime_formats(
    structs: Sequence[type[msgspec.Struct]], components: dict[str, Any]
) -> None:
    """msgspec leaves ``datetime`` fields as plain strings; ours are RFC 3339, UTC."""
    for info in msgspec.inspect.multi_type_info(structs):
        _walk_datetimes(info, components, set())


def _walk_datetimes(info: msgspec.inspect.Type, components: dict[str, Any], seen: set[str]) -> None:
    if isinstance(info, msgspec.inspect.ListType):
        _walk_datetimes(info.item_type, components, seen)
        return
    if isinstance(info, msgspec.inspect.UnionType):
        for member in info.types:
            _walk_datetimes(member, components, seen)
        return
    if not isinstance(info, msgspec.inspect.StructType):
        return
    name = info.cls.__name__
    if name in seen:
        return
    seen.add(name)
    properties = components.get(name, {}).get("properties", {})
    for fld in info.fields:
        member_types = (
            fld.type.types if isinstance(fld.type, msgspec.inspect.UnionType) else (fld.type,)
        )
        if any(isinstance(t, msgspec.inspect.DateTimeType) for t in member_types):
            schema = properties.get(fld.encode_name, {})
            branches = schema.get("anyOf", [schema])
            for branch in branches:
                if branch.get("type") == "string":
                    branch["format"] = "date-time"
        _walk_datetimes(fld.type, components, seen)


def _structs(operations: Sequence[Operation]) -> list[type[msgspec.Struct]]:
    found: dict[str, type[msgspec.Struct]] = {"Problem": Problem}
    for op in operations:
        if op.body is not None:
            found[op.body.__name__] = op.body
        for reply in op.replies.values():
            if isinstance(reply.schema, type):
                found[reply.schema.__name__] = reply.schema
    found.setdefault("MessageOut", dto.MessageOut)
    found.setdefault("MessagesOut", dto.MessagesOut)
    return list(found.values())


_INFO_DESCRIPTION: Final = """\
Retsu: a priority queue over HTTP, with PostgreSQL as its only source of truth.

Conventions: JSON bodies need `content-type: application/json` and are at most 1 MiB. \
Every error is `application/problem+json` with a stable `code`; an unknown route is \
`404 not_found`, a wrong method `405 method_not_allowed`. Every response carries \
`x-request-id`. IDs are UUIDv7.

Auth: with `auth.enabled`, every `/v1` route needs `authorization: Bearer <secret>`. \
Message routes and the two queue reads accept the `messages` or `admin` scope; every other \
`/v1` route needs `admin`. `/health/*`, `/metrics` and this document are always open. \
Without a valid token, any `/v1` path — even one that matches no route — is `401`."""


def build_document(app: Litestar) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``app``'s routes."""
    operations = document_operations(app)
    described = [OPERATIONS[key] for key in operations if key in OPERATIONS]
    structs = _structs(described)
    _, components = msgspec.json.schema_components(structs, ref_template=_SCHEMA_REF)
    _add_datetime_formats(structs, components)
    _refine(components)

    paths: dict[str, dict[str, Any]] = {}
    for method, path in operations:
        op = OPERATIONS.get((method, path))
        paths.setdefault(path, {})[method.lower()] = _operation(method, path, op)

    tags = sorted({op.tag for op in described})
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "Retsu",
            "version": __version__,
            "description": _INFO_DESCRIPTION,
            "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
        },
        "tags": [{"name": tag} for tag in tags],
        "paths": paths,
        "components": {
            "schemas": dict(sorted(components.items())),
            "parameters": {
                "queue_id": _path_parameter("queue_id", "The queue's id."),
                "message_id": _path_parameter("message_id", "The message's id."),
                "RequestId": {
                    "name": "x-request-id",
                    "in": "header",
                    "required": False,
                    "description": "Echoed back when it is 1–128 visible ASCII characters; "
                    "otherwise the server makes one up.",
                    "schema": {"type": "string", "minLength": 1, "maxLength": 128},
                },
            },
            "headers": {
                "RequestId": {
                    "description": "The request's id (the caller's, or a fresh one).",
                    "schema": {"type": "string"},
                }
            },
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "A token secret from `auth.tokens`; only with "
                    "`auth.enabled`. Its `name` is the audit actor.",
                }
            },
        },
    }


def _path_parameter(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": f"{description} Not a UUID: `400 invalid_path`.",
        "schema": {"type": "string", "format": "uuid"},
    }


# --- serving ----------------------------------------------------------------------------

_encoder = msgspec.json.Encoder()


def openapi_routes(
    build: Callable[[Litestar], dict[str, Any]] = build_document,
) -> list[HTTPRouteHandler]:
    """``GET /openapi.json``: built on first request from the serving app, then cached."""
    cache: dict[int, bytes] = {}

    @get(OPENAPI_PATH)
    async def openapi_document(request: Request[Any, Any, Any]) -> Response[bytes]:
        app = request.app
        body = cache.get(id(app))
        if body is None:
            body = cache[id(app)] = _encoder.encode(build(app))
        return Response(content=body, media_type=JSON)

    return [openapi_document]
