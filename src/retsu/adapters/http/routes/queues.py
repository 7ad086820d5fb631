"""Queue routes: create, list, read (with stats), update, pause, resume, purge, delete."""

from __future__ import annotations

from typing import Any

from litestar import Request, delete, get, patch, post
from litestar.params import JSONBody

from retsu.adapters.http.auth import ADMIN_ONLY, CONSUMER_READ
from retsu.adapters.http.caller import caller_of
from retsu.adapters.http.dependencies import Cursors, Queues
from retsu.adapters.http.dto import (
    CreateQueueBody,
    PurgedOut,
    QueueOut,
    QueuesOut,
    QueueWithStatsOut,
    UpdateQueueBody,
    queue_out,
    queue_with_stats_out,
)
from retsu.adapters.http.pages import queues_page
from retsu.adapters.http.params import DEFAULT_LIMIT, QUEUE, Cursor, Limit, QueueId, QueueNameFilter
from retsu.application.queues import (
    CreateQueueCommand,
    QueueCommand,
    UpdateQueueCommand,
)
from retsu.domain.errors import QueueAlreadyExists
from retsu.domain.queue import (
    COMPLETED_RETENTION,
    DEFAULT_MESSAGE_TTL,
    GROUP_MAX_IN_FLIGHT,
    MAX_DELIVERY_ATTEMPTS,
    MAX_IN_FLIGHT,
    VISIBILITY_TIMEOUT,
)

_SETTINGS = (
    VISIBILITY_TIMEOUT,
    MAX_DELIVERY_ATTEMPTS,
    DEFAULT_MESSAGE_TTL,
    GROUP_MAX_IN_FLIGHT,
    MAX_IN_FLIGHT,
    "invalid_rate_limit",
    COMPLETED_RETENTION,
)


@post(
    "/v1/queues",
    summary="Create a queue",
    description="Writes the audit entry `queue.created`.",
    errors=("invalid_queue_name", *_SETTINGS, QueueAlreadyExists),
    scopes=ADMIN_ONLY,
)
async def add_queue(
    data: JSONBody[CreateQueueBody], queues: Queues, request: Request[Any, Any, Any]
) -> QueueOut:
    queue = await queues.create(
        CreateQueueCommand(data.name, caller=caller_of(request), **data.settings())
    )
    return queue_out(queue)


@get(
    "/v1/queues",
    summary="List queues",
    response_description="One page of queues, ordered by name in byte order.",
    scopes=CONSUMER_READ,
)
async def list_queues_page(
    queues: Queues,
    cursors: Cursors,
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
    name: QueueNameFilter = None,
) -> QueuesOut:
    page = await queues_page(queues, cursors, limit=limit, cursor=cursor, name=name)
    return QueuesOut(items=[queue_out(q) for q in page.items], next_cursor=page.next_cursor)


@get(
    QUEUE,
    summary="Get a queue with its statistics",
    response_description="The queue and its exact counts at the time of the request.",
    scopes=CONSUMER_READ,
)
async def get_queue_with_stats(queue_id: QueueId, queues: Queues) -> QueueWithStatsOut:
    found = await queues.get(queue_id)
    return queue_with_stats_out(found.queue, found.stats)


@patch(
    QUEUE,
    summary="Change a queue's settings",
    description="Any subset of the settings; a name never changes. `null` for "
    "`max_in_flight`, `rate_limit` or `group_rate_limit` removes that limit. "
    "Writes the audit entry `queue.updated`.",
    response_description="The whole queue after the change.",
    errors=("empty_queue_update", *_SETTINGS),
    scopes=ADMIN_ONLY,
)
async def change_queue(
    queue_id: QueueId,
    data: JSONBody[UpdateQueueBody],
    queues: Queues,
    request: Request[Any, Any, Any],
) -> QueueOut:
    queue = await queues.update(
        UpdateQueueCommand(queue_id, caller=caller_of(request), **data.changes())
    )
    return queue_out(queue)


@post(
    QUEUE + "/pause",
    status_code=200,
    summary="Pause a queue",
    description="While paused, enqueue, acknowledge and visibility changes still work; "
    "dequeue finds nothing. Writes the audit entry `queue.paused`.",
    scopes=ADMIN_ONLY,
)
async def pause(queue_id: QueueId, queues: Queues, request: Request[Any, Any, Any]) -> QueueOut:
    return queue_out(await queues.pause(QueueCommand(queue_id, caller_of(request))))


@post(
    QUEUE + "/resume",
    status_code=200,
    summary="Resume a queue",
    description="Writes the audit entry `queue.resumed`.",
    scopes=ADMIN_ONLY,
)
async def resume(queue_id: QueueId, queues: Queues, request: Request[Any, Any, Any]) -> QueueOut:
    return queue_out(await queues.resume(QueueCommand(queue_id, caller_of(request))))


@post(
    QUEUE + "/purge",
    status_code=200,
    summary="Purge a queue",
    description="Removes every live message (dead letters stay). "
    "Writes the audit entry `queue.purged`.",
    scopes=ADMIN_ONLY,
)
async def purge(queue_id: QueueId, queues: Queues, request: Request[Any, Any, Any]) -> PurgedOut:
    return PurgedOut(purged=await queues.purge(QueueCommand(queue_id, caller_of(request))))


@delete(
    QUEUE,
    summary="Delete a queue",
    description="Removes the queue with its messages and dead letters. "
    "Writes the audit entry `queue.deleted`.",
    scopes=ADMIN_ONLY,
)
async def remove_queue(queue_id: QueueId, queues: Queues, request: Request[Any, Any, Any]) -> None:
    await queues.delete(QueueCommand(queue_id, caller_of(request)))


ROUTES = [
    add_queue,
    list_queues_page,
    get_queue_with_stats,
    change_queue,
    pause,
    resume,
    purge,
    remove_queue,
]
