"""Dead-letter routes: browse (newest first, searched by group, payload and reason), read
one, redrive one or those a filter selects, delete one or those a filter selects (SPEC §3.4,
§3.11)."""

from __future__ import annotations

from typing import Any

from litestar import Request, delete, get, post
from litestar.params import JSONBody

from retsu.adapters.http.auth import ADMIN_ONLY, OPERATOR_READ
from retsu.adapters.http.caller import caller_of
from retsu.adapters.http.dependencies import Cursors, DeadLetters
from retsu.adapters.http.dto import (
    DeadLetterOut,
    DeadLettersOut,
    DeleteDeadLettersBody,
    DeletedOut,
    IdOut,
    MatchedOut,
    RedriveBody,
    RedrivenOut,
    dead_letter_out,
    deleted_out,
    redriven_out,
)
from retsu.adapters.http.pages import dead_letters_page
from retsu.adapters.http.params import (
    DEFAULT_LIMIT,
    QUEUE,
    Cursor,
    GroupFilter,
    Limit,
    MatchFilter,
    MessageId,
    QueueId,
    ReasonFilter,
)
from retsu.application.dead_letters import (
    DeadLetterCommand,
    DeleteDeadLettersCommand,
    RedriveDeadLettersCommand,
)
from retsu.domain.errors import DeadLetterNotFound
from retsu.domain.message import DEFAULT_REDRIVE_LIMIT, REDRIVE_LIMIT
from retsu.domain.search import BULK_LIMIT, DEFAULT_BULK_LIMIT

DEAD_LETTERS = QUEUE + "/dead-letters"
ONE = DEAD_LETTERS + "/{message_id:str}"
_FILTER_CODES = ("invalid_priority", "invalid_group", "invalid_match", "invalid_reason")


@get(
    DEAD_LETTERS,
    summary="List dead letters",
    description="`group`, `match` and `reason` search (SPEC §3.11). A search examines a "
    "bounded number of records per page: a page may end short of `limit` with a "
    "`next_cursor` to go on.",
    response_description="One page of dead letters, newest first.",
    scopes=OPERATOR_READ,
)
async def list_dead_letters_page(
    queue_id: QueueId,
    dead_letters: DeadLetters,
    cursors: Cursors,
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
    group: GroupFilter = None,
    match: MatchFilter = None,
    reason: ReasonFilter = None,
) -> DeadLettersOut:
    page = await dead_letters_page(
        dead_letters,
        cursors,
        queue_id,
        limit=limit,
        cursor=cursor,
        group=group,
        match=match,
        reason=reason,
    )
    return DeadLettersOut(
        items=[dead_letter_out(d) for d in page.items], next_cursor=page.next_cursor
    )


@get(ONE, summary="Get a dead letter", errors=(DeadLetterNotFound,), scopes=OPERATOR_READ)
async def get_one_dead_letter(
    queue_id: QueueId, message_id: MessageId, dead_letters: DeadLetters
) -> DeadLetterOut:
    return dead_letter_out(await dead_letters.get(queue_id, message_id))


@post(
    ONE + "/redrive",
    summary="Redrive a dead letter",
    description="Same payload and priority, attempts 0, the queue's default lifetime; the "
    "record is removed in the same transaction. Writes `dead_letter.redriven`.",
    response_description="The id of the fresh message put back on the queue.",
    errors=(DeadLetterNotFound,),
    scopes=ADMIN_ONLY,
)
async def redrive_one(
    queue_id: QueueId,
    message_id: MessageId,
    dead_letters: DeadLetters,
    request: Request[Any, Any, Any],
) -> IdOut:
    new_id = await dead_letters.redrive(
        DeadLetterCommand(queue_id=queue_id, message_id=message_id, caller=caller_of(request))
    )
    return IdOut(id=new_id)


@post(
    DEAD_LETTERS + "/redrive",
    status_code=200,
    summary="Redrive dead letters in bulk",
    description="Up to `limit` records the filter selects (every given field must hold), "
    "oldest first, each back onto the queue as a fresh message. The body is optional. "
    "`dry_run`: only count them. A real run writes one audit entry `dead_letter.redriven` "
    "with the filter and the count.",
    response_description='`{"matched": n}` for a dry run (what a real run would take now), '
    'else `{"redriven": n}`.',
    errors=(*_FILTER_CODES, REDRIVE_LIMIT),
    scopes=ADMIN_ONLY,
)
async def redrive_many(
    queue_id: QueueId,
    dead_letters: DeadLetters,
    request: Request[Any, Any, Any],
    data: JSONBody[RedriveBody | None] = None,
) -> MatchedOut | RedrivenOut:
    body = data or RedriveBody()
    outcome = await dead_letters.redrive_many(
        RedriveDeadLettersCommand(
            queue_id=queue_id,
            search=body.search(body.reason),
            limit=DEFAULT_REDRIVE_LIMIT if body.limit is None else body.limit,
            dry_run=body.dry,
            caller=caller_of(request),
        )
    )
    return redriven_out(outcome)


@post(
    DEAD_LETTERS + "/delete",
    status_code=200,
    summary="Delete dead letters by filter",
    description="Removes up to `limit` records the filter selects (every given field must "
    "hold), oldest first, in bounded batches. `dry_run`: only count them. A real run writes "
    "one audit entry `dead_letter.deleted` with the filter and the count.",
    response_description='`{"matched": n}` for a dry run (what a real run would take now), '
    'else `{"deleted": n}`.',
    errors=(*_FILTER_CODES, BULK_LIMIT),
    scopes=ADMIN_ONLY,
)
async def delete_many(
    queue_id: QueueId,
    dead_letters: DeadLetters,
    request: Request[Any, Any, Any],
    data: JSONBody[DeleteDeadLettersBody | None] = None,
) -> MatchedOut | DeletedOut:
    body = data or DeleteDeadLettersBody()
    outcome = await dead_letters.delete_many(
        DeleteDeadLettersCommand(
            queue_id=queue_id,
            search=body.search(body.reason),
            limit=DEFAULT_BULK_LIMIT if body.limit is None else body.limit,
            dry_run=body.dry,
            caller=caller_of(request),
        )
    )
    return deleted_out(outcome)


@delete(
    ONE,
    summary="Delete a dead letter",
    description="Writes the audit entry `dead_letter.deleted`.",
    errors=(DeadLetterNotFound,),
    scopes=ADMIN_ONLY,
)
async def remove_dead_letter(
    queue_id: QueueId,
    message_id: MessageId,
    dead_letters: DeadLetters,
    request: Request[Any, Any, Any],
) -> None:
    await dead_letters.delete(
        DeadLetterCommand(queue_id=queue_id, message_id=message_id, caller=caller_of(request))
    )


ROUTES = [
    list_dead_letters_page,
    get_one_dead_letter,
    redrive_one,
    redrive_many,
    delete_many,
    remove_dead_letter,
]
