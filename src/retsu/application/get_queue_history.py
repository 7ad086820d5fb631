"""Use case: a queue's depth and throughput over the last ``minutes`` (SPEC §3.8).

The snapshots are summed into buckets of ``interval_seconds`` (``domain.history``): at
least the collection interval, and wide enough that a week fits in a few hundred points.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from retsu.application.ports import Clock, QueueDetails, QueueHistoryReader
from retsu.domain.history import (
    DEFAULT_HISTORY_MINUTES,
    HISTORY_MINUTES,
    History,
    bucket_seconds,
    window_start,
)


@dataclass(frozen=True, slots=True)
class QueueHistoryQuery:
    queue_id: UUID
    minutes: int = DEFAULT_HISTORY_MINUTES


class GetQueueHistory:
    def __init__(
        self,
        history: QueueHistoryReader,
        details: QueueDetails,
        clock: Clock,
        collection_interval_seconds: float,
    ) -> None:
        self._history = history
        self._details = details
        self._clock = clock
        self._collection_interval = collection_interval_seconds

    async def __call__(self, query: QueueHistoryQuery) -> History:
        minutes = HISTORY_MINUTES.check(query.minutes)
        await self._details.details_of(query.queue_id)  # raises QueueNotFound
        width = bucket_seconds(minutes, self._collection_interval)
        points = await self._history.read_history(
            query.queue_id,
            since=window_start(self._clock.now(), minutes, width),
            bucket_seconds=width,
        )
        return History(interval_seconds=width, points=points)
