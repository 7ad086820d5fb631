"""Looking at messages without claiming them (SPEC §3.6): list a page (searched by group
and payload, §3.11), show one, an operator's delete — one message or those a filter selects
(§3.11) — and the queue's groups (§3.10)."""

from __future__ import annotations

from typing import Any

from litestar import Request, delete, get, post
from litestar.params import JSONBody

from retsu.adapters.http.auth import ADMIN_ONLY, OPERATOR_READ
from retsu.adapters.http.caller import caller_of
from retsu.adapters.http.dependencies import Browsing, Cursors
from retsu.adapters.http.dto import (
    DeletedOut,
    DeleteMessagesBody,
    GroupsOut,
    MatchedOut,
    StoredMessageOut,
    StoredMessagesOut,
    deleted_out,
    group_out,
    stored_message_out,
)
from retsu.adapters.http.pages import groups_page, messages_page
from retsu.adapters.http.params import (
    DEFAULT_LIMIT,
    QUEUE,
    Cursor,
    GroupFilter,
    GroupStateFilter,
    Limit,
    MatchFilter,
    MessageId,
    PriorityFilter,
    QueueId,
    StateFilter,
)
from retsu.application.browsing import DeleteMessageCommand, DeleteMessagesCommand
from retsu.domain.browsing import BrowseState
from retsu.domain.errors import MessageNotFound
from retsu.domain.search import BULK_LIMIT, DEFAULT_BULK_LIMIT

MESSAGES = QUEUE + "/messages"
ONE = MESSAGES + "/{message_id:str}"


@get(
    MESSAGES,
    summary="Browse messages",
    description="Live messages without claiming them. `ready`: delivery order (priority, then "
    "enqueue order); `in_flight`: lease end, soonest first; `delayed`: end of the delay; "
    "`completed`: acknowledged messages the queue keeps, newest completion first; no "
    "state: every live message in enqueue order. `group` and `match` search (SPEC §3.11). A "
    "page never examines more than a bounded number of stored rows: with a filter no index "
    "serves it may end short of `limit` with a `next_cursor` to go on.",
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
    group: GroupFilter = None,
    match: MatchFilter = None,
) -> StoredMessagesOut:
    page = await messages_page(
        browsing,
        cursors,
        queue_id,
        state=message_state,
        priority=priority,
        limit=limit,
        cursor=cursor,
        group=group,
        match=match,
    )
    return StoredMessagesOut(
        items=[stored_message_out(m) for m in page.items], next_cursor=page.next_cursor
    )


@get(
    ONE,
    summary="Show a message",
    description="A live message, or a completed one the queue still keeps (SPEC §3.11).",
    errors=(MessageNotFound,),
    scopes=OPERATOR_READ,
)
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


@post(
    MESSAGES + "/delete",
    status_code=200,
    summary="Delete messages by filter",
    description="Removes up to `limit` messages the filter selects (every given field must "
    "hold; `state` absent: every live message), in bounded batches, skipping any a dequeue "
    "holds at that moment. `dry_run`: only count them. A real run writes one audit entry "
    "`message.deleted` with the filter and the count.",
    response_description='`{"matched": n}` for a dry run (what a real run would take now), '
    'else `{"deleted": n}`.',
    errors=("invalid_state", "invalid_priority", "invalid_group", "invalid_match", BULK_LIMIT),
    scopes=ADMIN_ONLY,
)
async def delete_messages(
    queue_id: QueueId,
    browsing: Browsing,
    request: Request[Any, Any, Any],
    data: JSONBody[DeleteMessagesBody | None] = None,
) -> MatchedOut | DeletedOut:
    body = data or DeleteMessagesBody()
    state = None if body.state is None else BrowseState.parse(body.state)
    outcome = await browsing.delete_many(
        DeleteMessagesCommand(
            queue_id=queue_id,
            state=state,
            search=body.search(),
            limit=DEFAULT_BULK_LIMIT if body.limit is None else body.limit,
            dry_run=body.dry,
            caller=caller_of(request),
        )
    )
    return deleted_out(outcome)


@get(
    QUEUE + "/groups",
    summary="List a queue's groups",
    description="Groups with a live message, the one whose next message has waited longest "
    "first (the claim's fair-service order). Counts are the lane's own: a lease or delay "
    "that ended since the group last moved counts where it was until the next dequeue.",
    response_description="One page of groups.",
    scopes=OPERATOR_READ,
)
async def list_groups_page(
    queue_id: QueueId,
    browsing: Browsing,
    cursors: Cursors,
    group_state: GroupStateFilter = None,
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
) -> GroupsOut:
    page = await groups_page(
        browsing, cursors, queue_id, state=group_state, limit=limit, cursor=cursor
    )
    return GroupsOut(items=[group_out(g) for g in page.items], next_cursor=page.next_cursor)


ROUTES = [list_messages_page, show_message, remove_message, delete_messages, list_groups_page]
