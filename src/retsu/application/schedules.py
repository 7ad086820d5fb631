"""Schedules: create, list, read, change, pause, resume, delete (SPEC §3.12).

Every change is one storage call that writes its audit row (``schedule.*``, target type
``schedule``, under the schedule's queue) in the same transaction. The queue is checked
through the details lookup (the shared cache, then PostgreSQL), as the dead-letter routes
do: a queue deleted through another API process answers 404 here at once. What a
schedule enqueues, and when, is the scheduler's (``scheduler.py``) and storage's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from retsu.application.ports import IdGenerator, QueueDetails, ScheduleRepository
from retsu.domain.audit import AuditAction, AuditEntry, Caller
from retsu.domain.pagination import DEFAULT_LIST_LIMIT, LIST_LIMIT, Page
from retsu.domain.schedule import (
    CronCalendar,
    MessageTemplate,
    NewSchedule,
    Recurrence,
    Schedule,
    ScheduleNotFound,
    SchedulePosition,
    ScheduleUpdate,
    validate_schedule_name,
)


@dataclass(frozen=True, slots=True)
class CreateScheduleCommand:
    queue_id: UUID
    name: str
    # ``{"payload", "priority", "ttl_seconds"?, "group"?}`` or a MessageTemplate.
    message: Mapping[str, Any] | MessageTemplate
    cron: str | None = None
    every_seconds: int | None = None
    timezone: str | None = None
    paused: bool = False
    caller: Caller = field(default_factory=Caller)


@dataclass(frozen=True, slots=True)
class UpdateScheduleCommand:
    """Only the fields the request gives (None: absent)."""

    queue_id: UUID
    schedule_id: UUID
    changes: Mapping[str, Any]
    caller: Caller = field(default_factory=Caller)


@dataclass(frozen=True, slots=True)
class ScheduleCommand:
    """An action on one schedule: pause, resume, delete."""

    queue_id: UUID
    schedule_id: UUID
    caller: Caller = field(default_factory=Caller)


@dataclass(frozen=True, slots=True)
class ListSchedulesQuery:
    queue_id: UUID
    limit: int = DEFAULT_LIST_LIMIT

    def __post_init__(self) -> None:
        LIST_LIMIT.check(self.limit)


class ScheduleService:
    def __init__(
        self,
        schedules: ScheduleRepository,
        details: QueueDetails,
        ids: IdGenerator,
        calendar: CronCalendar,
    ) -> None:
        self._schedules = schedules
        self._details = details
        self._ids = ids
        self._calendar = calendar

    async def create(self, cmd: CreateScheduleCommand) -> Schedule:
        name = validate_schedule_name(cmd.name)
        recurrence = Recurrence.parse(
            cron=cmd.cron,
            every_seconds=cmd.every_seconds,
            timezone=cmd.timezone,
            calendar=self._calendar,
        )
        message = MessageTemplate.read(
            dict(cmd.message) if isinstance(cmd.message, Mapping) else cmd.message
        )
        await self._details.details_of(cmd.queue_id)  # raises QueueNotFound
        schedule = NewSchedule(
            id=self._ids.new_id(),
            queue_id=cmd.queue_id,
            name=name,
            recurrence=recurrence,
            message=message,
            paused=cmd.paused,
        )
        audit = AuditEntry.of_schedule(
            AuditAction.SCHEDULE_CREATED,
            cmd.queue_id,
            schedule.id,
            cmd.caller,
            **schedule.definition(),
        )
        return await self._schedules.add_schedule(schedule, audit)

    async def list(
        self, query: ListSchedulesQuery, after: SchedulePosition | None = None
    ) -> Page[Schedule, SchedulePosition]:
        """The queue's schedules by name in byte order, a page after ``after``."""
        await self._details.details_of(query.queue_id)  # raises QueueNotFound
        # One more than asked tells whether another page exists.
        found = await self._schedules.list_schedules(
            query.queue_id, limit=query.limit + 1, after=after
        )
        if len(found) > query.limit:
            found = found[: query.limit]
            return Page(found, SchedulePosition(found[-1].name))
        return Page(found, None)

    async def get(self, queue_id: UUID, schedule_id: UUID) -> Schedule:
        await self._details.details_of(queue_id)  # raises QueueNotFound
        schedule = await self._schedules.get_schedule(queue_id, schedule_id)
        if schedule is None:
            raise ScheduleNotFound(schedule_id)
        return schedule

    async def update(self, cmd: UpdateScheduleCommand) -> Schedule:
        update = ScheduleUpdate.parse(dict(cmd.changes), self._calendar)
        await self._details.details_of(cmd.queue_id)  # raises QueueNotFound
        audit = AuditEntry.of_schedule(
            AuditAction.SCHEDULE_UPDATED,
            cmd.queue_id,
            cmd.schedule_id,
            cmd.caller,
            changes=update.changes(),
        )
        schedule = await self._schedules.update_schedule(
            cmd.queue_id, cmd.schedule_id, update, audit
        )
        if schedule is None:
            raise ScheduleNotFound(cmd.schedule_id)
        return schedule

    async def pause(self, cmd: ScheduleCommand) -> Schedule:
        """No due time until resumed: the ones meanwhile are skipped, not caught up."""
        return await self._set_paused(cmd, True, AuditAction.SCHEDULE_PAUSED)

    async def resume(self, cmd: ScheduleCommand) -> Schedule:
        """Due times start afresh from now (an interval: one interval from now)."""
        return await self._set_paused(cmd, False, AuditAction.SCHEDULE_RESUMED)

    async def _set_paused(
        self, cmd: ScheduleCommand, paused: bool, action: AuditAction
    ) -> Schedule:
        await self._details.details_of(cmd.queue_id)  # raises QueueNotFound
        audit = AuditEntry.of_schedule(action, cmd.queue_id, cmd.schedule_id, cmd.caller)
        schedule = await self._schedules.set_schedule_paused(
            cmd.queue_id, cmd.schedule_id, paused, audit
        )
        if schedule is None:
            raise ScheduleNotFound(cmd.schedule_id)
        return schedule

    async def delete(self, cmd: ScheduleCommand) -> None:
        """The schedule goes; the messages it enqueued stay (with its id)."""
        await self._details.details_of(cmd.queue_id)  # raises QueueNotFound
        audit = AuditEntry.of_schedule(
            AuditAction.SCHEDULE_DELETED, cmd.queue_id, cmd.schedule_id, cmd.caller
        )
        if not await self._schedules.delete_schedule(cmd.queue_id, cmd.schedule_id, audit):
            raise ScheduleNotFound(cmd.schedule_id)
