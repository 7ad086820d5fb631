"""The benchmark's own code against a real `retsu api` for about a second (bench/)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.conftest import create_database, drop_database
from tests.support.services import PostgresServer

pytestmark = pytest.mark.integration

bench_common = pytest.importorskip("bench.common", reason="the bench extra is not installed")


@pytest.fixture
async def bench_database(postgres_server: PostgresServer) -> AsyncIterator[str]:
    url = await create_database(postgres_server, migrate=False)
    yield url
    await drop_database(postgres_server, url)


async def test_the_load_generator_drives_a_real_api(
    postgres_server: PostgresServer, bench_database: str
) -> None:
    from bench import scenarios
    from bench.common import CpuWindow, plain_url
    from bench.floor import Statements
    from bench.retsu_system import RetsuSystem

    database_url = plain_url(bench_database)
    system = RetsuSystem(database_url, workers=1, max_connections=4)
    cfg = scenarios.Config(duration=0.5, connections=4, drain_single=200)
    await system.start()  # `retsu migrate`, then `retsu api`
    try:
        name = database_url.rsplit("/", 1)[1]
        window = CpuWindow(postgres_server.admin_url, [name], system.api_pids())

        await system.new_queue()
        enqueued = await scenarios.enqueue_closed_loop(system, cfg, False, "enqueue-1", window)
        assert enqueued.latency.errors == {}
        assert enqueued.messages > 0
        assert enqueued.cpu is not None and enqueued.cpu.api > 0

        await system.new_queue()
        drained = await scenarios.drain(system, cfg, False, "dequeue-ack-1", window)
        assert drained.latency.errors == {}
        assert drained.messages == cfg.drain_single  # prefilled through Retsu's schema rules
        assert drained.latency.summary("ack") is not None
    finally:
        await system.stop()
    assert system.api.process is not None and system.api.process.returncode == 0, (
        system.api.output()
    )
    # The floor compiles Retsu's own statements for asyncpg.
    statements = Statements.from_retsu()
    assert "$1" in statements.dequeue.sql and "queue_id" in statements.dequeue.order


async def test_the_minimal_floor_and_the_delayed_head_scenario(
    postgres_server: PostgresServer, bench_database: str
) -> None:
    """The minimal floor runs every kind of scenario, and delayed-head keeps its delayed
    messages out of delivery (on the minimal floor and on Retsu's SQL floor)."""
    from bench import scenarios
    from bench.common import CpuWindow, plain_url
    from bench.floor import FloorSystem
    from bench.minimal_system import MinimalSystem

    database_url = plain_url(bench_database)
    name = database_url.rsplit("/", 1)[1]
    window = CpuWindow(postgres_server.admin_url, [name], [])
    cfg = scenarios.Config(
        duration=0.3,
        connections=3,
        drain_single=100,
        drain_batch=300,
        backlog_small=50,
        warmup_messages=20,
        warmup_max_seconds=5,
        keeper_chunk=20,
        delayed_head=200,
    )

    minimal = MinimalSystem(database_url, pool_size=3)
    await minimal.start()
    try:
        await minimal.new_queue()
        enqueued = await scenarios.enqueue_closed_loop(minimal, cfg, True, "enqueue-100", window)
        assert enqueued.latency.errors == {} and enqueued.messages > 0
        await minimal.new_queue()
        drained = await scenarios.drain(minimal, cfg, True, "dequeue-ack-100", window)
        assert drained.messages == cfg.drain_batch
        await minimal.new_queue()
        steady = await scenarios.steady(
            minimal, cfg, 50, "delayed-head", minimal.prefill, window, delayed=cfg.delayed_head
        )
        assert steady.messages > 0 and steady.extra["delayed"] == cfg.delayed_head
        left = await minimal.pool.fetchval(
            "SELECT count(*) FROM minimal_message WHERE lease_until > now() + interval '10 min'"
        )
        assert left == cfg.delayed_head  # none of them delivered
    finally:
        await minimal.stop()

    floor = FloorSystem(database_url, pool_size=3)
    await floor.start()  # `retsu migrate` into the same database (other tables)
    try:
        await floor.new_queue()
        steady = await scenarios.steady(
            floor, cfg, 50, "delayed-head", floor.prefill, window, delayed=cfg.delayed_head
        )
        assert steady.latency.errors == {} and steady.messages > 0
        counts = await floor.pool.fetchrow(
            "SELECT sum(delayed) AS delayed, sum(enqueued) AS enqueued "
            "FROM queue_state_rollup WHERE queue_id = $1",
            floor.queue_id,
        )
        assert counts["delayed"] == cfg.delayed_head  # counted as Retsu counts them
    finally:
        await floor.stop()


async def test_the_consumer_runners_drain_a_backlog(
    postgres_server: PostgresServer, bench_database: str
) -> None:
    """consumer-1/consumer-10 (bench/consumers.py): the real `retsu-worker` and PgQueuer's
    runner each drain a prefilled backlog in a process of their own, are timed until the
    queue is empty, and stop on SIGTERM (`retsu-worker` with exit status 0)."""
    pytest.importorskip("pgqueuer", reason="the bench extra is not installed")
    from bench import consumers, scenarios
    from bench.common import plain_url
    from bench.pgqueuer_system import PgQueuerSystem
    from bench.retsu_system import RetsuSystem

    database_url = plain_url(bench_database)
    name = database_url.rsplit("/", 1)[1]
    cfg = scenarios.Config(consumer_single=60, consumer_batch=300, consumer_rounds=1)
    retsu = RetsuSystem(database_url, workers=1, max_connections=4)
    pgq = PgQueuerSystem(database_url, pool_size=2, consumers=1)
    await retsu.start()
    try:
        await pgq.start()  # PgQueuer's own tables, beside Retsu's
        try:
            contenders = [consumers.RetsuWorker(retsu), consumers.PgqRun(pgq)]
            for scenario, count in (("consumer-1", 60), ("consumer-10", 300)):
                results = await consumers.compare(
                    scenario, contenders, cfg, postgres_server.admin_url, [name]
                )
                assert [r.system_key for r in results] == ["retsu", "pgqueuer"]
                for result in results:
                    assert result.messages == count, result.notes
                    assert result.rate > 0
                    assert not any("exit status" in note for note in result.notes), result.notes
                assert await contenders[0].empty() and await contenders[1].empty()
                notes = "; ".join(results[0].notes)
                assert "per-round ratio to PgQueuer" in notes and "dequeue" in notes
        finally:
            await pgq.stop()
    finally:
        await retsu.stop()


async def test_the_held_horizon_holds_an_xid_in_the_systems_database_until_it_ends(
    bench_database: str,
) -> None:
    """The held-horizon scenario's transaction (SPEC §10): Retsu's own health reader names
    it while it is held, and it is gone after."""
    from bench.common import HELD_HORIZON_APPLICATION, HeldHorizon, plain_url

    from retsu.adapters.postgres.database import Database
    from retsu.adapters.postgres.engine import create_engine
    from retsu.adapters.postgres.health import PostgresDatabaseHealth

    engine = create_engine(bench_database, max_connections=1)
    reader = PostgresDatabaseHealth(Database(engine))
    try:
        async with HeldHorizon(plain_url(bench_database)) as held:
            health = await reader.read_database_health()
            (holder,) = [h for h in health.holders if h.name == HELD_HORIZON_APPLICATION]
            assert holder.pid == held.pid
            # Its snapshot's xmin, or its own xid (txid_current() is 64-bit, epoch included).
            assert held.xid is not None and holder.xid <= held.xid % 2**32
            assert holder.state == "idle in transaction"
        health = await reader.read_database_health()
        assert [h for h in health.holders if h.name == HELD_HORIZON_APPLICATION] == []
    finally:
        await engine.dispose()


async def test_the_grouped_prefill_stores_what_retsu_enqueue_stores(bench_database: str) -> None:
    """The groups scenario's fast prefill (one INSERT … SELECT) leaves the rows, lanes and
    counters that Retsu's own enqueue leaves for the same messages, enqueued in one batch."""
    from bench.common import DEFAULT_TTL_SECONDS, plain_url, retsu_prefill_grouped
    from bench.floor import FloorSystem

    count, groups = 14, 4
    floor = FloorSystem(plain_url(bench_database), pool_size=1)
    await floor.start()  # `retsu migrate`
    try:
        await floor.new_queue()
        fast = floor.queue_id
        await retsu_prefill_grouped(floor.pool, fast, count, groups, floor.payload)
        real = uuid.uuid4()
        await floor.pool.execute(
            "INSERT INTO queue (id, name, visibility_timeout_seconds, max_delivery_attempts, "
            "default_message_ttl_seconds, paused, created_at, updated_at) "
            "VALUES ($1, 'real', 30, 5, $2, false, now(), now())",
            real,
            DEFAULT_TTL_SECONDS,
        )
        await floor.pool.execute(
            "SELECT * FROM retsu_enqueue($1, $2, $3, $4, $5, $6, $7)",
            real,
            [uuid.uuid4() for _ in range(count)],
            [floor.payload] * count,
            [(3, 2, 1)[(i + 1) % 3] for i in range(count)],  # row i + 1: ARRAY[3,2,1][1 + i % 3]
            [None] * count,
            [0] * count,
            [f"group-{i % groups}" for i in range(count)],
        )

        async def stored(queue_id: uuid.UUID) -> dict[str, Any]:
            messages = await floor.pool.fetch(
                "SELECT priority, state, group_key, wait_key = enqueue_order AS head_key, "
                "wait_key IS NULL AS no_key, delivery_attempts, available_after <= now() AS now "
                "FROM queue_message WHERE queue_id = $1 ORDER BY enqueue_order",
                queue_id,
            )
            lanes = await floor.pool.fetch(
                "SELECT g.group_key, g.leased, g.pending, g.waiting, g.waiting_delayed, "
                "g.last_delivery_key, g.head_key = (SELECT min(m.enqueue_order) "
                "FROM queue_message AS m WHERE m.queue_id = g.queue_id "
                "AND m.group_key = g.group_key) AS head_key "
                "FROM queue_group AS g WHERE g.queue_id = $1 ORDER BY g.group_key",
                queue_id,
            )
            by_priority = await floor.pool.fetch(
                "SELECT priority, sum(ready) AS ready, sum(in_flight) AS in_flight, "
                "sum(delayed) AS delayed, sum(enqueued) AS enqueued "
                "FROM queue_state_rollup WHERE queue_id = $1 GROUP BY 1 ORDER BY 1",
                queue_id,
            )
            groups_by_row = await floor.pool.fetch(
                "SELECT priority, shard, groups FROM queue_state_rollup "
                "WHERE queue_id = $1 AND groups <> 0 ORDER BY 1, 2",
                queue_id,
            )
            return {
                "messages": [dict(r) for r in messages],
                "lanes": [dict(r) for r in lanes],
                "by_priority": [dict(r) for r in by_priority],
                "groups": [dict(r) for r in groups_by_row],
            }

        made, expected = await stored(fast), await stored(real)
        assert made == expected
        assert len(made["lanes"]) == groups and sum(g["groups"] for g in made["groups"]) == groups
    finally:
        await floor.stop()


async def test_the_paired_scenarios_run_on_a_real_api(
    postgres_server: PostgresServer, bench_database: str
) -> None:
    """groups, max-in-flight and attempts each give their feature's figure and their
    baseline's; the attempts what-if puts Retsu's functions back when it ends."""
    from bench import runner, scenarios
    from bench.common import CpuWindow, plain_url
    from bench.retsu_system import RetsuSystem
    from bench.what_if import ATTEMPTS_NOT_RECORDED, WhatIf

    database_url = plain_url(bench_database)
    system = RetsuSystem(database_url, workers=1, max_connections=4)
    cfg = scenarios.Config(
        duration=0.3,
        connections=3,
        backlog_small=50,
        warmup_messages=20,
        warmup_max_seconds=5,
        keeper_chunk=20,
        # Enough that the warm-up and 0.3 s do not drain it: the groups scenario has no
        # keeper, and a drained backlog answers empty dequeues (seen at 500 messages).
        group_count=200,
        group_size=10,
    )
    await system.start()
    try:
        name = database_url.rsplit("/", 1)[1]
        window = CpuWindow(postgres_server.admin_url, [name], system.api_pids())
        for scenario, order in (
            ("groups", "baseline-first"),
            ("max-in-flight", "feature-first"),
            ("attempts", "baseline-first"),
        ):
            cfg.pair_order = order
            results = await runner.run_paired(scenario, system, cfg, window)
            assert [r.scenario for r in results] == [scenario, scenarios.PAIRED[scenario]]
            for result in results:
                assert result.latency.errors == {}, (scenario, result.latency.error_examples)
                assert result.messages > 0, (scenario, result.notes)
        definitions = [
            await system._sql.fetchval("SELECT pg_get_functiondef($1::regproc)", r.function)
            for r in ATTEMPTS_NOT_RECORDED
        ]
        assert all("retsu_new_attempt" in d for d in definitions[:2])
        assert "'acknowledged'" in definitions[2]
        async with WhatIf(database_url, ATTEMPTS_NOT_RECORDED):
            inside = await system._sql.fetchval(
                "SELECT pg_get_functiondef('retsu_dequeue'::regproc)"
            )
            assert "retsu_new_attempt" not in inside and "plan_cache_mode" in inside
        after = await system._sql.fetchval("SELECT pg_get_functiondef('retsu_dequeue'::regproc)")
        assert after == definitions[0]
    finally:
        await system.stop()


async def test_the_sql_interface_enqueues_single_and_100_in_a_transaction(
    postgres_server: PostgresServer, bench_database: str
) -> None:
    """`retsu.enqueue` from asyncpg (SPEC §3.13); concurrent transactions of 100 enqueues
    each once deadlocked on the counter rows (migration 0012's retsu_uuid7)."""
    from bench import scenarios
    from bench.common import CpuWindow, plain_url
    from bench.floor import SqlInterfaceSystem

    database_url = plain_url(bench_database)
    window = CpuWindow(postgres_server.admin_url, [database_url.rsplit("/", 1)[1]], [])
    cfg = scenarios.Config(duration=0.5, connections=4)
    system = SqlInterfaceSystem(database_url, pool_size=4)
    await system.start()
    try:
        for batch, scenario in ((False, "enqueue-1"), (True, "enqueue-100")):
            await system.new_queue()
            result = await scenarios.enqueue_closed_loop(system, cfg, batch, scenario, window)
            assert result.latency.errors == {}, scenario
            assert result.messages > 0
    finally:
        await system.stop()


async def test_a_systems_pool_is_open_only_between_ready_and_rest(
    postgres_server: PostgresServer, bench_database: str
) -> None:
    """The runner rests every system's pool outside its own scenarios, so the five systems
    of a default run stay under PostgreSQL's 100 connections (bench/common.py)."""
    import asyncpg
    from bench.common import plain_url
    from bench.minimal_system import MinimalSystem

    database_url = plain_url(bench_database)
    name = database_url.rsplit("/", 1)[1]

    async def sessions() -> int:
        admin = await asyncpg.connect(plain_url(postgres_server.admin_url))
        try:
            return int(
                await admin.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 "
                    "AND application_name = 'retsu-bench-minimal'",
                    name,
                )
            )
        finally:
            await admin.close()

    minimal = MinimalSystem(database_url, pool_size=4)
    await minimal.start()
    try:
        assert await sessions() == 4  # start leaves it ready (standalone tools use it)
        await minimal.rest()
        assert await sessions() == 0
        with pytest.raises(RuntimeError, match="at rest"):
            minimal.pool  # noqa: B018 -- the property is what is tested
        await minimal.ready()
        assert await sessions() == 4
        assert await minimal.pool.fetchval("SELECT 1") == 1
    finally:
        await minimal.stop()
    assert await sessions() == 0
