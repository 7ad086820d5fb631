"""Consumers seen on dequeue: ``GET /v1/consumers`` (SPEC §3.7), most recently seen first.

DTOs live here with the route (read by nothing else)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated
from uuid import UUID

import msgspec
from litestar import get
from litestar.params import KwargDefinition

from retsu.adapters.http.auth import OPERATOR_READ
from retsu.adapters.http.dependencies import Activity, Cursors
from retsu.adapters.http.pages import consumers_page
from retsu.adapters.http.params import (
    DEFAULT_LIMIT,
    Cursor,
    HealthFilter,
    Limit,
    QueueIdFilter,
)
from retsu.application.activity import ConsumerView
from retsu.domain.consumer import ConsumerHealth

HealthName = Annotated[str, KwargDefinition(enum=[h.value for h in ConsumerHealth])]


class ConsumerOut(msgspec.Struct):
    queue_id: UUID
    queue_name: str
    name: str
    first_seen_at: datetime
    last_seen_at: datetime
    deliveries: int
    health: HealthName


class ConsumersOut(msgspec.Struct):
    items: list[ConsumerOut]
    next_cursor: str | None


def consumer_out(view: ConsumerView) -> ConsumerOut:
    record = view.record
    return ConsumerOut(
        queue_id=record.queue_id,
        queue_name=record.queue_name,
        name=record.name,
        first_seen_at=record.first_seen_at.astimezone(UTC),
        last_seen_at=record.last_seen_at.astimezone(UTC),
        deliveries=record.deliveries,
        health=view.health.value,
    )


@get(
    "/v1/consumers",
    summary="List consumers",
    description="Consumers that named themselves with `Retsu-Consumer` on dequeue, per queue "
    "and name, most recently seen first. `health`: `healthy` (seen within 30 s), `stale` "
    "(within 5 min), `offline` (longer). Each API process writes what it saw at most every "
    "5 s, so `last_seen_at` may lag by up to 5 s. Entries not seen for 24 h are removed. "
    "An unknown `queue_id` lists nothing.",
    response_description="One page of consumers.",
    errors=("invalid_health", "invalid_queue_id"),
    scopes=OPERATOR_READ,
)
async def list_consumers(
    activity: Activity,
    cursors: Cursors,
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
    queue_id: QueueIdFilter = None,
    health: HealthFilter = None,
) -> ConsumersOut:
    page = await consumers_page(
        activity, cursors, limit=limit, cursor=cursor, queue_id=queue_id, health=health
    )
    return ConsumersOut(items=[consumer_out(v) for v in page.items], next_cursor=page.next_cursor)


ROUTES = [list_consumers]
