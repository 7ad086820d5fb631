"""Dead-letter routes: browse (newest first), read one, redrive one or a batch, delete."""

from __future__ import annotations

from litestar import delete, get, post
from litestar.di import NamedDependency
from litestar.params import JSONBody

from retsu.adapters.http.dto import (
    DeadLetterOut,
    DeadLettersOut,
    IdOut,
    RedriveBody,
    RedrivenOut,
    dead_letter_out,
)
from retsu.adapters.http.params import DEFAULT_LIMIT, QUEUE, Cursor, Limit, MessageId, QueueId
from retsu.application.delete_dead_letter import DeleteDeadLetter, DeleteDeadLetterCommand
from retsu.application.get_dead_letter import GetDeadLetter
from retsu.application.list_dead_letters import ListDeadLetters, ListDeadLettersQuery
from retsu.application.redrive_dead_letter import RedriveDeadLetter, RedriveDeadLetterCommand
from retsu.application.redrive_dead_letters import (
    RedriveDeadLetters,
    RedriveDeadLettersCommand,
)
from retsu.domain.audit import Caller
from retsu.domain.errors import DeadLetterNotFound
from retsu.domain.message import DEFAULT_REDRIVE_LIMIT, REDRIVE_LIMIT

DEAD_LETTERS = QUEUE + "/dead-letters"
ONE = DEAD_LETTERS + "/{message_id:str}"


@get(
    DEAD_LETTERS,
    summary="List dead letters",
    response_description="One page of dead letters, newest first.",
)
async def list_dead_letters_page(
    queue_id: QueueId,
    list_dead_letters: NamedDependency[ListDeadLetters],
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
) -> DeadLettersOut:
    page = await list_dead_letters(
        ListDeadLettersQuery(queue_id=queue_id, limit=limit, cursor=cursor)
    )
    return DeadLettersOut(
        items=[dead_letter_out(d) for d in page.items], next_cursor=page.next_cursor
    )


@get(ONE, summary="Get a dead letter", errors=(DeadLetterNotFound,))
async def get_one_dead_letter(
    queue_id: QueueId, message_id: MessageId, get_dead_letter: NamedDependency[GetDeadLetter]
) -> DeadLetterOut:
    return dead_letter_out(await get_dead_letter(queue_id, message_id))


@post(
    ONE + "/redrive",
    summary="Redrive a dead letter",
    description="Same payload and priority, attempts 0, the queue's default lifetime; the "
    "record is removed in the same transaction. Writes `dead_letter.redriven`.",
    response_description="The id of the fresh message put back on the queue.",
    errors=(DeadLetterNotFound,),
)
async def redrive_one(
    queue_id: QueueId,
    message_id: MessageId,
    redrive_dead_letter: NamedDependency[RedriveDeadLetter],
    caller: NamedDependency[Caller],
) -> IdOut:
    new_id = await redrive_dead_letter(
        RedriveDeadLetterCommand(queue_id=queue_id, message_id=message_id, caller=caller)
    )
    return IdOut(id=new_id)


@post(
    DEAD_LETTERS + "/redrive",
    status_code=200,
    summary="Redrive dead letters in bulk",
    description="Oldest first. The body is optional. Writes `dead_letter.redriven`.",
    response_description="How many were redriven.",
    errors=(REDRIVE_LIMIT,),
)
async def redrive_many(
    queue_id: QueueId,
    redrive_dead_letters: NamedDependency[RedriveDeadLetters],
    caller: NamedDependency[Caller],
    data: JSONBody[RedriveBody | None] = None,
) -> RedrivenOut:
    limit = DEFAULT_REDRIVE_LIMIT if data is None or data.limit is None else data.limit
    redriven = await redrive_dead_letters(
        RedriveDeadLettersCommand(queue_id=queue_id, limit=limit, caller=caller)
    )
    return RedrivenOut(redriven=redriven)


@delete(
    ONE,
    summary="Delete a dead letter",
    description="Writes the audit entry `dead_letter.deleted`.",
    errors=(DeadLetterNotFound,),
)
async def remove_dead_letter(
    queue_id: QueueId,
    message_id: MessageId,
    delete_dead_letter: NamedDependency[DeleteDeadLetter],
    caller: NamedDependency[Caller],
) -> None:
    await delete_dead_letter(
        DeleteDeadLetterCommand(queue_id=queue_id, message_id=message_id, caller=caller)
    )


ROUTES = [
    list_dead_letters_page,
    get_one_dead_letter,
    redrive_one,
    redrive_many,
    remove_dead_letter,
]
