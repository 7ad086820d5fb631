"""Typed path, query and header parameters shared by the routes.

Each is an ``Annotated`` type: Litestar parses and documents it, ``request_rules`` adds the
contract's lexical rules, and a bad value answers ``400`` with the parameter's code
(``invalid_<name>``; a path id: ``invalid_path``). Ranges come from the domain's constants.
"""

from __future__ import annotations

import re
from typing import Annotated, Any
from uuid import UUID

from litestar import Request
from litestar.enums import ParamType
from litestar.openapi.spec import Parameter as OpenAPIParameter
from litestar.openapi.spec import Schema
from litestar.openapi.spec.enums import OpenAPIType
from litestar.params import PathParameter, QueryParameter

from retsu.adapters.http.request_rules import RequestProblem
from retsu.domain.audit import AuditAction
from retsu.domain.browsing import BrowseState
from retsu.domain.consumer import ConsumerHealth, parse_consumer_name
from retsu.domain.groups import GroupState
from retsu.domain.message import GROUP_MAX_LENGTH
from retsu.domain.pagination import DEFAULT_LIST_LIMIT, LIST_LIMIT
from retsu.domain.search import MATCH_MAX_LENGTH, REASONS

__all__ = [
    "CONSUMER",
    "DEFAULT_LIMIT",
    "IDEMPOTENCY_KEY",
    "QUEUE",
    "TYPE_DECODERS",
    "ActionFilter",
    "Cursor",
    "Digits",
    "GroupFilter",
    "GroupStateFilter",
    "HealthFilter",
    "Limit",
    "MatchFilter",
    "MessageId",
    "PriorityFilter",
    "QueueId",
    "QueueIdFilter",
    "QueueNameFilter",
    "ReasonFilter",
    "ScheduleId",
    "StateFilter",
    "consumer_of",
    "idempotency_key_of",
]

# Route templates keep ``:str`` path segments: Litestar's ``:uuid`` type answers 404 for a
# non-UUID, the contract says ``400 invalid_path`` (request_rules checks the text, the
# handler's ``UUID`` annotation converts it and puts ``format: uuid`` in the document).
QUEUE = "/v1/queues/{queue_id:str}"

QueueId = Annotated[
    UUID, PathParameter(description="The queue's id. Not a UUID: `400 invalid_path`.")
]
MessageId = Annotated[
    UUID, PathParameter(description="The message's id. Not a UUID: `400 invalid_path`.")
]
ScheduleId = Annotated[
    UUID, PathParameter(description="The schedule's id. Not a UUID: `400 invalid_path`.")
]


class Digits(int):
    """A query integer as the contract reads it: 1–9 decimal digits, leading zeros allowed.

    msgspec's lax string conversion (what Litestar uses for parameters) also takes ``5.0``
    and ``1e2`` and refuses ``050``; ``decode_digits`` (an app type decoder) keeps the
    contract's reading. Ranges stay the domain's, with the parameter's own code.
    """


_DIGITS = re.compile(r"[0-9]{1,9}")


def decode_digits(target: type[Any], value: Any) -> Digits:
    if isinstance(value, str) and _DIGITS.fullmatch(value):
        return Digits(value)
    if type(value) is int:  # a handler's own default
        return Digits(value)
    raise ValueError("must be an integer")


DEFAULT_LIMIT = Digits(DEFAULT_LIST_LIMIT)
TYPE_DECODERS = [(lambda target: target is Digits, decode_digits)]

Limit = Annotated[
    Digits,
    QueryParameter(
        schema_extra={"type": "integer", "minimum": LIST_LIMIT.low, "maximum": LIST_LIMIT.high},
        description=f"Page size, {LIST_LIMIT.low}–{LIST_LIMIT.high} "
        f"(default {DEFAULT_LIST_LIMIT}). Else `400 {LIST_LIMIT.code}`.",
    ),
]
Cursor = Annotated[
    str | None,
    QueryParameter(
        description="The `next_cursor` of the previous page; opaque, validated fully by the "
        "server. Else `400 invalid_cursor`.",
    ),
]
IDEMPOTENCY_KEY_HEADER = b"idempotency-key"
# The header as the document describes it (the handlers read it with idempotency_key_of).
IDEMPOTENCY_KEY = OpenAPIParameter(
    name="Idempotency-Key",
    param_in=ParamType.HEADER,
    required=False,
    schema=Schema(type=OpenAPIType.STRING, min_length=1, max_length=128, pattern="^[!-~]+$"),
    description="1–128 visible ASCII characters, scoped to the queue and remembered for 24 h. "
    "A repeat with the same message answers `200` with the original id and "
    "`idempotent-replayed: true`; the same key with another message is "
    "`409 idempotency_key_conflict`. Otherwise (or sent twice) `400 invalid_idempotency_key`.",
)


def _one_header(
    request: Request[Any, Any, Any], header: bytes, code: str, shown: str
) -> str | None:
    """A header as sent (None when absent); sent twice, it is refused with ``code``.

    Read from the raw headers rather than as a Litestar header parameter: that one parses
    every header into a ``Headers`` object, which cost single enqueue ~5 % of its
    throughput (measured with stub use cases). Latin-1 maps every byte to one character, so
    a non-ASCII byte stays visible to the domain's check (and is refused there).
    """
    found: bytes | None = None
    for name, value in request.scope["headers"]:
        if name == header:
            if found is not None:
                raise RequestProblem(400, code, f"Send at most one {shown} header.")
            found = value
    return None if found is None else found.decode("latin-1")


def idempotency_key_of(request: Request[Any, Any, Any]) -> str | None:
    """The Idempotency-Key header as sent (None when absent); sent twice, it is refused."""
    return _one_header(
        request, IDEMPOTENCY_KEY_HEADER, "invalid_idempotency_key", "Idempotency-Key"
    )


CONSUMER_HEADER = b"retsu-consumer"
CONSUMER = OpenAPIParameter(
    name="Retsu-Consumer",
    param_in=ParamType.HEADER,
    required=False,
    schema=Schema(type=OpenAPIType.STRING, min_length=1, max_length=128, pattern="^[!-~]+$"),
    description="Names the consumer (1–128 visible ASCII characters), remembered per queue "
    "for `GET /v1/consumers`. Otherwise (or sent twice) `400 invalid_consumer`.",
)


def consumer_of(request: Request[Any, Any, Any]) -> str | None:
    """The Retsu-Consumer header (None when absent), checked: ``400 invalid_consumer``."""
    name = _one_header(request, CONSUMER_HEADER, "invalid_consumer", "Retsu-Consumer")
    return None if name is None else parse_consumer_name(name)


QueueNameFilter = Annotated[
    str | None,
    QueryParameter(
        description="Only the queue with exactly this name. Else `400 invalid_queue_name`."
    ),
]
QueueIdFilter = Annotated[
    UUID | None,
    QueryParameter(description="Only the entries about this queue. Else `400 invalid_queue_id`."),
]
ActionFilter = Annotated[
    str | None,
    QueryParameter(
        schema_extra={"enum": [action.value for action in AuditAction]},
        description="Only the entries of this action. Else `400 invalid_action`.",
    ),
]
# ``state`` is a name Litestar reserves for the app state: the handler's parameter is named
# otherwise, the query parameter keeps the contract's name.
StateFilter = Annotated[
    str | None,
    QueryParameter(
        name="state",
        schema_extra={"enum": [state.value for state in BrowseState]},
        description="Only the messages in this state (SPEC §3.2 counting rules; `completed`: "
        "acknowledged and kept, newest completion first); absent: every live message. Else "
        "`400 invalid_state`.",
    ),
]
GroupStateFilter = Annotated[
    str | None,
    QueryParameter(
        name="state",
        schema_extra={"enum": [state.value for state in GroupState]},
        description="Only the groups in this state: `ready` (its next message is deliverable "
        "now), `blocked` (at its in-flight limit) or `waiting` (its next message waits for its "
        "delay or the group's next token). Else `400 invalid_state`.",
    ),
]
GroupFilter = Annotated[
    str | None,
    QueryParameter(
        schema_extra={"minLength": 1, "maxLength": GROUP_MAX_LENGTH, "pattern": "^[!-~]+$"},
        description="Only the messages of this group (1–128 visible ASCII characters). Else "
        "`400 invalid_group`.",
    ),
]
MatchFilter = Annotated[
    str | None,
    QueryParameter(
        schema_extra={"maxLength": MATCH_MAX_LENGTH},
        description="A JSON object, URL-encoded: only payloads that are JSON and contain it "
        "(PostgreSQL's `@>`; a payload that is not JSON never matches). At most "
        f"{MATCH_MAX_LENGTH} characters. Else `400 invalid_match`.",
    ),
]
ReasonFilter = Annotated[
    str | None,
    QueryParameter(
        schema_extra={"enum": sorted(REASONS)},
        description="Only the dead letters moved for this reason. Else `400 invalid_reason`.",
    ),
]
PriorityFilter = Annotated[
    str | None,
    QueryParameter(
        schema_extra={"enum": ["HIGH", "MEDIUM", "LOW"]},
        description="Only the messages of this priority. Else `400 invalid_priority`.",
    ),
]
HealthFilter = Annotated[
    str | None,
    QueryParameter(
        schema_extra={"enum": [health.value for health in ConsumerHealth]},
        description="Only consumers of this health: `healthy` (seen within 30 s), `stale` "
        "(within 5 min) or `offline`. Else `400 invalid_health`.",
    ),
]
