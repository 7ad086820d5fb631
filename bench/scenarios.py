"""The scenarios, written once against a small interface that every system implements.

A system offers *operations* (enqueue one, enqueue a batch, dequeue one or up to N,
acknowledge what was dequeued), one ``Ops`` object per concurrent client, plus a
fast way to prefill its queue. Retsu implements them over HTTP, the floor over
asyncpg; PgQueuer has no pull-style dequeue, so it implements the consuming
scenarios itself with its own consumer (``ConsumingSystem``).

Every scenario runs on a fresh, empty queue. Throughput is messages completed
divided by the wall time from the first request to the last answer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from bench.client import LatencyRecorder
from bench.common import CpuUse, OpError


class Window(Protocol):
    """Marks the measured part of a scenario (CPU accounting)."""

    async def begin(self) -> None: ...

    async def end(self) -> CpuUse: ...


SCENARIOS = (
    "enqueue-1",
    "enqueue-100",
    "dequeue-ack-1",
    "dequeue-ack-100",
    "backlog-1k",
    "backlog-100k",
    "delayed-head",
    "held-horizon",
    "mixed",
    "consumer-1",
    "consumer-10",
    "groups",
    "max-in-flight",
    "attempts",
)

# The new features' costs (SPEC §7b, issue 24): each of these scenarios measures its feature
# and, seconds apart in the same scenario, the same load without it; the results carry the
# scenario's name and ``<scenario>:<baseline>``. They run on Retsu and its SQL floor (the
# minimal floor and PgQueuer have no groups, caps or attempt records).
PAIRED = {
    "groups": "groups:ungrouped",
    "max-in-flight": "max-in-flight:none",
    "attempts": "attempts:not-recorded",
}

TITLES = {
    "enqueue-1": "enqueue, 1 message per request",
    "enqueue-100": "enqueue, batches of 100",
    "dequeue-ack-1": "dequeue + ack, 1 message per request",
    "dequeue-ack-100": "dequeue + ack, batches of 100",
    "backlog-1k": "dequeue + ack (1 per request), backlog ~1,000",
    "backlog-100k": "dequeue + ack (1 per request), backlog ~100,000",
    "delayed-head": "dequeue + ack (1 per request), backlog ~1,000 behind 30,000 delayed",
    "held-horizon": "dequeue + ack (1 per request), backlog ~1,000, a transaction held open "
    "in the database all along",
    "mixed": "mixed: paced producers + consumers at half the peak",
    "consumer-1": "consumer runner vs consumer runner, concurrency 1 (PgQueuer batch 1), "
    "no-op handler, draining a backlog",
    "consumer-10": "consumer runner vs consumer runner, concurrency 10 (PgQueuer batch 10), "
    "no-op handler, draining a backlog",
    "groups": "dequeue + ack (1 per request) over 10,000 groups × 10 messages, prefilled",
    "groups:ungrouped": "dequeue + ack (1 per request) over the same backlog ungrouped, prefilled",
    "max-in-flight": "dequeue + ack (1 per request), backlog ~1,000, queue max_in_flight "
    "1,000,000 (never reached)",
    "max-in-flight:none": "dequeue + ack (1 per request), backlog ~1,000, no max_in_flight "
    "(the pair's baseline)",
    "attempts": "dequeue + ack (1 per request), backlog ~1,000, attempts recorded (as shipped)",
    "attempts:not-recorded": "dequeue + ack (1 per request), backlog ~1,000, the claim and "
    "acknowledge functions without their attempt record (what-if in the run's own database)",
}


class Ops(Protocol):
    """The operations of one client (one HTTP connection, or one floor task)."""

    async def enqueue(self, index: int) -> int: ...

    async def enqueue_batch(self) -> int: ...

    async def dequeue(self, limit: int | None) -> Sequence[Any]: ...

    async def ack(self, items: Sequence[Any]) -> None: ...

    def close(self) -> None: ...


class System(Protocol):
    key: str  # "retsu", "floor", "pgqueuer"
    name: str
    database_url: str  # the system's own database (the held-horizon scenario holds it)
    batch_size: int

    async def new_queue(self) -> None: ...

    async def open_ops(self, count: int) -> Sequence[Ops]: ...

    async def prefill(self, count: int) -> None: ...

    async def analyze(self) -> None: ...

    async def prefill_delayed(self, count: int, seconds: int) -> None:
        """``count`` HIGH-priority messages deliverable only after ``seconds``: ahead of
        every ready message in delivery order, but not deliverable."""
        ...

    async def ready(self) -> None:
        """Before each of its scenarios (outside the window): open what it holds only
        while it runs (``common.ScenarioPool``)."""
        ...

    async def rest(self) -> None:
        """After each of its scenarios: close that again."""
        ...


class FeatureSystem(System, Protocol):
    """Retsu or its SQL floor: what the paired scenarios (``PAIRED``) need besides."""

    async def new_queue(self, *, max_in_flight: int | None = None) -> None: ...

    async def prefill_grouped(self, count: int, groups: int) -> None:
        """``count`` messages of an empty queue in ``groups`` groups, as Retsu's enqueue
        stores them (``group_max_in_flight`` the default 1: ordered lanes)."""
        ...


class ConsumingSystem(System, Protocol):
    """A system whose consumer is its own (PgQueuer): it runs the consuming scenarios."""

    async def drain(self, cfg: Config, batch: int, total: int, window: Window) -> Result: ...

    async def steady(
        self, cfg: Config, backlog: int, scenario: str, window: Window, *, delayed: int = 0
    ) -> Result: ...

    async def mixed(self, cfg: Config, rate: float, window: Window) -> Result: ...


@dataclass
class Config:
    duration: float = 10.0
    connections: int = 32
    drain_single: int = 10_000
    drain_batch: int = 100_000
    drain_max_seconds: float = 45.0  # a drain stops here; its rate is still done / time
    backlog_small: int = 1_000
    backlog_large: int = 100_000
    delayed_head: int = 30_000  # delayed messages ahead of the backlog (delayed-head)
    delayed_seconds: int = 3_600  # their delay: longer than any run
    warmup_messages: int = 20_000
    warmup_max_seconds: float = 30.0
    keeper_chunk: int = 500
    mixed_fraction: float = 0.5
    mixed_basis: str = "combined"  # or "enqueue"
    analyze: bool = True  # ANALYZE the queue table after a prefill
    consumer_single: int = 5_000  # consumer-1: messages one drain takes (bench/consumers.py)
    consumer_batch: int = 10_000  # consumer-10
    consumer_rounds: int = 3  # drains per system, alternating systems
    consumer_max_seconds: float = 60.0  # a consumer drain stops here; rate = done / time
    group_count: int = 10_000  # groups: the groups of the prefilled backlog
    group_size: int = 10  # groups: messages per group
    never_reached_cap: int = 1_000_000  # max-in-flight: the queue's cap (Retsu's maximum)
    pair_order: str = "abba"  # or "baseline-first", "feature-first": a paired scenario's runs
    quick: bool = False


@dataclass
class Result:
    scenario: str
    system: str
    system_key: str
    messages: int
    seconds: float
    latency: LatencyRecorder = field(default_factory=LatencyRecorder)
    cpu: CpuUse | None = None
    notes: list[str] = field(default_factory=list)
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Counter:
    value: int = 0


# -- closed-loop enqueue --------------------------------------------------------


async def _enqueue_worker(
    ops: Ops, batch: bool, stop_at: float, latency: LatencyRecorder, offset: int
) -> int:
    series = latency.series("enqueue")
    perf = time.perf_counter
    done = 0
    index = offset
    while perf() < stop_at:
        started = perf()
        try:
            done += await (ops.enqueue_batch() if batch else ops.enqueue(index))
        except (OpError, OSError) as error:
            latency.error("enqueue", str(error))
            await asyncio.sleep(0.01)
            continue
        series.append(perf() - started)
        index += 1
    return done


async def enqueue_closed_loop(
    system: System, cfg: Config, batch: bool, scenario: str, window: Window
) -> Result:
    ops = await system.open_ops(cfg.connections)
    latency = LatencyRecorder()
    try:
        await window.begin()
        started = time.perf_counter()
        stop_at = started + cfg.duration
        counts = await asyncio.gather(
            *(_enqueue_worker(o, batch, stop_at, latency, i) for i, o in enumerate(ops))
        )
        seconds = time.perf_counter() - started
        cpu = await window.end()
    finally:
        for o in ops:
            o.close()
    return Result(scenario, system.name, system.key, sum(counts), seconds, latency, cpu)


# -- drain a prefilled queue ----------------------------------------------------------


async def _drain_worker(
    ops: Ops, limit: int | None, stop_at: float, latency: LatencyRecorder, done: Counter
) -> None:
    dequeue_series = latency.series("dequeue")
    ack_series = latency.series("ack")
    perf = time.perf_counter
    while perf() < stop_at:
        started = perf()
        try:
            items = await ops.dequeue(limit)
        except (OpError, OSError) as error:
            latency.error("dequeue", str(error))
            await asyncio.sleep(0.01)
            continue
        dequeue_series.append(perf() - started)
        if not items:
            return  # SKIP LOCKED: nothing unlocked is left, the others finish the tail
        started = perf()
        try:
            await ops.ack(items)
        except (OpError, OSError) as error:
            latency.error("ack", str(error))
            continue
        ack_series.append(perf() - started)
        done.value += len(items)


async def drain(system: System, cfg: Config, batch: bool, scenario: str, window: Window) -> Result:
    total = cfg.drain_batch if batch else cfg.drain_single
    await system.prefill(total)
    if cfg.analyze:
        await system.analyze()
    ops = await system.open_ops(cfg.connections)
    latency = LatencyRecorder()
    done = Counter()
    limit = system.batch_size if batch else None
    try:
        await window.begin()
        started = time.perf_counter()
        stop_at = started + cfg.drain_max_seconds
        await asyncio.gather(*(_drain_worker(o, limit, stop_at, latency, done) for o in ops))
        seconds = time.perf_counter() - started
        cpu = await window.end()
    finally:
        for o in ops:
            o.close()
    result = Result(scenario, system.name, system.key, done.value, seconds, latency, cpu)
    if done.value < total:
        result.notes.append(f"drained {done.value:,} of {total:,} before the time limit")
    return result


# -- steady state over a kept-up backlog --------------------------------------------


class BacklogKeeper:
    """Keeps about ``target`` messages ready by inserting chunks as consumers take them.

    It tracks the backlog from its own inserts minus the consumers' acknowledgements,
    so it costs PostgreSQL nothing but the inserts themselves.
    """

    def __init__(
        self,
        insert: Callable[[int], Awaitable[None]],
        consumed: Counter,
        target: int,
        chunk: int,
    ) -> None:
        self._insert = insert
        self._consumed = consumed
        self.target = target
        self.chunk = chunk
        self.inserted = 0
        self._stop = asyncio.Event()

    async def fill(self) -> None:
        remaining = self.target
        while remaining > 0:
            step = min(remaining, 20_000)
            await self._insert(step)
            remaining -= step
        self.inserted = self.target

    def backlog(self) -> int:
        return self.inserted - self._consumed.value

    async def run(self) -> None:
        while not self._stop.is_set():
            if self.backlog() < self.target:
                await self._insert(self.chunk)
                self.inserted += self.chunk
            else:
                await asyncio.sleep(0.005)

    def stop(self) -> None:
        self._stop.set()


async def _steady_worker(
    ops: Ops, stop: asyncio.Event, latency: LatencyRecorder, done: Counter
) -> None:
    dequeue_series = latency.series("dequeue")
    ack_series = latency.series("ack")
    perf = time.perf_counter
    while not stop.is_set():
        started = perf()
        try:
            items = await ops.dequeue(None)
        except (OpError, OSError) as error:
            latency.error("dequeue", str(error))
            await asyncio.sleep(0.01)
            continue
        dequeue_series.append(perf() - started)
        if not items:
            latency.error("dequeue", "empty: the keeper fell behind")
            await asyncio.sleep(0.002)
            continue
        started = perf()
        try:
            await ops.ack(items)
        except (OpError, OSError) as error:
            latency.error("ack", str(error))
            continue
        ack_series.append(perf() - started)
        done.value += len(items)


async def measure_window(
    cfg: Config, consumed: Counter, latency: LatencyRecorder, window: Window
) -> tuple[int, float, str | None, CpuUse]:
    """Wait for the warm-up, then count consumption over ``cfg.duration``."""
    started = time.perf_counter()
    note = None
    while consumed.value < cfg.warmup_messages:
        if time.perf_counter() - started > cfg.warmup_max_seconds:
            note = (
                f"warm-up stopped after {cfg.warmup_max_seconds:.0f} s at "
                f"{consumed.value:,} messages"
            )
            break
        await asyncio.sleep(0.01)
    await window.begin()
    for series in latency.samples.values():
        series.clear()
    first = consumed.value
    window_start = time.perf_counter()
    await asyncio.sleep(cfg.duration)
    messages, seconds = consumed.value - first, time.perf_counter() - window_start
    return messages, seconds, note, await window.end()


async def steady(
    system: System,
    cfg: Config,
    backlog: int,
    scenario: str,
    insert: Callable[[int], Awaitable[None]],
    window: Window,
    *,
    delayed: int = 0,
) -> Result:
    """Dequeue + ack one at a time over a kept-up backlog; with ``delayed``, that many
    delayed HIGH messages sit ahead of it for the whole run (delayed-head)."""
    if delayed:
        await system.prefill_delayed(delayed, cfg.delayed_seconds)
    consumed = Counter()
    keeper = BacklogKeeper(insert, consumed, backlog, cfg.keeper_chunk)
    await keeper.fill()
    if cfg.analyze:
        await system.analyze()
    ops = await system.open_ops(cfg.connections)
    latency = LatencyRecorder()
    stop = asyncio.Event()
    keeping = asyncio.create_task(keeper.run())
    workers = [asyncio.create_task(_steady_worker(o, stop, latency, consumed)) for o in ops]
    try:
        messages, seconds, note, cpu = await measure_window(cfg, consumed, latency, window)
    finally:
        stop.set()
        keeper.stop()
        await asyncio.gather(*workers, keeping, return_exceptions=True)
        for o in ops:
            o.close()
    result = Result(scenario, system.name, system.key, messages, seconds, latency, cpu)
    result.extra["backlog_target"] = backlog
    if delayed:
        result.extra["delayed"] = delayed
    if note:
        result.notes.append(note)
    return result


async def prefilled(
    system: System,
    cfg: Config,
    scenario: str,
    prefill: Callable[[], Awaitable[None]],
    window: Window,
    *,
    total: int,
) -> Result:
    """Dequeue + ack one at a time over a backlog of ``total`` prefilled messages, no
    keeper: the warm-up and the window take a part of it (the groups scenario's lanes cannot
    be topped up without Retsu's own enqueue; its ungrouped baseline is measured the same
    way)."""
    await prefill()
    if cfg.analyze:
        await system.analyze()
    consumed = Counter()
    ops = await system.open_ops(cfg.connections)
    latency = LatencyRecorder()
    stop = asyncio.Event()
    workers = [asyncio.create_task(_steady_worker(o, stop, latency, consumed)) for o in ops]
    try:
        messages, seconds, note, cpu = await measure_window(cfg, consumed, latency, window)
    finally:
        stop.set()
        await asyncio.gather(*workers, return_exceptions=True)
        for o in ops:
            o.close()
    result = Result(scenario, system.name, system.key, messages, seconds, latency, cpu)
    result.extra["prefilled"] = total
    result.extra["left_at_end"] = total - consumed.value
    if note:
        result.notes.append(note)
    result.notes.append(f"{consumed.value:,} of the {total:,} prefilled messages consumed")
    return result


async def paired(
    cfg: Config,
    feature: Callable[[], Awaitable[Result]],
    baseline: Callable[[], Awaitable[Result]],
) -> list[Result]:
    """A feature's run and its baseline's, close together so their ratio is measured under
    the same conditions; the feature's result first.

    ``abba`` (the default) runs baseline, feature, feature, baseline and pools each side's
    two runs: the machine drifts within a pair (dead rows pile up between autovacuums, a
    checkpoint comes), and a drift that is steady over the four runs weighs on both sides
    alike. Measured: one half after the other gave the same never-reached cap 0.83 to 1.12
    from run to run (docs/performance.md). ``baseline-first`` and ``feature-first`` run each
    side once."""
    if cfg.pair_order == "feature-first":
        measured = await feature()
        return [measured, await baseline()]
    if cfg.pair_order == "baseline-first":
        without = await baseline()
        return [await feature(), without]
    first = await baseline()
    inner = [await feature(), await feature()]
    return [pooled(inner), pooled([first, await baseline()])]


def pooled(runs: list[Result]) -> Result:
    """One result from several runs of the same scenario: their messages over their summed
    measured seconds, every latency sample, CPU averaged over the time, each run's rate in
    the notes."""
    first = runs[0]
    latency = LatencyRecorder()
    for run in runs:
        latency.merge(run.latency)
    cpus = [run.cpu for run in runs if run.cpu is not None]
    cpu = None
    if len(cpus) == len(runs):
        seconds = sum(c.seconds for c in cpus)

        def mean(values: list[float]) -> float:
            return sum(v * c.seconds for v, c in zip(values, cpus, strict=True)) / seconds

        cpu = CpuUse(
            seconds=seconds,
            bench=mean([c.bench for c in cpus]),
            api=mean([c.api for c in cpus]),
            postgres=mean([c.postgres for c in cpus]),
            machine=mean([c.machine for c in cpus]),
            cores=cpus[0].cores,
        )
    rates = " / ".join(f"{run.rate:,.0f}" for run in runs)
    notes = list(first.notes)
    for run in runs[1:]:
        notes += [note for note in run.notes if note not in notes]
    return Result(
        scenario=first.scenario,
        system=first.system,
        system_key=first.system_key,
        messages=sum(run.messages for run in runs),
        seconds=sum(run.seconds for run in runs),
        latency=latency,
        cpu=cpu,
        notes=[f"{len(runs)} runs pooled ({rates} msg/s)", *notes],
        extra=dict(first.extra),
    )


# -- mixed: paced producers and consumers ---------------------------------------------


async def paced(
    rate: float,
    stop_at: float,
    step: Callable[[], Awaitable[None]],
    late: Counter,
    phase: float = 0.0,
) -> None:
    """Calls ``step`` ``rate`` times a second on a fixed schedule until ``stop_at``,
    the first call ``phase`` (0–1) of an interval after the start.

    When a step overruns, the next ones start at once to catch up; a schedule more
    than a second behind is reset (and counted in ``late``) rather than bursting.
    """
    interval = 1.0 / rate
    perf = time.perf_counter
    next_at = perf() + phase * interval
    while next_at < stop_at:
        now = perf()
        if next_at > now:
            await asyncio.sleep(next_at - now)
        elif now - next_at > 1.0:
            late.value += 1
            next_at = now
        await step()
        next_at += interval


def spread(index: float, clients: int) -> float:
    """The phase of client ``index`` of ``clients`` paced at the same rate: evenly spread
    over one interval, so together they offer a steady stream. Started in phase, they
    fired together, and the half-peak load arrived as bursts of every client at once
    (measured: p99 35.7–43.4 ms in phase; docs/performance.md)."""
    return (index / clients) % 1.0


async def mixed(system: System, cfg: Config, rate: float, window: Window) -> Result:
    """Producers enqueue ``rate`` messages/s in total; as many consumers dequeue + ack."""
    pairs = max(1, cfg.connections // 2)
    producers = await system.open_ops(pairs)
    consumers = await system.open_ops(pairs)
    latency = LatencyRecorder()
    enqueue_series = latency.series("enqueue")
    dequeue_series = latency.series("dequeue")
    ack_series = latency.series("ack")
    produced = Counter()
    consumed = Counter()
    empty = Counter()
    late = Counter()
    perf = time.perf_counter

    def producer(ops: Ops, offset: int) -> Callable[[], Awaitable[None]]:
        index = offset

        async def step() -> None:
            nonlocal index
            started = perf()
            try:
                added = await ops.enqueue(index)  # not `+= await`: that loses updates
            except (OpError, OSError) as error:
                latency.error("enqueue", str(error))
                return
            enqueue_series.append(perf() - started)
            produced.value += added
            index += 1

        return step

    def consumer(ops: Ops) -> Callable[[], Awaitable[None]]:
        async def step() -> None:
            started = perf()
            try:
                items = await ops.dequeue(None)
            except (OpError, OSError) as error:
                latency.error("dequeue", str(error))
                return
            dequeue_series.append(perf() - started)
            if not items:
                empty.value += 1
                return
            started = perf()
            try:
                await ops.ack(items)
            except (OpError, OSError) as error:
                latency.error("ack", str(error))
                return
            ack_series.append(perf() - started)
            consumed.value += len(items)

        return step

    each = rate / pairs
    try:
        await window.begin()
        started = perf()
        stop_at = started + cfg.duration
        await asyncio.gather(
            *(
                paced(each, stop_at, producer(o, i), late, spread(i, pairs))
                for i, o in enumerate(producers)
            ),
            *(
                paced(each, stop_at, consumer(o), late, spread(i + 0.5, pairs))
                for i, o in enumerate(consumers)
            ),
        )
        seconds = perf() - started
        cpu = await window.end()
    finally:
        for o in (*producers, *consumers):
            o.close()
    result = Result("mixed", system.name, system.key, consumed.value, seconds, latency, cpu)
    result.extra.update(
        offered_rate=rate,
        enqueued_rate=produced.value / seconds,
        consumed_rate=consumed.value / seconds,
        empty_dequeues=empty.value,
    )
    if late.value:
        result.notes.append(f"fell more than 1 s behind schedule {late.value} times")
    return result
