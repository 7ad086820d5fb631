"""Dead-letter routes: browse (newest first), read one, redrive one or a batch, delete."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, delete, get, post
from litestar.handlers import HTTPRouteHandler
from litestar.params import FromPath

from retsu.adapters.http.body import parse_path_id, read_optional_json
from retsu.adapters.http.caller import caller_of
from retsu.adapters.http.dto import (
    REDRIVE,
    DeadLettersOut,
    IdOut,
    RedrivenOut,
    dead_letter_out,
    json_response,
)
from retsu.adapters.http.query import query_int, query_text
from retsu.adapters.http.services import ApiServices
from retsu.application.delete_dead_letter import DeleteDeadLetterCommand
from retsu.application.list_dead_letters import ListDeadLettersQuery
from retsu.application.redrive_dead_letter import RedriveDeadLetterCommand
from retsu.application.redrive_dead_letters import RedriveDeadLettersCommand
from retsu.domain.cursor import DEFAULT_LIST_LIMIT
from retsu.domain.message import DEFAULT_REDRIVE_LIMIT

_BASE = "/v1/queues/{queue_id:str}/dead-letters"


def dead_letter_routes(services: ApiServices) -> list[HTTPRouteHandler]:
    list_dead_letters = services.list_dead_letters
    get_dead_letter = services.get_dead_letter
    redrive_dead_letter = services.redrive_dead_letter
    redrive_dead_letters = services.redrive_dead_letters
    delete_dead_letter = services.delete_dead_letter

    @get(_BASE)
    async def list_all(request: Request[Any, Any, Any], queue_id: FromPath[str]) -> Response[bytes]:
        qid = parse_path_id(queue_id, "queue_id")
        page = await list_dead_letters(
            ListDeadLettersQuery(
                queue_id=qid,
                limit=query_int(request, "limit", "invalid_limit", DEFAULT_LIST_LIMIT),
                cursor=query_text(request, "cursor", "invalid_cursor"),
            )
        )
        return json_response(
            DeadLettersOut(
                items=[dead_letter_out(d) for d in page.items], next_cursor=page.next_cursor
            )
        )

    @get(_BASE + "/{message_id:str}")
    async def read(queue_id: FromPath[str], message_id: FromPath[str]) -> Response[bytes]:
        qid = parse_path_id(queue_id, "queue_id")
        mid = parse_path_id(message_id, "message_id")
        return json_response(dead_letter_out(await get_dead_letter(qid, mid)))

    @post(_BASE + "/{message_id:str}/redrive")
    async def redrive_one(
        request: Request[Any, Any, Any], queue_id: FromPath[str], message_id: FromPath[str]
    ) -> Response[bytes]:
        qid = parse_path_id(queue_id, "queue_id")
        mid = parse_path_id(message_id, "message_id")
        new_id = await redrive_dead_letter(
            RedriveDeadLetterCommand(queue_id=qid, message_id=mid, caller=caller_of(request))
        )
        return json_response(IdOut(id=new_id), 201)

    @post(_BASE + "/redrive")
    async def redrive_many(
        request: Request[Any, Any, Any], queue_id: FromPath[str]
    ) -> Response[bytes]:
        qid = parse_path_id(queue_id, "queue_id")
        body = await read_optional_json(request, REDRIVE)  # the body is optional
        limit = DEFAULT_REDRIVE_LIMIT if body is None or body.limit is None else body.limit
        redriven = await redrive_dead_letters(
            RedriveDeadLettersCommand(queue_id=qid, limit=limit, caller=caller_of(request))
        )
        return json_response(RedrivenOut(redriven=redriven))

    @delete(_BASE + "/{message_id:str}")  # 204, no body
    async def remove(
        request: Request[Any, Any, Any], queue_id: FromPath[str], message_id: FromPath[str]
    ) -> None:
        qid = parse_path_id(queue_id, "queue_id")
        mid = parse_path_id(message_id, "message_id")
        await delete_dead_letter(
            DeleteDeadLetterCommand(queue_id=qid, message_id=mid, caller=caller_of(request))
        )

    return [list_all, read, redrive_one, redrive_many, remove]
