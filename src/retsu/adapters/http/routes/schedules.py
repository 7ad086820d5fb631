"""Schedule routes (SPEC §3.12): create, list by name, read, change, pause, resume, delete.

Scopes as the queue routes': the reads as the queue reads, every change as a queue
mutation (``admin``).
"""

from __future__ import annotations

from typing import Any

from litestar import Request, delete, get, patch, post
from litestar.params import JSONBody

from retsu.adapters.http.auth import ADMIN_ONLY, CONSUMER_READ
from retsu.adapters.http.caller import caller_of
from retsu.adapters.http.dependencies import Cursors, Schedules
from retsu.adapters.http.dto import (
    CreateScheduleBody,
    ScheduleOut,
    SchedulesOut,
    UpdateScheduleBody,
    schedule_out,
)
from retsu.adapters.http.pages import schedules_page
from retsu.adapters.http.params import DEFAULT_LIMIT, QUEUE, Cursor, Limit, QueueId, ScheduleId
from retsu.application.schedules import (
    CreateScheduleCommand,
    ScheduleCommand,
    UpdateScheduleCommand,
)
from retsu.domain.message import MESSAGE_TTL
from retsu.domain.schedule import EVERY_SECONDS, ScheduleAlreadyExists, ScheduleNotFound

SCHEDULES = QUEUE + "/schedules"
ONE = SCHEDULES + "/{schedule_id:str}"

# The definition's own codes, and the message template's (the message's codes).
_DEFINITION = (
    "invalid_schedule_name",
    "invalid_cron",
    EVERY_SECONDS,
    "invalid_timezone",
    "invalid_payload",
    "invalid_priority",
    MESSAGE_TTL,
    "invalid_group",
)
_RUNS = (
    " Each due time is enqueued exactly once by `retsu worker run queue scheduler` (any "
    "number may run); a due time missed while no scheduler ran is enqueued once, late."
)


@post(
    SCHEDULES,
    summary="Create a schedule",
    description="A recurring message: exactly one of `cron` (in `timezone`) and "
    "`every_seconds` (first due one interval after creation)." + _RUNS + " Writes the audit "
    "entry `schedule.created`.",
    errors=(*_DEFINITION, ScheduleAlreadyExists),
    scopes=ADMIN_ONLY,
)
async def add_schedule(
    queue_id: QueueId,
    data: JSONBody[CreateScheduleBody],
    schedules: Schedules,
    request: Request[Any, Any, Any],
) -> ScheduleOut:
    schedule = await schedules.create(
        CreateScheduleCommand(
            queue_id=queue_id,
            name=data.name,
            message=data.message.as_dict(),
            cron=data.cron,
            every_seconds=data.every_seconds,
            timezone=data.timezone,
            paused=bool(data.paused),
            caller=caller_of(request),
        )
    )
    return schedule_out(schedule)


@get(
    SCHEDULES,
    summary="List a queue's schedules",
    response_description="One page of schedules, ordered by name in byte order.",
    scopes=CONSUMER_READ,
)
async def list_schedules_page(
    queue_id: QueueId,
    schedules: Schedules,
    cursors: Cursors,
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
) -> SchedulesOut:
    page = await schedules_page(schedules, cursors, queue_id, limit=limit, cursor=cursor)
    return SchedulesOut(items=[schedule_out(s) for s in page.items], next_cursor=page.next_cursor)


@get(ONE, summary="Get a schedule", errors=(ScheduleNotFound,), scopes=CONSUMER_READ)
async def get_one_schedule(
    queue_id: QueueId, schedule_id: ScheduleId, schedules: Schedules
) -> ScheduleOut:
    return schedule_out(await schedules.get(queue_id, schedule_id))


@patch(
    ONE,
    summary="Change a schedule",
    description="Any subset of `name`, `cron`, `every_seconds`, `timezone`, `message` (the "
    "whole template). Giving `cron` or `every_seconds` switches the schedule to that kind; a "
    "new recurrence or time zone starts the due times afresh from now. Writes the audit "
    "entry `schedule.updated`.",
    response_description="The whole schedule after the change.",
    errors=("empty_schedule_update", *_DEFINITION, ScheduleAlreadyExists, ScheduleNotFound),
    scopes=ADMIN_ONLY,
)
async def change_schedule(
    queue_id: QueueId,
    schedule_id: ScheduleId,
    data: JSONBody[UpdateScheduleBody],
    schedules: Schedules,
    request: Request[Any, Any, Any],
) -> ScheduleOut:
    schedule = await schedules.update(
        UpdateScheduleCommand(queue_id, schedule_id, data.changes(), caller_of(request))
    )
    return schedule_out(schedule)


@post(
    ONE + "/pause",
    status_code=200,
    summary="Pause a schedule",
    description="No due time until resumed: the due times meanwhile are skipped, not caught "
    "up. Writes the audit entry `schedule.paused`.",
    errors=(ScheduleNotFound,),
    scopes=ADMIN_ONLY,
)
async def pause_schedule(
    queue_id: QueueId,
    schedule_id: ScheduleId,
    schedules: Schedules,
    request: Request[Any, Any, Any],
) -> ScheduleOut:
    command = ScheduleCommand(queue_id, schedule_id, caller_of(request))
    return schedule_out(await schedules.pause(command))


@post(
    ONE + "/resume",
    status_code=200,
    summary="Resume a schedule",
    description="Due times start afresh from now (`every_seconds`: one interval from now). "
    "Writes the audit entry `schedule.resumed`.",
    errors=(ScheduleNotFound,),
    scopes=ADMIN_ONLY,
)
async def resume_schedule(
    queue_id: QueueId,
    schedule_id: ScheduleId,
    schedules: Schedules,
    request: Request[Any, Any, Any],
) -> ScheduleOut:
    command = ScheduleCommand(queue_id, schedule_id, caller_of(request))
    return schedule_out(await schedules.resume(command))


@delete(
    ONE,
    summary="Delete a schedule",
    description="Messages it enqueued stay. Writes the audit entry `schedule.deleted`.",
    errors=(ScheduleNotFound,),
    scopes=ADMIN_ONLY,
)
async def remove_schedule(
    queue_id: QueueId,
    schedule_id: ScheduleId,
    schedules: Schedules,
    request: Request[Any, Any, Any],
) -> None:
    await schedules.delete(ScheduleCommand(queue_id, schedule_id, caller_of(request)))


ROUTES = [
    add_schedule,
    list_schedules_page,
    get_one_schedule,
    change_schedule,
    pause_schedule,
    resume_schedule,
    remove_schedule,
]
