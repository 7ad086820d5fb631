"""The state-metrics collector: one leader, standbys that never read, clean hand-over."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from datetime import timedelta

import pytest

from retsu.adapters.memory.clock import ManualClock
from retsu.adapters.memory.leadership import (
    InMemoryLeaderSession,
    InMemoryLeadership,
    InMemoryLock,
)
from retsu.adapters.memory.storage import MemoryStorage
from retsu.adapters.telemetry.metrics import OVERFLOW_LABEL, Metrics
from retsu.adapters.telemetry.state_metrics import StateMetricsExporter
from retsu.application.state_collector import CollectorSchedule, StateMetricsCollector
from retsu.domain.audit import AuditAction, AuditEntry, Caller
from retsu.domain.database_health import DatabaseHealth
from retsu.domain.errors import DatabaseUnavailable
from retsu.domain.message import MessageToStore, Priority
from retsu.domain.queue import Queue, QueueSettings
from retsu.domain.state import PriorityState, StateSnapshot
from tests.support.doubles.sleeper import FakeSleeper

SCHEDULE = CollectorSchedule(collection_interval_seconds=15, leadership_retry_interval_seconds=20)


def audit() -> AuditEntry:
    return AuditEntry.of_queue(AuditAction.QUEUE_CREATED, uuid.uuid4(), Caller())


class RecordingSnapshots:
    def __init__(self) -> None:
        self.events: list[str] = []
        self.snapshots: list[StateSnapshot] = []
        self.outcomes: list[str] = []

    def leadership_acquired(self) -> None:
        self.events.append("leadership")

    def leadership_released(self) -> None:
        self.events.append("released")

    def publish(self, snapshot: StateSnapshot) -> None:
        self.events.append("publish")
        self.snapshots.append(snapshot)

    def publish_database_health(self, health: DatabaseHealth | None) -> None:
        self.events.append("health")

    def collection_finished(self, outcome: str, duration_seconds: float) -> None:
        assert duration_seconds >= 0
        self.outcomes.append(outcome)


class World:
    def __init__(self) -> None:
        self.clock = ManualClock()
        self.repository = MemoryStorage(self.clock)
        self.lock = InMemoryLock()

    def collector(
        self, *, stop_after: int | None = None, clock: ManualClock | None = None
    ) -> tuple[StateMetricsCollector, InMemoryLeadership, RecordingSnapshots, FakeSleeper]:
        leadership = InMemoryLeadership(self.lock, self.repository)
        snapshots = RecordingSnapshots()
        sleeper = FakeSleeper(clock, stop_after=stop_after)
        collector = StateMetricsCollector(leadership, snapshots, self.clock, sleeper, SCHEDULE)
        return collector, leadership, snapshots, sleeper

    async def queue(self, name: str) -> Queue:
        return await self.repository.add_queue(
            Queue(
                id=uuid.uuid4(),
                name=name,
                settings=QueueSettings(),
                paused=False,
                created_at=self.clock.now(),
                updated_at=self.clock.now(),
            ),
            audit(),
        )

    async def send(self, queue: Queue, priority: Priority, n: int = 1) -> None:
        await self.repository.enqueue(
            queue.id,
            [
                MessageToStore(uuid.uuid4(), "x", priority, ttl_seconds=600, delay_seconds=0)
                for _ in range(n)
            ],
        )


@pytest.fixture
def world() -> World:
    return World()


async def test_a_standby_retries_at_the_leadership_interval_and_never_reads(world: World) -> None:
    other = await InMemoryLeadership(world.lock, world.repository).try_acquire()
    assert other is not None
    collector, leadership, snapshots, sleeper = world.collector(stop_after=4)

    await collector.run()

    assert sleeper.sleeps == [20, 20, 20, 20]
    assert leadership.sessions == []  # never held a session, so never read through one
    assert snapshots.events == [] and snapshots.outcomes == []  # no gauges registered either
    assert not collector.is_leader
    assert world.lock.holder is other


async def test_the_leader_refreshes_at_once_then_every_interval(world: World) -> None:
    queue = await world.queue("orders")
    await world.send(queue, Priority.HIGH, 2)
    collector, leadership, snapshots, sleeper = world.collector(stop_after=3, clock=world.clock)
    refreshes_before_each_sleep: list[int] = []
    sleeper.on_sleep = lambda _: refreshes_before_each_sleep.append(collector.refreshes)

    await collector.run()

    assert snapshots.events == ["leadership", "publish", "publish", "publish", "released"]
    assert refreshes_before_each_sleep == [1, 2, 3]  # the first refresh came before any wait
    assert sleeper.sleeps == [15, 15, 15]
    assert snapshots.outcomes == ["success"] * 3
    taken = [s.taken_at for s in snapshots.snapshots]
    assert [b - a for a, b in itertools.pairwise(taken)] == [timedelta(seconds=15)] * 2
    # What was published is what the repository reads, all three priorities.
    latest = snapshots.snapshots[-1].priorities
    assert [(s.queue_name, s.priority, s.ready) for s in latest] == [
        ("orders", Priority.HIGH, 2),
        ("orders", Priority.MEDIUM, 0),
        ("orders", Priority.LOW, 0),
    ]
    # A clean stop gives leadership back.
    [session] = leadership.sessions
    assert session.released and world.lock.holder is None
    assert not collector.is_leader


async def test_a_stop_during_leadership_releases_the_session(world: World) -> None:
    collector, leadership, _, sleeper = world.collector()
    sleeper.on_sleep = lambda _: sleeper.stop()
    await collector.run()
    assert collector.refreshes == 1
    assert leadership.sessions[0].released
    assert world.lock.holder is None


async def test_a_refresh_failing_on_a_live_session_raises_and_releases_leadership(
    world: World,
) -> None:
    collector, leadership, snapshots, sleeper = world.collector()

    def query_fails(_: float) -> None:
        leadership.sessions[0].failing = True  # the session is there; its query fails

    sleeper.on_sleep = query_fails

    with pytest.raises(RuntimeError):
        await collector.run()

    assert collector.refreshes == 1
    assert snapshots.outcomes == ["success", "failure"]
    # No snapshot after the failure, and the old one is withdrawn.
    assert snapshots.events == ["leadership", "publish", "released"]
    assert leadership.sessions[0].released
    assert world.lock.holder is None
    assert not collector.is_leader


async def test_a_lost_session_ends_leadership_and_the_collector_competes_again(
    world: World,
) -> None:
    collector, leadership, snapshots, sleeper = world.collector(stop_after=4)

    def session_dies(_: float) -> None:
        if len(sleeper.sleeps) == 1:
            leadership.sessions[0].broken = True  # killed, or the database restarted

    sleeper.on_sleep = session_dies

    await collector.run()  # no exception: the process keeps running

    assert collector.leaderships_lost == 1
    # Lead, lose it (gauges withdrawn), wait the retry interval, lead again.
    assert sleeper.sleeps == [15, 20, 15, 15]
    assert snapshots.events == [
        "leadership",
        "publish",
        "released",
        "leadership",
        "publish",
        "publish",
        "released",
    ]
    assert snapshots.outcomes == ["success", "failure", "success", "success"]
    assert [session.released for session in leadership.sessions] == [True, True]


async def test_competing_while_the_database_is_unreachable_is_retried_at_the_retry_interval(
    world: World,
) -> None:
    class Restarting:
        def __init__(self) -> None:
            self.attempts = 0
            self.leadership = InMemoryLeadership(world.lock, world.repository)

        async def try_acquire(self) -> InMemoryLeaderSession | None:
            self.attempts += 1
            if self.attempts <= 2:
                raise DatabaseUnavailable()
            return await self.leadership.try_acquire()

    snapshots = RecordingSnapshots()
    sleeper = FakeSleeper(stop_after=3)
    collector = StateMetricsCollector(Restarting(), snapshots, world.clock, sleeper, SCHEDULE)

    await collector.run()

    assert sleeper.sleeps == [20, 20, 15]
    assert snapshots.events == ["leadership", "publish", "released"]


async def test_a_failing_release_does_not_hide_the_refresh_error(world: World) -> None:
    collector, leadership, _, sleeper = world.collector()

    async def release_fails() -> None:
        raise OSError("connection already closed")

    def query_fails(_: float) -> None:
        session = leadership.sessions[0]
        session.failing = True
        session.release = release_fails  # type: ignore[method-assign]

    sleeper.on_sleep = query_fails
    with pytest.raises(RuntimeError):
        await collector.run()


async def test_a_refresh_that_never_answers_fails_after_the_refresh_timeout(world: World) -> None:
    class SilentSession:
        released = False

        async def read_state(self) -> list[PriorityState]:
            await asyncio.Event().wait()  # a leader cut off from its database
            raise AssertionError("unreachable")

        async def release(self) -> None:
            self.released = True

    session = SilentSession()

    class Granted:
        async def try_acquire(self) -> SilentSession:
            return session

    snapshots = RecordingSnapshots()
    collector = StateMetricsCollector(
        Granted(),
        snapshots,
        world.clock,
        FakeSleeper(),
        CollectorSchedule(15, 20, refresh_timeout_seconds=0.01),
    )
    with pytest.raises(TimeoutError):
        await collector.run()
    assert snapshots.outcomes == ["failure"] and snapshots.snapshots == []
    assert session.released


def test_the_refresh_timeout_defaults_to_the_collection_interval() -> None:
    assert CollectorSchedule(15, 20).refresh_timeout == 15
    assert CollectorSchedule(15, 20, refresh_timeout_seconds=3).refresh_timeout == 3


async def test_an_error_while_trying_for_leadership_ends_the_collector(world: World) -> None:
    class Unreachable:
        async def try_acquire(self) -> None:
            raise OSError("connection refused")

    collector = StateMetricsCollector(
        Unreachable(), RecordingSnapshots(), world.clock, FakeSleeper(), SCHEDULE
    )
    with pytest.raises(OSError):
        await collector.run()


async def test_a_second_collector_takes_over_after_the_first_releases(world: World) -> None:
    await world.queue("orders")
    first, first_leadership, first_snapshots, _ = world.collector(stop_after=3)
    second, second_leadership, second_snapshots, second_sleeper = world.collector()
    sleeps_as_standby: list[bool] = []

    def second_rests(_: float) -> None:
        sleeps_as_standby.append(not second.is_leader)
        if second.refreshes >= 2:
            second_sleeper.stop()

    second_sleeper.on_sleep = second_rests

    # The first leads; the second starts while the first holds the lock.
    first_task = asyncio.create_task(first.run())
    await asyncio.sleep(0)
    assert first.is_leader
    await asyncio.gather(first_task, second.run())

    assert first.refreshes == 3 and first_leadership.sessions[0].released
    assert len(second_leadership.sessions) == 1
    assert second.refreshes == 2
    # It waited as a standby (leadership interval) at least once, then led.
    assert second_sleeper.sleeps[0] == 20 and sleeps_as_standby[0]
    assert second_sleeper.sleeps[-1] == 15
    assert second_snapshots.events[0] == "leadership"
    assert first_snapshots.events.count("leadership") == 1
    assert world.lock.holder is None


async def test_two_collectors_started_together_never_lead_at_the_same_time(world: World) -> None:
    a, a_leadership, _, a_sleeper = world.collector(stop_after=4)
    b, _b_leadership, _, b_sleeper = world.collector(stop_after=4)
    both_leading: list[bool] = []

    def check(_: float) -> None:
        both_leading.append(a.is_leader and b.is_leader)

    a_sleeper.on_sleep = b_sleeper.on_sleep = check
    await asyncio.gather(a.run(), b.run())

    assert both_leading and not any(both_leading)
    assert len(a_leadership.sessions) == 1  # the first to try won
    assert b_sleeper.sleeps[0] == 20  # the other one started as a standby
    assert a.refreshes + b.refreshes >= 4


# -- the exporter (StateSnapshots over the process's Prometheus registry) ---------------


def state(name: str, priority: Priority, ready: int, oldest: float = 0.0) -> PriorityState:
    return PriorityState(
        queue_id=uuid.uuid4(),
        queue_name=name,
        priority=priority,
        ready=ready,
        in_flight=1,
        delayed=0,
        dead_letters=0,
        oldest_ready_age_seconds=oldest,
        oldest_in_flight_age_seconds=2.0,
    )


def test_a_standby_exports_no_state_gauges_at_all() -> None:
    metrics = Metrics()
    exporter = StateMetricsExporter(metrics, ManualClock())
    exporter.collection_finished("success", 0.1)  # ignored before leadership
    text = metrics.render()[0].decode()
    assert "queue_messages_ready" not in text
    assert "queue_state_collections_total" not in text
    assert "queue_state_snapshot_age_seconds" not in text


def test_the_leader_exports_every_queue_and_priority_zeros_included() -> None:
    clock = ManualClock()
    metrics = Metrics()
    exporter = StateMetricsExporter(metrics, clock)
    exporter.leadership_acquired()
    exporter.leadership_acquired()  # idempotent: registering twice would raise
    exporter.publish(
        StateSnapshot(
            taken_at=clock.now(),
            priorities=tuple(state("orders", p, 3 if p is Priority.HIGH else 0) for p in Priority),
        )
    )
    exporter.collection_finished("success", 0.02)
    clock.advance(4)
    sample = metrics.registry.get_sample_value
    for priority in Priority:
        labels = {"queue_name": "orders", "message_priority": priority.name}
        assert sample("queue_messages_ready", labels) == (3 if priority is Priority.HIGH else 0)
        assert sample("queue_messages_in_flight", labels) == 1
        assert sample("queue_oldest_in_flight_message_age_seconds", labels) == 2.0
    assert sample("queue_state_snapshot_age_seconds") == 4.0
    assert sample("queue_state_collections_total", {"outcome": "success"}) == 1
    assert sample("queue_state_collection_duration_seconds_count") == 1


def test_an_old_leader_stops_exporting_state_when_leadership_ends() -> None:
    clock = ManualClock()
    metrics = Metrics()
    exporter = StateMetricsExporter(metrics, clock)
    exporter.leadership_acquired()
    exporter.publish(StateSnapshot(clock.now(), (state("orders", Priority.HIGH, 3),)))
    assert "queue_messages_ready{" in metrics.render()[0].decode()
    exporter.leadership_released()
    text = metrics.render()[0].decode()
    assert "queue_messages_ready" not in text
    assert "queue_state_snapshot_age_seconds" not in text
    exporter.leadership_acquired()  # leading again (same process): exporting again
    exporter.publish(StateSnapshot(clock.now(), (state("orders", Priority.HIGH, 4),)))
    sample = metrics.registry.get_sample_value
    assert sample("queue_messages_ready", {"queue_name": "orders", "message_priority": "HIGH"}) == 4


def test_queues_past_the_label_budget_are_summed_under_overflow() -> None:
    clock = ManualClock()
    metrics = Metrics(max_queues=1)
    exporter = StateMetricsExporter(metrics, clock)
    exporter.leadership_acquired()
    exporter.publish(
        StateSnapshot(
            taken_at=clock.now(),
            priorities=(
                state("a", Priority.HIGH, 1, oldest=1),
                state("b", Priority.HIGH, 2, oldest=5),
                state("c", Priority.HIGH, 3, oldest=3),
            ),
        )
    )
    sample = metrics.registry.get_sample_value
    overflow = {"queue_name": OVERFLOW_LABEL, "message_priority": "HIGH"}
    assert sample("queue_messages_ready", {"queue_name": "a", "message_priority": "HIGH"}) == 1
    assert sample("queue_messages_ready", overflow) == 5  # counts add up
    assert sample("queue_oldest_ready_message_age_seconds", overflow) == 5  # ages take the max
    assert sample("queue_messages_in_flight", overflow) == 2


async def test_every_refresh_stores_a_history_snapshot_per_queue(world: World) -> None:
    queue = await world.queue("orders")
    await world.send(queue, Priority.HIGH, 2)
    collector, _, _, sleeper = world.collector(stop_after=3, clock=world.clock)
    sleeper.on_sleep = lambda _: None

    await collector.run()

    points = await world.repository.read_history(
        queue.id, since=world.clock.now() - timedelta(hours=1), bucket_seconds=1
    )
    assert [(p.ready, p.counts.enqueued) for p in points] == [(2, 2), (2, 0), (2, 0)]
    assert [b.at - a.at for a, b in itertools.pairwise(points)] == [timedelta(seconds=15)] * 2


async def test_a_failed_history_write_is_a_failed_refresh(world: World) -> None:
    await world.queue("orders")
    collector, _, snapshots, _sleeper = world.collector(stop_after=3, clock=world.clock)

    async def failing(state: object) -> None:
        raise RuntimeError("the history insert failed")

    world.repository.record_history = failing  # type: ignore[method-assign, assignment]
    with pytest.raises(RuntimeError):
        await collector.run()
    assert snapshots.outcomes == ["failure"]
    assert "publish" not in snapshots.events  # nothing half-done is exported
