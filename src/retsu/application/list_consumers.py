"""Use case: list the consumers seen on dequeue (SPEC §3.7), most recently seen first.

Health is judged against this process's clock, the one that stamped the sightings. The
health filter becomes time bounds on ``last_seen_at`` that the storage applies, so a
page is always ``limit`` matching rows and the keyset cursor stays exact. An unknown
``queue_id`` lists nothing (like the audit log's filter): consumers are not a route
under ``/v1/queues/{queue_id}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from retsu.application.ports import Clock, ConsumerStore, ServerSecrets
from retsu.domain.consumer import (
    CONSUMERS_CURSOR_KIND,
    ConsumerHealth,
    ConsumerPosition,
    ConsumerRecord,
    SeenBetween,
)
from retsu.domain.cursor import DEFAULT_LIST_LIMIT, LIST_LIMIT, Page, open_cursor, seal_cursor


@dataclass(frozen=True, slots=True)
class ListConsumersQuery:
    limit: int = DEFAULT_LIST_LIMIT
    cursor: str | None = None
    queue_id: UUID | None = None
    # healthy | stale | offline; anything else is invalid_health.
    health: str | None = None


@dataclass(frozen=True, slots=True)
class ConsumerView:
    record: ConsumerRecord
    health: ConsumerHealth


class ListConsumers:
    def __init__(self, consumers: ConsumerStore, secrets: ServerSecrets, clock: Clock) -> None:
        self._consumers = consumers
        self._secrets = secrets
        self._clock = clock

    async def __call__(self, query: ListConsumersQuery) -> Page[ConsumerView]:
        limit = LIST_LIMIT.check(query.limit)
        health = None if query.health is None else ConsumerHealth.parse(query.health)
        # A cursor is bound to its filters: one from another filter is invalid_cursor.
        scope = [
            None if query.queue_id is None else str(query.queue_id),
            None if health is None else health.value,
        ]
        after = None
        if query.cursor is not None:
            key = await self._secrets.cursor_signing_key()
            after = ConsumerPosition.read(
                open_cursor(key, CONSUMERS_CURSOR_KIND, scope, query.cursor)
            )
        now = self._clock.now()
        records = await self._consumers.list_consumers(
            limit=limit + 1,
            after=after,
            queue_id=query.queue_id,
            seen=SeenBetween.of(health, now),
        )
        next_cursor = None
        if len(records) > limit:
            records = records[:limit]
            key = await self._secrets.cursor_signing_key()
            next_cursor = seal_cursor(
                key, CONSUMERS_CURSOR_KIND, scope, records[-1].position.seal()
            )
        views = [ConsumerView(r, ConsumerHealth.of(r.last_seen_at, now)) for r in records]
        return Page(views, next_cursor)
