"""Looking at messages without claiming them, and an operator's delete (SPEC §3.6).

Pages come from the server-side function ``retsu_browse_messages`` (migrations 0006,
0009): it walks an existing index in the list's order and examines at most
``BROWSE_SCAN_BUDGET`` rows per page, its plans pinned like the hot path's; the group and
``match`` filters (SPEC §3.11) are checked on the rows examined, so a page's cost stays
bounded. Showing and deleting find the message by primary key; all three decide its
logical state with the same SQL function, ``retsu_message_state`` (the §3.2 counting
rules, and ``completed`` for messages kept after their acknowledgement).

A delete is an operator action like purge: it gives way to message traffic, writes its
audit row in the same transaction and keeps the state counters exact — the removed row
comes off the counter of the physical state it was found in, in a second statement
(``counters.py`` says why), after a grouped one has left its lane.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import msgspec
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from retsu.adapters.postgres.attempts import read_attempts
from retsu.adapters.postgres.audit_log import audit_insert
from retsu.adapters.postgres.bulk import in_batches
from retsu.adapters.postgres.counters import (
    COMPLETED,
    DELAYED,
    GROUPS_LEFT,
    IN_FLIGHT,
    READY,
    REMOVED_BY_COUNTER,
    THROTTLED,
    UNCOUNT_REMOVED,
    groups_left_parameters,
    uncount_parameters,
)
from retsu.adapters.postgres.database import Database
from retsu.adapters.postgres.queues import OPERATOR_ATTEMPTS
from retsu.adapters.postgres.search import search_parameters
from retsu.adapters.postgres.tables import queue
from retsu.domain.attempts import finish
from retsu.domain.audit import AuditEntry
from retsu.domain.browsing import (
    BROWSE_SCAN_BUDGET,
    BrowseState,
    MessageBatch,
    MessagePosition,
    StoredMessage,
)
from retsu.domain.errors import QueueNotFound
from retsu.domain.groups import GroupPosition, GroupState, GroupSummary, group_state
from retsu.domain.message import Priority
from retsu.domain.pagination import Found
from retsu.domain.search import Search

# Logical state codes of retsu_message_state (the physical codes, read as §3.2 states).
_STATES = {
    READY: BrowseState.READY,
    IN_FLIGHT: BrowseState.IN_FLIGHT,
    DELAYED: BrowseState.DELAYED,
    COMPLETED: BrowseState.COMPLETED,
}
_CODES = {state: code for code, state in _STATES.items()}

_BROWSE = sa.text(
    "SELECT * FROM retsu_browse_messages(:queue_id, :state, :min_priority, :max_priority, "
    ":limit, :budget, :after_priority, :after_at, :after_order, :group, "
    "CAST(:match AS jsonb))"
)

_SHOW = sa.text(
    """
    SELECT m.id, m.payload, m.priority, m.delivery_attempts, m.enqueued_at, m.expires_at,
           m.available_after AS available_at, m.last_delivered_at, m.redriven_from,
           m.enqueue_order, m.group_key, m.schedule_id, m.attempts, m.completed_at, m.result,
           retsu_message_state(m.state, m.available_after, m.expires_at, m.delivery_attempts,
                               q.max_delivery_attempts) AS state
    FROM queue AS q
    LEFT JOIN queue_message AS m ON m.queue_id = q.id AND m.id = :message_id
    WHERE q.id = :queue_id
    """
)

# Only a message in some state (live, or kept as completed) is removed; what it was comes
# back for its lane and the counters.
_DELETE = sa.text(
    f"""
    WITH removed AS (
        DELETE FROM queue_message AS m
        USING queue AS q
        WHERE m.id = :message_id AND m.queue_id = :queue_id AND q.id = m.queue_id
          AND retsu_message_state(m.state, m.available_after, m.expires_at,
                                  m.delivery_attempts, q.max_delivery_attempts) IS NOT NULL
        RETURNING m.id, m.priority, m.state, m.group_key
    )
    {REMOVED_BY_COUNTER}
    """
)
_UNCOUNT = sa.text(UNCOUNT_REMOVED)

# Bulk actions (SPEC §3.11): the messages a state and a search select — live ones in
# enqueue order (queue_message_browse_idx), completed ones oldest completion first
# (queue_message_completed_idx) — never one a dequeue holds (SKIP LOCKED).
_SELECTED = """
    SELECT m.id FROM queue_message AS m
    WHERE m.queue_id = :queue_id AND {kept}
      AND (CAST(:state AS smallint) IS NULL
           OR retsu_message_state(m.state, m.available_after, m.expires_at,
                                  m.delivery_attempts, :max_attempts) = :state)
      AND retsu_message_state(m.state, m.available_after, m.expires_at,
                              m.delivery_attempts, :max_attempts) IS NOT NULL
      AND (CAST(:priority AS smallint) IS NULL OR m.priority = :priority)
      AND (CAST(:group AS text) IS NULL OR m.group_key = :group)
      AND (CAST(:match AS jsonb) IS NULL OR retsu_jsonb(m.payload) @> CAST(:match AS jsonb))
    ORDER BY {order}
    LIMIT :limit
"""
_LIVE = {"kept": f"m.state <> {COMPLETED}", "order": "m.enqueue_order"}
_KEPT = {"kept": f"m.state = {COMPLETED}", "order": "m.completed_at, m.enqueue_order"}
_MAX_ATTEMPTS = sa.text("SELECT max_delivery_attempts FROM queue WHERE id = :queue_id")


def _count_selected(where: dict[str, str]) -> sa.TextClause:
    return sa.text(f"SELECT count(*) FROM ({_SELECTED.format(**where)}) AS n")


def _delete_selected(where: dict[str, str]) -> sa.TextClause:
    return sa.text(
        f"""
        WITH doomed AS ({_SELECTED.format(**where)} FOR UPDATE OF m SKIP LOCKED),
        removed AS (
            DELETE FROM queue_message AS m USING doomed WHERE m.id = doomed.id
            RETURNING m.id, m.priority, m.state, m.group_key
        )
        {REMOVED_BY_COUNTER}
        """
    )


# A page of groups (SPEC §3.10), by how long their next message has waited: the live
# lanes after the position (queue_group_live_idx), each with its head (its oldest live
# member) and, when it has one, its next message not leased (the pending head: after the
# leased members in the lane's order, so found within group_max_in_flight + 1 rows).
_GROUPS = sa.text(
    f"""
    WITH examined AS (
        SELECT g.group_key, g.leased, g.pending, g.waiting, g.waiting_delayed, g.head_key,
               g.last_delivered_at
        FROM queue_group AS g
        WHERE g.queue_id = :queue_id
          AND g.leased + g.pending + g.waiting + g.waiting_delayed > 0
          AND (CAST(:after_key AS bigint) IS NULL
               OR (g.head_key, g.group_key) > (:after_key, CAST(:after_group AS text)))
        ORDER BY g.head_key, g.group_key
        LIMIT :budget
    )
    SELECT e.*, now() AS now, q.group_max_in_flight, h.id AS head_id,
           h.delivery_attempts AS head_delivery_attempts, h.enqueued_at AS head_enqueued_at,
           (h.state = {IN_FLIGHT} AND h.available_after <= now()) AS head_lease_ended,
           p.state AS next_state, p.available_after AS next_at
    FROM examined AS e
    JOIN queue AS q ON q.id = :queue_id
    CROSS JOIN LATERAL (
        SELECT m.id, m.delivery_attempts, m.enqueued_at, m.state, m.available_after
        FROM queue_message AS m
        WHERE m.queue_id = :queue_id AND m.group_key = e.group_key
          AND m.state <> {COMPLETED}
        ORDER BY m.enqueue_order
        LIMIT 1
    ) AS h
    LEFT JOIN LATERAL (
        SELECT m.state, m.available_after
        FROM queue_message AS m
        WHERE e.pending = 1 AND m.queue_id = :queue_id AND m.group_key = e.group_key
          AND m.state <> {COMPLETED} AND m.state IN ({READY}, {DELAYED}, {THROTTLED})
        ORDER BY m.enqueue_order
        LIMIT 1
    ) AS p ON true
    ORDER BY e.head_key, e.group_key
    """
)
_QUEUE_EXISTS = sa.text("SELECT 1 FROM queue WHERE id = :queue_id")


def _group(row: Any) -> GroupSummary:
    next_delayed = row.next_state == DELAYED and row.next_at > row.now
    next_deliverable = (
        None if row.next_state is None else row.next_state == READY or row.next_at <= row.now
    )
    return GroupSummary(
        group=row.group_key,
        ready=row.waiting + row.pending - int(next_delayed),
        in_flight=row.leased,
        delayed=row.waiting_delayed + int(next_delayed),
        head_id=row.head_id,
        head_delivery_attempts=row.head_delivery_attempts,
        head_enqueued_at=row.head_enqueued_at,
        last_delivered_at=row.last_delivered_at,
        state=group_state(
            leased=row.leased,
            group_max_in_flight=row.group_max_in_flight,
            head_lease_ended=row.head_lease_ended,
            next_deliverable=next_deliverable,
        ),
    )


_COUNT_LIVE, _COUNT_KEPT = _count_selected(_LIVE), _count_selected(_KEPT)
_DELETE_LIVE, _DELETE_KEPT = _delete_selected(_LIVE), _delete_selected(_KEPT)


def _message(row: Any) -> StoredMessage:
    state = _STATES[row.state]
    return StoredMessage(
        id=row.id,
        payload=row.payload,
        priority=Priority(row.priority),
        state=state,
        delivery_attempts=row.delivery_attempts,
        enqueued_at=row.enqueued_at,
        expires_at=row.expires_at,
        available_at=row.available_at,
        last_delivered_at=row.last_delivered_at,
        redriven_from=row.redriven_from,
        enqueue_order=row.enqueue_order,
        group=row.group_key,
        schedule_id=row.schedule_id,
        attempts=tuple(
            finish(
                read_attempts(row.attempts),
                leased=state is BrowseState.IN_FLIGHT,
                lease_end=row.available_at,
            )
        ),
        completed_at=row.completed_at,
        result=row.result,
    )


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
        group: str | None = None,
        match: dict[str, Any] | None = None,
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
            "group": group,
            "match": None if match is None else msgspec.json.encode(match).decode(),
        }

        async def read(connection: AsyncConnection) -> list[Any]:
            return list((await connection.execute(_BROWSE, parameters)).all())

        rows = await self._database.read(read, operation="list_messages")
        last = rows[-1]
        if not last.queue_found:
            raise QueueNotFound(queue_id)
        resume = None
        if last.resume:
            resume = MessagePosition(
                last.enqueue_order,
                priority=Priority(last.priority) if state is BrowseState.READY else None,
                at=last.available_at
                if state in (BrowseState.IN_FLIGHT, BrowseState.DELAYED, BrowseState.COMPLETED)
                else None,
            )
        return MessageBatch([_message(row) for row in rows[:-1]], resume)

    async def get_message(self, queue_id: UUID, message_id: UUID) -> StoredMessage | None:
        parameters = {"queue_id": queue_id, "message_id": message_id}

        async def read(connection: AsyncConnection) -> Any:
            return (await connection.execute(_SHOW, parameters)).one_or_none()

        row = await self._database.read(read, operation="get_message")
        if row is None:
            raise QueueNotFound(queue_id)
        return None if row.id is None or row.state is None else _message(row)

    def _selection(
        self, queue_id: UUID, state: BrowseState | None, search: Search, limit: int
    ) -> dict[str, Any]:
        return {
            "queue_id": queue_id,
            "state": None if state is None else _CODES[state],
            "limit": limit,
            **search_parameters(search),
        }

    async def count_messages(
        self, queue_id: UUID, *, state: BrowseState | None, search: Search, limit: int
    ) -> int:
        parameters = self._selection(queue_id, state, search, limit)
        statement = _COUNT_KEPT if state is BrowseState.COMPLETED else _COUNT_LIVE

        async def read(connection: AsyncConnection) -> int:
            limit = (await connection.execute(_MAX_ATTEMPTS, parameters)).scalar_one_or_none()
            if limit is None:
                raise QueueNotFound(queue_id)
            return int(
                (
                    await connection.execute(statement, {**parameters, "max_attempts": limit})
                ).scalar_one()
            )

        return await self._database.read(read, operation="count_messages")

    async def delete_messages(
        self,
        queue_id: UUID,
        *,
        state: BrowseState | None,
        search: Search,
        limit: int,
        audit: AuditEntry,
    ) -> int:
        statement = _DELETE_KEPT if state is BrowseState.COMPLETED else _DELETE_LIVE

        async def take(connection: AsyncConnection, n: int) -> int:
            parameters = self._selection(queue_id, state, search, n)
            # KEY SHARE, as purge: the queue cannot be deleted under the batch.
            limit = (
                await connection.execute(
                    sa.select(queue.c.max_delivery_attempts)
                    .where(queue.c.id == queue_id)
                    .with_for_update(key_share=True)
                )
            ).scalar_one_or_none()
            if limit is None:
                raise QueueNotFound(queue_id)
            removed = list(
                (await connection.execute(statement, {**parameters, "max_attempts": limit})).all()
            )
            if removed:
                lanes = groups_left_parameters(queue_id, removed)
                if lanes is not None:
                    await connection.execute(GROUPS_LEFT, lanes)
                await connection.execute(_UNCOUNT, uncount_parameters(queue_id, removed))
            return sum(
                int(row.ready + row.in_flight + row.delayed + row.completed) for row in removed
            )

        return await in_batches(
            self._database,
            take,
            limit=limit,
            audit=audit,
            counted_as="deleted",
            operation="delete_messages",
        )

    async def list_groups(
        self,
        queue_id: UUID,
        *,
        state: GroupState | None,
        limit: int,
        after: GroupPosition | None,
    ) -> Found[GroupSummary, GroupPosition]:
        parameters = {
            "queue_id": queue_id,
            # A state filter is checked on the groups examined: at most the budget.
            "budget": limit if state is None else self._budget,
            "after_key": None if after is None else after.wait_key,
            "after_group": None if after is None else after.group,
        }

        async def read(connection: AsyncConnection) -> list[Any]:
            if (await connection.execute(_QUEUE_EXISTS, parameters)).first() is None:
                raise QueueNotFound(queue_id)
            return list((await connection.execute(_GROUPS, parameters)).all())

        rows = await self._database.read(read, operation="list_groups")
        found: list[tuple[GroupSummary, GroupPosition]] = []
        for row in rows:
            summary = _group(row)
            if state is None or summary.state is state:
                found.append((summary, GroupPosition(row.head_key, row.group_key)))
                if len(found) == limit:
                    break
        resume = None
        if len(found) < limit and len(rows) == parameters["budget"] and state is not None:
            resume = GroupPosition(rows[-1].head_key, rows[-1].group_key)
        return Found(found, resume)

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
            removed = list((await connection.execute(_DELETE, parameters)).all())
            if not removed:
                return False
            lanes = groups_left_parameters(queue_id, removed)
            if lanes is not None:
                await connection.execute(GROUPS_LEFT, lanes)
            await connection.execute(_UNCOUNT, uncount_parameters(queue_id, removed))
            await connection.execute(audit_insert(audit))
            return True

        return await self._database.yielding(
            delete, operation="delete_message", attempts=OPERATOR_ATTEMPTS
        )
