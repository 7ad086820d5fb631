"""Queue routes: create, list, read (with stats), update, pause, resume, purge, delete."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, delete, get, patch, post
from litestar.handlers import HTTPRouteHandler
from litestar.params import FromPath

from retsu.adapters.http.body import parse_path_id, read_json
from retsu.adapters.http.caller import caller_of
from retsu.adapters.http.dto import (
    CREATE_QUEUE,
    UPDATE_QUEUE,
    PurgedOut,
    QueuesOut,
    json_response,
    queue_out,
    queue_with_stats_out,
)
from retsu.adapters.http.query import query_int, query_text
from retsu.adapters.http.services import ApiServices
from retsu.application.create_queue import CreateQueueCommand
from retsu.application.delete_queue import DeleteQueueCommand
from retsu.application.list_queues import ListQueuesQuery
from retsu.application.pause_queue import PauseQueueCommand
from retsu.application.purge_queue import PurgeQueueCommand
from retsu.application.update_queue import UpdateQueueCommand
from retsu.domain.cursor import DEFAULT_LIST_LIMIT


def queue_routes(services: ApiServices) -> list[HTTPRouteHandler]:
    create_queue = services.create_queue
    update_queue = services.update_queue
    list_queues = services.list_queues
    get_queue = services.get_queue
    pause_queue = services.pause_queue
    resume_queue = services.resume_queue
    purge_queue = services.purge_queue
    delete_queue = services.delete_queue

    @post("/v1/queues")
    async def create(request: Request[Any, Any, Any]) -> Response[bytes]:
        body = await read_json(request, CREATE_QUEUE)
        queue = await create_queue(
            CreateQueueCommand(
                name=body.name,
                visibility_timeout_seconds=body.visibility_timeout_seconds,
                max_delivery_attempts=body.max_delivery_attempts,
                default_message_ttl_seconds=body.default_message_ttl_seconds,
                caller=caller_of(request),
            )
        )
        return json_response(queue_out(queue), 201)

    @get("/v1/queues")
    async def list_all(request: Request[Any, Any, Any]) -> Response[bytes]:
        page = await list_queues(
            ListQueuesQuery(
                limit=query_int(request, "limit", "invalid_limit", DEFAULT_LIST_LIMIT),
                cursor=query_text(request, "cursor", "invalid_cursor"),
                name=query_text(request, "name", "invalid_queue_name"),
            )
        )
        return json_response(
            QueuesOut(items=[queue_out(q) for q in page.items], next_cursor=page.next_cursor)
        )

    @get("/v1/queues/{queue_id:str}")
    async def read(queue_id: FromPath[str]) -> Response[bytes]:
        found = await get_queue(parse_path_id(queue_id, "queue_id"))
        return json_response(queue_with_stats_out(found.queue, found.stats))

    @patch("/v1/queues/{queue_id:str}")
    async def update(request: Request[Any, Any, Any], queue_id: FromPath[str]) -> Response[bytes]:
        qid = parse_path_id(queue_id, "queue_id")
        body = await read_json(request, UPDATE_QUEUE)
        queue = await update_queue(
            UpdateQueueCommand(
                queue_id=qid,
                visibility_timeout_seconds=body.visibility_timeout_seconds,
                max_delivery_attempts=body.max_delivery_attempts,
                default_message_ttl_seconds=body.default_message_ttl_seconds,
                caller=caller_of(request),
            )
        )
        return json_response(queue_out(queue))

    @post("/v1/queues/{queue_id:str}/pause")
    async def pause(request: Request[Any, Any, Any], queue_id: FromPath[str]) -> Response[bytes]:
        qid = parse_path_id(queue_id, "queue_id")
        queue = await pause_queue(PauseQueueCommand(qid, caller_of(request)))
        return json_response(queue_out(queue))

    @post("/v1/queues/{queue_id:str}/resume")
    async def resume(request: Request[Any, Any, Any], queue_id: FromPath[str]) -> Response[bytes]:
        qid = parse_path_id(queue_id, "queue_id")
        queue = await resume_queue(PauseQueueCommand(qid, caller_of(request)))
        return json_response(queue_out(queue))

    @post("/v1/queues/{queue_id:str}/purge")
    async def purge(request: Request[Any, Any, Any], queue_id: FromPath[str]) -> Response[bytes]:
        qid = parse_path_id(queue_id, "queue_id")
        purged = await purge_queue(PurgeQueueCommand(qid, caller_of(request)))
        return json_response(PurgedOut(purged=purged))

    @delete("/v1/queues/{queue_id:str}")  # 204, no body
    async def remove(request: Request[Any, Any, Any], queue_id: FromPath[str]) -> None:
        qid = parse_path_id(queue_id, "queue_id")
        await delete_queue(DeleteQueueCommand(qid, caller_of(request)))

    return [create, list_all, read, update, pause, resume, purge, remove]
