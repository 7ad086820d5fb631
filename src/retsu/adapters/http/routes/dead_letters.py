"""Dead-letter routes: browse (newest first), read one, redrive one or a batch, delete."""

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
    IdOut,
    RedriveBody,
    RedrivenOut,
    dead_letter_out,
)
from retsu.adapters.http.pages import dead_letters_page
from retsu.adapters.http.params import DEFAULT_LIMIT, QUEUE, Cursor, Limit, MessageId, QueueId
from retsu.application.dead_letters import (
    DeadLetterCommand,
    RedriveDeadLettersCommand,
)
from retsu.domain.errors import DeadLetterNotFound
from retsu.domain.message import DEFAULT_REDRIVE_LIMIT, REDRIVE_LIMIT

DEAD_LETTERS = QUEUE + "/dead-letters"
ONE = DEAD_LETTERS + "/{message_id:str}"


@get(
    DEAD_LETTERS,
    summary="List dead letters",
    response_description="One page of dead letters, newest first.",
    scopes=OPERATOR_READ,
)
async def list_dead_letters_page(
    queue_id: QueueId,
    dead_letters: DeadLetters,
    cursors: Cursors,
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
) -> DeadLettersOut:
    page = await dead_letters_page(dead_letters, cursors, queue_id, limit=limit, cursor=cursor)
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
    description="Oldest first. The body is optional. Writes `dead_letter.redriven`.",
    response_description="How many were redriven.",
    errors=(REDRIVE_LIMIT,),
    scopes=ADMIN_ONLY,
)
async def redrive_many(
    queue_id: QueueId,
    dead_letters: DeadLetters,
    request: Request[Any, Any, Any],
    data: JSONBody[RedriveBody | None] = None,
) -> RedrivenOut:
    limit = DEFAULT_REDRIVE_LIMIT if data is None or data.limit is None else data.limit
    redriven = await dead_letters.redrive_many(
        RedriveDeadLettersCommand(queue_id=queue_id, limit=limit, caller=caller_of(request))
    )
    return RedrivenOut(redriven=redriven.count)


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
    remove_dead_letter,
]
