"""Queue routes: create, list, read (with stats), update, pause, resume, purge, delete."""

from __future__ import annotations

from litestar import delete, get, patch, post
from litestar.di import NamedDependency
from litestar.params import JSONBody

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
from retsu.adapters.http.params import DEFAULT_LIMIT, QUEUE, Cursor, Limit, QueueId, QueueNameFilter
from retsu.application.create_queue import CreateQueue, CreateQueueCommand
from retsu.application.delete_queue import DeleteQueue, DeleteQueueCommand
from retsu.application.get_queue import GetQueue
from retsu.application.list_queues import ListQueues, ListQueuesQuery
from retsu.application.pause_queue import PauseQueue, PauseQueueCommand, ResumeQueue
from retsu.application.purge_queue import PurgeQueue, PurgeQueueCommand
from retsu.application.update_queue import UpdateQueue, UpdateQueueCommand
from retsu.domain.audit import Caller
from retsu.domain.errors import QueueAlreadyExists
from retsu.domain.queue import DEFAULT_MESSAGE_TTL, MAX_DELIVERY_ATTEMPTS, VISIBILITY_TIMEOUT

_SETTINGS = (VISIBILITY_TIMEOUT, MAX_DELIVERY_ATTEMPTS, DEFAULT_MESSAGE_TTL)


@post(
    "/v1/queues",
    summary="Create a queue",
    description="Writes the audit entry `queue.created`.",
    errors=("invalid_queue_name", *_SETTINGS, QueueAlreadyExists),
)
async def add_queue(
    data: JSONBody[CreateQueueBody],
    create_queue: NamedDependency[CreateQueue],
    caller: NamedDependency[Caller],
) -> QueueOut:
    queue = await create_queue(
        CreateQueueCommand(
            name=data.name,
            visibility_timeout_seconds=data.visibility_timeout_seconds,
            max_delivery_attempts=data.max_delivery_attempts,
            default_message_ttl_seconds=data.default_message_ttl_seconds,
            caller=caller,
        )
    )
    return queue_out(queue)


@get(
    "/v1/queues",
    summary="List queues",
    response_description="One page of queues, ordered by name in byte order.",
)
async def list_queues_page(
    list_queues: NamedDependency[ListQueues],
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
    name: QueueNameFilter = None,
) -> QueuesOut:
    page = await list_queues(ListQueuesQuery(limit=limit, cursor=cursor, name=name))
    return QueuesOut(items=[queue_out(q) for q in page.items], next_cursor=page.next_cursor)


@get(
    QUEUE,
    summary="Get a queue with its statistics",
    response_description="The queue and its exact counts at the time of the request.",
)
async def get_queue_with_stats(
    queue_id: QueueId, get_queue: NamedDependency[GetQueue]
) -> QueueWithStatsOut:
    found = await get_queue(queue_id)
    return queue_with_stats_out(found.queue, found.stats)


@patch(
    QUEUE,
    summary="Change a queue's settings",
    description="Any subset of the three settings; a name never changes. "
    "Writes the audit entry `queue.updated`.",
    response_description="The whole queue after the change.",
    errors=("empty_queue_update", *_SETTINGS),
)
async def change_queue(
    queue_id: QueueId,
    data: JSONBody[UpdateQueueBody],
    update_queue: NamedDependency[UpdateQueue],
    caller: NamedDependency[Caller],
) -> QueueOut:
    queue = await update_queue(
        UpdateQueueCommand(
            queue_id=queue_id,
            visibility_timeout_seconds=data.visibility_timeout_seconds,
            max_delivery_attempts=data.max_delivery_attempts,
            default_message_ttl_seconds=data.default_message_ttl_seconds,
            caller=caller,
        )
    )
    return queue_out(queue)


@post(
    QUEUE + "/pause",
    status_code=200,
    summary="Pause a queue",
    description="While paused, enqueue, acknowledge and visibility changes still work; "
    "dequeue finds nothing. Writes the audit entry `queue.paused`.",
)
async def pause(
    queue_id: QueueId, pause_queue: NamedDependency[PauseQueue], caller: NamedDependency[Caller]
) -> QueueOut:
    return queue_out(await pause_queue(PauseQueueCommand(queue_id, caller)))


@post(
    QUEUE + "/resume",
    status_code=200,
    summary="Resume a queue",
    description="Writes the audit entry `queue.resumed`.",
)
async def resume(
    queue_id: QueueId, resume_queue: NamedDependency[ResumeQueue], caller: NamedDependency[Caller]
) -> QueueOut:
    return queue_out(await resume_queue(PauseQueueCommand(queue_id, caller)))


@post(
    QUEUE + "/purge",
    status_code=200,
    summary="Purge a queue",
    description="Removes every live message (dead letters stay). "
    "Writes the audit entry `queue.purged`.",
)
async def purge(
    queue_id: QueueId, purge_queue: NamedDependency[PurgeQueue], caller: NamedDependency[Caller]
) -> PurgedOut:
    return PurgedOut(purged=await purge_queue(PurgeQueueCommand(queue_id, caller)))


@delete(
    QUEUE,
    summary="Delete a queue",
    description="Removes the queue with its messages and dead letters. "
    "Writes the audit entry `queue.deleted`.",
)
async def remove_queue(
    queue_id: QueueId, delete_queue: NamedDependency[DeleteQueue], caller: NamedDependency[Caller]
) -> None:
    await delete_queue(DeleteQueueCommand(queue_id, caller))


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
