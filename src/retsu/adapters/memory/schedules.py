"""Schedules in memory (``ScheduleRepository``, ``ScheduleRunner``): the twin of
``adapters/postgres/schedules.py``.

Each method runs without awaiting in the middle of its change (the enqueue included: the
memory enqueue never suspends), so a run is atomic on the event loop as the PostgreSQL
run is one transaction: two schedulers on one loop never run one due time twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import cast
from uuid import UUID

from retsu.adapters.cron import CRON_CALENDAR
from retsu.adapters.memory.tables import MemoryTables
from retsu.application.ports import MessageRepository
from retsu.domain.audit import AuditEntry
from retsu.domain.errors import QueueNotFound
from retsu.domain.schedule import (
    DueSchedules,
    NewSchedule,
    Schedule,
    ScheduleAlreadyExists,
    SchedulePosition,
    ScheduleRun,
    ScheduleUpdate,
    new_schedule_times,
    paused_or_resumed,
    scheduled_message_id,
)


class SchedulesPart(MemoryTables):
    """Implements ScheduleRepository and ScheduleRunner over the tables."""

    def _name_taken(self, schedule: Schedule) -> bool:
        return any(
            other.queue_id == schedule.queue_id
            and other.name == schedule.name
            and other.id != schedule.id
            for other in self._schedules.values()
        )

    async def add_schedule(self, schedule: NewSchedule, audit: AuditEntry) -> Schedule:
        if schedule.queue_id not in self._queues:
            raise QueueNotFound(schedule.queue_id)
        stored = new_schedule_times(schedule, self._clock.now(), CRON_CALENDAR)
        if self._name_taken(stored):
            raise ScheduleAlreadyExists(stored.name)
        self._schedules[stored.id] = stored
        self._write_audit(audit)
        return stored

    def _find(self, queue_id: UUID, schedule_id: UUID) -> Schedule | None:
        found = self._schedules.get(schedule_id)
        return found if found is not None and found.queue_id == queue_id else None

    async def get_schedule(self, queue_id: UUID, schedule_id: UUID) -> Schedule | None:
        return self._find(queue_id, schedule_id)

    async def list_schedules(
        self, queue_id: UUID, *, limit: int, after: SchedulePosition | None
    ) -> list[Schedule]:
        # Byte order of the UTF-8 name, as PostgreSQL's COLLATE "C".
        after_key = None if after is None else after.name.encode()
        chosen = sorted(
            (
                s
                for s in self._schedules.values()
                if s.queue_id == queue_id and (after_key is None or s.name.encode() > after_key)
            ),
            key=lambda s: s.name.encode(),
        )
        return chosen[:limit]

    async def update_schedule(
        self, queue_id: UUID, schedule_id: UUID, update: ScheduleUpdate, audit: AuditEntry
    ) -> Schedule | None:
        return self._change(
            queue_id,
            schedule_id,
            lambda s, now: update.apply_to(s, now, CRON_CALENDAR),
            audit,
        )

    async def set_schedule_paused(
        self, queue_id: UUID, schedule_id: UUID, paused: bool, audit: AuditEntry
    ) -> Schedule | None:
        return self._change(
            queue_id,
            schedule_id,
            lambda s, now: paused_or_resumed(s, paused, now, CRON_CALENDAR),
            audit,
        )

    def _change(
        self,
        queue_id: UUID,
        schedule_id: UUID,
        change: Callable[[Schedule, datetime], Schedule],
        audit: AuditEntry,
    ) -> Schedule | None:
        schedule = self._find(queue_id, schedule_id)
        if schedule is None:
            return None
        changed = change(schedule, self._clock.now())
        if self._name_taken(changed):
            raise ScheduleAlreadyExists(changed.name)
        self._schedules[schedule_id] = changed
        self._write_audit(audit)
        return changed

    async def delete_schedule(self, queue_id: UUID, schedule_id: UUID, audit: AuditEntry) -> bool:
        schedule = self._find(queue_id, schedule_id)
        if schedule is None:
            return False
        del self._schedules[schedule_id]
        self._write_audit(audit.with_details(name=schedule.name))
        return True

    async def run_due_schedule(self) -> DueSchedules:
        now = self._clock.now()
        active = [s for s in self._schedules.values() if s.next_run_at is not None]
        due = [s for s in active if s.next_run_at is not None and s.next_run_at <= now]
        if not due:
            if not active:
                return DueSchedules()
            earliest = min(s.next_run_at for s in active if s.next_run_at is not None)
            return DueSchedules(next_due_in_seconds=(earliest - now).total_seconds())
        schedule = min(due, key=lambda s: (s.next_run_at, s.id))
        due_at = schedule.next_run_at
        assert due_at is not None
        next_run_at, missed = schedule.recurrence.advance(due_at, now, CRON_CALENDAR)
        message = schedule.message.to_store(scheduled_message_id(schedule.id, due_at), schedule.id)
        enqueued = message.id not in self._messages.get(schedule.queue_id, {})
        if enqueued:
            # The MessagesPart of the one MemoryStorage (it stores and counts alike); it
            # never suspends, so this run stays atomic.
            await cast(MessageRepository, self).enqueue(schedule.queue_id, [message])
        self._schedules[schedule.id] = replace(schedule, last_run_at=now, next_run_at=next_run_at)
        return DueSchedules(
            ScheduleRun(
                schedule_id=schedule.id,
                queue_id=schedule.queue_id,
                queue_name=self._queues[schedule.queue_id].name,
                message_id=message.id,
                priority=message.priority,
                due_at=due_at,
                ran_at=now,
                next_run_at=next_run_at,
                missed=missed,
                enqueued=enqueued,
            )
        )
