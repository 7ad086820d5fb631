"""The storage contract of schedules (SPEC §3.12), mixed into ``RepositoryContract``: the
harness also has ``schedules`` (ScheduleRepository and ScheduleRunner), ``now()``, and
``rewind_schedule`` (sets a schedule's next due time behind the ports' back: a fault the
derived message id must still catch).

``run_due_schedule`` is global: on PostgreSQL the session's database may hold other tests'
schedules, so a test only looks at the runs of its own queues (``runs_of``), running until
nothing is due.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Protocol
from uuid import UUID

import pytest

from retsu.adapters.ids import uuid7
from retsu.application.ports import (
    AuditLog,
    MessageBrowser,
    MessageRepository,
    QueueRepository,
    QueueStateReader,
)
from retsu.domain.audit import AuditAction, AuditEntry, Caller
from retsu.domain.errors import QueueNotFound
from retsu.domain.message import Priority
from retsu.domain.queue import Queue
from retsu.domain.schedule import (
    MessageTemplate,
    NewSchedule,
    Recurrence,
    Schedule,
    ScheduleAlreadyExists,
    SchedulePosition,
    ScheduleRun,
    ScheduleUpdate,
    due_time_of,
    scheduled_message_id,
)

CALLER = Caller(actor="contract-operator", request_id="contract-request")
# PostgreSQL's clock runs on while a test does: times read before and after a call bound it.
SLACK = timedelta(seconds=5)


class ScheduleHarness(Protocol):
    queues: QueueRepository
    messages: MessageRepository
    audit_log: AuditLog
    state: QueueStateReader
    browser: MessageBrowser
    schedules: Any  # ScheduleRepository and ScheduleRunner

    async def now(self) -> datetime: ...

    async def advance(self, seconds: float) -> None: ...

    async def rewind_schedule(self, schedule_id: UUID, next_run_at: datetime) -> None: ...


def _queue(**settings: Any) -> Queue:
    from tests.contract.repository_contract import new_queue

    return new_queue(**settings)


def _audit(queue_id: UUID, schedule_id: UUID, action: AuditAction) -> AuditEntry:
    return AuditEntry.of_schedule(action, queue_id, schedule_id, CALLER, note="contract")


def new_schedule(
    queue: Queue,
    name: str = "nightly",
    *,
    every: int | None = 3600,
    cron: str | None = None,
    timezone: str = "UTC",
    paused: bool = False,
    payload: str = "tick",
    priority: Priority = Priority.HIGH,
    ttl: int | None = None,
    group: str | None = None,
) -> NewSchedule:
    return NewSchedule(
        id=uuid7(),
        queue_id=queue.id,
        name=name,
        recurrence=Recurrence(
            cron=cron, every_seconds=None if cron is not None else every, timezone=timezone
        ),
        message=MessageTemplate(payload, priority, ttl, group),
        paused=paused,
    )


class ScheduleContract:
    """SPEC §3.12 at the storage ports: definitions and their audit rows, and the run that
    enqueues each due time exactly once."""

    # -- helpers -----------------------------------------------------------------------

    async def queue(self, harness: ScheduleHarness, **settings: Any) -> Queue:
        from tests.contract.repository_contract import add

        return await add(harness, _queue(**settings))  # type: ignore[arg-type]

    async def add(self, harness: ScheduleHarness, schedule: NewSchedule) -> Schedule:
        stored: Schedule = await harness.schedules.add_schedule(
            schedule, _audit(schedule.queue_id, schedule.id, AuditAction.SCHEDULE_CREATED)
        )
        return stored

    async def runs_of(self, harness: ScheduleHarness, *queues: Queue) -> list[ScheduleRun]:
        """Run every due schedule until none is due; the runs of ``queues``."""
        mine = {queue.id for queue in queues}
        runs = []
        for _ in range(1000):
            due = await harness.schedules.run_due_schedule()
            if due.run is None:
                return runs
            if due.run.queue_id in mine:
                runs.append(due.run)
        raise AssertionError("schedules kept coming due")

    async def stored_messages(self, harness: ScheduleHarness, queue: Queue) -> list[Any]:
        batch = await harness.browser.list_messages(
            queue.id, state=None, priority=None, limit=100, after=None
        )
        return list(batch.messages)

    async def get(self, harness: ScheduleHarness, schedule: Schedule | NewSchedule) -> Schedule:
        found: Schedule | None = await harness.schedules.get_schedule(
            schedule.queue_id, schedule.id
        )
        assert found is not None
        return found

    # -- definitions ---------------------------------------------------------------------

    async def test_an_interval_schedule_is_first_due_one_interval_after_it_is_made(
        self, harness: ScheduleHarness
    ) -> None:
        queue = await self.queue(harness)
        before = await harness.now()
        definition = new_schedule(queue, every=90, ttl=60, group="lane")
        stored = await self.add(harness, definition)
        after = await harness.now()
        assert before <= stored.created_at <= after
        assert stored.created_at == stored.updated_at
        assert stored.next_run_at == stored.created_at + timedelta(seconds=90)
        assert stored.last_run_at is None and stored.paused is False
        assert (stored.id, stored.queue_id, stored.name) == (definition.id, queue.id, "nightly")
        assert stored.recurrence == Recurrence(every_seconds=90, timezone="UTC")
        assert stored.message == MessageTemplate("tick", Priority.HIGH, 60, "lane")
        assert await self.get(harness, stored) == stored

    async def test_a_cron_schedule_is_first_due_at_the_crons_next_match(
        self, harness: ScheduleHarness
    ) -> None:
        queue = await self.queue(harness)
        stored = await self.add(
            harness, new_schedule(queue, cron="*/5 * * * *", timezone="Europe/Berlin")
        )
        due = stored.next_run_at
        assert due is not None
        assert stored.created_at < due <= stored.created_at + timedelta(minutes=5)
        assert due.minute % 5 == 0 and due.second == 0 and due.microsecond == 0
        assert stored.recurrence == Recurrence(cron="*/5 * * * *", timezone="Europe/Berlin")

    async def test_a_paused_schedule_has_no_due_time(self, harness: ScheduleHarness) -> None:
        queue = await self.queue(harness)
        stored = await self.add(harness, new_schedule(queue, paused=True))
        assert stored.paused is True and stored.next_run_at is None

    async def test_names_are_unique_per_queue(self, harness: ScheduleHarness) -> None:
        first, second = await self.queue(harness), await self.queue(harness)
        await self.add(harness, new_schedule(first, "daily"))
        with pytest.raises(ScheduleAlreadyExists) as raised:
            await self.add(harness, new_schedule(first, "daily"))
        assert raised.value.code == "schedule_already_exists"
        await self.add(harness, new_schedule(second, "daily"))  # another queue: fine
        listed = await harness.schedules.list_schedules(first.id, limit=10, after=None)
        assert [s.name for s in listed] == ["daily"]

    async def test_a_schedule_needs_its_queue(self, harness: ScheduleHarness) -> None:
        with pytest.raises(QueueNotFound):
            await self.add(harness, new_schedule(_queue()))

    async def test_schedules_are_listed_by_name_in_byte_order_a_page_at_a_time(
        self, harness: ScheduleHarness
    ) -> None:
        queue = await self.queue(harness)
        names = ["b", "a-2", "a.1", "c", "a_3", "a1"]
        for name in names:
            await self.add(harness, new_schedule(queue, name))
        pages: list[list[str]] = []
        after = None
        while True:
            page = await harness.schedules.list_schedules(queue.id, limit=4, after=after)
            if not page:
                break
            pages.append([s.name for s in page])
            after = SchedulePosition(page[-1].name)
        assert pages == [["a-2", "a.1", "a1", "a_3"], ["b", "c"]]
        assert sorted(names, key=str.encode) == pages[0] + pages[1]

    async def test_a_schedule_is_read_only_in_its_own_queue(self, harness: ScheduleHarness) -> None:
        queue, other = await self.queue(harness), await self.queue(harness)
        stored = await self.add(harness, new_schedule(queue))
        assert await harness.schedules.get_schedule(other.id, stored.id) is None
        assert await harness.schedules.get_schedule(queue.id, uuid7()) is None
        audit = _audit(other.id, stored.id, AuditAction.SCHEDULE_PAUSED)
        assert await harness.schedules.set_schedule_paused(other.id, stored.id, True, audit) is None
        assert await harness.schedules.delete_schedule(other.id, stored.id, audit) is False

    async def test_every_change_writes_its_audit_row_under_the_queue(
        self, harness: ScheduleHarness
    ) -> None:
        queue = await self.queue(harness)
        stored = await self.add(harness, new_schedule(queue))
        schedules = harness.schedules
        update = ScheduleUpdate(name="renamed")
        await schedules.update_schedule(
            queue.id, stored.id, update, _audit(queue.id, stored.id, AuditAction.SCHEDULE_UPDATED)
        )
        for paused, action in (
            (True, AuditAction.SCHEDULE_PAUSED),
            (False, AuditAction.SCHEDULE_RESUMED),
        ):
            await schedules.set_schedule_paused(
                queue.id, stored.id, paused, _audit(queue.id, stored.id, action)
            )
        deleted = _audit(queue.id, stored.id, AuditAction.SCHEDULE_DELETED)
        assert await schedules.delete_schedule(queue.id, stored.id, deleted) is True
        assert await schedules.delete_schedule(queue.id, stored.id, deleted) is False
        records = await harness.audit_log.list_audit_records(
            limit=10, after=None, queue_id=queue.id, action=None
        )
        schedule_rows = [r for r in records if r.target_type == "schedule"]
        assert [r.action for r in schedule_rows] == [
            "schedule.deleted",
            "schedule.resumed",
            "schedule.paused",
            "schedule.updated",
            "schedule.created",
        ]
        assert {r.target_id for r in schedule_rows} == {str(stored.id)}
        assert schedule_rows[0].details["name"] == "renamed"
        assert (schedule_rows[0].actor, schedule_rows[0].request_id) == (
            "contract-operator",
            "contract-request",
        )

    async def test_a_refused_change_writes_no_audit_row(self, harness: ScheduleHarness) -> None:
        queue = await self.queue(harness)
        await self.add(harness, new_schedule(queue, "taken"))
        stored = await self.add(harness, new_schedule(queue, "mine"))
        with pytest.raises(ScheduleAlreadyExists):
            await harness.schedules.update_schedule(
                queue.id,
                stored.id,
                ScheduleUpdate(name="taken"),
                _audit(queue.id, stored.id, AuditAction.SCHEDULE_UPDATED),
            )
        with pytest.raises(ScheduleAlreadyExists):
            await self.add(harness, new_schedule(queue, "taken"))
        records = await harness.audit_log.list_audit_records(
            limit=10, after=None, queue_id=queue.id, action=AuditAction.SCHEDULE_UPDATED
        )
        assert records == []
        assert (await self.get(harness, stored)).name == "mine"

    async def test_a_new_recurrence_starts_afresh_a_new_message_keeps_the_due_time(
        self, harness: ScheduleHarness
    ) -> None:
        queue = await self.queue(harness)
        stored = await self.add(harness, new_schedule(queue, every=3600))
        template = MessageTemplate("new", Priority.LOW, None, "g")
        audit = _audit(queue.id, stored.id, AuditAction.SCHEDULE_UPDATED)
        kept = await harness.schedules.update_schedule(
            queue.id, stored.id, ScheduleUpdate(message=template), audit
        )
        assert kept.message == template and kept.next_run_at == stored.next_run_at
        assert kept.updated_at >= stored.updated_at and kept.created_at == stored.created_at
        await harness.advance(100)
        changed = await harness.schedules.update_schedule(
            queue.id, stored.id, ScheduleUpdate(every_seconds=60), audit
        )
        assert changed.recurrence == Recurrence(every_seconds=60)
        assert changed.next_run_at == changed.updated_at + timedelta(seconds=60)
        to_cron = await harness.schedules.update_schedule(
            queue.id, stored.id, ScheduleUpdate(cron="0 3 * * *", timezone="Asia/Tokyo"), audit
        )
        assert to_cron.recurrence == Recurrence(cron="0 3 * * *", timezone="Asia/Tokyo")
        assert to_cron.next_run_at is not None
        in_utc = to_cron.next_run_at.astimezone(UTC)
        assert (in_utc.hour, in_utc.minute) == (18, 0)  # 03:00 in Tokyo
        assert await self.get(harness, stored) == to_cron

    async def test_pause_clears_the_due_time_and_resume_starts_it_afresh(
        self, harness: ScheduleHarness
    ) -> None:
        queue = await self.queue(harness)
        stored = await self.add(harness, new_schedule(queue, every=60))
        schedules = harness.schedules
        audit = _audit(queue.id, stored.id, AuditAction.SCHEDULE_PAUSED)
        paused = await schedules.set_schedule_paused(queue.id, stored.id, True, audit)
        assert paused.paused is True and paused.next_run_at is None
        again = await schedules.set_schedule_paused(queue.id, stored.id, True, audit)
        assert again.next_run_at is None
        await harness.advance(3600)  # sixty due times pass while paused
        assert await self.runs_of(harness, queue) == []
        resumed = await schedules.set_schedule_paused(queue.id, stored.id, False, audit)
        assert resumed.paused is False
        assert resumed.next_run_at == resumed.updated_at + timedelta(seconds=60)
        assert await self.runs_of(harness, queue) == []  # nothing caught up
        assert await self.stored_messages(harness, queue) == []

    async def test_a_deleted_queue_takes_its_schedules(self, harness: ScheduleHarness) -> None:
        from tests.contract.repository_contract import audit_of

        queue = await self.queue(harness)
        stored = await self.add(harness, new_schedule(queue, every=1))
        assert await harness.queues.delete_queue(queue.id, audit_of(queue.id))
        assert await harness.schedules.get_schedule(queue.id, stored.id) is None
        await harness.advance(5)
        assert await self.runs_of(harness, queue) == []

    # -- runs ----------------------------------------------------------------------------

    async def test_a_due_time_enqueues_its_message_once_and_advances_the_schedule(
        self, harness: ScheduleHarness
    ) -> None:
        queue = await self.queue(harness, default_message_ttl_seconds=900)
        stored = await self.add(harness, new_schedule(queue, every=60, group="lane"))
        assert await self.runs_of(harness, queue) == []  # not due yet
        await harness.advance(60.5)
        # (Read again: PostgreSQL's harness moves the stored times back instead of the clock.)
        due = (await self.get(harness, stored)).next_run_at
        [run] = await self.runs_of(harness, queue)
        assert run.schedule_id == stored.id and run.queue_name == queue.name
        assert run.enqueued is True and run.missed == 0
        assert run.due_at == due
        assert run.next_run_at == run.due_at + timedelta(seconds=60)
        assert run.message_id == scheduled_message_id(stored.id, run.due_at)
        assert run.ran_at >= run.due_at
        [message] = await self.stored_messages(harness, queue)
        assert message.id == run.message_id and due_time_of(message.id) <= run.due_at
        assert (message.payload, message.priority, message.group) == ("tick", Priority.HIGH, "lane")
        assert message.schedule_id == stored.id and message.delivery_attempts == 0
        assert message.enqueued_at == run.ran_at
        # No ttl in the template: the queue's default lifetime, as for any message.
        assert message.expires_at - message.enqueued_at == timedelta(seconds=900)
        after = await self.get(harness, stored)
        assert (after.last_run_at, after.next_run_at) == (run.ran_at, run.next_run_at)
        assert await self.runs_of(harness, queue) == []  # once
        [state] = [s for s in await harness.state.read_state(queue.id) if s.priority == 3]
        assert state.ready == 1

    async def test_each_due_time_runs_once_in_order(self, harness: ScheduleHarness) -> None:
        queue = await self.queue(harness)
        stored = await self.add(harness, new_schedule(queue, every=10, ttl=3600))
        for _ in range(5):
            await harness.advance(10)
            due = (await self.get(harness, stored)).next_run_at
            [run] = await self.runs_of(harness, queue)
            assert (run.due_at, run.missed, run.enqueued) == (due, 0, True)
            assert run.next_run_at == run.due_at + timedelta(seconds=10)
            [message] = await self.stored_messages(harness, queue)
            assert message.id == run.message_id
            # Consumed before the next due time. (PostgreSQL's harness moves stored times
            # back rather than its clock forward, so its due times repeat the same instant,
            # and with it the due time's message id: a live one would be a duplicate.)
            audit = AuditEntry.of_message(AuditAction.MESSAGE_DELETED, queue.id, message.id, CALLER)
            assert await harness.browser.delete_message(queue.id, message.id, audit)

    async def test_due_times_missed_while_nothing_ran_are_enqueued_once_late(
        self, harness: ScheduleHarness
    ) -> None:
        queue = await self.queue(harness)
        stored = await self.add(harness, new_schedule(queue, every=60))
        await harness.advance(60 * 10 + 30)  # ten due times passed (and a half)
        first = (await self.get(harness, stored)).next_run_at
        assert first is not None
        [run] = await self.runs_of(harness, queue)
        assert run.due_at == first and run.missed == 9
        assert run.next_run_at == first + timedelta(seconds=600)  # the grid, after now
        assert run.next_run_at > run.ran_at
        assert run.lag_seconds >= 570
        assert len(await self.stored_messages(harness, queue)) == 1  # never a burst
        assert await self.runs_of(harness, queue) == []

    async def test_a_paused_queues_schedules_still_enqueue(self, harness: ScheduleHarness) -> None:
        queue = await self.queue(harness, paused=True)
        await self.add(harness, new_schedule(queue, every=5))
        await harness.advance(5)
        [run] = await self.runs_of(harness, queue)
        assert run.enqueued
        assert len(await self.stored_messages(harness, queue)) == 1
        result = await harness.messages.dequeue(
            queue.id, limit=1, visibility_timeout_seconds=30, dead_letter_batch_size=10
        )
        assert result.paused and result.messages == []

    async def test_a_due_time_already_enqueued_is_never_enqueued_again(
        self, harness: ScheduleHarness
    ) -> None:
        """A fault that put a due time back (the next due time rewound to one already run)
        still enqueues nothing twice: the message id is the due time's."""
        queue = await self.queue(harness)
        stored = await self.add(harness, new_schedule(queue, every=30))
        await harness.advance(30)
        [run] = await self.runs_of(harness, queue)
        await harness.rewind_schedule(stored.id, run.due_at)
        [again] = await self.runs_of(harness, queue)
        assert (again.due_at, again.message_id, again.enqueued) == (
            run.due_at,
            run.message_id,
            False,
        )
        assert len(await self.stored_messages(harness, queue)) == 1
        assert (await self.get(harness, stored)).next_run_at == again.next_run_at
        assert await self.runs_of(harness, queue) == []

    async def test_nothing_due_says_how_long_until_the_earliest_due_time(
        self, harness: ScheduleHarness
    ) -> None:
        queue = await self.queue(harness)
        await self.add(harness, new_schedule(queue, every=600))
        assert await self.runs_of(harness, queue) == []
        due = await harness.schedules.run_due_schedule()
        assert due.run is None
        assert due.next_due_in_seconds is not None and due.next_due_in_seconds <= 600

    async def test_the_earliest_due_time_runs_first(self, harness: ScheduleHarness) -> None:
        queue = await self.queue(harness)
        late = await self.add(harness, new_schedule(queue, "late", every=50))
        early = await self.add(harness, new_schedule(queue, "early", every=20))
        await harness.advance(60)
        runs = await self.runs_of(harness, queue)
        assert [r.schedule_id for r in runs] == [early.id, late.id]
        assert [r.missed for r in runs] == [2, 0]  # early: 40 s and 60 s passed too

    async def test_deleting_a_schedule_keeps_what_it_enqueued(
        self, harness: ScheduleHarness
    ) -> None:
        queue = await self.queue(harness)
        stored = await self.add(harness, new_schedule(queue, every=5))
        await harness.advance(5)
        assert len(await self.runs_of(harness, queue)) == 1
        audit = _audit(queue.id, stored.id, AuditAction.SCHEDULE_DELETED)
        assert await harness.schedules.delete_schedule(queue.id, stored.id, audit)
        await harness.advance(5)
        assert await self.runs_of(harness, queue) == []
        [message] = await self.stored_messages(harness, queue)
        assert message.schedule_id == stored.id
        assert (await harness.browser.get_message(queue.id, message.id)).schedule_id == stored.id
