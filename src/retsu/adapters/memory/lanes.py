"""Groups as ordered lanes in memory (SPEC §3.10): the twin of ``retsu_group_apply``
(migration 0009).

A lane's members are in lane states exactly as in PostgreSQL: the pending head (READY,
DELAYED, or THROTTLED until its group's next token), the leased ones (IN_FLIGHT), and the
rest WAITING (WAITING_DELAYED while their own delay runs). Every writer passes the lane
changes of the grouped messages it touched to ``_lanes_changed``, which promotes each
lane's oldest waiting message while the lane has no pending head and fewer leases than
``group_max_in_flight``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

from retsu.adapters.memory.tables import MemoryTables, State, StoredGroup, StoredMessage
from retsu.domain.queue import Queue, RateLimit


@dataclass(frozen=True, slots=True)
class LaneChange:
    """What one message did to its lane: members moved between leased, pending, waiting
    and waiting-delayed, and the key of a delivery (the lane's last one)."""

    group: str
    leased: int = 0
    pending: int = 0
    waiting: int = 0
    waiting_delayed: int = 0
    delivery_key: int | None = None


def tokens_now(group: StoredGroup, rate: RateLimit, now: datetime) -> float:
    """A lane's tokens at ``now`` (a bucket never touched is full)."""
    if group.tokens is None or group.tokens_at is None:
        return float(rate.burst)
    elapsed = (now - group.tokens_at).total_seconds()
    return min(float(rate.burst), group.tokens + rate.per_second * elapsed)


class LanesPart(MemoryTables):
    """The lane bookkeeping every memory writer shares."""

    def _lane(self, queue_id: UUID, group: str) -> StoredGroup:
        return self._groups.setdefault((queue_id, group), StoredGroup())

    def _lanes_changed(self, queue: Queue, changes: Iterable[LaneChange]) -> int:
        """Apply lane changes and promote where a lane may have its next message; how
        many were promoted."""
        promoted = 0
        now = self._clock.now()
        touched: set[str] = set()
        for change in sorted(changes, key=lambda c: c.group):
            touched.add(change.group)
            lane = self._lane(queue.id, change.group)
            lane.leased += change.leased
            lane.pending += change.pending
            lane.waiting += change.waiting
            lane.waiting_delayed += change.waiting_delayed
            if change.delivery_key is not None:
                lane.last_delivery_key = max(lane.last_delivery_key, change.delivery_key)
                lane.head_key = max(lane.head_key, change.delivery_key)
                lane.last_delivered_at = now
        for group in sorted(touched):
            if self._promote(queue, group, self._lane(queue.id, group), now):
                promoted += 1
        return promoted

    def _promote(self, queue: Queue, group: str, lane: StoredGroup, now: datetime) -> bool:
        if not (
            lane.pending == 0
            and lane.waiting + lane.waiting_delayed > 0
            and lane.leased < queue.settings.group_max_in_flight
        ):
            return False
        waiting = [
            m
            for m in self._messages[queue.id].values()
            if m.group == group and m.state in (State.WAITING, State.WAITING_DELAYED)
        ]
        if not waiting:
            return False
        head = min(waiting, key=lambda m: m.enqueue_order)
        was = head.state
        head.wait_key = max(head.enqueue_order, lane.last_delivery_key)
        if was is State.WAITING_DELAYED and head.available_after > now:
            head.state = State.DELAYED
        else:
            head.state = State.READY
            rate = queue.settings.group_rate_limit
            if rate is not None:
                tokens = tokens_now(lane, rate, now)
                if tokens < 1:
                    head.state = State.THROTTLED
                    head.available_after = now + timedelta(seconds=(1 - tokens) / rate.per_second)
        lane.pending = 1
        lane.head_key = head.wait_key
        if was is State.WAITING:
            lane.waiting -= 1
        else:
            lane.waiting_delayed -= 1
        return True

    @staticmethod
    def _lane_state_change(message: StoredMessage) -> LaneChange | None:
        """The lane change of a grouped message leaving its lane (removed: acknowledged,
        deleted, expired, dead-lettered, purged)."""
        if message.group is None:
            return None
        state = message.state
        return LaneChange(
            message.group,
            leased=-(state is State.IN_FLIGHT),
            pending=-(state in (State.READY, State.DELAYED, State.THROTTLED)),
            waiting=-(state is State.WAITING),
            waiting_delayed=-(state is State.WAITING_DELAYED),
        )
