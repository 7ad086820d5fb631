"""Looking at messages without claiming them, and an operator's delete (SPEC §3.6).

Pages come from the server-side function ``retsu_browse_messages`` (migration 0006): it
walks an existing index in the list's order and examines at most
``BROWSE_SCAN_BUDGET`` rows per page, its plans pinned like the hot path's. Showing and
deleting find the message by primary key; all three decide its logical state with the
same SQL function, ``retsu_message_state`` (the §3.2 counting rules).

A delete is an operator action like purge: it gives way to message traffic, writes its
audit row in the same transaction and keeps the state counters exact — the removed row
comes off the counter of the physical state it was found in, in a second statement
(``counters.py`` says why).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from retsu.adapters.postgres.audit_log import audit_insert
from retsu.adapters.postgres.counters import (
    DELAYED,
    IN_FLIGHT,
    READY,
    UNCOUNT_REMOVED,
    uncount_parameters,
)
from retsu.adapters.postgres.database import Database
from retsu.adapters.postgres.queues import OPERATOR_ATTEMPTS
from retsu.adapters.postgres.tables import queue
from retsu.domain.audit import AuditEntry
from retsu.domain.browsing import (
    BROWSE_SCAN_BUDGET,
    BrowseState,
    MessageBatch,
    MessagePosition,
    StoredMessage,
)
from retsu.domain.errors import QueueNotFound
from retsu.domain.message import Priority

# Logical state codes of retsu_message_state (the physical codes, read as §3.2 states).
_STATES = {
    READY: BrowseState.READY,
    IN_FLIGHT: BrowseState.IN_FLIGHT,
    DELAYED: BrowseState.DELAYED,
}
_CODES = {state: code for code, state in _STATES.items()}

_BROWSE = sa.text(
    "SELECT * FROM retsu_browse_messages(:queue_id, :state, :min_priority, :max_priority, "
    ":limit, :budget, :after_priority, :after_at, :after_order)"
)

_SHOW = sa.text(
    """
    SELECT m.id, m.payload, m.priority, m.delivery_attempts, m.enqueued_at, m.expires_at,
           m.available_after AS available_at, m.last_delivered_at, m.redriven_from,
           m.enqueue_order, m.group_key, m.schedule_id,
           retsu_message_state(m.state, m.available_after, m.expires_at, m.delivery_attempts,
                               q.max_delivery_attempts) AS state
    FROM queue AS q
    LEFT JOIN queue_message AS m ON m.queue_id = q.id AND m.id = :message_id
    WHERE q.id = :queue_id
    """
)

# Only a live message (in some state) is removed; what it was is returned for the counters.
_DELETE = sa.text(
    f"""
    DELETE FROM queue_message AS m
    USING queue AS q
    WHERE m.id = :message_id AND m.queue_id = :queue_id AND q.id = m.queue_id
      AND retsu_message_state(m.state, m.available_after, m.expires_at, m.delivery_attempts,
                              q.max_delivery_attempts) IS NOT NULL
    RETURNING m.priority, retsu_shard(m.id) AS shard,
              (m.state = {READY})::int AS ready, (m.state = {IN_FLIGHT})::int AS in_flight,
              (m.state = {DELAYED})::int AS delayed
    """
)
_UNCOUNT = sa.text(UNCOUNT_REMOVED)

# What retsu_browse_messages (migration 0006) does not return yet: each listed message's
# group and schedule (SPEC §3.10, §3.12), read by primary key for the page's ids.
_EXTRAS = sa.text(
    "SELECT id, group_key, schedule_id FROM queue_message WHERE id = ANY(CAST(:ids AS uuid[]))"
)


def _message(row: Any, extras: Any = None) -> StoredMessage:
    extras = row if extras is None else extras
    return StoredMessage(
        id=row.id,
        payload=row.payload,
        priority=Priority(row.priority),
        state=_STATES[row.state],
        delivery_attempts=row.delivery_attempts,
        enqueued_at=row.enqueued_at,
        expires_at=row.expires_at,
        available_at=row.available_at,
        last_delivered_at=row.last_delivered_at,
        redriven_from=row.redriven_from,
        enqueue_order=row.enqueue_order,
        group=None if extras is _GONE else extras.group_key,
        schedule_id=None if extras is _GONE else extras.schedule_id,
    )


# A listed message acknowledged between the two reads of its page: shown without extras.
_GONE = object()


class PostgresMessageBrowser:
    """Implements MessageBrowser."""

    def __init__(self, database: Database, *, budget: int = BROWSE_SCAN_BUDGET) -> None:
        self._database = database
        self._budget = budget

    async def list_messages(
        self,
        queue_id: UUID,
        *,
        state: BrowseState | None,
        priority: Priority | None,
        limit: int,
        after: MessagePosition | None,
    ) -> MessageBatch:
        parameters = {
            "queue_id": queue_id,
            "state": None if state is None else _CODES[state],
            "min_priority": int(priority or Priority.LOW),
            "max_priority": int(priority or Priority.HIGH),
            "limit": limit,
            "budget": self._budget,
            "after_priority": None if after is None or after.priority is None else after.priority,
            "after_at": None if after is None else after.at,
            "after_order": None if after is None else after.enqueue_order,
        }

        async def read(connection: AsyncConnection) -> tuple[list[Any], dict[Any, Any]]:
            rows = list((await connection.execute(_BROWSE, parameters)).all())
            ids = [row.id for row in rows[:-1]]
            extras = (await connection.execute(_EXTRAS, {"ids": ids})).all() if ids else []
            return rows, {row.id: row for row in extras}

        rows, extras = await self._database.read(read, operation="list_messages")
        last = rows[-1]
        if not last.queue_found:
            raise QueueNotFound(queue_id)
        resume = None
        if last.resume:
            resume = MessagePosition(
                last.enqueue_order,
                priority=Priority(last.priority) if state is BrowseState.READY else None,
                at=last.available_at
                if state in (BrowseState.IN_FLIGHT, BrowseState.DELAYED)
                else None,
            )
        return MessageBatch([_message(row, extras.get(row.id, _GONE)) for row in rows[:-1]], resume)

    async def get_message(self, queue_id: UUID, message_id: UUID) -> StoredMessage | None:
        parameters = {"queue_id": queue_id, "message_id": message_id}

        async def read(connection: AsyncConnection) -> Any:
            return (await connection.execute(_SHOW, parameters)).one_or_none()

        row = await self._database.read(read, operation="get_message")
        if row is None:
            raise QueueNotFound(queue_id)
        return None if row.id is None or row.state is None else _message(row)

    async def delete_message(self, queue_id: UUID, message_id: UUID, audit: AuditEntry) -> bool:
        parameters = {"queue_id": queue_id, "message_id": message_id}

        async def delete(connection: AsyncConnection) -> bool:
            # KEY SHARE, as purge: the queue cannot be deleted under us, while message
            # traffic and settings changes go on.
            exists = await connection.execute(
                sa.select(queue.c.id).where(queue.c.id == queue_id).with_for_update(key_share=True)
            )
            if exists.one_or_none() is None:
                raise QueueNotFound(queue_id)
            removed = (await connection.execute(_DELETE, parameters)).all()
            if not removed:
                return False
            await connection.execute(_UNCOUNT, uncount_parameters(queue_id, list(removed)))
            await connection.execute(audit_insert(audit))
            return True

        return await self._database.yielding(
            delete, operation="delete_message", attempts=OPERATOR_ATTEMPTS
        )
