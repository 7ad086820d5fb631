"""Creating and deleting queues in the console (SPEC §3.2), through ``QueueService`` as
``POST /v1/queues`` and ``DELETE /v1/queues/{id}`` do: the same rules, codes and audit rows
(``queue.created``, ``queue.deleted``).

A new queue's form is the settings form with a name (each field's error next to it; a
taken name is the use case's ``409 queue_already_exists`` next to the name). Deleting asks
on a page of its own what purge asks: the exact numbers that go with the queue, and its
name typed in.
"""

from __future__ import annotations

from typing import Annotated, Any, Final
from urllib.parse import urlencode
from uuid import UUID

from litestar import Request, Response, get, post
from litestar.di import NamedDependency
from litestar.params import PathParameter
from litestar.response import Template

from retsu.adapters.http.caller import caller_of
from retsu.adapters.http.console.forms import SECTIONS, SettingsForm
from retsu.adapters.http.console.gate import ROOT, ConsoleContext, page, see_other
from retsu.adapters.http.console.notices import queue_path
from retsu.adapters.http.dependencies import Cursors, Queues, Schedules
from retsu.adapters.http.pages import schedules_page
from retsu.application.queues import CreateQueueCommand, QueueCommand, QueueWithStats
from retsu.domain.errors import Conflict, InvalidInput
from retsu.domain.queue import validate_queue_name

Ctx = NamedDependency[ConsoleContext]
PathId = Annotated[UUID, PathParameter()]

# How many schedules the delete page counts exactly ("100 or more" past it).
SCHEDULES_COUNTED: Final = 100


def _new_queue_page(ctx: ConsoleContext, form: SettingsForm, status: int = 200) -> Template:
    return page(ctx, "queue_new.html", status=status, form=form, sections=SECTIONS)


@get("/queues/new")
async def new_queue(ctx: Ctx) -> Template:
    return _new_queue_page(ctx, SettingsForm.blank())


@post("/queues")
async def create_queue(ctx: Ctx, request: Request[Any, Any, Any], queues: Queues) -> Response[Any]:
    form = SettingsForm.submitted(await request.form(), with_name=True)
    settings = form.given()
    try:  # the use case checks it too; here so that every wrong field shows at once
        validate_queue_name(form.values["name"])
    except InvalidInput as error:
        form.fail(error.code, error.detail)
    if form.errors:
        return _new_queue_page(ctx, form, status=400)
    try:
        created = await queues.create(
            CreateQueueCommand(form.values["name"], caller=caller_of(request), **settings)
        )
    except (InvalidInput, Conflict) as error:
        form.fail(error.code, error.detail)
        return _new_queue_page(ctx, form, status=409 if isinstance(error, Conflict) else 400)
    return see_other(ctx, queue_path(created.id, notice="created", name=created.name))


async def _schedule_count(schedules: Schedules, cursors: Cursors, queue_id: UUID) -> str:
    listed = await schedules_page(schedules, cursors, queue_id, limit=SCHEDULES_COUNTED)
    count = len(listed.items)
    return f"{count} or more" if listed.next_cursor else str(count)


def _delete_page(
    ctx: ConsoleContext,
    found: QueueWithStats,
    schedules: str,
    *,
    error: str | None = None,
    typed: str = "",
) -> Template:
    stats = found.stats
    return page(
        ctx,
        "queue_delete.html",
        status=400 if error else 200,
        queue=found.queue,
        stats=stats,
        live=stats.ready + stats.in_flight + stats.delayed,
        schedules=schedules,
        error=error,
        typed=typed,
    )


@get("/queues/{queue_id:str}/delete")
async def confirm_delete_queue(
    ctx: Ctx, queue_id: PathId, queues: Queues, schedules: Schedules, cursors: Cursors
) -> Template:
    found = await queues.get(queue_id)
    return _delete_page(ctx, found, await _schedule_count(schedules, cursors, queue_id))


@post("/queues/{queue_id:str}/delete")
async def delete_queue(
    ctx: Ctx,
    request: Request[Any, Any, Any],
    queue_id: PathId,
    queues: Queues,
    schedules: Schedules,
    cursors: Cursors,
) -> Response[Any]:
    found = await queues.get(queue_id)
    typed = str((await request.form()).get("confirm_name", "")).strip()
    if typed != found.queue.name:
        return _delete_page(
            ctx,
            found,
            await _schedule_count(schedules, cursors, queue_id),
            error=f"Type the queue's name, {found.queue.name}, to confirm. Nothing was deleted.",
            typed=typed,
        )
    await queues.delete(QueueCommand(queue_id, caller_of(request)))
    notice = urlencode({"notice": "queue_deleted", "name": found.queue.name})
    return see_other(ctx, f"{ROOT}/?{notice}")


ROUTES = [new_queue, create_queue, confirm_delete_queue, delete_queue]
