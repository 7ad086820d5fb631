"""Database health (SPEC §10): the rules of ``domain.database_health``, the collector
leader's four gauges, and what the console's service warns about — on the memory twin,
time on a ManualClock."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from retsu.adapters.memory.clock import ManualClock
from retsu.adapters.memory.leadership import InMemoryLeadership, InMemoryLock
from retsu.adapters.memory.storage import MemoryStorage
from retsu.adapters.telemetry.metrics import Metrics
from retsu.adapters.telemetry.state_metrics import StateMetricsExporter
from retsu.application.database_health import DatabaseHealthService
from retsu.application.state_collector import CollectorSchedule, StateMetricsCollector
from retsu.domain.database_health import (
    RETSU_TABLES,
    DatabaseHealth,
    HolderKind,
    HorizonHolder,
    since_first_seen,
)
from tests.support.doubles.sleeper import FakeSleeper

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
SCHEDULE = CollectorSchedule(collection_interval_seconds=15, leadership_retry_interval_seconds=20)


def holder(
    name: str, *, since: datetime | None, xid: int = 100, kind: HolderKind = HolderKind.SESSION
) -> HorizonHolder:
    return HorizonHolder(kind, name, "idle in transaction", xid, 5, since, pid=xid)


def health(*holders: HorizonHolder, at: datetime = T0) -> DatabaseHealth:
    return DatabaseHealth(taken_at=at, oldest_transaction_start=None, holders=holders, tables=())


# -- the rules ---------------------------------------------------------------------------


def test_the_horizon_age_is_the_longest_hold_and_zero_when_nothing_holds_it() -> None:
    assert health().xmin_horizon_age_seconds == 0
    assert health().blocking() is None
    read = health(
        holder("report", since=T0 - timedelta(seconds=90), xid=100),
        holder("psql", since=T0 - timedelta(seconds=400), xid=101),
        holder("standby", since=None, xid=99, kind=HolderKind.REPLICATION_SLOT),
    )
    assert read.xmin_horizon_age_seconds == 400
    longest = read.longest_holder()
    assert longest is not None and longest.name == "psql"


@pytest.mark.parametrize(("held", "warned"), [(299, False), (300, False), (301, True)])
def test_the_warning_starts_after_5_minutes(held: float, warned: bool) -> None:
    read = health(holder("psql", since=T0 - timedelta(seconds=held)))
    found = read.blocking()
    assert (found is not None) is warned
    if warned:
        assert found is not None and found.name == "psql"


def test_holders_of_unknown_start_are_dated_from_their_first_sighting() -> None:
    slot = holder("lost-standby", since=None, xid=77, kind=HolderKind.REPLICATION_SLOT)
    first, seen = since_first_seen(health(slot, at=T0), {})
    assert first.holders[0].since == T0
    assert first.xmin_horizon_age_seconds == 0

    later = T0 + timedelta(minutes=6)
    second, seen = since_first_seen(health(slot, at=later), seen)
    assert second.holders[0].since == T0
    assert second.xmin_horizon_age_seconds == 360
    assert second.blocking() is not None

    # The same slot with a newer xmin (a standby's feedback moved on) is a new hold...
    moved = holder("lost-standby", since=None, xid=90, kind=HolderKind.REPLICATION_SLOT)
    third, seen = since_first_seen(health(moved, at=later + timedelta(seconds=15)), seen)
    assert third.xmin_horizon_age_seconds == 0
    # ... and a holder that is gone is forgotten.
    _, seen = since_first_seen(health(at=later + timedelta(seconds=30)), seen)
    assert seen == {}


def test_a_holder_is_dated_no_later_than_its_first_sighting_with_that_xid() -> None:
    # A repeatable-read transaction: storage dates its first statement, then (while its
    # second statement runs) only that statement; its snapshot, and xid, stayed the same.
    first, seen = since_first_seen(health(holder("report", since=T0, xid=7), at=T0), {})
    assert first.holders[0].since == T0
    second_statement = holder("report", since=T0 + timedelta(seconds=400), xid=7)
    later, _ = since_first_seen(health(second_statement, at=T0 + timedelta(seconds=401)), seen)
    assert later.holders[0].since == T0
    assert later.xmin_horizon_age_seconds == 401
    # Known starts that are earlier than any sighting stay as they are.
    early = holder("psql", since=T0 - timedelta(hours=1), xid=8)
    dated, _ = since_first_seen(health(early, at=T0), {})
    assert dated.holders[0].since == T0 - timedelta(hours=1)


async def test_tables_are_reported_as_staged_and_only_retsus() -> None:
    storage = MemoryStorage(ManualClock(T0))
    storage.set_table_statistics(
        "queue_message", dead_rows=12, last_autovacuum=T0 - timedelta(seconds=30)
    )
    read = await storage.read_database_health()
    by_name = {t.table: t for t in read.tables}
    assert by_name["queue_message"].dead_rows == 12
    assert by_name["queue_message"].last_autovacuum_age_seconds(read.taken_at) == 30
    assert by_name["queue"].last_autovacuum_age_seconds(read.taken_at) == math.inf
    with pytest.raises(ValueError):
        storage.set_table_statistics("someone_elses", dead_rows=1, last_autovacuum=None)


# -- the collector leader's gauges -------------------------------------------------------


class World:
    def __init__(self) -> None:
        self.clock = ManualClock(T0)
        self.storage = MemoryStorage(self.clock)
        self.metrics = Metrics()
        self.exporter = StateMetricsExporter(self.metrics, self.clock)
        self.lock = InMemoryLock()

    def collector(self, sleeper: FakeSleeper, reader: object = None) -> StateMetricsCollector:
        return StateMetricsCollector(
            InMemoryLeadership(self.lock, self.storage),
            self.exporter,
            self.clock,
            sleeper,
            SCHEDULE,
            database_health=reader if reader is not None else self.storage,  # type: ignore[arg-type]
        )

    def sample(self, name: str, **labels: str) -> float | None:
        return self.metrics.registry.get_sample_value(name, labels)


async def test_the_leader_exports_the_four_gauges_and_they_move_with_a_held_transaction() -> None:
    world = World()
    world.storage.set_table_statistics(
        "queue_message", dead_rows=4_200, last_autovacuum=T0 - timedelta(seconds=40)
    )
    sleeper = FakeSleeper(world.clock, stop_after=3)
    readings: list[tuple[float | None, float | None]] = []
    tables: dict[str, dict[str, float]] = {}

    def look(_: float) -> None:
        # Called after each refresh, once the sleep moved the clock on by 15 s.
        readings.append(
            (
                world.sample("db_xmin_horizon_age_seconds"),
                world.sample("db_oldest_transaction_age_seconds"),
            )
        )
        if len(readings) == 1:
            world.storage.hold_transaction("nightly-report")
        for family in world.metrics.registry.collect():
            if family.name.startswith("db_table_"):
                tables[family.name] = {s.labels["table"]: s.value for s in family.samples}

    sleeper.on_sleep = look
    await world.collector(sleeper).run()

    # Nothing held at the first refresh; then a transaction held across two more (the clock
    # moved 15 s before each).
    assert readings == [(0.0, 0.0), (0.0, 0.0), (15.0, 15.0)]
    # Every Retsu table by name; ages in the storage's clock at the last read (T0 + 30 s).
    assert set(tables["db_table_dead_rows"]) == set(RETSU_TABLES)
    assert tables["db_table_dead_rows"]["queue_message"] == 4_200
    assert tables["db_table_dead_rows"]["audit_log"] == 0
    assert tables["db_table_last_autovacuum_age_seconds"]["queue_message"] == 70
    assert tables["db_table_last_autovacuum_age_seconds"]["audit_log"] == math.inf
    # Leadership ended with the run: the gauges went with it.
    assert world.sample("db_xmin_horizon_age_seconds") is None
    assert world.sample("db_table_dead_rows", table="queue_message") is None


async def test_a_failing_health_read_exports_nothing_and_never_ends_leadership() -> None:
    world = World()

    class Failing:
        calls = 0

        async def read_database_health(self) -> DatabaseHealth:
            Failing.calls += 1
            raise RuntimeError("permission denied for view pg_stat_activity")

    sleeper = FakeSleeper(world.clock, stop_after=2)
    seen: list[float | None] = []
    sleeper.on_sleep = lambda _: seen.append(world.sample("db_xmin_horizon_age_seconds"))
    collector = world.collector(sleeper, Failing())
    await collector.run()

    assert Failing.calls == 2 and collector.refreshes == 2
    assert collector.leaderships_lost == 0
    assert seen == [None, None]
    # The state refreshes went on regardless.
    assert world.sample("queue_state_collections_total", outcome="success") == 2


async def test_standbys_export_no_health_gauges() -> None:
    world = World()
    other = await InMemoryLeadership(world.lock, world.storage).try_acquire()
    assert other is not None
    sleeper = FakeSleeper(world.clock, stop_after=2)
    await world.collector(sleeper).run()
    names = {family.name for family in world.metrics.registry.collect()}
    assert not names & {
        "db_oldest_transaction_age_seconds",
        "db_xmin_horizon_age_seconds",
        "db_table_dead_rows",
        "db_table_last_autovacuum_age_seconds",
    }


# -- what the console warns about --------------------------------------------------------


async def test_the_service_warns_after_5_minutes_naming_the_session() -> None:
    clock = ManualClock(T0)
    storage = MemoryStorage(clock)
    service = DatabaseHealthService(storage)
    held = storage.hold_transaction("etl-job")
    clock.advance(300)
    assert await service.horizon_warning() is None
    clock.advance(1)
    warning = await service.horizon_warning()
    assert warning is not None
    assert warning.holder.name == "etl-job"
    assert warning.holder.state == "idle in transaction"
    assert warning.held_seconds == 301
    held.end()
    assert await service.horizon_warning() is None
