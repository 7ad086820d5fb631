"""Browsing messages without claiming them (``MessageBrowser``, SPEC §3.6): the twin of
``adapters/postgres/browsing.py``."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from retsu.adapters.memory.lanes import LanesPart
from retsu.adapters.memory.tables import (
    State,
    StoredMessage,
    logical,
)
from retsu.domain.attempts import finish
from retsu.domain.audit import AuditEntry
from retsu.domain.browsing import (
    BrowseState,
    MessageBatch,
    MessagePosition,
)
from retsu.domain.browsing import (
    StoredMessage as BrowsedMessage,
)
from retsu.domain.errors import (
    QueueNotFound,
)
from retsu.domain.groups import GroupPosition, GroupState, GroupSummary, group_state
from retsu.domain.message import (
    Priority,
)
from retsu.domain.pagination import Found
from retsu.domain.queue import Queue
from retsu.domain.search import Search, payload_matches


class BrowsingPart(LanesPart):
    """Implements MessageBrowser over the tables."""

    # No scan budget here: the in-memory store has no index walk to bound, so a page is
    # never cut short (the PostgreSQL adapter's budget is tested against PostgreSQL).

    def _browsed(
        self, message: StoredMessage, queue: Queue, now: datetime
    ) -> BrowsedMessage | None:
        state = logical(message, queue.settings.max_delivery_attempts, now)
        if state is None:
            return None
        return BrowsedMessage(
            id=message.id,
            payload=message.payload,
            priority=message.priority,
            state=state,
            delivery_attempts=message.delivery_attempts,
            enqueued_at=message.enqueued_at,
            expires_at=message.expires_at,
            available_at=message.available_after,
            last_delivered_at=message.last_delivered_at,
            redriven_from=message.redriven_from,
            group=message.group,
            schedule_id=message.schedule_id,
            enqueue_order=message.enqueue_order,
            attempts=tuple(
                finish(
                    message.attempts,
                    leased=state is BrowseState.IN_FLIGHT,
                    lease_end=message.available_after,
                )
            ),
            completed_at=message.completed_at,
            result=message.result,
        )

    @staticmethod
    def _browse_key(
        state: BrowseState | None, grouped: bool, priority: int, at: datetime, order: int
    ) -> tuple[object, ...]:
        if state is None or (state is BrowseState.READY and grouped):
            return (order,)  # one lane's delivery order is its enqueue order
        if state is BrowseState.READY:
            return (-priority, order)
        if state is BrowseState.COMPLETED:
            return (-at.timestamp(), -order)  # newest completion first
        return (at, order)

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
        queue = self._queues.get(queue_id)
        if queue is None:
            raise QueueNotFound(queue_id)
        now = self._clock.now()
        grouped = group is not None
        boundary = None
        if after is not None:
            boundary = self._browse_key(
                state, grouped, int(after.priority or 0), after.at or now, after.enqueue_order
            )
        found = []
        for message in self._messages[queue_id].values():
            browsed = self._browsed(message, queue, now)
            if browsed is None:
                continue
            if state is None and browsed.state is BrowseState.COMPLETED:
                continue
            if state is not None and browsed.state is not state:
                continue
            if priority is not None and message.priority is not priority:
                continue
            if group is not None and message.group != group:
                continue
            if not payload_matches(message.payload, match):
                continue
            at = (
                message.completed_at
                if state is BrowseState.COMPLETED and message.completed_at is not None
                else message.available_after
            )
            key = self._browse_key(state, grouped, int(message.priority), at, message.enqueue_order)
            if boundary is None or key > boundary:
                found.append((key, browsed))
        found.sort(key=lambda pair: pair[0])
        return MessageBatch([browsed for _, browsed in found[:limit]])

    async def get_message(self, queue_id: UUID, message_id: UUID) -> BrowsedMessage | None:
        queue = self._queues.get(queue_id)
        if queue is None:
            raise QueueNotFound(queue_id)
        message = self._messages[queue_id].get(message_id)
        return None if message is None else self._browsed(message, queue, self._clock.now())

    async def delete_message(self, queue_id: UUID, message_id: UUID, audit: AuditEntry) -> bool:
        found = await self.get_message(queue_id, message_id)  # raises QueueNotFound
        if found is None:
            return False
        message = self._messages[queue_id].pop(message_id)
        change = self._lane_state_change(message)
        if change is not None:
            self._lanes_changed(self._queues[queue_id], [change])
        self._write_audit(audit)
        return True

    def _selected(
        self, queue_id: UUID, state: BrowseState | None, search: Search
    ) -> list[StoredMessage]:
        """What a bulk action takes, in its order: live messages in enqueue order (every
        live one when no state is given), completed ones oldest completion first."""
        queue = self._queues.get(queue_id)
        if queue is None:
            raise QueueNotFound(queue_id)
        now = self._clock.now()
        chosen = []
        for message in self._messages[queue_id].values():
            current = logical(message, queue.settings.max_delivery_attempts, now)
            if current is None or (state is None and current is BrowseState.COMPLETED):
                continue
            if state is not None and current is not state:
                continue
            if search.admits(
                priority=message.priority, group=message.group, payload=message.payload
            ):
                chosen.append(message)
        if state is BrowseState.COMPLETED:
            return sorted(chosen, key=lambda m: (m.completed_at, m.enqueue_order))
        return sorted(chosen, key=lambda m: m.enqueue_order)

    async def count_messages(
        self, queue_id: UUID, *, state: BrowseState | None, search: Search, limit: int
    ) -> int:
        return min(len(self._selected(queue_id, state, search)), limit)

    async def delete_messages(
        self,
        queue_id: UUID,
        *,
        state: BrowseState | None,
        search: Search,
        limit: int,
        audit: AuditEntry,
    ) -> int:
        doomed = self._selected(queue_id, state, search)[:limit]
        changes = []
        for message in doomed:
            del self._messages[queue_id][message.id]
            change = self._lane_state_change(message)
            if change is not None:
                changes.append(change)
        if changes:
            self._lanes_changed(self._queues[queue_id], changes)
        self._write_audit(audit.with_details(deleted=len(doomed)))
        return len(doomed)

    async def list_groups(
        self,
        queue_id: UUID,
        *,
        state: GroupState | None,
        limit: int,
        after: GroupPosition | None,
    ) -> Found[GroupSummary, GroupPosition]:
        queue = self._queues.get(queue_id)
        if queue is None:
            raise QueueNotFound(queue_id)
        now = self._clock.now()
        found = []
        lanes = sorted(
            (
                (lane.head_key, group, lane)
                for (owner, group), lane in self._groups.items()
                if owner == queue_id and lane.live > 0
            ),
            key=lambda entry: (entry[0], entry[1]),
        )
        for head_key, group, lane in lanes:
            if after is not None and (head_key, group) <= (after.wait_key, after.group):
                continue
            members = sorted(
                (
                    m
                    for m in self._messages[queue_id].values()
                    if m.group == group and m.state is not State.COMPLETED
                ),
                key=lambda m: m.enqueue_order,
            )
            if not members:
                continue
            head = members[0]
            pending = next(
                (
                    m
                    for m in members
                    if lane.pending and m.state in (State.READY, State.DELAYED, State.THROTTLED)
                ),
                None,
            )
            next_delayed = (
                pending is not None
                and pending.state is State.DELAYED
                and pending.available_after > now
            )
            summary = GroupSummary(
                group=group,
                ready=lane.waiting + lane.pending - int(next_delayed),
                in_flight=lane.leased,
                delayed=lane.waiting_delayed + int(next_delayed),
                head_id=head.id,
                head_delivery_attempts=head.delivery_attempts,
                head_enqueued_at=head.enqueued_at,
                last_delivered_at=lane.last_delivered_at,
                state=group_state(
                    leased=lane.leased,
                    group_max_in_flight=queue.settings.group_max_in_flight,
                    head_lease_ended=head.state is State.IN_FLIGHT and head.available_after <= now,
                    next_deliverable=None
                    if pending is None
                    else pending.state is State.READY or pending.available_after <= now,
                ),
            )
            if state is None or summary.state is state:
                found.append((summary, GroupPosition(head_key, group)))
                if len(found) == limit:
                    break
        return Found(found)
