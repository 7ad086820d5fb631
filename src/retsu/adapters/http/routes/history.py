"""A queue's depth and throughput over time: ``GET /v1/queues/{id}/history`` (SPEC §3.8).

DTOs live here with the route (read by nothing else)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import msgspec
from litestar import get
from litestar.params import QueryParameter

from retsu.adapters.http.auth import OPERATOR_READ
from retsu.adapters.http.dependencies import Activity
from retsu.adapters.http.params import QUEUE, Digits, QueueId
from retsu.application.activity import QueueHistoryQuery
from retsu.domain.errors import QueueNotFound
from retsu.domain.history import DEFAULT_HISTORY_MINUTES, HISTORY_MINUTES, History

Minutes = Annotated[
    Digits,
    QueryParameter(
        schema_extra={
            "type": "integer",
            "minimum": HISTORY_MINUTES.low,
            "maximum": HISTORY_MINUTES.high,
        },
        description=f"The window, {HISTORY_MINUTES.low}–{HISTORY_MINUTES.high} minutes "
        f"(default {DEFAULT_HISTORY_MINUTES}). Else `400 {HISTORY_MINUTES.code}`.",
    ),
]


_DEFAULT_MINUTES = Digits(DEFAULT_HISTORY_MINUTES)


class HistoryPointOut(msgspec.Struct):
    at: datetime
    ready: int
    in_flight: int
    delayed: int
    dead_letters: int
    enqueued: int
    delivered: int
    acknowledged: int
    dead_lettered: int
    expired: int


class HistoryOut(msgspec.Struct):
    interval_seconds: int
    points: list[HistoryPointOut]


def history_out(history: History) -> HistoryOut:
    return HistoryOut(
        interval_seconds=history.interval_seconds,
        points=[
            HistoryPointOut(
                at=p.at.astimezone(UTC),
                ready=p.ready,
                in_flight=p.in_flight,
                delayed=p.delayed,
                dead_letters=p.dead_letters,
                enqueued=p.counts.enqueued,
                delivered=p.counts.delivered,
                acknowledged=p.counts.acknowledged,
                dead_lettered=p.counts.dead_lettered,
                expired=p.counts.expired,
            )
            for p in history.points
        ],
    )


@get(
    QUEUE + "/history",
    summary="Read a queue's history",
    description="Snapshots of the state-metrics collector's leader, oldest first, summed into "
    "buckets of `interval_seconds` (epoch-aligned; at least the collection interval, and "
    "wide enough for at most 360 points): each point has the counts of messages enqueued, "
    "delivered, acknowledged, dead-lettered and expired during its bucket (exact: their sum "
    "over every point is what happened), and the depth of the bucket's latest snapshot, "
    "taken at `at`. Snapshots are kept 7 days; a younger queue simply has fewer points.",
    response_description="The points, oldest first.",
    errors=(HISTORY_MINUTES.code, QueueNotFound),
    scopes=OPERATOR_READ,
)
async def read_queue_history(
    queue_id: QueueId,
    activity: Activity,
    minutes: Minutes = _DEFAULT_MINUTES,
) -> HistoryOut:
    history = await activity.history(QueueHistoryQuery(queue_id=queue_id, minutes=minutes))
    return history_out(history)


ROUTES = [read_queue_history]
