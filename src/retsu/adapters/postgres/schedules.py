"""Schedules on PostgreSQL (SPEC §3.12): an operator's changes, and the scheduler's run.

Every change writes its audit row in the same transaction; times come from the database
clock (``now()``), due times from the schedule's recurrence (``retsu.domain.schedule``,
cron read by ``adapters/cron.py``), computed here between the statements of the
transaction that reads ``now()``.

**Exactly once per due time.** ``run_due_schedule`` is one transaction:

1. claim the unpaused schedule whose due time passed longest ago, skipping any row another
   scheduler holds (``FOR UPDATE OF s SKIP LOCKED``, walking ``queue_schedule_due``), with
   its queue (``FOR KEY SHARE OF q SKIP LOCKED``: what ``retsu_enqueue`` takes anyway,
   taken first, so a queue being deleted is skipped instead of becoming a deadlock partner);
2. enqueue the message through ``retsu_enqueue`` (migrations 0007, 0009: the state rollup stays
   exact, ``schedule_id`` is stored), with the id ``scheduled_message_id(schedule, due)``;
3. advance the schedule: ``last_run_at = now()``, ``next_run_at`` = its first due time
   after now.

Two schedulers never claim one row; a scheduler killed between any two statements (or its
connection, or the database) commits nothing, its row lock goes with its session, and the
due time is still there for the next claim. The claim reads the due time from the row, so
running the transaction again after its COMMIT's answer was lost (``repeatable``) finds the
schedule advanced and enqueues nothing twice. And the message id is derived from the due
time: a second enqueue of one due time while its message lives would be a primary-key
violation (a savepoint turns it into the ``duplicate`` outcome and the schedule advances).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from retsu.adapters.cron import CRON_CALENDAR
from retsu.adapters.postgres.audit_log import audit_insert
from retsu.adapters.postgres.database import Database
from retsu.adapters.postgres.errors import FOREIGN_KEY_VIOLATION, UNIQUE_VIOLATION, sqlstate
from retsu.adapters.postgres.notifications import CHANNEL, MESSAGES_SUFFIX
from retsu.adapters.postgres.tables import queue_schedule
from retsu.domain.audit import AuditEntry
from retsu.domain.errors import QueueNotFound
from retsu.domain.message import Priority
from retsu.domain.schedule import (
    CronCalendar,
    DueSchedules,
    MessageTemplate,
    NewSchedule,
    Recurrence,
    Schedule,
    ScheduleAlreadyExists,
    SchedulePosition,
    ScheduleRun,
    ScheduleUpdate,
    new_schedule_times,
    paused_or_resumed,
    scheduled_message_id,
)

_NOW = sa.text("SELECT now()")

_CLAIM = sa.text(
    """
    SELECT s.*, q.name AS queue_name, now() AS now
    FROM queue_schedule AS s
    JOIN queue AS q ON q.id = s.queue_id
    WHERE NOT s.paused AND s.next_run_at <= now()
    ORDER BY s.next_run_at
    LIMIT 1
    FOR UPDATE OF s SKIP LOCKED
    FOR KEY SHARE OF q SKIP LOCKED
    """
)
_NEXT_DUE_IN = sa.text(
    "SELECT EXTRACT(EPOCH FROM min(next_run_at) - now()) FROM queue_schedule WHERE NOT paused"
)
# The message of one due time, through the same function as every enqueue (no delay: the
# schedule says when).
_ENQUEUE = sa.text(
    "SELECT queue_found FROM retsu_enqueue(CAST(:queue_id AS uuid), "
    "ARRAY[CAST(:id AS uuid)], ARRAY[CAST(:payload AS text)], "
    "ARRAY[CAST(:priority AS smallint)], ARRAY[CAST(:ttl AS integer)], ARRAY[0], "
    "ARRAY[CAST(:group AS text)], ARRAY[CAST(:schedule_id AS uuid)])"
)
# Wakes the long polls waiting on the queue, in every API process, when (and only if) the
# run commits. Inside the transaction, unlike the API's enqueues (notifications.py says
# why they batch theirs apart): a schedule's runs are few, and the scheduler has no
# LISTEN connection of its own to send them on.
_ANNOUNCE = sa.text("SELECT pg_notify(:channel, :payload)")
_ADVANCE = sa.text(
    "UPDATE queue_schedule SET last_run_at = :ran_at, next_run_at = :next_run_at WHERE id = :id"
)


def _schedule_columns(schedule: Schedule) -> dict[str, Any]:
    return {
        "id": schedule.id,
        "queue_id": schedule.queue_id,
        "name": schedule.name,
        "cron": schedule.recurrence.cron,
        "every_seconds": schedule.recurrence.every_seconds,
        "timezone": schedule.recurrence.timezone,
        "payload": schedule.message.payload,
        "priority": int(schedule.message.priority),
        "ttl_seconds": schedule.message.ttl_seconds,
        "group_key": schedule.message.group,
        "paused": schedule.paused,
        "next_run_at": schedule.next_run_at,
        "last_run_at": schedule.last_run_at,
        "created_at": schedule.created_at,
        "updated_at": schedule.updated_at,
    }


def schedule_from_row(row: Any) -> Schedule:
    return Schedule(
        id=row.id,
        queue_id=row.queue_id,
        name=row.name,
        recurrence=Recurrence(
            cron=row.cron, every_seconds=row.every_seconds, timezone=row.timezone
        ),
        message=MessageTemplate(
            payload=row.payload,
            priority=Priority(row.priority),
            ttl_seconds=row.ttl_seconds,
            group=row.group_key,
        ),
        paused=row.paused,
        next_run_at=row.next_run_at,
        last_run_at=row.last_run_at,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _refused(error: IntegrityError, schedule: Schedule) -> Exception:
    """The domain's reading of a refused insert or update, or the error itself."""
    code = sqlstate(error)
    if code == UNIQUE_VIOLATION:
        return ScheduleAlreadyExists(schedule.name)
    if code == FOREIGN_KEY_VIOLATION:
        return QueueNotFound(schedule.queue_id)
    return error


class PostgresSchedules:
    """Implements ScheduleRepository and ScheduleRunner."""

    def __init__(self, database: Database, calendar: CronCalendar = CRON_CALENDAR) -> None:
        self._database = database
        self._calendar = calendar

    # -- an operator's changes ---------------------------------------------------------

    async def add_schedule(self, schedule: NewSchedule, audit: AuditEntry) -> Schedule:
        async def add(connection: AsyncConnection) -> Schedule:
            now: datetime = (await connection.execute(_NOW)).scalar_one()
            stored = new_schedule_times(schedule, now, self._calendar)
            # Translated inside the transaction, so the operation's telemetry sees the
            # database's answer ("that name is taken"), not a failure.
            try:
                await connection.execute(
                    sa.insert(queue_schedule).values(**_schedule_columns(stored))
                )
            except IntegrityError as error:
                raise _refused(error, stored) from None
            await connection.execute(audit_insert(audit))
            return stored

        return await self._database.transaction(add, operation="add_schedule")

    async def get_schedule(self, queue_id: UUID, schedule_id: UUID) -> Schedule | None:
        statement = sa.select(queue_schedule).where(
            queue_schedule.c.id == schedule_id, queue_schedule.c.queue_id == queue_id
        )

        async def read(connection: AsyncConnection) -> Any:
            return (await connection.execute(statement)).one_or_none()

        row = await self._database.read(read, operation="get_schedule")
        return None if row is None else schedule_from_row(row)

    async def list_schedules(
        self, queue_id: UUID, *, limit: int, after: SchedulePosition | None
    ) -> list[Schedule]:
        # The name column is COLLATE "C": byte order, walked on the (queue_id, name) index.
        statement = (
            sa.select(queue_schedule)
            .where(queue_schedule.c.queue_id == queue_id)
            .order_by(queue_schedule.c.name)
            .limit(limit)
        )
        if after is not None:
            statement = statement.where(queue_schedule.c.name > after.name)

        async def read(connection: AsyncConnection) -> list[Schedule]:
            return [schedule_from_row(row) for row in await connection.execute(statement)]

        return await self._database.read(read, operation="list_schedules")

    async def update_schedule(
        self, queue_id: UUID, schedule_id: UUID, update: ScheduleUpdate, audit: AuditEntry
    ) -> Schedule | None:
        return await self._change(
            queue_id,
            schedule_id,
            lambda schedule, now: update.apply_to(schedule, now, self._calendar),
            audit,
            operation="update_schedule",
        )

    async def set_schedule_paused(
        self, queue_id: UUID, schedule_id: UUID, paused: bool, audit: AuditEntry
    ) -> Schedule | None:
        return await self._change(
            queue_id,
            schedule_id,
            lambda schedule, now: paused_or_resumed(schedule, paused, now, self._calendar),
            audit,
            operation="set_schedule_paused",
        )

    async def _change(
        self,
        queue_id: UUID,
        schedule_id: UUID,
        change: Any,
        audit: AuditEntry,
        *,
        operation: str,
    ) -> Schedule | None:
        # The row is locked first: a scheduler running it finishes (or gives it up) before
        # the change is computed from it, and none claims it until the change commits.
        locked = (
            sa.select(queue_schedule, sa.func.now().label("now"))
            .where(queue_schedule.c.id == schedule_id, queue_schedule.c.queue_id == queue_id)
            .with_for_update(of=queue_schedule)
        )

        async def apply(connection: AsyncConnection) -> Schedule | None:
            row = (await connection.execute(locked)).one_or_none()
            if row is None:
                return None
            changed: Schedule = change(schedule_from_row(row), row.now)
            try:
                await connection.execute(
                    sa.update(queue_schedule)
                    .where(queue_schedule.c.id == schedule_id)
                    .values(**_schedule_columns(changed))
                )
            except IntegrityError as error:
                raise _refused(error, changed) from None
            await connection.execute(audit_insert(audit))
            return changed

        return await self._database.transaction(apply, operation=operation)

    async def delete_schedule(self, queue_id: UUID, schedule_id: UUID, audit: AuditEntry) -> bool:
        statement = (
            sa.delete(queue_schedule)
            .where(queue_schedule.c.id == schedule_id, queue_schedule.c.queue_id == queue_id)
            .returning(queue_schedule.c.name)
        )

        async def delete(connection: AsyncConnection) -> bool:
            row = (await connection.execute(statement)).one_or_none()
            if row is None:
                return False
            await connection.execute(audit_insert(audit.with_details(name=row.name)))
            return True

        return await self._database.transaction(delete, operation="delete_schedule")

    # -- the scheduler's run -------------------------------------------------------------

    async def run_due_schedule(self) -> DueSchedules:
        async def run(connection: AsyncConnection) -> DueSchedules:
            row = (await connection.execute(_CLAIM)).one_or_none()
            if row is None:
                seconds = (await connection.execute(_NEXT_DUE_IN)).scalar_one()
                return DueSchedules(next_due_in_seconds=None if seconds is None else float(seconds))
            schedule = schedule_from_row(row)
            due, now = row.next_run_at, row.now
            next_run_at, missed = schedule.recurrence.advance(due, now, self._calendar)
            message = schedule.message.to_store(scheduled_message_id(schedule.id, due), schedule.id)
            enqueued = True
            try:
                # A savepoint: the enqueue alone is undone if its id is already stored.
                async with connection.begin_nested():
                    await connection.execute(
                        _ENQUEUE,
                        {
                            "queue_id": schedule.queue_id,
                            "id": message.id,
                            "payload": message.payload,
                            "priority": int(message.priority),
                            "ttl": message.ttl_seconds,
                            "group": message.group,
                            "schedule_id": schedule.id,
                        },
                    )
            except IntegrityError as error:
                if sqlstate(error) != UNIQUE_VIOLATION:
                    raise
                enqueued = False  # this due time's message is stored already
            if enqueued:
                payload = f"{schedule.queue_id}{MESSAGES_SUFFIX}"
                await connection.execute(_ANNOUNCE, {"channel": CHANNEL, "payload": payload})
            await connection.execute(
                _ADVANCE, {"id": schedule.id, "ran_at": now, "next_run_at": next_run_at}
            )
            return DueSchedules(
                ScheduleRun(
                    schedule_id=schedule.id,
                    queue_id=schedule.queue_id,
                    queue_name=row.queue_name,
                    message_id=message.id,
                    priority=message.priority,
                    due_at=due,
                    ran_at=now,
                    next_run_at=next_run_at,
                    missed=missed,
                    enqueued=enqueued,
                )
            )

        # Repeatable: a second run after a lost COMMIT answer finds the schedule advanced.
        return await self._database.transaction(run, operation="run_due_schedule", repeatable=True)
