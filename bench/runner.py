"""Runs every scenario on every system, interleaved, and collects the results.

Scenario-major order: each scenario runs on Retsu, then its SQL floor, then the minimal
floor, then PgQueuer, before the next scenario starts, so the systems of one row are measured
minutes apart at most on a machine whose background load drifts.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from bench import consumers, scenarios
from bench.common import (
    AutovacuumWatch,
    Checkpoints,
    CpuUse,
    CpuWindow,
    Databases,
    HeldHorizon,
    RssSampler,
    autovacuum_note,
    checkpoint_note,
    dead_rows,
)
from bench.floor import FloorSystem, SqlInterfaceSystem
from bench.minimal_system import MinimalSystem
from bench.pgqueuer_system import PgQueuerSystem
from bench.retsu_system import RetsuSystem
from bench.scenarios import Config, FeatureSystem, Result, System
from bench.what_if import ATTEMPTS_NOT_RECORDED, WhatIf


@dataclass
class Options:
    admin_url: str
    workers: int = 2
    db_connections: int = 10
    pgq_consumers: int = 5
    redis_url: str | None = None
    connect_burst: bool = False
    pgbouncer_url: str | None = None  # Retsu's database.url through it (its own URL)
    systems: tuple[str, ...] = ("retsu", "floor", "sql", "minimal", "pgqueuer")
    scenarios: tuple[str, ...] = scenarios.SCENARIOS
    config: Config = field(default_factory=Config)
    consumer_baseline: Path | None = None  # an older retsu_client to run beside (consumer-*)
    consumer_fixed: bool = False  # also retsu-worker --prefetch = concurrency (consumer-*)


@dataclass
class RunOutcome:
    results: list[Result]
    rss_peaks: dict[str, int]  # label -> bytes
    started: float
    finished: float
    options: Options


class _Window:
    """A measured window: the CPU it used and the autovacuum work that ran during it (one
    entry in ``vacuumed`` per window, in the order they ran)."""

    def __init__(self, admin_url: str, databases: list[str], api_pids: list[int]) -> None:
        self._admin_url = admin_url
        self._inner = CpuWindow(admin_url, databases, api_pids)
        self._vacuum = AutovacuumWatch(databases)
        self._checkpoints: Checkpoints | None = None
        self.vacuumed: list[dict[str, float]] = []
        self.checkpointed: list[Checkpoints | None] = []

    async def begin(self) -> None:
        self._checkpoints = await Checkpoints.read(self._admin_url)
        self._vacuum.begin(await self._inner.begin())

    async def end(self) -> CpuUse:
        used = await self._inner.end()
        self.vacuumed.append(await self._vacuum.end())
        now = await Checkpoints.read(self._admin_url)
        before = self._checkpoints
        self.checkpointed.append(now.since(before) if now and before else None)
        return used


def mixed_peak(cfg: Config, enqueue: float, consume: float | None) -> tuple[float, str]:
    """The peak a mixed load is a fraction of, and how it was found.

    ``combined``: producers and consumers at the same rate r share one capacity, so
    the peak is the r where r / enqueue_peak + r / dequeue_ack_peak = 1 (each measured
    alone earlier in the run). ``enqueue``: the single-enqueue peak alone, which
    offers more than the system can serve once consumers are added.
    """
    if cfg.mixed_basis == "combined" and consume:
        peak = 1.0 / (1.0 / enqueue + 1.0 / consume)
        return peak, f"the combined peak {peak:,.0f}/s (enqueue-1 and dequeue-ack-1)"
    return enqueue, f"the enqueue-1 peak {enqueue:,.0f}/s"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


async def run_one(
    scenario: str,
    system: System,
    cfg: Config,
    window: _Window,
    peaks: dict[str, float],
) -> Result:
    if scenario == "enqueue-1":
        return await scenarios.enqueue_closed_loop(system, cfg, False, scenario, window)
    if scenario == "enqueue-100":
        return await scenarios.enqueue_closed_loop(system, cfg, True, scenario, window)
    if scenario in ("dequeue-ack-1", "dequeue-ack-100"):
        batch = scenario.endswith("100")
        if isinstance(system, PgQueuerSystem):
            total = cfg.drain_batch if batch else cfg.drain_single
            return await system.drain(cfg, system.batch_size if batch else 1, total, window)
        return await scenarios.drain(system, cfg, batch, scenario, window)
    if scenario in ("backlog-1k", "backlog-100k", "delayed-head", "held-horizon"):
        backlog = cfg.backlog_large if scenario == "backlog-100k" else cfg.backlog_small
        # delayed-head: backlog-1k with delayed HIGH messages ahead of the backlog.
        delayed = cfg.delayed_head if scenario == "delayed-head" else 0
        url = system.database_url
        async with contextlib.AsyncExitStack() as held:
            # held-horizon: backlog-1k with a transaction held open in the system's database
            # from before the backlog is filled to after the window (SPEC §10).
            horizon = None
            if scenario == "held-horizon":
                horizon = await held.enter_async_context(HeldHorizon(url))
            if isinstance(system, PgQueuerSystem):
                result = await system.steady(cfg, backlog, scenario, window, delayed=delayed)
            else:
                result = await scenarios.steady(
                    system, cfg, backlog, scenario, system.prefill, window, delayed=delayed
                )
            if scenario in ("backlog-1k", "held-horizon"):
                # Read before the transaction ends: what it kept vacuum from removing.
                result.extra["dead_rows"] = await dead_rows(url)
            if horizon is not None:
                result.notes.append(f"transaction xid {horizon.xid} held open all along")
        return result
    if scenario == "mixed":
        enqueue_peak = peaks.get(f"{system.key}:enqueue-1")
        if enqueue_peak is None:  # no enqueue-1 this run: measure the peak briefly first
            short = Config(**{**cfg.__dict__, "duration": min(cfg.duration, 3.0)})
            probe = await scenarios.enqueue_closed_loop(system, short, False, "enqueue-1", window)
            enqueue_peak = probe.rate
            await system.new_queue()
        consume_peak = peaks.get(f"{system.key}:dequeue-ack-1")
        peak, basis = mixed_peak(cfg, enqueue_peak, consume_peak)
        rate = max(1.0, peak * cfg.mixed_fraction)
        if isinstance(system, PgQueuerSystem):
            result = await system.mixed(cfg, rate, window)
        else:
            result = await scenarios.mixed(system, cfg, rate, window)
        result.extra["peak"] = peak
        result.notes.insert(0, f"{cfg.mixed_fraction:.0%} of {basis}")
        return result
    raise ValueError(f"unknown scenario {scenario!r}")


def applies(scenario: str, system: object) -> bool:
    """The paired scenarios need Retsu's schema: Retsu and its SQL floor only."""
    return scenario not in scenarios.PAIRED or isinstance(system, (RetsuSystem, FloorSystem))


async def run_paired(
    scenario: str, system: FeatureSystem, cfg: Config, window: scenarios.Window
) -> list[Result]:
    """A new feature's run and its baseline's (``scenarios.PAIRED``), each on a fresh queue."""
    baseline = scenarios.PAIRED[scenario]

    async def steady(name: str, max_in_flight: int | None = None) -> Result:
        await system.new_queue(max_in_flight=max_in_flight)
        return await scenarios.steady(system, cfg, cfg.backlog_small, name, system.prefill, window)

    if scenario == "groups":
        total = cfg.group_count * cfg.group_size

        async def grouped(name: str, groups: int | None) -> Result:
            await system.new_queue()

            async def prefill() -> None:
                if groups is None:
                    await system.prefill(total)
                else:
                    await system.prefill_grouped(total, groups)

            result = await scenarios.prefilled(system, cfg, name, prefill, window, total=total)
            if groups is not None:
                result.extra["groups"] = groups
            return result

        return await scenarios.paired(
            cfg, lambda: grouped(scenario, cfg.group_count), lambda: grouped(baseline, None)
        )
    if scenario == "max-in-flight":

        async def capped() -> Result:
            result = await steady(scenario, cfg.never_reached_cap)
            result.notes.append(f"queue max_in_flight {cfg.never_reached_cap:,}")
            return result

        return await scenarios.paired(cfg, capped, lambda: steady(baseline))
    if scenario == "attempts":

        async def not_recorded() -> Result:
            async with WhatIf(system.database_url, ATTEMPTS_NOT_RECORDED):
                result = await steady(baseline)
            result.notes.append(
                "what-if: "
                + ", ".join(r.function for r in ATTEMPTS_NOT_RECORDED)
                + " redefined without the attempt record in this run's database"
            )
            return result

        return await scenarios.paired(cfg, lambda: steady(scenario), not_recorded)
    raise ValueError(f"unknown paired scenario {scenario!r}")


async def run(options: Options) -> RunOutcome:
    cfg = options.config
    databases = Databases(options.admin_url)
    systems: list[Any] = []
    systems_started: list[Any] = []  # started for the consumer scenarios only
    rss = RssSampler(0.1)
    results: list[Result] = []
    retsu: RetsuSystem | None = None
    started = time.time()
    try:
        wanted = [s for s in options.scenarios if s not in consumers.SCENARIOS]
        consuming = [s for s in options.scenarios if s in consumers.SCENARIOS]
        if wanted and "retsu" in options.systems:
            log(f"starting Retsu: migrate + `retsu api` with {options.workers} process(es)")
            retsu = RetsuSystem(
                await databases.create("retsu"),
                workers=options.workers,
                max_connections=options.db_connections,
                redis_url=options.redis_url,
                connect_burst=options.connect_burst,
                pgbouncer_url=options.pgbouncer_url,
            )
            systems.append(retsu)
            await retsu.start()
            supervisor = retsu.api.supervisor_pid()
            if supervisor is not None:
                rss.watch(supervisor, "supervisor")
            for index, pid in enumerate(retsu.api_pids()):
                rss.watch(pid, f"api-{index + 1}")
            log(
                f"  retsu api on port {retsu.api.port}: supervisor {supervisor}, "
                f"API processes {retsu.api_pids()}, log {retsu.api.log_path}"
            )
        if wanted and "floor" in options.systems:
            log("starting the raw-SQL floor")
            floor = FloorSystem(
                await databases.create("floor"),
                pool_size=options.workers * options.db_connections,
            )
            systems.append(floor)
            await floor.start()
            await floor.rest()  # its pool opens for its own scenarios only
        if any(s in SqlInterfaceSystem.scenarios for s in wanted) and "sql" in options.systems:
            log("starting the SQL interface (retsu.enqueue from asyncpg)")
            sql_interface = SqlInterfaceSystem(
                await databases.create("sql"),
                pool_size=options.workers * options.db_connections,
            )
            systems.append(sql_interface)
            await sql_interface.start()
            await sql_interface.rest()  # its pool opens for its own scenarios only
        if wanted and "minimal" in options.systems:
            log("starting the minimal floor")
            minimal = MinimalSystem(
                await databases.create("minimal"),
                pool_size=options.workers * options.db_connections,
            )
            systems.append(minimal)
            await minimal.start()
            await minimal.rest()  # its pool opens for its own scenarios only
        pgq: PgQueuerSystem | None = None
        if "pgqueuer" in options.systems:
            log("starting PgQueuer")
            pgq = PgQueuerSystem(
                await databases.create("pgqueuer"),
                pool_size=options.workers * options.db_connections,
                consumers=options.pgq_consumers,
            )
            systems.append(pgq)
            await pgq.start()
            await pgq.rest()  # its pool opens for its own scenarios only

        contenders: list[consumers.Contender] = []
        if consuming and "retsu" in options.systems:
            # SPEC §7b: one default `retsu api` (one process, default pool), whatever
            # --workers the other scenarios use.
            log("starting Retsu for the consumer runner: one default `retsu api`")
            single = RetsuSystem(
                await databases.create("retsu_consumer"),
                workers=1,
                max_connections=10,
                redis_url=options.redis_url,
            )
            systems_started.append(single)
            await single.start()
            for pid in single.api_pids():
                rss.watch(pid, "consumer-api")
            contenders.append(consumers.RetsuWorker(single))
            if options.consumer_fixed:
                contenders.append(consumers.RetsuWorker(single, fixed_prefetch=True))
            if options.consumer_baseline is not None:
                contenders.append(consumers.RetsuWorker(single, source=options.consumer_baseline))
        if consuming and pgq is not None:
            contenders.append(consumers.PgqRun(pgq))
        rss.start()

        api_pids = retsu.api_pids() if retsu is not None else []
        peaks: dict[str, float] = {}
        for scenario in options.scenarios:
            if scenario in consumers.SCENARIOS:
                if len(contenders) > 1:
                    results.extend(
                        await consumers.compare(
                            scenario, contenders, cfg, options.admin_url, databases.names(), log
                        )
                    )
                else:
                    log(f"  {scenario}: needs the systems retsu and pgqueuer; skipped")
                continue
            for system in systems:
                if scenario not in getattr(system, "scenarios", (scenario,)):
                    continue  # a system that offers only some scenarios (the SQL interface)
                if not applies(scenario, system):
                    log(f"  {scenario}: not applicable to {system.name}; skipped")
                    continue
                window = _Window(options.admin_url, databases.names(), api_pids)
                began = time.perf_counter()
                await system.ready()
                try:
                    if scenario in scenarios.PAIRED:
                        feature = cast(FeatureSystem, system)
                        produced = await run_paired(scenario, feature, cfg, window)
                    else:
                        await system.new_queue()
                        one = cast(System, system)
                        produced = [await run_one(scenario, one, cfg, window, peaks)]
                        # One window per single scenario: what autovacuum and the
                        # checkpointer did while it was timed.
                        if window.vacuumed and (note := autovacuum_note(window.vacuumed[-1])):
                            produced[0].notes.append(note)
                        if window.checkpointed and (
                            note := checkpoint_note(window.checkpointed[-1])
                        ):
                            produced[0].notes.append(note)
                finally:
                    await system.rest()
                took = time.perf_counter() - began
                spread = getattr(system, "take_spread", lambda: None)()
                for result in produced:
                    if spread:
                        result.notes.append(f"client connections per API process {spread}")
                    results.append(result)
                    peaks[f"{system.key}:{result.scenario}"] = result.rate
                    errors = sum(result.latency.errors.values())
                    log(
                        f"  {result.scenario:<16} {system.name:<34} {result.rate:>10,.0f} msg/s"
                        f"  ({result.messages:,} in {result.seconds:.1f} s; scenario took "
                        f"{took:.1f} s" + (f"; errors: {errors})" if errors else ")")
                    )
            process = retsu.api.process if retsu is not None else None
            if retsu is not None and process is not None and process.poll() is not None:
                raise RuntimeError(f"retsu api exited:\n{retsu.api.output()}")
    finally:
        rss.stop()
        for system in reversed([*systems, *systems_started]):
            try:
                await system.stop()
            except Exception as error:  # keep going: the databases must be dropped
                log(f"stopping {system.name}: {error}")
        await databases.drop_all()
    peaks_by_label = {rss.labels[pid]: peak for pid, peak in rss.peaks.items()}
    return RunOutcome(results, peaks_by_label, started, time.time(), options)


def run_sync(options: Options) -> RunOutcome:
    try:
        import uvloop

        return uvloop.run(run(options))
    except ImportError:
        return asyncio.run(run(options))
