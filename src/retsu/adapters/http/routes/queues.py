"""Queue routes: create and update (GET, pause/resume, purge and delete come later)."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, patch, post
from litestar.handlers import HTTPRouteHandler
from litestar.params import FromPath

from retsu.adapters.http.body import parse_path_id, read_json
from retsu.adapters.http.dto import CREATE_QUEUE, UPDATE_QUEUE, json_response, queue_out
from retsu.adapters.http.services import ApiServices
from retsu.application.create_queue import CreateQueueCommand
from retsu.application.update_queue import UpdateQueueCommand


def queue_routes(services: ApiServices) -> list[HTTPRouteHandler]:
    create_queue = services.create_queue
    update_queue = services.update_queue

    @post("/v1/queues")
    async def create(request: Request[Any, Any, Any]) -> Response[bytes]:
        body = await read_json(request, CREATE_QUEUE)
        queue = await create_queue(
            CreateQueueCommand(
                name=body.name,
                visibility_timeout_seconds=body.visibility_timeout_seconds,
                max_delivery_attempts=body.max_delivery_attempts,
                default_message_ttl_seconds=body.default_message_ttl_seconds,
            )
        )
        return json_response(queue_out(queue), 201)

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
            )
        )
        return json_response(queue_out(queue))

    return [create, update]
