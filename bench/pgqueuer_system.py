"""PgQueuer (PyPI) in-process, on a database of its own: its documented API only.

Enqueue: ``Queries.enqueue`` over an asyncpg pool (one job per call, or lists of 100).
Consume: ``QueueManager`` instances, each on its own asyncpg connection (the shape
of PgQueuer's own benchmark tool), with a no-op entrypoint; PgQueuer acknowledges a
finished job by deleting it and logging it in batches. "Single message" means a
consumer ``batch_size`` of 1, "batches of 100" a ``batch_size`` of 100.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any

import asyncpg

from bench.client import LatencyRecorder
from bench.common import PRIORITY_VALUES, ScenarioPool, payload
from bench.scenarios import Config, Counter, Result, Window, measure_window, paced, spread

ENTRYPOINT = "bench"


def _modules() -> tuple[Any, Any, Any, Any]:
    from pgqueuer.db import AsyncpgDriver, AsyncpgPoolDriver
    from pgqueuer.qm import QueueManager
    from pgqueuer.queries import Queries

    return AsyncpgDriver, AsyncpgPoolDriver, QueueManager, Queries


def _mode(name: str) -> Any:
    from pgqueuer.types import QueueExecutionMode

    return getattr(QueueExecutionMode, name)


def _no_op(done: Counter, pickup: list[float] | None) -> Callable[[Any], Awaitable[None]]:
    """The consumer's entrypoint: counts the job (and its pickup latency when stamped)."""
    if pickup is None:

        async def count(job: Any) -> None:
            done.value += 1

        return count

    async def count_and_time(job: Any) -> None:
        done.value += 1
        pickup.append(time.perf_counter() - float(job.payload[:20]))

    return count_and_time


class PgqOps:
    def __init__(self, queries: Any, body: bytes, batch_size: int, stamped: bool) -> None:
        self._queries = queries
        self._body = body
        self._batch_size = batch_size
        self._stamped = stamped
        self._entrypoints = [ENTRYPOINT] * batch_size
        self._payloads = [body] * batch_size
        self._priorities = [PRIORITY_VALUES[i % 3] for i in range(batch_size)]

    async def enqueue(self, index: int) -> int:
        body = self._body
        if self._stamped:  # the consumer measures pickup latency from this stamp
            body = b"%020.6f" % time.perf_counter() + body[20:]
        await self._queries.enqueue(ENTRYPOINT, body, PRIORITY_VALUES[index % 3])
        return 1

    async def enqueue_batch(self) -> int:
        await self._queries.enqueue(self._entrypoints, self._payloads, self._priorities)
        return self._batch_size

    async def dequeue(self, limit: int | None) -> Sequence[Any]:
        raise NotImplementedError("PgQueuer consumes through its QueueManager")

    async def ack(self, items: Sequence[Any]) -> None:
        raise NotImplementedError("PgQueuer acknowledges inside its QueueManager")

    def close(self) -> None:
        return None


class PgQueuerSystem:
    key = "pgqueuer"
    batch_size = 100

    def __init__(self, database_url: str, *, pool_size: int, consumers: int) -> None:
        import pgqueuer

        self.name = f"PgQueuer {getattr(pgqueuer, '__version__', '?')} (in-process)"
        self.database_url = database_url
        self.pool_size = pool_size
        self.consumers = consumers
        self.body = payload().encode()
        self._pools = ScenarioPool(database_url, pool_size)
        self._sql: asyncpg.Connection | None = None
        self._queries: Any = None  # over the pool: producers
        self._admin_queries: Any = None  # over _sql: prefill, keeper, reset
        logging.getLogger("pgqueuer").setLevel(logging.WARNING)

    async def start(self) -> None:
        driver, _, _, queries = _modules()
        self._sql = await asyncpg.connect(self.database_url)
        self._admin_queries = queries(driver(self._sql))
        await self._admin_queries.install()
        await self.ready()  # the runner rests it until its scenario

    async def ready(self) -> None:
        _, pool_driver, _, queries = _modules()
        self._queries = queries(pool_driver(await self._pools.ready()))

    async def rest(self) -> None:
        self._queries = None
        await self._pools.rest()

    async def stop(self) -> None:
        await self._pools.rest()
        if self._sql is not None:
            await self._sql.close()
            self._sql = None

    def _tables(self) -> list[str]:
        settings = getattr(getattr(self._admin_queries, "qbe", None), "settings", None)
        names = []
        for attribute, default in (
            ("queue_table", "pgqueuer"),
            ("queue_table_log", "pgqueuer_log"),
            ("statistics_table", "pgqueuer_statistics"),
        ):
            value = getattr(settings, attribute, default)
            names.append(value if isinstance(value, str) else default)
        return names

    async def new_queue(self) -> None:
        assert self._sql is not None
        await self._admin_queries.clear_queue()
        await self._admin_queries.clear_queue_log()
        await self._admin_queries.clear_statistics_log()
        for table in self._tables():
            with contextlib.suppress(asyncpg.PostgresError):
                await self._sql.execute(f'VACUUM "{table}"')

    async def open_ops(self, count: int, *, stamped: bool = False) -> list[PgqOps]:
        return [PgqOps(self._queries, self.body, self.batch_size, stamped) for _ in range(count)]

    async def prefill(self, count: int) -> None:
        while count > 0:
            n = min(count, 10_000)
            await self._admin_queries.enqueue(
                [ENTRYPOINT] * n,
                [self.body] * n,
                [PRIORITY_VALUES[i % 3] for i in range(n)],
            )
            count -= n

    async def prefill_delayed(self, count: int, seconds: int) -> None:
        """HIGH-priority jobs that become due only after ``seconds`` (``execute_after``)."""
        while count > 0:
            n = min(count, 10_000)
            await self._admin_queries.enqueue(
                [ENTRYPOINT] * n,
                [self.body] * n,
                [max(PRIORITY_VALUES)] * n,
                [timedelta(seconds=seconds)] * n,
            )
            count -= n

    async def analyze(self) -> None:
        assert self._sql is not None
        await self._sql.execute(f'ANALYZE "{self._tables()[0]}"')

    # -- consuming with PgQueuer's own QueueManager ------------------------------------

    async def _managers(
        self, done: Counter, pickup: list[float] | None = None
    ) -> tuple[list[Any], list[asyncpg.Connection]]:
        driver, _, queue_manager, queries = _modules()
        connections = [await asyncpg.connect(self.database_url) for _ in range(self.consumers)]
        managers = []
        for connection in connections:
            manager = queue_manager(queries(driver(connection)))

            manager.entrypoint(ENTRYPOINT)(_no_op(done, pickup))
            managers.append(manager)
        return managers, connections

    async def drain(self, cfg: Config, batch: int, total: int, window: Window) -> Result:
        scenario = "dequeue-ack-100" if batch > 1 else "dequeue-ack-1"
        await self.prefill(total)
        if cfg.analyze:
            await self.analyze()
        done = Counter()
        managers, connections = await self._managers(done)
        try:
            await window.begin()
            started = time.perf_counter()
            runs = [
                asyncio.create_task(
                    m.run(
                        batch_size=batch,
                        mode=_mode("drain"),
                        dequeue_timeout=timedelta(seconds=1),
                        log_aggregation_interval=timedelta(0),
                    )
                )
                for m in managers
            ]
            finished, pending = await asyncio.wait(runs, timeout=cfg.drain_max_seconds)
            seconds = time.perf_counter() - started
            cpu = await window.end()
            for m in managers:
                m.shutdown.set()
            if pending:
                await asyncio.wait(pending, timeout=10)
            for task in finished:
                task.result()
        finally:
            for connection in connections:
                await connection.close()
        result = Result(scenario, self.name, self.key, done.value, seconds, cpu=cpu)
        result.notes.append(f"{self.consumers} QueueManagers, batch_size={batch}")
        if done.value < total:
            result.notes.append(f"drained {done.value:,} of {total:,} before the time limit")
        return result

    async def _continuous(self, managers: list[Any], batch: int) -> list[asyncio.Task[None]]:
        return [
            asyncio.create_task(
                m.run(
                    batch_size=batch,
                    mode=_mode("continuous"),
                    dequeue_timeout=timedelta(seconds=1),
                    log_aggregation_interval=timedelta(0),
                )
            )
            for m in managers
        ]

    async def _stop(self, managers: list[Any], tasks: list[asyncio.Task[None]]) -> None:
        for m in managers:
            m.shutdown.set()
        await asyncio.wait(tasks, timeout=15)
        for task in tasks:
            if not task.done():
                task.cancel()

    async def steady(
        self, cfg: Config, backlog: int, scenario: str, window: Window, *, delayed: int = 0
    ) -> Result:
        from bench.scenarios import BacklogKeeper

        if delayed:
            await self.prefill_delayed(delayed, cfg.delayed_seconds)
        consumed = Counter()
        keeper = BacklogKeeper(self.prefill, consumed, backlog, cfg.keeper_chunk)
        await keeper.fill()
        if cfg.analyze:
            await self.analyze()
        managers, connections = await self._managers(consumed)
        tasks = await self._continuous(managers, 1)
        keeping = asyncio.create_task(keeper.run())
        latency = LatencyRecorder()
        try:
            messages, seconds, note, cpu = await measure_window(cfg, consumed, latency, window)
        finally:
            keeper.stop()
            await self._stop(managers, tasks)
            await asyncio.gather(keeping, return_exceptions=True)
            for connection in connections:
                await connection.close()
        result = Result(scenario, self.name, self.key, messages, seconds, latency, cpu)
        result.notes.append(f"{self.consumers} QueueManagers, batch_size=1")
        result.extra["backlog_target"] = backlog
        if delayed:
            result.extra["delayed"] = delayed
        if note:
            result.notes.append(note)
        return result

    async def mixed(self, cfg: Config, rate: float, window: Window) -> Result:
        pairs = max(1, cfg.connections // 2)
        producers = await self.open_ops(pairs, stamped=True)
        latency = LatencyRecorder()
        enqueue_series = latency.series("enqueue")
        pickup = latency.series("pickup (enqueue→handler)")
        consumed = Counter()
        produced = Counter()
        late = Counter()
        managers, connections = await self._managers(consumed, pickup)
        tasks = await self._continuous(managers, 1)
        perf = time.perf_counter

        def producer(ops: PgqOps, offset: int) -> Any:
            index = offset

            async def step() -> None:
                nonlocal index
                started = perf()
                try:
                    added = await ops.enqueue(index)  # not `+= await`: that loses updates
                except (asyncpg.PostgresError, OSError) as error:
                    latency.error("enqueue", str(error))
                    return
                enqueue_series.append(perf() - started)
                produced.value += added
                index += 1

            return step

        try:
            await asyncio.sleep(0.2)  # let the managers start listening
            await window.begin()
            started = perf()
            stop_at = started + cfg.duration
            each = rate / pairs
            await asyncio.gather(
                *(
                    paced(each, stop_at, producer(o, i), late, spread(i, pairs))
                    for i, o in enumerate(producers)
                )
            )
            seconds = perf() - started
            cpu = await window.end()
        finally:
            await self._stop(managers, tasks)
            for connection in connections:
                await connection.close()
        result = Result("mixed", self.name, self.key, consumed.value, seconds, latency, cpu)
        result.extra.update(
            offered_rate=rate,
            enqueued_rate=produced.value / seconds,
            consumed_rate=consumed.value / seconds,
        )
        result.notes.append(
            f"{self.consumers} QueueManagers (push consumer: no dequeue/ack latency; "
            "pickup = enqueue to handler)"
        )
        if late.value:
            result.notes.append(f"fell more than 1 s behind schedule {late.value} times")
        return result
