"""The cleaners' batches in memory (``Maintenance``): the twin of
``adapters/postgres/maintenance.py``."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from uuid import UUID

from retsu.adapters.memory.lanes import LaneChange, LanesPart
from retsu.adapters.memory.tables import State
from retsu.domain.maintenance import (
    NEVER_DELIVERED,
    PREVIOUSLY_DELIVERED,
    ExpiredMessages,
    PurgedDeadLetters,
)


class MaintenancePart(LanesPart):
    """Implements Maintenance (the cleaners' batches) over the tables."""

    async def delete_expired_messages(self, batch_size: int) -> list[ExpiredMessages]:
        now = self._clock.now()
        doomed = sorted(
            (
                m
                for stored in self._messages.values()
                for m in stored.values()
                if m.expires_at <= now
                and m.state is not State.COMPLETED
                and (m.state is not State.IN_FLIGHT or m.available_after <= now)
            ),
            key=lambda m: (m.expires_at, m.id),
        )[:batch_size]
        counts: Counter[tuple[str, str]] = Counter()
        changes: dict[UUID, list[LaneChange]] = {}
        for message in doomed:
            del self._messages[message.queue_id][message.id]
            self.totals[message.queue_id]["expired"] += 1
            history = PREVIOUSLY_DELIVERED if message.delivery_attempts else NEVER_DELIVERED
            counts[self._queues[message.queue_id].name, history] += 1
            change = self._lane_state_change(message)
            if change is not None:
                changes.setdefault(message.queue_id, []).append(change)
        for queue_id, lane_changes in changes.items():
            self._lanes_changed(self._queues[queue_id], lane_changes)
        return [ExpiredMessages(name, history, n) for (name, history), n in counts.items()]

    async def delete_completed_messages(self, batch_size: int) -> int:
        now = self._clock.now()
        doomed = sorted(
            (
                m
                for queue_id, stored in self._messages.items()
                for m in stored.values()
                if m.state is State.COMPLETED
                and m.completed_at is not None
                and m.completed_at
                <= now
                - timedelta(seconds=self._queues[queue_id].settings.completed_retention_seconds)
            ),
            key=lambda m: (m.completed_at, m.enqueue_order),
        )[:batch_size]
        for message in doomed:
            del self._messages[message.queue_id][message.id]
        return len(doomed)

    async def delete_dead_letters_older_than(
        self, retention_seconds: int, batch_size: int
    ) -> list[PurgedDeadLetters]:
        cutoff = self._clock.now() - timedelta(seconds=retention_seconds)
        doomed = sorted(
            (
                stored
                for records in self._dead_letters.values()
                for stored in records.values()
                if stored.record.dead_lettered_at < cutoff
            ),
            key=lambda stored: (stored.record.dead_lettered_at, stored.record.id),
        )[:batch_size]
        counts: Counter[str] = Counter()
        for stored in doomed:
            del self._dead_letters[stored.record.queue_id][stored.record.id]
            counts[self._queues[stored.record.queue_id].name] += 1
        return [PurgedDeadLetters(name, n) for name, n in counts.items()]

    async def delete_idempotency_keys_older_than(self, age_seconds: int, batch_size: int) -> int:
        cutoff = self._clock.now() - timedelta(seconds=age_seconds)
        doomed = sorted(
            (k for k, stored in self._idempotency_keys.items() if stored.created_at < cutoff),
            key=lambda k: self._idempotency_keys[k].created_at,
        )[:batch_size]
        for k in doomed:
            del self._idempotency_keys[k]
        return len(doomed)
