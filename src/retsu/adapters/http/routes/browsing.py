"""Looking at messages without claiming them (SPEC §3.6): list a page, show one, and an
operator's delete."""

from __future__ import annotations

from typing import Any

from litestar import Request, delete, get

from retsu.adapters.http.auth import ADMIN_ONLY, OPERATOR_READ
from retsu.adapters.http.caller import caller_of
from retsu.adapters.http.dependencies import Browsing, Cursors
from retsu.adapters.http.dto import StoredMessageOut, StoredMessagesOut, stored_message_out
from retsu.adapters.http.pages import messages_page
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
from retsu.application.browsing import DeleteMessageCommand
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
    scopes=OPERATOR_READ,
)
async def list_messages_page(
    queue_id: QueueId,
    browsing: Browsing,
    cursors: Cursors,
    message_state: StateFilter = None,
    priority: PriorityFilter = None,
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
) -> StoredMessagesOut:
    page = await messages_page(
        browsing,
        cursors,
        queue_id,
        state=message_state,
        priority=priority,
        limit=limit,
        cursor=cursor,
    )
    return StoredMessagesOut(
        items=[stored_message_out(m) for m in page.items], next_cursor=page.next_cursor
    )


@get(ONE, summary="Show a message", errors=(MessageNotFound,), scopes=OPERATOR_READ)
async def show_message(
    queue_id: QueueId, message_id: MessageId, browsing: Browsing
) -> StoredMessageOut:
    return stored_message_out(await browsing.get(queue_id, message_id))


@delete(
    ONE,
    summary="Delete a message",
    description="Removes a live message in any state (a later acknowledge of its delivery "
    "is the usual idempotent `204`). Writes the audit entry `message.deleted`.",
    errors=(MessageNotFound,),
    scopes=ADMIN_ONLY,
)
async def remove_message(
    queue_id: QueueId,
    message_id: MessageId,
    browsing: Browsing,
    request: Request[Any, Any, Any],
) -> None:
    await browsing.delete(
        DeleteMessageCommand(queue_id=queue_id, message_id=message_id, caller=caller_of(request))
    )


ROUTES = [list_messages_page, show_message, remove_message]
