"""Looking at messages without claiming them (SPEC §3.6): list a page, show one, and an
operator's delete."""

from __future__ import annotations

from litestar import delete, get
from litestar.di import NamedDependency

from retsu.adapters.http.dto import StoredMessageOut, StoredMessagesOut, stored_message_out
from retsu.adapters.http.params import (
    DEFAULT_LIMIT,
    QUEUE,
    Cursor,
    Limit,
    MessageId,
    PriorityFilter,
    QueueId,
    StateFilter,
)
from retsu.application.delete_message import DeleteMessage, DeleteMessageCommand
from retsu.application.get_message import GetMessage
from retsu.application.list_messages import ListMessages, ListMessagesQuery
from retsu.domain.audit import Caller
from retsu.domain.errors import MessageNotFound

MESSAGES = QUEUE + "/messages"
ONE = MESSAGES + "/{message_id:str}"


@get(
    MESSAGES,
    summary="Browse messages",
    description="Live messages without claiming them. `ready`: delivery order (priority, then "
    "enqueue order); `in_flight`: lease end, soonest first; `delayed`: end of the delay; no "
    "state: every live message in enqueue order. A page never examines more than a bounded "
    "number of stored rows: with a filter no index serves it may end short of `limit` with a "
    "`next_cursor` to go on.",
    response_description="One page of messages.",
)
async def list_messages_page(
    queue_id: QueueId,
    list_messages: NamedDependency[ListMessages],
    message_state: StateFilter = None,
    priority: PriorityFilter = None,
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
) -> StoredMessagesOut:
    page = await list_messages(
        ListMessagesQuery(
            queue_id=queue_id, state=message_state, priority=priority, limit=limit, cursor=cursor
        )
    )
    return StoredMessagesOut(
        items=[stored_message_out(m) for m in page.items], next_cursor=page.next_cursor
    )


@get(ONE, summary="Show a message", errors=(MessageNotFound,))
async def show_message(
    queue_id: QueueId, message_id: MessageId, get_message: NamedDependency[GetMessage]
) -> StoredMessageOut:
    return stored_message_out(await get_message(queue_id, message_id))


@delete(
    ONE,
    summary="Delete a message",
    description="Removes a live message in any state (a later acknowledge of its delivery "
    "is the usual idempotent `204`). Writes the audit entry `message.deleted`.",
    errors=(MessageNotFound,),
)
async def remove_message(
    queue_id: QueueId,
    message_id: MessageId,
    delete_message: NamedDependency[DeleteMessage],
    caller: NamedDependency[Caller],
) -> None:
    await delete_message(
        DeleteMessageCommand(queue_id=queue_id, message_id=message_id, caller=caller)
    )


ROUTES = [list_messages_page, show_message, remove_message]
