"""The scheduler worker (SPEC §3.12, §5) over the memory storage and a controllable clock:
exactly once per due time with two schedulers, a clock that jumps either way, the
daylight-saving days, riding out an unreachable database, and how long it sleeps."""

from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from uuid import UUID
from zoneinfo import ZoneInfo

import pytest

from retsu.adapters.ids import uuid7
from retsu.adapters.memory.clock import ManualClock
from retsu.adapters.memory.storage import MemoryStorage
from retsu.adapters.telemetry.metrics import Metrics
from retsu.application.scheduler import IDLE_SECONDS, MIN_WAIT_SECONDS, Scheduler
from retsu.domain.audit import AuditAction, AuditEntry, Caller
from retsu.domain.errors import DatabaseUnavailable
from retsu.domain.message import Priority
from retsu.domain.queue import Queue, QueueSettings
from retsu.domain.schedule import (
    DueSchedules,
    MessageTemplate,
    NewSchedule,
    Recurrence,
    ScheduleRun,
    due_time_of,
)
from tests.support.doubles.sleeper import FakeSleeper

BERLIN = ZoneInfo("Europe/Berlin")


class World:
    """One memory storage, a clock, and as many schedulers as a test starts."""

    def __init__(self, start: datetime) -> None:
        self.clock = ManualClock(start)
        self.storage = MemoryStorage(self.clock)
        self.metrics = Metrics()

    async def queue(self, name: str = "jobs") -> Queue:
        now = self.clock.now()
        queue = Queue(uuid7(), name, QueueSettings(), False, now, now)
        return await self.storage.add_queue(
            queue, AuditEntry.of_queue(AuditAction.QUEUE_CREATED, queue.id, Caller())
        )

    async def schedule(
        self, queue: Queue, *, every: int | None = None, cron: str | None = None, tz: str = "UTC"
    ) -> UUID:
        schedule = NewSchedule(
            id=uuid7(),
            queue_id=queue.id,
            name=f"s-{uuid7().hex[-8:]}",
            recurrence=Recurrence(cron=cron, every_seconds=every, timezone=tz),
            message=MessageTemplate("tick", Priority.MEDIUM, 86_400),
        )
        audit = AuditEntry.of_schedule(
            AuditAction.SCHEDULE_CREATED, queue.id, schedule.id, Caller()
        )
        return (await self.storage.add_schedule(schedule, audit)).id

    async def pass_of(self, *schedulers: int) -> None:
        """Each of ``schedulers`` (how many) runs what is due, concurrently, then stops at
        its first sleep."""

        async def one() -> None:
            await Scheduler(
                self.storage, self.metrics, self.metrics, FakeSleeper(stop_after=1)
            ).run()

        await asyncio.gather(*(one() for _ in range(schedulers[0] if schedulers else 1)))

    def due_times(self, queue: Queue) -> list[datetime]:
        """The due time each stored message stands for (its id), in enqueue order."""
        messages = sorted(self.storage._messages[queue.id].values(), key=lambda m: m.enqueue_order)
        return [due_time_of(m.id) for m in messages]


def local(moment: datetime) -> str:
    return moment.astimezone(BERLIN).strftime("%m-%d %H:%M%z")


def runs(world: World, outcome: str, queue: str = "jobs") -> float:
    value = world.metrics.registry.get_sample_value(
        "queue_schedule_runs_total", {"queue_name": queue, "outcome": outcome}
    )
    return float(value or 0)


async def test_two_schedulers_every_second_enqueue_each_due_time_exactly_once() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    world = World(start)
    queue = await world.queue()
    await world.schedule(queue, every=1)
    # 120 s in steps of 0.3 s; two schedulers run concurrently at every step.
    for _ in range(400):
        world.clock.advance(0.3)
        await world.pass_of(2)
    due = world.due_times(queue)
    expected = [start + timedelta(seconds=s) for s in range(1, 121)]
    assert due == expected  # every due time, once, in order
    assert runs(world, "enqueued") == 120 and runs(world, "missed") == 0


async def test_a_clock_that_jumps_forward_then_back_enqueues_nothing_twice_or_in_a_burst() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    world = World(start)
    queue = await world.queue()
    await world.schedule(queue, every=1)
    for _ in range(10):  # 0 → 10 s, a run each second
        world.clock.advance(1)
        await world.pass_of(2)
    world.clock.advance(30.5)  # jumps to 40.5 s: the due time of 11 s runs once, late
    await world.pass_of(2)
    world.clock.set(start + timedelta(seconds=20))  # back to 20 s: nothing is due again
    await world.pass_of(2)
    for _ in range(25):  # 20 → 45 s: nothing until 41 s, then a run each second
        world.clock.advance(1)
        await world.pass_of(2)
    seconds = [int((d - start).total_seconds()) for d in world.due_times(queue)]
    assert seconds == [*range(1, 12), 41, 42, 43, 44, 45]
    assert len(set(seconds)) == len(seconds)
    assert runs(world, "missed") == 29  # 12 s … 40 s: passed while nothing ran


async def test_spring_forward_a_nightly_job_runs_once_at_the_first_minute_after_the_jump() -> None:
    start = datetime(2026, 3, 27, 12, tzinfo=UTC)
    world = World(start)
    nightly_queue, hourly_queue = await world.queue("nightly"), await world.queue("hourly")
    await world.schedule(nightly_queue, cron="30 2 * * *", tz="Europe/Berlin")
    await world.schedule(hourly_queue, cron="0 * * * *", tz="Europe/Berlin")
    end = datetime(2026, 3, 31, 12, tzinfo=UTC)
    while world.clock.now() < end:
        world.clock.advance(600)
        await world.pass_of(2)
    nightly = [local(d) for d in world.due_times(nightly_queue)]
    # 02:30 does not exist on 03-29: it runs once, at 03:00 CEST.
    assert nightly == [
        "03-28 02:30+0100",
        "03-29 03:00+0200",
        "03-30 02:30+0200",
        "03-31 02:30+0200",
    ]
    hourly = world.due_times(hourly_queue)
    assert all(b - a == timedelta(hours=1) for a, b in itertools.pairwise(hourly))
    on_the_day = [local(d) for d in hourly if local(d).startswith("03-29")]
    assert len(on_the_day) == 23  # a 23-hour day
    assert "03-29 01:00+0100" in on_the_day and "03-29 03:00+0200" in on_the_day
    assert runs(world, "missed", "nightly") == runs(world, "missed", "hourly") == 0


async def test_fall_back_a_nightly_job_runs_once_and_a_half_hourly_one_every_half_hour() -> None:
    start = datetime(2026, 10, 24, 12, tzinfo=UTC)
    world = World(start)
    nightly_queue, half_hourly_queue = await world.queue("nightly"), await world.queue("half")
    await world.schedule(nightly_queue, cron="30 2 * * *", tz="Europe/Berlin")
    await world.schedule(half_hourly_queue, cron="*/30 * * * *", tz="Europe/Berlin")
    end = datetime(2026, 10, 26, 12, tzinfo=UTC)
    while world.clock.now() < end:
        world.clock.advance(300)
        await world.pass_of(2)
    nightly = [
        d.astimezone(BERLIN).strftime("%m-%d %H:%M%z") for d in world.due_times(nightly_queue)
    ]
    assert nightly == ["10-25 02:30+0200", "10-26 02:30+0100"]  # once, though 02:30 came twice
    half = world.due_times(half_hourly_queue)
    assert all(b - a == timedelta(minutes=30) for a, b in itertools.pairwise(half))
    repeated_hour = [
        d.astimezone(BERLIN).strftime("%H:%M%z")
        for d in half
        if d.astimezone(BERLIN).strftime("%m-%d %H") == "10-25 02"
    ]
    assert repeated_hour == ["02:00+0200", "02:30+0200", "02:00+0100", "02:30+0100"]


@dataclass
class FlakyRunner:
    """Unreachable for the first ``failures`` calls, then one run, then nothing due."""

    failures: int
    calls: int = 0
    runs: list[ScheduleRun] = field(default_factory=list)

    async def run_due_schedule(self) -> DueSchedules:
        self.calls += 1
        if self.calls <= self.failures:
            raise DatabaseUnavailable()
        if self.calls == self.failures + 1:
            now = datetime(2026, 1, 1, tzinfo=UTC)
            run = ScheduleRun(
                uuid7(), uuid7(), "jobs", uuid7(), Priority.LOW, now, now, now + timedelta(1)
            )
            self.runs.append(run)
            return DueSchedules(run)
        return DueSchedules(next_due_in_seconds=0.2)


async def test_an_unreachable_database_is_retried_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runner = FlakyRunner(failures=3)
    sleeper = FakeSleeper(stop_after=4)
    metrics = Metrics()
    with caplog.at_level(logging.DEBUG, logger="retsu.worker.scheduler"):
        await Scheduler(runner, metrics, metrics, sleeper, retry_seconds=1.5).run()
    assert sleeper.sleeps == [1.5, 1.5, 1.5, 0.2]  # three retries, then the next due time
    assert len(runner.runs) == 1
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2  # the first failure, and the recovery
    assert "run failed" in warnings[0].getMessage()
    assert "answers again" in warnings[1].getMessage()


async def test_any_other_failure_ends_the_worker() -> None:
    class Broken:
        async def run_due_schedule(self) -> DueSchedules:
            raise RuntimeError("a bug")

    metrics = Metrics()
    with pytest.raises(RuntimeError):
        await Scheduler(Broken(), metrics, metrics, FakeSleeper(stop_after=5)).run()


@pytest.mark.parametrize(
    ("next_due", "slept"),
    [(None, IDLE_SECONDS), (30.0, IDLE_SECONDS), (0.25, 0.25), (-2.0, MIN_WAIT_SECONDS)],
)
async def test_it_sleeps_until_the_next_due_time_at_most_a_second(
    next_due: float | None, slept: float
) -> None:
    class Idle:
        async def run_due_schedule(self) -> DueSchedules:
            return DueSchedules(next_due_in_seconds=next_due)

    sleeper = FakeSleeper(stop_after=1)
    metrics = Metrics()
    await Scheduler(Idle(), metrics, metrics, sleeper).run()
    assert sleeper.sleeps == [slept]


async def test_a_stop_request_ends_it_after_the_run_in_progress() -> None:
    world = World(datetime(2026, 1, 1, tzinfo=UTC))
    queue = await world.queue()
    await world.schedule(queue, every=1)
    world.clock.advance(1)
    sleeper = FakeSleeper()
    sleeper.stop()
    await Scheduler(world.storage, world.metrics, world.metrics, sleeper).run()
    assert world.due_times(queue) == []  # stopped before taking new work
