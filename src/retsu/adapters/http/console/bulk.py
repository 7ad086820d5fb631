"""Bulk actions in the console (SPEC §3.11): delete the messages a filter selects, delete
or redrive the dead letters it selects.

Each is two steps. The ``GET`` page runs the use case's dry run and says what the action
will do and to how many ("Delete 1,204 messages"); its ``limit`` field counts again with
another cap. The ``POST`` from that page runs the action for real with its cap set to the
number confirmed, so it never takes more than the operator was told (fewer when some went
meanwhile, and the notice says so). Both go through the same use cases as
``POST …/messages/delete``, ``…/dead-letters/delete`` and ``…/dead-letters/redrive``, with
the same rules, codes and audit row.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Final
from urllib.parse import urlencode
from uuid import UUID

from litestar import Request, Response, get, post
from litestar.datastructures import FormMultiDict
from litestar.di import NamedDependency
from litestar.params import PathParameter, QueryParameter
from litestar.response import Template

from retsu.adapters.http.caller import caller_of
from retsu.adapters.http.console.forms import parse_whole_number
from retsu.adapters.http.console.gate import ConsoleContext, page, see_other
from retsu.adapters.http.console.lists import SearchForm, parse_priority, parse_state
from retsu.adapters.http.console.notices import queue_path
from retsu.adapters.http.dependencies import Browsing, DeadLetters, Queues
from retsu.application.browsing import DeleteMessagesCommand
from retsu.application.dead_letters import DeleteDeadLettersCommand, RedriveDeadLettersCommand
from retsu.domain.errors import InvalidInput
from retsu.domain.message import DEFAULT_REDRIVE_LIMIT, REDRIVE_LIMIT
from retsu.domain.queue import Queue
from retsu.domain.ranges import IntRange
from retsu.domain.search import BULK_LIMIT, DEFAULT_BULK_LIMIT

Ctx = NamedDependency[ConsoleContext]
PathId = Annotated[UUID, PathParameter()]
# Declared, so the API's request rules refuse one given twice before any handler runs.
Text = Annotated[str | None, QueryParameter()]

STATE_NAMES: Final = {
    "": "every live message",
    "ready": "ready",
    "in_flight": "in flight",
    "delayed": "delayed",
    "completed": "completed (kept after acknowledgement)",
}


@dataclass(frozen=True, slots=True)
class Bulk:
    """One kind of bulk action: its words, its cap, where it is and where it goes back."""

    key: str  # the page's data-bulk attribute
    tail: str  # the action's path under the queue
    back: str  # the list to go back to, under the queue
    noun: str  # "messages", "dead letters"
    verb: str  # "Delete", "Redrive"
    what: str  # what a real run does, one sentence
    limit: IntRange
    default_limit: int
    notice: str


DELETE_MESSAGES: Final = Bulk(
    key="delete-messages",
    tail="/messages/delete",
    back="/messages",
    noun="messages",
    verb="Delete",
    what="They are removed for good, in enqueue order (completed ones: oldest completion "
    "first), skipping any a consumer holds at that moment. It cannot be undone; the audit "
    "log records the filter and the count.",
    limit=BULK_LIMIT,
    default_limit=DEFAULT_BULK_LIMIT,
    notice="messages_deleted",
)
DELETE_DEAD_LETTERS: Final = Bulk(
    key="delete-dead-letters",
    tail="/dead-letters/delete",
    back="/dead-letters",
    noun="dead letters",
    verb="Delete",
    what="They are removed for good, oldest first. It cannot be undone; the audit log "
    "records the filter and the count.",
    limit=BULK_LIMIT,
    default_limit=DEFAULT_BULK_LIMIT,
    notice="dead_letters_deleted",
)
REDRIVE_DEAD_LETTERS: Final = Bulk(
    key="redrive-dead-letters",
    tail="/dead-letters/redrive",
    back="/dead-letters",
    noun="dead letters",
    verb="Redrive",
    what="Each goes back onto the queue as a fresh message (same payload, priority and "
    "group; attempts 0; the queue's default lifetime), oldest first, and its dead-letter "
    "record is removed. The audit log records the filter and the count.",
    limit=REDRIVE_LIMIT,
    default_limit=DEFAULT_REDRIVE_LIMIT,
    notice="redriven_many",
)


@dataclass(frozen=True, slots=True)
class Filter:
    """A bulk action's filter as typed (messages take a state and a priority too)."""

    search: SearchForm
    state: str = ""
    priority: str = ""

    def params(self) -> dict[str, str]:
        given = {"state": self.state, "priority": self.priority, **self.search.params()}
        return {k: v for k, v in given.items() if v}

    def described(self, bulk: Bulk) -> list[tuple[str, str]]:
        """The filter as the confirmation page lists it."""
        rows = []
        if bulk is DELETE_MESSAGES:
            rows.append(("State", STATE_NAMES.get(self.state, self.state)))
            rows.append(("Priority", self.priority or "any"))
        rows.append(("Group", self.search.group_text or "any"))
        rows.append(("Payload contains", self.search.match_text or "anything (no match)"))
        return rows


def _read_filter(values: Mapping[str, Any], bulk: Bulk) -> Filter:
    search = SearchForm.read(values.get("group"), values.get("match"))
    if bulk is not DELETE_MESSAGES:
        return Filter(search)
    state = str(values.get("state") or "")
    priority = str(values.get("priority") or "")
    # The API's own codes: invalid_state, invalid_priority (an error page: these come from
    # the browser's tabs, never typed).
    parse_state(state)
    parse_priority(priority)
    return Filter(search, state, priority)


def _limit(text: object, bulk: Bulk) -> int:
    value = parse_whole_number(text)
    if value is None:
        raise InvalidInput(
            f"limit must be a whole number from {bulk.limit.low} to {bulk.limit.high}.",
            code=bulk.limit.code,
        )
    return bulk.limit.check(value)


async def _run(
    bulk: Bulk,
    queue_id: UUID,
    chosen: Filter,
    limit: int,
    *,
    dry_run: bool,
    request: Request[Any, Any, Any],
    browsing: Browsing,
    dead_letters: DeadLetters,
) -> int:
    """The use case's answer: how many (would be) taken."""
    caller = caller_of(request)
    if bulk is DELETE_MESSAGES:
        command = DeleteMessagesCommand(
            queue_id=queue_id,
            state=parse_state(chosen.state),
            search=chosen.search.search(parse_priority(chosen.priority)),
            limit=limit,
            dry_run=dry_run,
            caller=caller,
        )
        return (await browsing.delete_many(command)).count
    if bulk is DELETE_DEAD_LETTERS:
        doomed = DeleteDeadLettersCommand(
            queue_id=queue_id,
            search=chosen.search.search(),
            limit=limit,
            dry_run=dry_run,
            caller=caller,
        )
        return (await dead_letters.delete_many(doomed)).count
    redrive = RedriveDeadLettersCommand(
        queue_id=queue_id,
        limit=limit,
        caller=caller,
        search=chosen.search.search(),
        dry_run=dry_run,
    )
    return (await dead_letters.redrive_many(redrive)).count


def _confirmation(
    ctx: ConsoleContext,
    bulk: Bulk,
    queue: Queue,
    chosen: Filter,
    *,
    limit_text: str,
    count: int | None,
    limit: int | None,
    errors: dict[str, str],
    codes: dict[str, str],
) -> Template:
    back = queue_path(queue.id, bulk.back)
    params = chosen.params()
    return page(
        ctx,
        "bulk_confirm.html",
        status=400 if errors else 200,
        queue=queue,
        bulk=bulk,
        filters=chosen.described(bulk),
        params=params,
        count=count,
        limit=limit,
        limit_text=limit_text,
        errors=errors,
        codes=codes,
        action=queue_path(queue.id, bulk.tail),
        back=back + ("?" + urlencode(params) if params else ""),
    )


async def _confirm(
    ctx: ConsoleContext,
    bulk: Bulk,
    queue_id: UUID,
    values: Mapping[str, str | None],
    request: Request[Any, Any, Any],
    queues: Queues,
    browsing: Browsing,
    dead_letters: DeadLetters,
) -> Template:
    found = await queues.get(queue_id)
    chosen = _read_filter(values, bulk)
    limit_text = str(values.get("limit") or bulk.default_limit).strip()
    errors, codes = dict(chosen.search.errors), dict(chosen.search.codes)
    limit: int | None = None
    try:
        limit = _limit(limit_text, bulk)
    except InvalidInput as error:
        errors["limit"], codes["limit"] = error.detail, error.code
    count = None
    if not errors and limit is not None:
        count = await _run(
            bulk,
            queue_id,
            chosen,
            limit,
            dry_run=True,
            request=request,
            browsing=browsing,
            dead_letters=dead_letters,
        )
    return _confirmation(
        ctx,
        bulk,
        found.queue,
        chosen,
        limit_text=limit_text,
        count=count,
        limit=limit,
        errors=errors,
        codes=codes,
    )


async def _act(
    ctx: ConsoleContext,
    bulk: Bulk,
    queue_id: UUID,
    request: Request[Any, Any, Any],
    browsing: Browsing,
    dead_letters: DeadLetters,
) -> Response[Any]:
    form: FormMultiDict = await request.form()
    chosen = _read_filter(form, bulk)
    for name, detail in chosen.search.errors.items():
        # Only a crafted post gets here (the confirmation page posts what it checked).
        raise InvalidInput(detail, code=chosen.search.codes[name])
    # The number confirmed is the cap: never more than the operator was told.
    confirmed = _limit(form.get("limit"), bulk)
    done = await _run(
        bulk,
        queue_id,
        chosen,
        confirmed,
        dry_run=False,
        request=request,
        browsing=browsing,
        dead_letters=dead_letters,
    )
    return see_other(
        ctx,
        queue_path(
            queue_id, bulk.back, **chosen.params(), notice=bulk.notice, n=done, of=confirmed
        ),
    )


@get("/queues/{queue_id:str}/messages/delete")
async def confirm_delete_messages(
    ctx: Ctx,
    request: Request[Any, Any, Any],
    queue_id: PathId,
    queues: Queues,
    browsing: Browsing,
    dead_letters: DeadLetters,
    message_state: Annotated[str | None, QueryParameter(name="state")] = None,
    priority: Text = None,
    group: Text = None,
    match: Text = None,
    limit: Text = None,
) -> Template:
    values = {
        "state": message_state,
        "priority": priority,
        "group": group,
        "match": match,
        "limit": limit,
    }
    return await _confirm(
        ctx, DELETE_MESSAGES, queue_id, values, request, queues, browsing, dead_letters
    )


@post("/queues/{queue_id:str}/messages/delete")
async def delete_messages(
    ctx: Ctx,
    request: Request[Any, Any, Any],
    queue_id: PathId,
    browsing: Browsing,
    dead_letters: DeadLetters,
) -> Response[Any]:
    return await _act(ctx, DELETE_MESSAGES, queue_id, request, browsing, dead_letters)


@get("/queues/{queue_id:str}/dead-letters/delete")
async def confirm_delete_dead_letters(
    ctx: Ctx,
    request: Request[Any, Any, Any],
    queue_id: PathId,
    queues: Queues,
    browsing: Browsing,
    dead_letters: DeadLetters,
    group: Text = None,
    match: Text = None,
    limit: Text = None,
) -> Template:
    values = {"group": group, "match": match, "limit": limit}
    return await _confirm(
        ctx, DELETE_DEAD_LETTERS, queue_id, values, request, queues, browsing, dead_letters
    )


@post("/queues/{queue_id:str}/dead-letters/delete")
async def delete_dead_letters(
    ctx: Ctx,
    request: Request[Any, Any, Any],
    queue_id: PathId,
    browsing: Browsing,
    dead_letters: DeadLetters,
) -> Response[Any]:
    return await _act(ctx, DELETE_DEAD_LETTERS, queue_id, request, browsing, dead_letters)


@get("/queues/{queue_id:str}/dead-letters/redrive")
async def confirm_redrive_dead_letters(
    ctx: Ctx,
    request: Request[Any, Any, Any],
    queue_id: PathId,
    queues: Queues,
    browsing: Browsing,
    dead_letters: DeadLetters,
    group: Text = None,
    match: Text = None,
    limit: Text = None,
) -> Template:
    values = {"group": group, "match": match, "limit": limit}
    return await _confirm(
        ctx, REDRIVE_DEAD_LETTERS, queue_id, values, request, queues, browsing, dead_letters
    )


@post("/queues/{queue_id:str}/dead-letters/redrive")
async def redrive_dead_letters(
    ctx: Ctx,
    request: Request[Any, Any, Any],
    queue_id: PathId,
    browsing: Browsing,
    dead_letters: DeadLetters,
) -> Response[Any]:
    return await _act(ctx, REDRIVE_DEAD_LETTERS, queue_id, request, browsing, dead_letters)


ROUTES = [
    confirm_delete_messages,
    delete_messages,
    confirm_delete_dead_letters,
    delete_dead_letters,
    confirm_redrive_dead_letters,
    redrive_dead_letters,
]
