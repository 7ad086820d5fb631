"""Schedules (SPEC §3.12): recurring messages, and when each one is due.

A schedule enqueues its message template into its queue at each *due time* of its
recurrence: either a five-field cron expression read in an IANA time zone, or a fixed
interval (``every_seconds``). What the scheduler does with a due time, storage decides in
one transaction (``ScheduleRunner``); what the due times *are* is decided here:

* ``every_seconds``: the first due time is one interval after the schedule's creation (or
  resume, or a change of its recurrence), then every interval on that grid.
* ``cron``: the next minute the expression matches on the wall clock of ``timezone``.
  Daylight-saving changes follow Debian's cron, as ``cronsim`` implements it: on the
  spring-forward day a fixed-time job inside the skipped hour runs once, at the first
  minute after the jump (``30 2 * * *`` in Europe/Berlin runs at 03:00 CEST); on the
  fall-back day a fixed-time job inside the repeated hour runs once, at its first
  occurrence, while a job whose minute or hour is a wildcard (``*/15 * * * *``) runs in
  both copies of the hour, every real quarter-hour.

Cron expressions are read by a ``CronCalendar`` (this module stays standard-library only):
``adapters/cron.py`` implements it with cronsim, chosen over croniter for its DST rules
(the comparison is there and in docs/schedules.md).

A run's due time that passed while nothing ran (no scheduler, a long outage, a clock that
jumped) is enqueued once, late; every other due time that passed meanwhile is skipped
(``advance`` counts them), never enqueued in a burst.
"""

from __future__ import annotations

import functools
import hashlib
import uuid
import zoneinfo
from collections.abc import Iterator
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime, timedelta
from itertools import islice
from typing import Any, Protocol
from uuid import UUID

from retsu.domain.errors import Conflict, InvalidInput, NotFound
from retsu.domain.message import MessageToStore, NewMessage, Priority
from retsu.domain.pagination import invalid_cursor
from retsu.domain.queue import NAME_MAX_LENGTH, is_valid_queue_name
from retsu.domain.ranges import IntRange

EVERY_SECONDS = IntRange("every_seconds", 1, 2_592_000, "invalid_every_seconds")
DEFAULT_TIMEZONE = "UTC"
CRON_FIELDS = 5
# Missed due times counted at most this far (a cron schedule every minute, out for a
# month, would otherwise walk 43,200 matches to count them); the count saturates here.
MAX_COUNTED_MISSES = 10_000

_MICROSECOND = timedelta(microseconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class ScheduleNotFound(NotFound):
    code = "schedule_not_found"

    def __init__(self, schedule_id: object) -> None:
        super().__init__(f"Schedule {schedule_id} does not exist in this queue.")


class ScheduleAlreadyExists(Conflict):
    code = "schedule_already_exists"

    def __init__(self, name: str) -> None:
        super().__init__(f"This queue already has a schedule named {name!r}.")


def validate_schedule_name(name: str) -> str:
    """As a queue name: 1–64 chars of ``a-z 0-9 . _ -``, starting and ending with a letter
    or digit; else ``invalid_schedule_name``."""
    if not is_valid_queue_name(name):
        raise InvalidInput(
            f"name must be 1-{NAME_MAX_LENGTH} characters of a-z, 0-9, '.', '_' or '-', "
            "starting and ending with a letter or digit.",
            code="invalid_schedule_name",
        )
    return name


@functools.cache
def _zone_keys() -> frozenset[str]:
    # The IANA keys zoneinfo can load (system tz database, else the tzdata package),
    # read once (~30 ms). "localtime" is the host's own zone, not an IANA name.
    return frozenset(zoneinfo.available_timezones()) - {"localtime"}


def validate_timezone(name: str) -> str:
    """An IANA time zone name (``Europe/Berlin``, ``UTC``); else ``invalid_timezone``."""
    if isinstance(name, str) and name in _zone_keys():
        try:
            zoneinfo.ZoneInfo(name)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
            pass
        else:
            return name
    raise InvalidInput(
        "timezone must be an IANA time zone name such as UTC or Europe/Berlin.",
        code="invalid_timezone",
    )


class CronCalendar(Protocol):
    """Reads cron expressions (``adapters/cron.py``: cronsim)."""

    def check(self, expression: str) -> str:
        """The expression (five fields, single spaces) if it is valid and can match;
        else ``InvalidInput(code="invalid_cron")``."""
        ...

    def matches_after(self, expression: str, timezone: str, after: datetime) -> Iterator[datetime]:
        """Every moment the expression matches on the wall clock of ``timezone``, strictly
        after ``after``, in order, as UTC datetimes."""
        ...


def validate_cron(expression: str, calendar: CronCalendar) -> str:
    """A five-field cron expression (minute hour day-of-month month day-of-week, with
    ranges, steps, lists and names), normalised to single spaces; else ``invalid_cron``.
    An expression that can never match (``0 0 30 2 *``) is refused too."""
    parts = expression.split() if isinstance(expression, str) else []
    if len(parts) != CRON_FIELDS:
        raise InvalidInput(
            "cron must have five fields: minute hour day-of-month month day-of-week.",
            code="invalid_cron",
        )
    return calendar.check(" ".join(parts))


def _micros(moment: datetime) -> int:
    return (moment - _EPOCH) // _MICROSECOND


@dataclass(frozen=True, slots=True)
class Recurrence:
    """When a schedule is due: exactly one of ``cron`` and ``every_seconds``, in
    ``timezone`` (cron reads it; an interval ignores it)."""

    cron: str | None = None
    every_seconds: int | None = None
    timezone: str = DEFAULT_TIMEZONE

    @classmethod
    def parse(
        cls,
        *,
        cron: str | None,
        every_seconds: int | None,
        timezone: str | None,
        calendar: CronCalendar,
    ) -> Recurrence:
        if (cron is None) == (every_seconds is None):
            raise InvalidInput("Give exactly one of cron and every_seconds.", code="invalid_cron")
        return cls(
            cron=None if cron is None else validate_cron(cron, calendar),
            every_seconds=None if every_seconds is None else EVERY_SECONDS.check(every_seconds),
            timezone=DEFAULT_TIMEZONE if timezone is None else validate_timezone(timezone),
        )

    def first_due(self, now: datetime, calendar: CronCalendar) -> datetime:
        """The first due time of a schedule made (or resumed, or given this recurrence)
        at ``now``: one interval later, or the cron's first match after ``now``."""
        if self.every_seconds is not None:
            return now + timedelta(seconds=self.every_seconds)
        return next(self._matches_after(now, calendar))

    def _matches_after(self, after: datetime, calendar: CronCalendar) -> Iterator[datetime]:
        assert self.cron is not None
        return calendar.matches_after(self.cron, self.timezone, after)

    def advance(self, due: datetime, now: datetime, calendar: CronCalendar) -> tuple[datetime, int]:
        """After the run of due time ``due`` at ``now`` (``due <= now``): the next due time
        (the first one after ``now``) and how many due times in between were skipped
        (they passed while nothing ran: enqueued never, rather than in a burst)."""
        if self.every_seconds is not None:
            step = self.every_seconds * 1_000_000
            # Whole microseconds: the grid never drifts however long it runs.
            passed = max(0, (_micros(now) - _micros(due)) // step)
            return due + timedelta(microseconds=(passed + 1) * step), passed
        missed = 0
        for moment in islice(self._matches_after(due, calendar), MAX_COUNTED_MISSES):
            if moment > now:
                break
            missed += 1
        return next(self._matches_after(now, calendar)), missed

    def as_dict(self) -> dict[str, Any]:
        return {"cron": self.cron, "every_seconds": self.every_seconds, "timezone": self.timezone}


@dataclass(frozen=True, slots=True)
class MessageTemplate:
    """The message a schedule enqueues at each due time, checked with the message's own
    codes (``invalid_payload``, ``invalid_priority``, ``invalid_ttl``, ``invalid_group``).
    No delay: a schedule says when. ``ttl_seconds`` None: the queue's default lifetime,
    read when the message is stored."""

    payload: str
    priority: Priority
    ttl_seconds: int | None = None
    group: str | None = None

    @classmethod
    def parse(
        cls,
        payload: str,
        priority: str,
        ttl_seconds: int | None = None,
        group: str | None = None,
    ) -> MessageTemplate:
        checked = NewMessage.parse(payload, priority, ttl_seconds=ttl_seconds, group=group)
        return cls(checked.payload, checked.priority, checked.ttl_seconds, checked.group)

    @classmethod
    def read(cls, value: MessageTemplate | dict[str, Any]) -> MessageTemplate:
        """A template as a request gives it (``{"payload", "priority", "ttl_seconds"?,
        "group"?}``)."""
        if isinstance(value, MessageTemplate):
            return value
        return cls.parse(
            value["payload"], value["priority"], value.get("ttl_seconds"), value.get("group")
        )

    def to_store(self, message_id: UUID, schedule_id: UUID) -> MessageToStore:
        return MessageToStore(
            id=message_id,
            payload=self.payload,
            priority=self.priority,
            ttl_seconds=self.ttl_seconds,
            delay_seconds=0,
            group=self.group,
            schedule_id=schedule_id,
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "payload": self.payload,
            "priority": self.priority.name,
            "ttl_seconds": self.ttl_seconds,
            "group": self.group,
        }


def scheduled_message_id(schedule_id: UUID, due: datetime) -> UUID:
    """The id of the message a schedule enqueues for one due time: a UUIDv7 whose time is
    the due time (milliseconds) and whose other bits come from the schedule and the due
    time. One due time, one id: storing it twice is a primary-key violation, so even a
    fault in the claim could not enqueue a due time twice while its message lives; and the
    id tells which due time a message stands for (``due_time_of``)."""
    micros = _micros(due)
    digest = hashlib.sha256(schedule_id.bytes + micros.to_bytes(8, "big", signed=True)).digest()
    rand_a = int.from_bytes(digest[:2], "big") & 0x0FFF  # 12 bits
    rand_b = int.from_bytes(digest[2:10], "big") & ((1 << 62) - 1)  # 62 bits
    value = (micros // 1000 & ((1 << 48) - 1)) << 80  # unix_ts_ms
    value |= 0x7 << 76 | rand_a << 64  # version 7
    value |= 0b10 << 62 | rand_b  # the RFC 9562 variant
    return uuid.UUID(int=value)


def due_time_of(message_id: UUID) -> datetime:
    """The due time (to the millisecond) a scheduled message's id stands for."""
    return _EPOCH + timedelta(milliseconds=message_id.int >> 80)


@dataclass(frozen=True, slots=True)
class NewSchedule:
    """A schedule as an operator defines it, validated; storage stamps its times."""

    id: UUID
    queue_id: UUID
    name: str
    recurrence: Recurrence
    message: MessageTemplate
    paused: bool = False

    def definition(self) -> dict[str, Any]:
        """What the audit row records."""
        return {
            "name": self.name,
            **self.recurrence.as_dict(),
            "message": self.message.as_dict(),
            "paused": self.paused,
        }


@dataclass(frozen=True, slots=True)
class Schedule:
    id: UUID
    queue_id: UUID
    name: str
    recurrence: Recurrence
    message: MessageTemplate
    paused: bool
    # None while paused: a paused schedule has no due time (SPEC §3.12).
    next_run_at: datetime | None
    # When its message was last enqueued (the enqueue's own time), None before the first.
    last_run_at: datetime | None
    created_at: datetime
    updated_at: datetime


_UPDATABLE = ("name", "cron", "every_seconds", "timezone", "message")


@dataclass(frozen=True, slots=True)
class ScheduleUpdate:
    """A partial change: None leaves a field as it is. ``cron`` or ``every_seconds`` (not
    both) switches the recurrence to that kind; a new recurrence or time zone starts its due
    times afresh from the moment of the change."""

    name: str | None = None
    cron: str | None = None
    every_seconds: int | None = None
    timezone: str | None = None
    message: MessageTemplate | None = None

    @classmethod
    def parse(cls, given: dict[str, Any], calendar: CronCalendar) -> ScheduleUpdate:
        unknown = set(given) - set(_UPDATABLE)
        if unknown:
            raise ValueError(f"unknown schedule fields: {sorted(unknown)}")
        values = {k: v for k, v in given.items() if v is not None}
        if "cron" in values and "every_seconds" in values:
            raise InvalidInput("Give at most one of cron and every_seconds.", code="invalid_cron")
        if not values:
            raise InvalidInput(
                "Give at least one field to change: " + ", ".join(_UPDATABLE) + ".",
                code="empty_schedule_update",
            )
        return cls(
            name=None if "name" not in values else validate_schedule_name(values["name"]),
            cron=None if "cron" not in values else validate_cron(values["cron"], calendar),
            every_seconds=(
                None
                if "every_seconds" not in values
                else EVERY_SECONDS.check(values["every_seconds"])
            ),
            timezone=None if "timezone" not in values else validate_timezone(values["timezone"]),
            message=None if "message" not in values else MessageTemplate.read(values["message"]),
        )

    @property
    def changes_recurrence(self) -> bool:
        return self.cron is not None or self.every_seconds is not None or self.timezone is not None

    def apply_to(self, schedule: Schedule, now: datetime, calendar: CronCalendar) -> Schedule:
        """The schedule after this change at ``now`` (storage's clock)."""
        recurrence = schedule.recurrence
        if self.cron is not None:
            recurrence = replace(recurrence, cron=self.cron, every_seconds=None)
        if self.every_seconds is not None:
            recurrence = replace(recurrence, cron=None, every_seconds=self.every_seconds)
        if self.timezone is not None:
            recurrence = replace(recurrence, timezone=self.timezone)
        next_run_at = schedule.next_run_at
        if self.changes_recurrence and not schedule.paused:
            next_run_at = recurrence.first_due(now, calendar)
        return replace(
            schedule,
            name=self.name if self.name is not None else schedule.name,
            recurrence=recurrence,
            message=self.message if self.message is not None else schedule.message,
            next_run_at=next_run_at,
            updated_at=now,
        )

    def changes(self) -> dict[str, Any]:
        """What the audit row records."""
        found: dict[str, Any] = {}
        for item in fields(self):
            value = getattr(self, item.name)
            if value is not None:
                found[item.name] = value.as_dict() if isinstance(value, MessageTemplate) else value
        return found


def paused_or_resumed(
    schedule: Schedule, paused: bool, now: datetime, calendar: CronCalendar
) -> Schedule:
    """Pause: no due time until resumed (the ones meanwhile are skipped). Resume: due
    times start afresh from ``now``, as for a new schedule. Either on a schedule already in
    that state changes nothing."""
    if schedule.paused == paused:
        return schedule
    return replace(
        schedule,
        paused=paused,
        next_run_at=None if paused else schedule.recurrence.first_due(now, calendar),
        updated_at=now,
    )


def new_schedule_times(schedule: NewSchedule, now: datetime, calendar: CronCalendar) -> Schedule:
    """A new schedule as stored at ``now``."""
    return Schedule(
        id=schedule.id,
        queue_id=schedule.queue_id,
        name=schedule.name,
        recurrence=schedule.recurrence,
        message=schedule.message,
        paused=schedule.paused,
        next_run_at=None if schedule.paused else schedule.recurrence.first_due(now, calendar),
        last_run_at=None,
        created_at=now,
        updated_at=now,
    )


@dataclass(frozen=True, slots=True)
class ScheduleRun:
    """One due time enqueued: by storage, in the transaction that advanced the schedule."""

    schedule_id: UUID
    queue_id: UUID
    queue_name: str
    message_id: UUID
    priority: Priority
    due_at: datetime
    ran_at: datetime
    next_run_at: datetime
    # Due times between this one and ``next_run_at`` that passed while nothing ran: skipped.
    missed: int = 0
    # False: this due time's message was stored already (its id, derived from the due
    # time, was taken), so nothing was enqueued twice; the schedule advanced all the same.
    enqueued: bool = True

    @property
    def lag_seconds(self) -> float:
        return max(0.0, (self.ran_at - self.due_at).total_seconds())


@dataclass(frozen=True, slots=True)
class DueSchedules:
    """What a scheduler's call to storage found: the run it made, if any, and else how
    long until the earliest due time (None: no active schedule at all)."""

    run: ScheduleRun | None = None
    next_due_in_seconds: float | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class SchedulePosition:
    """A queue's schedules are listed by name in byte order; the last name seen."""

    name: str

    def seal(self) -> list[Any]:
        return [self.name]

    @classmethod
    def read(cls, position: list[Any]) -> SchedulePosition:
        if len(position) != 1 or type(position[0]) is not str:
            raise invalid_cursor()
        return cls(position[0])
