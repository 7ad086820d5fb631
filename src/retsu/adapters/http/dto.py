"""msgspec shapes of request and response bodies.

Request Structs forbid unknown fields; optional fields default to ``None`` so that
an explicit ``null`` means "absent". Integer fields are plain ``int`` (msgspec
refuses bools and floats for them); their ranges are the domain's business and are only
*documented* here. Handlers return the response Structs; Litestar encodes them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any
from uuid import UUID

import msgspec
from litestar.params import KwargDefinition

from retsu.domain.attempts import ERROR_MAX_LENGTH, RESULT_MAX_LENGTH, Attempt, Outcome
from retsu.domain.audit import AuditAction, AuditRecord
from retsu.domain.browsing import BrowseState, StoredMessage
from retsu.domain.dequeue import MAX_MESSAGES, WAIT_SECONDS
from retsu.domain.groups import GroupState, GroupSummary
from retsu.domain.message import (
    DEFAULT_REDRIVE_LIMIT,
    GROUP_MAX_LENGTH,
    MESSAGE_DELAY,
    MESSAGE_TTL,
    REDRIVE_LIMIT,
    VISIBILITY_CHANGE,
    DeadLetter,
    DeliveredMessage,
    Priority,
    validate_group,
)
from retsu.domain.queue import (
    COMPLETED_RETENTION,
    DEFAULT_COMPLETED_RETENTION_SECONDS,
    DEFAULT_GROUP_MAX_IN_FLIGHT,
    DEFAULT_MAX_DELIVERY_ATTEMPTS,
    DEFAULT_MESSAGE_TTL,
    DEFAULT_MESSAGE_TTL_SECONDS,
    DEFAULT_VISIBILITY_TIMEOUT_SECONDS,
    GROUP_MAX_IN_FLIGHT,
    MAX_DELIVERY_ATTEMPTS,
    MAX_IN_FLIGHT,
    NAME_MAX_LENGTH,
    RATE_BURST,
    RATE_PER_SECOND_HIGH,
    RATE_PER_SECOND_LOW,
    VISIBILITY_TIMEOUT,
    Queue,
    RateLimit,
)
from retsu.domain.ranges import IntRange
from retsu.domain.schedule import DEFAULT_TIMEZONE, EVERY_SECONDS, Schedule
from retsu.domain.search import (
    BULK_LIMIT,
    DEFAULT_BULK_LIMIT,
    MATCH_MAX_LENGTH,
    REASONS,
    BulkOutcome,
    Search,
    check_match,
    parse_reason,
)
from retsu.domain.state import QueueStats

MAX_BATCH_SIZE = 100
# The queue-name rule of domain/queue.py, for the document (JSON Schema's regex dialect).
QUEUE_NAME_PATTERN = r"^[a-z0-9]([a-z0-9._-]*[a-z0-9])?$"

# -- requests ---------------------------------------------------------------------
# ``Doc`` annotations only document a field (msgspec ignores them): the domain checks the
# ranges, so a bad value keeps the field's own code (``invalid_ttl``…), not invalid_json.


def _range(rule: IntRange, text: str = "", default: int | None = None) -> KwargDefinition:
    lead = f"{text} " if text else ""
    return KwargDefinition(
        ge=rule.low,
        le=rule.high,
        # The server's default when the field is absent or null (the Struct's is None).
        schema_extra=None if default is None else {"default": default},
        description=f"{lead}{rule.low}–{rule.high}; else `{rule.code}`.",
    )


_PRIORITIES = [p.name for p in sorted(Priority, reverse=True)]
PriorityName = Annotated[str, KwargDefinition(enum=_PRIORITIES)]
ActionName = Annotated[str, KwargDefinition(enum=[a.value for a in AuditAction])]
_QUEUE_NAME = KwargDefinition(
    min_length=1,
    max_length=NAME_MAX_LENGTH,
    pattern=QUEUE_NAME_PATTERN,
    description="1–64 characters of a-z 0-9 . _ -, starting and ending with a letter or digit; "
    "else `invalid_queue_name`.",
)
_VISIBILITY = _range(VISIBILITY_TIMEOUT)
_ATTEMPTS = _range(MAX_DELIVERY_ATTEMPTS)
_DEFAULT_TTL = _range(DEFAULT_MESSAGE_TTL)
_BATCH = KwargDefinition(
    min_items=1, max_items=MAX_BATCH_SIZE, description="1–100 entries; else `invalid_batch_size`."
)


class RateLimitBody(msgspec.Struct, forbid_unknown_fields=True):
    """A token bucket: over any window of t seconds at most burst + per_second × t
    deliveries."""

    per_second: Annotated[
        float,
        KwargDefinition(
            ge=RATE_PER_SECOND_LOW,
            le=RATE_PER_SECOND_HIGH,
            description=f"{RATE_PER_SECOND_LOW}–{RATE_PER_SECOND_HIGH:g}; else "
            "`invalid_rate_limit`.",
        ),
    ]
    burst: Annotated[int | None, _range(RATE_BURST, "Default: max(1, ceil(per_second)).")] = None

    def as_dict(self) -> dict[str, Any]:
        return {"per_second": self.per_second, "burst": self.burst}


_RATE_LIMIT = KwargDefinition(
    description="A token bucket for the queue's deliveries (redeliveries count); null: none."
)
_GROUP_RATE_LIMIT = KwargDefinition(
    description="The same bucket for each group on its own; null: none."
)
_MAX_IN_FLIGHT = _range(MAX_IN_FLIGHT, "At most this many active leases; null: no cap.")
_GROUP_MAX = _range(
    GROUP_MAX_IN_FLIGHT,
    "At most this many messages of one group leased at once (1: an ordered lane).",
    default=DEFAULT_GROUP_MAX_IN_FLIGHT,
)
_RETENTION = _range(
    COMPLETED_RETENTION,
    "How long an acknowledged message is kept as completed (0: gone at once).",
    default=DEFAULT_COMPLETED_RETENTION_SECONDS,
)


class CreateQueueBody(msgspec.Struct, forbid_unknown_fields=True):
    name: Annotated[str, _QUEUE_NAME]
    visibility_timeout_seconds: Annotated[
        int | None, _range(VISIBILITY_TIMEOUT, default=DEFAULT_VISIBILITY_TIMEOUT_SECONDS)
    ] = None
    max_delivery_attempts: Annotated[
        int | None, _range(MAX_DELIVERY_ATTEMPTS, default=DEFAULT_MAX_DELIVERY_ATTEMPTS)
    ] = None
    default_message_ttl_seconds: Annotated[
        int | None, _range(DEFAULT_MESSAGE_TTL, default=DEFAULT_MESSAGE_TTL_SECONDS)
    ] = None
    group_max_in_flight: Annotated[int | None, _GROUP_MAX] = None
    max_in_flight: Annotated[int | None, _MAX_IN_FLIGHT] = None
    rate_limit: Annotated[RateLimitBody | None, _RATE_LIMIT] = None
    group_rate_limit: Annotated[RateLimitBody | None, _GROUP_RATE_LIMIT] = None
    completed_retention_seconds: Annotated[int | None, _RETENTION] = None

    def settings(self) -> dict[str, Any]:
        """The settings given (None: the default), rate limits as mappings."""
        return {name: _plain(getattr(self, name)) for name in _SETTING_FIELDS}


class UpdateQueueBody(msgspec.Struct, forbid_unknown_fields=True):
    """Any subset of the settings. ``null`` is "absent" (SPEC §3.1), except for the three
    limits, where it removes the limit: those distinguish an absent field (UNSET)."""

    visibility_timeout_seconds: Annotated[int | None, _VISIBILITY] = None
    max_delivery_attempts: Annotated[int | None, _ATTEMPTS] = None
    default_message_ttl_seconds: Annotated[int | None, _DEFAULT_TTL] = None
    group_max_in_flight: Annotated[int | None, _range(GROUP_MAX_IN_FLIGHT)] = None
    max_in_flight: Annotated[int | msgspec.UnsetType | None, _MAX_IN_FLIGHT] = msgspec.UNSET
    rate_limit: Annotated[RateLimitBody | msgspec.UnsetType | None, _RATE_LIMIT] = msgspec.UNSET
    group_rate_limit: Annotated[RateLimitBody | msgspec.UnsetType | None, _GROUP_RATE_LIMIT] = (
        msgspec.UNSET
    )
    completed_retention_seconds: Annotated[int | None, _range(COMPLETED_RETENTION)] = None

    def changes(self) -> dict[str, Any]:
        """The settings this request changes (a removed limit as None)."""
        found: dict[str, Any] = {}
        for name in _SETTING_FIELDS:
            value = getattr(self, name)
            if value is msgspec.UNSET or (value is None and name not in _NULLABLE):
                continue
            found[name] = _plain(value)
        return found


_SETTING_FIELDS = (
    "visibility_timeout_seconds",
    "max_delivery_attempts",
    "default_message_ttl_seconds",
    "group_max_in_flight",
    "max_in_flight",
    "rate_limit",
    "group_rate_limit",
    "completed_retention_seconds",
)
_NULLABLE = frozenset({"max_in_flight", "rate_limit", "group_rate_limit"})


def _plain(value: Any) -> Any:
    return value.as_dict() if isinstance(value, RateLimitBody) else value


class MessageBody(msgspec.Struct, forbid_unknown_fields=True):
    payload: Annotated[
        str,
        KwargDefinition(
            description="Any text without the NUL character U+0000; else `invalid_payload`."
        ),
    ]
    priority: Annotated[
        str,
        KwargDefinition(
            enum=_PRIORITIES,
            description="HIGH, MEDIUM or LOW; else `invalid_priority`.",
        ),
    ]
    ttl_seconds: Annotated[
        int | None,
        _range(MESSAGE_TTL, "The lifetime in seconds; default: the queue's own."),
    ] = None
    delay_seconds: Annotated[
        int | None,
        _range(MESSAGE_DELAY, "Deliverable only after this delay, shorter than the lifetime.", 0),
    ] = None
    group: Annotated[
        str | None,
        KwargDefinition(
            min_length=1,
            max_length=GROUP_MAX_LENGTH,
            description="The message's group: an ordered, fairly served lane of its queue. "
            "1–128 visible ASCII characters; else `invalid_group`.",
        ),
    ] = None


class BatchEnqueueBody(msgspec.Struct, forbid_unknown_fields=True):
    messages: Annotated[list[MessageBody], _BATCH]


class DequeueBody(msgspec.Struct, forbid_unknown_fields=True):
    wait_seconds: Annotated[
        int | None, _range(WAIT_SECONDS, "Long-poll up to this many seconds.", 0)
    ] = None
    visibility_timeout_seconds: Annotated[
        int | None, _range(VISIBILITY_TIMEOUT, "Overrides the queue's visibility timeout.")
    ] = None
    max_messages: Annotated[
        int | None,
        _range(MAX_MESSAGES, 'Present: answer `{"messages": [...]}` with up to this many.'),
    ] = None


class AcknowledgeBody(msgspec.Struct, forbid_unknown_fields=True):
    receipt_handle: str
    result: Annotated[
        str | None,
        KwargDefinition(
            max_length=RESULT_MAX_LENGTH,
            description="The work's result, kept with the message when its queue keeps "
            f"completed messages (`completed_retention_seconds` > 0). At most "
            f"{RESULT_MAX_LENGTH} characters, no U+0000; else `invalid_result`.",
        ),
    ] = None


class ReceiptBody(msgspec.Struct, forbid_unknown_fields=True):
    id: UUID
    receipt_handle: str


class BatchAcknowledgeBody(msgspec.Struct, forbid_unknown_fields=True):
    messages: Annotated[list[ReceiptBody], _BATCH]


class VisibilityBody(msgspec.Struct, forbid_unknown_fields=True):
    receipt_handle: str
    visibility_timeout_seconds: Annotated[
        int, _range(VISIBILITY_CHANGE, "The lease ends this many seconds from now; 0 releases it.")
    ]
    error: Annotated[
        str | None,
        KwargDefinition(
            max_length=ERROR_MAX_LENGTH,
            description="Why the consumer gives the message back, recorded on the current "
            f"attempt. At most {ERROR_MAX_LENGTH} characters, no U+0000; else "
            "`invalid_error`.",
        ),
    ] = None


# -- bulk actions (SPEC §3.11) --------------------------------------------------------
# ``match`` arrives as any JSON value and is checked by the domain (``check_match``), so a
# value that is not an object answers ``invalid_match``, as the query parameter does.
_MATCH = KwargDefinition(
    schema_extra={"oneOf": [{"type": "object"}, {"type": "null"}]},
    description="Only payloads that are JSON and contain this object (PostgreSQL's `@>`). "
    f"A JSON object of at most {MATCH_MAX_LENGTH} characters; else `invalid_match`.",
)
_BULK_PRIORITY = KwargDefinition(
    enum=_PRIORITIES, description="Only this priority; else `invalid_priority`."
)
_BULK_GROUP = KwargDefinition(
    min_length=1,
    max_length=GROUP_MAX_LENGTH,
    description="Only this group; 1–128 visible ASCII characters, else `invalid_group`.",
)
_REASON = KwargDefinition(
    enum=sorted(REASONS),
    description="Only dead letters moved for this reason; else `invalid_reason`.",
)
_DRY_RUN = KwargDefinition(
    schema_extra={"default": False},
    description='true: only count what a real run would take now (`{"matched": n}`).',
)


class _BulkFilter(msgspec.Struct, forbid_unknown_fields=True):
    priority: Annotated[str | None, _BULK_PRIORITY] = None
    group: Annotated[str | None, _BULK_GROUP] = None
    match: Annotated[Any, _MATCH] = None
    dry_run: Annotated[bool | None, _DRY_RUN] = None

    def search(self, reason: str | None = None) -> Search:
        """The filter, parsed with the domain's rules and codes."""
        return Search(
            priority=None if self.priority is None else Priority.parse(self.priority),
            group=None if self.group is None else validate_group(self.group),
            match=None if self.match is None else check_match(self.match),
            reason=None if reason is None else parse_reason(reason),
        )

    @property
    def dry(self) -> bool:
        return bool(self.dry_run)


class DeleteMessagesBody(_BulkFilter, forbid_unknown_fields=True):
    state: Annotated[
        str | None,
        KwargDefinition(
            enum=[s.value for s in BrowseState],
            description="Only messages in this state (completed: kept after acknowledgement); "
            "absent: every live message. Else `invalid_state`.",
        ),
    ] = None
    limit: Annotated[int | None, _range(BULK_LIMIT, "At most this many.", DEFAULT_BULK_LIMIT)] = (
        None
    )


class DeleteDeadLettersBody(_BulkFilter, forbid_unknown_fields=True):
    reason: Annotated[str | None, _REASON] = None
    limit: Annotated[int | None, _range(BULK_LIMIT, "At most this many.", DEFAULT_BULK_LIMIT)] = (
        None
    )


class RedriveBody(_BulkFilter, forbid_unknown_fields=True):
    reason: Annotated[str | None, _REASON] = None
    limit: Annotated[
        int | None, _range(REDRIVE_LIMIT, "At most this many.", DEFAULT_REDRIVE_LIMIT)
    ] = None


class ScheduleMessageBody(msgspec.Struct, forbid_unknown_fields=True):
    """What a schedule enqueues at each due time (no delay: the schedule says when)."""

    payload: Annotated[
        str,
        KwargDefinition(
            description="Any text without the NUL character U+0000; else `invalid_payload`."
        ),
    ]
    priority: Annotated[
        str,
        KwargDefinition(
            enum=_PRIORITIES, description="HIGH, MEDIUM or LOW; else `invalid_priority`."
        ),
    ]
    ttl_seconds: Annotated[
        int | None,
        _range(MESSAGE_TTL, "The lifetime in seconds; default: the queue's own."),
    ] = None
    group: Annotated[
        str | None,
        KwargDefinition(
            min_length=1,
            max_length=GROUP_MAX_LENGTH,
            description="The message's group (SPEC §3.10). 1–128 visible ASCII characters; "
            "else `invalid_group`.",
        ),
    ] = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "payload": self.payload,
            "priority": self.priority,
            "ttl_seconds": self.ttl_seconds,
            "group": self.group,
        }


_SCHEDULE_NAME = KwargDefinition(
    min_length=1,
    max_length=NAME_MAX_LENGTH,
    pattern=QUEUE_NAME_PATTERN,
    description="Unique in its queue; as a queue name: 1–64 characters of a-z 0-9 . _ -, "
    "starting and ending with a letter or digit. Else `invalid_schedule_name`.",
)
_CRON = KwargDefinition(
    description="A five-field cron expression (minute hour day-of-month month day-of-week; "
    "ranges, steps, lists, names), read on the wall clock of `timezone`. Exactly one of `cron` "
    "and `every_seconds`; else `invalid_cron`."
)
_EVERY = _range(
    EVERY_SECONDS,
    "Due one interval after the schedule is made (or resumed), then every interval. Exactly "
    "one of `cron` and `every_seconds`.",
)
_TIMEZONE = KwargDefinition(
    schema_extra={"default": DEFAULT_TIMEZONE},
    description="An IANA time zone (`Europe/Berlin`) for `cron`; else `invalid_timezone`.",
)


class CreateScheduleBody(msgspec.Struct, forbid_unknown_fields=True):
    name: Annotated[str, _SCHEDULE_NAME]
    message: ScheduleMessageBody
    cron: Annotated[str | None, _CRON] = None
    every_seconds: Annotated[int | None, _EVERY] = None
    timezone: Annotated[str | None, _TIMEZONE] = None
    paused: Annotated[
        bool | None,
        KwargDefinition(
            schema_extra={"default": False}, description="Made paused: no due time until resumed."
        ),
    ] = None


class UpdateScheduleBody(msgspec.Struct, forbid_unknown_fields=True):
    """Any subset. A new `cron`, `every_seconds` or `timezone` starts the due times afresh
    from now; `message` replaces the whole template."""

    name: Annotated[str | None, _SCHEDULE_NAME] = None
    cron: Annotated[str | None, _CRON] = None
    every_seconds: Annotated[int | None, _EVERY] = None
    timezone: Annotated[str | None, _TIMEZONE] = None
    message: ScheduleMessageBody | None = None

    def changes(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "cron": self.cron,
            "every_seconds": self.every_seconds,
            "timezone": self.timezone,
            "message": None if self.message is None else self.message.as_dict(),
        }


# -- responses ----------------------------------------------------------------------


class RateLimitOut(msgspec.Struct, gc=False):
    per_second: float
    burst: int


class QueueOut(msgspec.Struct, gc=False):
    id: UUID
    name: str
    visibility_timeout_seconds: int
    max_delivery_attempts: int
    default_message_ttl_seconds: int
    paused: bool
    group_max_in_flight: int
    max_in_flight: int | None
    rate_limit: RateLimitOut | None
    group_rate_limit: RateLimitOut | None
    completed_retention_seconds: int


class StatsOut(msgspec.Struct, gc=False):
    ready: int
    in_flight: int
    delayed: int
    dead_letters: int
    oldest_ready_age_seconds: float
    groups: Annotated[int, KwargDefinition(description="Groups with a live message.")]
    completed: Annotated[
        int, KwargDefinition(description="Completed messages kept right now (not live).")
    ]


class QueueWithStatsOut(QueueOut, gc=False):
    stats: StatsOut


class QueuesOut(msgspec.Struct):
    items: list[QueueOut]
    next_cursor: str | None


class PurgedOut(msgspec.Struct, gc=False):
    purged: int


OutcomeName = Annotated[str, KwargDefinition(enum=[o.value for o in Outcome])]


class AttemptOut(msgspec.Struct, gc=False):
    """One delivery of a message (SPEC §3.11)."""

    number: int
    delivered_at: datetime
    consumer: Annotated[
        str | None, KwargDefinition(description="The dequeue's `Retsu-Consumer`, if it sent one.")
    ]
    ended_at: Annotated[datetime | None, KwargDefinition(description="null while in flight.")]
    outcome: Annotated[
        OutcomeName,
        KwargDefinition(
            enum=[o.value for o in Outcome],
            description="How the delivery ended: `in_flight` (not yet), `acknowledged`, "
            "`released` (a visibility change to 0), `lease_expired` or `deleted` (an operator "
            "removed it while leased).",
        ),
    ]
    error: Annotated[
        str | None,
        KwargDefinition(description="The last `error` a visibility change gave it."),
    ]


_ATTEMPTS_DOC = KwargDefinition(
    description="Every delivery, oldest first (at most the latest 100)."
)


class DeadLetterOut(msgspec.Struct, gc=False):
    id: UUID
    payload: str
    priority: PriorityName
    group: str | None
    delivery_attempts: int
    enqueued_at: datetime
    last_delivered_at: datetime | None
    dead_lettered_at: datetime
    reason: str
    attempts: Annotated[list[AttemptOut], _ATTEMPTS_DOC]
    last_error: Annotated[
        str | None, KwargDefinition(description="The error of its latest attempt that had one.")
    ]


class DeadLettersOut(msgspec.Struct):
    items: list[DeadLetterOut]
    next_cursor: str | None


class RedrivenOut(msgspec.Struct, gc=False):
    redriven: int


class MatchedOut(msgspec.Struct, gc=False):
    """A bulk action's dry run: how many a real run would take now (at most its limit)."""

    matched: int


class DeletedOut(msgspec.Struct, gc=False):
    deleted: int


def deleted_out(outcome: BulkOutcome) -> MatchedOut | DeletedOut:
    return MatchedOut(outcome.count) if outcome.dry_run else DeletedOut(outcome.count)


def redriven_out(outcome: BulkOutcome) -> MatchedOut | RedrivenOut:
    return MatchedOut(outcome.count) if outcome.dry_run else RedrivenOut(outcome.count)


class AuditRecordOut(msgspec.Struct):
    id: UUID
    at: datetime
    actor: str
    action: ActionName
    target_type: str
    target_id: str
    request_id: str | None
    details: dict[str, Any]


class AuditLogOut(msgspec.Struct):
    items: list[AuditRecordOut]
    next_cursor: str | None


class IdOut(msgspec.Struct, gc=False):
    id: UUID


class IdsOut(msgspec.Struct):
    ids: list[UUID]


class MessageOut(msgspec.Struct, gc=False):
    id: UUID
    payload: str
    priority: PriorityName
    group: str | None
    receipt_handle: Annotated[
        str, KwargDefinition(description="Opaque; valid for this delivery only.")
    ]
    delivery_attempts: int
    enqueued_at: datetime


class MessagesOut(msgspec.Struct):
    messages: list[MessageOut]


StateName = Annotated[str, KwargDefinition(enum=[s.value for s in BrowseState])]


class StoredMessageOut(msgspec.Struct, gc=False):
    """A live message as an operator sees it (SPEC §3.6): never a receipt handle."""

    id: UUID
    payload: str
    priority: PriorityName
    state: StateName
    delivery_attempts: int
    enqueued_at: datetime
    expires_at: datetime
    available_at: Annotated[
        datetime,
        KwargDefinition(
            description="When it becomes deliverable: now or past (ready), the lease end "
            "(in flight), the end of the delay (delayed)."
        ),
    ]
    last_delivered_at: datetime | None
    redriven_from: Annotated[
        UUID | None,
        KwargDefinition(description="The dead letter a redrive made this message from."),
    ]
    group: str | None
    schedule_id: Annotated[
        UUID | None, KwargDefinition(description="The schedule that enqueued this message.")
    ]
    attempts: Annotated[list[AttemptOut], _ATTEMPTS_DOC]
    completed_at: Annotated[
        datetime | None,
        KwargDefinition(description="When it was acknowledged (completed messages only)."),
    ]
    result: Annotated[
        str | None,
        KwargDefinition(description="The acknowledge's `result` (completed messages only)."),
    ]


class StoredMessagesOut(msgspec.Struct):
    items: list[StoredMessageOut]
    next_cursor: str | None


GroupStateName = Annotated[str, KwargDefinition(enum=[s.value for s in GroupState])]


class GroupOut(msgspec.Struct, gc=False):
    """A group with a live message (SPEC §3.10)."""

    group: str
    ready: int
    in_flight: int
    delayed: int
    head_id: Annotated[UUID, KwargDefinition(description="Its oldest live message.")]
    head_delivery_attempts: int
    head_enqueued_at: datetime
    last_delivered_at: Annotated[
        datetime | None, KwargDefinition(description="The group's most recent delivery.")
    ]
    state: Annotated[
        GroupStateName,
        KwargDefinition(
            enum=[s.value for s in GroupState],
            description="`ready`: its next message is deliverable now; `blocked`: it is at its "
            "in-flight limit; `waiting`: its next message waits for its delay (or the "
            "group's next token).",
        ),
    ]


class GroupsOut(msgspec.Struct):
    items: list[GroupOut]
    next_cursor: str | None


class StatusOut(msgspec.Struct, gc=False):
    status: str


_PRIORITY_NAMES = {p: p.name for p in Priority}


def _rate_out(limit: RateLimit | None) -> RateLimitOut | None:
    return None if limit is None else RateLimitOut(per_second=limit.per_second, burst=limit.burst)


def _queue_fields(queue: Queue) -> dict[str, Any]:
    settings = queue.settings
    return {
        "id": queue.id,
        "name": queue.name,
        "visibility_timeout_seconds": settings.visibility_timeout_seconds,
        "max_delivery_attempts": settings.max_delivery_attempts,
        "default_message_ttl_seconds": settings.default_message_ttl_seconds,
        "paused": queue.paused,
        "group_max_in_flight": settings.group_max_in_flight,
        "max_in_flight": settings.max_in_flight,
        "rate_limit": _rate_out(settings.rate_limit),
        "group_rate_limit": _rate_out(settings.group_rate_limit),
        "completed_retention_seconds": settings.completed_retention_seconds,
    }


def queue_out(queue: Queue) -> QueueOut:
    return QueueOut(**_queue_fields(queue))


def _utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo is UTC else moment.astimezone(UTC)


def queue_with_stats_out(queue: Queue, stats: QueueStats) -> QueueWithStatsOut:
    return QueueWithStatsOut(
        **_queue_fields(queue),
        stats=StatsOut(
            ready=stats.ready,
            in_flight=stats.in_flight,
            delayed=stats.delayed,
            dead_letters=stats.dead_letters,
            # Milliseconds are plenty for an age; fewer digits on the wire.
            oldest_ready_age_seconds=round(stats.oldest_ready_age_seconds, 3),
            groups=stats.groups,
            completed=stats.completed,
        ),
    )


def _attempts_out(attempts: tuple[Attempt, ...]) -> list[AttemptOut]:
    # Storage hands over finished attempts (``domain.attempts.finish``): an attempt left
    # without an outcome here would be a storage bug, shown as the lease that ended it.
    return [
        AttemptOut(
            number=a.number,
            delivered_at=_utc(a.delivered_at),
            consumer=a.consumer,
            ended_at=_maybe_utc(a.ended_at),
            outcome=(a.outcome or Outcome.LEASE_EXPIRED).value,
            error=a.error,
        )
        for a in attempts
    ]


def dead_letter_out(record: DeadLetter) -> DeadLetterOut:
    return DeadLetterOut(
        id=record.id,
        payload=record.payload,
        priority=_PRIORITY_NAMES[record.priority],
        group=record.group,
        delivery_attempts=record.delivery_attempts,
        enqueued_at=_utc(record.enqueued_at),
        last_delivered_at=(
            None if record.last_delivered_at is None else _utc(record.last_delivered_at)
        ),
        dead_lettered_at=_utc(record.dead_lettered_at),
        reason=record.reason,
        attempts=_attempts_out(record.attempts),
        last_error=record.last_error,
    )


def stored_message_out(message: StoredMessage) -> StoredMessageOut:
    return StoredMessageOut(
        id=message.id,
        payload=message.payload,
        priority=_PRIORITY_NAMES[message.priority],
        state=message.state.value,
        delivery_attempts=message.delivery_attempts,
        enqueued_at=_utc(message.enqueued_at),
        expires_at=_utc(message.expires_at),
        available_at=_utc(message.available_at),
        last_delivered_at=(
            None if message.last_delivered_at is None else _utc(message.last_delivered_at)
        ),
        redriven_from=message.redriven_from,
        group=message.group,
        schedule_id=message.schedule_id,
        attempts=_attempts_out(message.attempts),
        completed_at=_maybe_utc(message.completed_at),
        result=message.result,
    )


def group_out(summary: GroupSummary) -> GroupOut:
    return GroupOut(
        group=summary.group,
        ready=summary.ready,
        in_flight=summary.in_flight,
        delayed=summary.delayed,
        head_id=summary.head_id,
        head_delivery_attempts=summary.head_delivery_attempts,
        head_enqueued_at=_utc(summary.head_enqueued_at),
        last_delivered_at=_maybe_utc(summary.last_delivered_at),
        state=summary.state.value,
    )


def audit_record_out(record: AuditRecord) -> AuditRecordOut:
    return AuditRecordOut(
        id=record.id,
        at=_utc(record.at),
        actor=record.actor,
        action=record.action,
        target_type=record.target_type,
        target_id=record.target_id,
        request_id=record.request_id,
        details=record.details,
    )


def message_out(message: DeliveredMessage) -> MessageOut:
    return MessageOut(
        id=message.id,
        payload=message.payload,
        priority=_PRIORITY_NAMES[message.priority],
        group=message.group,
        receipt_handle=message.receipt_handle,
        delivery_attempts=message.delivery_attempts,
        enqueued_at=_utc(message.enqueued_at),
    )


class ScheduleMessageOut(msgspec.Struct, gc=False):
    payload: str
    priority: PriorityName
    ttl_seconds: int | None
    group: str | None


class ScheduleOut(msgspec.Struct):
    id: UUID
    queue_id: UUID
    name: str
    cron: str | None
    every_seconds: int | None
    timezone: str
    message: ScheduleMessageOut
    paused: bool
    next_run_at: Annotated[
        datetime | None,
        KwargDefinition(description="The next due time; null while paused."),
    ]
    last_run_at: Annotated[
        datetime | None,
        KwargDefinition(
            description="When its message was last enqueued (late after an outage); null "
            "before the first run."
        ),
    ]
    created_at: datetime


class SchedulesOut(msgspec.Struct):
    items: list[ScheduleOut]
    next_cursor: str | None


def _maybe_utc(moment: datetime | None) -> datetime | None:
    return None if moment is None else _utc(moment)


def schedule_out(schedule: Schedule) -> ScheduleOut:
    message = schedule.message
    return ScheduleOut(
        id=schedule.id,
        queue_id=schedule.queue_id,
        name=schedule.name,
        cron=schedule.recurrence.cron,
        every_seconds=schedule.recurrence.every_seconds,
        timezone=schedule.recurrence.timezone,
        message=ScheduleMessageOut(
            payload=message.payload,
            priority=_PRIORITY_NAMES[message.priority],
            ttl_seconds=message.ttl_seconds,
            group=message.group,
        ),
        paused=schedule.paused,
        next_run_at=_maybe_utc(schedule.next_run_at),
        last_run_at=_maybe_utc(schedule.last_run_at),
        created_at=_utc(schedule.created_at),
    )
