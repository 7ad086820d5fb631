"""The console's schedules of a queue (SPEC §3.9, §3.12): the list with each schedule's
next and last run, a form to create one, pause, resume, and delete (after a confirmation
page). Every action goes through ``ScheduleService``, as the JSON routes do: the same
rules, codes and audit rows."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Final
from urllib.parse import urlencode
from uuid import UUID

from litestar import Request, Response, get, post
from litestar.di import NamedDependency
from litestar.params import PathParameter, QueryParameter
from litestar.response import Template

from retsu.adapters.http.caller import caller_of
from retsu.adapters.http.console.gate import ROOT, ConsoleContext, page, see_other
from retsu.adapters.http.dependencies import Cursors, Queues, Schedules
from retsu.adapters.http.pages import schedules_page
from retsu.application.schedules import CreateScheduleCommand, ScheduleCommand
from retsu.domain.errors import Conflict, InvalidInput
from retsu.domain.schedule import DEFAULT_TIMEZONE, EVERY_SECONDS

Ctx = NamedDependency[ConsoleContext]
PathId = Annotated[UUID, PathParameter()]
Text = Annotated[str | None, QueryParameter()]

PAGE_SIZE: Final = 50
PRIORITIES: Final = ("HIGH", "MEDIUM", "LOW")
NOTICES: Final = {
    "created": "Schedule created.",
    "paused": "Schedule paused: its due times are skipped until it is resumed.",
    "resumed": "Schedule resumed: its due times start afresh from now.",
    "deleted": "Schedule deleted. The messages it enqueued stay.",
}
# Which field of the form an error code belongs to.
FIELD_OF: Final = {
    "invalid_schedule_name": "name",
    "schedule_already_exists": "name",
    "invalid_cron": "cron",
    "invalid_every_seconds": "every_seconds",
    "invalid_timezone": "timezone",
    "invalid_payload": "payload",
    "invalid_priority": "priority",
    "invalid_ttl": "ttl_seconds",
    "invalid_group": "group",
}


def _schedules_path(queue_id: UUID, tail: str = "", **query: object) -> str:
    path = f"{ROOT}/queues/{queue_id}/schedules{tail}"
    params = {k: str(v) for k, v in query.items() if v is not None}
    return path + ("?" + urlencode(params) if params else "")


def _whole_number(text: str, code: str, what: str) -> int | None:
    """An optional whole number typed into a form (empty: absent)."""
    if not text:
        return None
    if text.isascii() and text.isdigit() and len(text) < 10:
        return int(text)
    raise InvalidInput(f"{what} must be a whole number.", code=code)


@dataclass
class ScheduleForm:
    """What was typed into the create form, and what was wrong with it."""

    values: dict[str, str] = field(
        default_factory=lambda: {"kind": "cron", "timezone": DEFAULT_TIMEZONE, "priority": "MEDIUM"}
    )
    errors: dict[str, str] = field(default_factory=dict)

    @classmethod
    def submitted(cls, form: Mapping[str, Any]) -> ScheduleForm:
        names = (
            "name",
            "kind",
            "cron",
            "every_seconds",
            "timezone",
            "payload",
            "priority",
            "ttl_seconds",
            "group",
        )
        values = {name: str(form.get(name, "")) for name in names}
        for name in names:
            if name != "payload":  # a payload is kept exactly as typed
                values[name] = values[name].strip()
        values["paused"] = "on" if form.get("paused") else ""
        return cls(values)

    def command(self, queue_id: UUID, request: Request[Any, Any, Any]) -> CreateScheduleCommand:
        v = self.values
        every = v["kind"] == "every"
        return CreateScheduleCommand(
            queue_id=queue_id,
            name=v["name"],
            cron=None if every else v["cron"],
            every_seconds=(
                _whole_number(v["every_seconds"], EVERY_SECONDS.code, "every_seconds")
                if every
                else None
            ),
            timezone=v["timezone"] or None,
            message={
                "payload": v["payload"],
                "priority": v["priority"],
                "ttl_seconds": _whole_number(v["ttl_seconds"], "invalid_ttl", "ttl_seconds"),
                "group": v["group"] or None,
            },
            paused=bool(v["paused"]),
            caller=caller_of(request),
        )

    def fail(self, code: str, detail: str) -> None:
        self.errors[FIELD_OF.get(code, "name")] = detail


async def _schedules_page(
    ctx: ConsoleContext,
    queue_id: UUID,
    queues: Queues,
    schedules: Schedules,
    cursors: Cursors,
    *,
    cursor: str | None = None,
    notice: str | None = None,
    form: ScheduleForm | None = None,
    status: int = 200,
) -> Template:
    found = await queues.get(queue_id)
    listed = await schedules_page(schedules, cursors, queue_id, limit=PAGE_SIZE, cursor=cursor)
    return page(
        ctx,
        "schedules.html",
        status=status,
        queue=found.queue,
        stats=found.stats,
        schedules=listed.items,
        next_cursor=listed.next_cursor,
        cursor=cursor,
        notice=notice,
        form=form or ScheduleForm(),
        priorities=PRIORITIES,
        every_range=EVERY_SECONDS,
        tab="schedules",
    )


@get("/queues/{queue_id:str}/schedules")
async def schedules_list(
    ctx: Ctx,
    queue_id: PathId,
    queues: Queues,
    schedules: Schedules,
    cursors: Cursors,
    cursor: Text = None,
    notice: Text = None,
) -> Template:
    return await _schedules_page(
        ctx,
        queue_id,
        queues,
        schedules,
        cursors,
        cursor=cursor or None,
        notice=NOTICES.get(notice or ""),
    )


@post("/queues/{queue_id:str}/schedules")
async def create_schedule(
    ctx: Ctx,
    request: Request[Any, Any, Any],
    queue_id: PathId,
    queues: Queues,
    schedules: Schedules,
    cursors: Cursors,
) -> Response[Any]:
    form = ScheduleForm.submitted(await request.form())
    try:
        await schedules.create(form.command(queue_id, request))
    except (InvalidInput, Conflict) as error:
        form.fail(error.code, error.detail)
        return await _schedules_page(
            ctx, queue_id, queues, schedules, cursors, form=form, status=400
        )
    return see_other(ctx, _schedules_path(queue_id, notice="created"))


@post("/queues/{queue_id:str}/schedules/{schedule_id:str}/pause")
async def pause_schedule(
    ctx: Ctx,
    request: Request[Any, Any, Any],
    queue_id: PathId,
    schedule_id: PathId,
    schedules: Schedules,
) -> Response[Any]:
    await schedules.pause(ScheduleCommand(queue_id, schedule_id, caller_of(request)))
    return see_other(ctx, _schedules_path(queue_id, notice="paused"))


@post("/queues/{queue_id:str}/schedules/{schedule_id:str}/resume")
async def resume_schedule(
    ctx: Ctx,
    request: Request[Any, Any, Any],
    queue_id: PathId,
    schedule_id: PathId,
    schedules: Schedules,
) -> Response[Any]:
    await schedules.resume(ScheduleCommand(queue_id, schedule_id, caller_of(request)))
    return see_other(ctx, _schedules_path(queue_id, notice="resumed"))


@get("/queues/{queue_id:str}/schedules/{schedule_id:str}/delete")
async def confirm_delete_schedule(
    ctx: Ctx, queue_id: PathId, schedule_id: PathId, queues: Queues, schedules: Schedules
) -> Template:
    found = await queues.get(queue_id)
    schedule = await schedules.get(queue_id, schedule_id)
    return page(ctx, "schedule_delete.html", queue=found.queue, schedule=schedule)


@post("/queues/{queue_id:str}/schedules/{schedule_id:str}/delete")
async def delete_schedule(
    ctx: Ctx,
    request: Request[Any, Any, Any],
    queue_id: PathId,
    schedule_id: PathId,
    schedules: Schedules,
) -> Response[Any]:
    await schedules.delete(ScheduleCommand(queue_id, schedule_id, caller_of(request)))
    return see_other(ctx, _schedules_path(queue_id, notice="deleted"))


ROUTES = [
    schedules_list,
    create_schedule,
    pause_schedule,
    resume_schedule,
    confirm_delete_schedule,
    delete_schedule,
]
