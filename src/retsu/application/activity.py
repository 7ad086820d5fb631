"""What happened around the queues: named consumers (SPEC §3.7), queue history (§3.8), the
audit log (§3.5) and a page of queues at a glance (the console's overview) — read views an
operator lists and charts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from uuid import UUID

from retsu.application.ports import (
    AuditLog,
    Clock,
    ConsumerStore,
    QueueDetails,
    QueueHistoryReader,
    QueueStateReader,
)
from retsu.domain.audit import AuditAction, AuditRecord
from retsu.domain.consumer import ConsumerHealth, ConsumerPosition, ConsumerRecord, SeenBetween
from retsu.domain.history import (
    DEFAULT_HISTORY_MINUTES,
    HISTORY_MINUTES,
    History,
    bucket_seconds,
    window_start,
)
from retsu.domain.pagination import DEFAULT_LIST_LIMIT, LIST_LIMIT, AuditPosition, Page
from retsu.domain.queue import Queue
from retsu.domain.state import PriorityState, QueueStats


@dataclass(frozen=True, slots=True)
class ListConsumersQuery:
    limit: int = DEFAULT_LIST_LIMIT
    queue_id: UUID | None = None
    health: ConsumerHealth | None = None

    def __post_init__(self) -> None:
        LIST_LIMIT.check(self.limit)


@dataclass(frozen=True, slots=True)
class ConsumerView:
    record: ConsumerRecord
    health: ConsumerHealth


@dataclass(frozen=True, slots=True)
class QueueHistoryQuery:
    queue_id: UUID
    minutes: int = DEFAULT_HISTORY_MINUTES

    def __post_init__(self) -> None:
        HISTORY_MINUTES.check(self.minutes)


@dataclass(frozen=True, slots=True)
class ListAuditLogQuery:
    limit: int = DEFAULT_LIST_LIMIT
    queue_id: UUID | None = None
    action: AuditAction | None = None

    def __post_init__(self) -> None:
        LIST_LIMIT.check(self.limit)


@dataclass(frozen=True, slots=True)
class QueueSummary:
    """One queue at a glance: its exact counts, its healthy consumers, its recent history."""

    queue: Queue
    stats: QueueStats
    healthy_consumers: int
    history: History


class ActivityService:
    def __init__(
        self,
        consumers: ConsumerStore,
        history: QueueHistoryReader,
        audit_log: AuditLog,
        state: QueueStateReader,
        details: QueueDetails,
        clock: Clock,
        collection_interval_seconds: float,
    ) -> None:
        self._state = state
        self._consumers = consumers
        self._history = history
        self._audit_log = audit_log
        self._details = details
        self._clock = clock
        self._collection_interval = collection_interval_seconds

    async def consumers(
        self, query: ListConsumersQuery, after: ConsumerPosition | None = None
    ) -> Page[ConsumerView, ConsumerPosition]:
        """Most recently seen first. Health is judged against this process's clock, the one
        that stamped the sightings; the health filter becomes time bounds on
        ``last_seen_at`` that storage applies, so a page is always ``limit`` matching rows.
        An unknown ``queue_id`` lists nothing (like the audit log's filter): consumers are
        not a route under ``/v1/queues/{queue_id}``."""
        now = self._clock.now()
        records = await self._consumers.list_consumers(
            limit=query.limit + 1,
            after=after,
            queue_id=query.queue_id,
            seen=SeenBetween.of(query.health, now),
        )
        next_position = None
        if len(records) > query.limit:
            records = records[: query.limit]
            next_position = records[-1].position
        views = [ConsumerView(r, ConsumerHealth.of(r.last_seen_at, now)) for r in records]
        return Page(views, next_position)

    async def history(self, query: QueueHistoryQuery) -> History:
        """Depth and throughput over the last ``minutes``, the snapshots summed into buckets
        of ``interval_seconds``: at least the collection interval, and wide enough that a
        week fits in a few hundred points (``domain.history``)."""
        await self._details.details_of(query.queue_id)  # raises QueueNotFound
        width = bucket_seconds(query.minutes, self._collection_interval)
        now = self._clock.now()
        since = window_start(now, query.minutes, width)
        points = await self._history.read_history(query.queue_id, since=since, bucket_seconds=width)
        return History(interval_seconds=width, points=points, since=since, until=now)

    async def audit_log(
        self, query: ListAuditLogQuery, after: AuditPosition | None = None
    ) -> Page[AuditRecord, AuditPosition]:
        """Newest first."""
        records = await self._audit_log.list_audit_records(
            limit=query.limit + 1, after=after, queue_id=query.queue_id, action=query.action
        )
        if len(records) > query.limit:
            records = records[: query.limit]
            return Page(records, AuditPosition(records[-1].at, records[-1].id))
        return Page(records, None)

    async def summaries(self, queues: Sequence[Queue], *, minutes: int) -> list[QueueSummary]:
        """``queues`` at a glance, in three reads whatever their number (states, healthy
        consumers, histories of the last ``minutes``); a queue deleted meanwhile is left
        out."""
        ids = [queue.id for queue in queues]
        now = self._clock.now()
        states = await self._state.read_states(ids)
        healthy = await self._consumers.count_consumers(
            seen=SeenBetween.of(ConsumerHealth.HEALTHY, now)
        )
        width = bucket_seconds(minutes, self._collection_interval)
        histories = await self._history.read_histories(
            ids, since=window_start(now, minutes, width), bucket_seconds=width
        )
        by_queue: dict[UUID, list[PriorityState]] = {}
        for state in states:
            by_queue.setdefault(state.queue_id, []).append(state)
        return [
            QueueSummary(
                queue=queue,
                stats=QueueStats.combine(by_queue[queue.id]),
                healthy_consumers=healthy.get(queue.id, 0),
                history=History(interval_seconds=width, points=histories.get(queue.id, [])),
            )
            for queue in queues
            if queue.id in by_queue
        ]
