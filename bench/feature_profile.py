"""`python -m bench.feature_profile`: where the time of a claim and an acknowledgement goes
with each new feature of SPEC §7b's "new features' costs" (groups, a never-reached
``max_in_flight``, attempts) against its baseline, on Retsu's SQL floor (the exact statements
of the API over asyncpg, ``bench/floor.py``).

For each variant, on a fresh database: set the queue up as ``python -m bench``'s paired
scenario does (``runner.run_paired``), consume ``--messages`` dequeue + ack one at a time on
``--connections`` connections, and report the throughput, the claim's and the
acknowledgement's mean time, buffers and WAL (``pg_stat_statements``, nested statements
tracked: the statements inside Retsu's PL/pgSQL functions are listed too), and one claim and
its acknowledgement explained with ``EXPLAIN (ANALYZE, BUFFERS)`` of every statement they run
(``auto_explain``). Variants of one feature run one after the other, alternating, ``--rounds``
times.

Without ``--database-url`` it runs on a private PostgreSQL cluster of its own (as
``bench.held_horizon`` does), so no shared server's settings or statistics are touched.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import asyncpg

from bench.client import LatencyRecorder
from bench.common import Databases, plain_url
from bench.floor import FloorSystem
from bench.held_horizon import (
    TOP_STATEMENTS,
    _explained,
    _private_server,
    _statements_available,
)
from bench.scenarios import BacklogKeeper, Counter, _steady_worker
from bench.what_if import ATTEMPTS_NOT_RECORDED, WhatIf

FEATURES = ("groups", "max-in-flight", "attempts")

# The claim's and the acknowledgement's own rows (top level) of pg_stat_statements.
HOT = """
SELECT CASE WHEN query LIKE '%retsu_dequeue(%' THEN 'claim' ELSE 'ack' END AS statement,
       calls, total_exec_time / greatest(calls, 1) AS mean_ms,
       (shared_blks_hit + shared_blks_read)::numeric / greatest(calls, 1) AS buffers,
       wal_bytes / greatest(calls, 1) AS wal
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND toplevel
  AND (query LIKE '%FROM retsu_dequeue(%' OR query LIKE '%FROM retsu_acknowledge(%')
"""


@dataclass
class Variant:
    feature: str
    label: str
    prepare: Callable[[FloorSystem, argparse.Namespace], Awaitable[bool]]  # True: keep up
    what_if: bool = False


@dataclass
class Measured:
    variant: Variant
    rate: float = 0.0
    hot: dict[str, asyncpg.Record] = field(default_factory=dict)
    statements: list[asyncpg.Record] = field(default_factory=list)
    plans: list[str] = field(default_factory=list)


async def _plain(system: FloorSystem, cfg: argparse.Namespace) -> bool:
    await system.new_queue()
    return True


async def _capped(system: FloorSystem, cfg: argparse.Namespace) -> bool:
    await system.new_queue(max_in_flight=1_000_000)
    return True


async def _ungrouped(system: FloorSystem, cfg: argparse.Namespace) -> bool:
    await system.new_queue()
    await system.prefill(cfg.groups * cfg.group_size)
    return False


async def _grouped(system: FloorSystem, cfg: argparse.Namespace) -> bool:
    await system.new_queue()
    await system.prefill_grouped(cfg.groups * cfg.group_size, cfg.groups)
    return False


VARIANTS = {
    "groups": (Variant("groups", "ungrouped", _ungrouped), Variant("groups", "grouped", _grouped)),
    "max-in-flight": (
        Variant("max-in-flight", "no max_in_flight", _plain),
        Variant("max-in-flight", "max_in_flight 1,000,000", _capped),
    ),
    "attempts": (
        Variant("attempts", "attempts not recorded (what-if)", _plain, what_if=True),
        Variant("attempts", "attempts recorded", _plain),
    ),
}


async def _consume(system: FloorSystem, cfg: argparse.Namespace, keep_up: bool) -> float:
    consumed = Counter()
    keeper = None
    if keep_up:
        keeper = BacklogKeeper(system.prefill, consumed, 1_000, 500)
        await keeper.fill()
    await system.analyze()
    ops = await system.open_ops(cfg.connections)
    stop = asyncio.Event()
    latency = LatencyRecorder()
    tasks = [asyncio.create_task(_steady_worker(o, stop, latency, consumed)) for o in ops]
    if keeper is not None:
        tasks.append(asyncio.create_task(keeper.run()))
    started = time.perf_counter()
    try:
        # A counter the workers bump, polled: nothing to wait on.
        while consumed.value < cfg.messages and time.perf_counter() - started < cfg.max_seconds:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        if keeper is not None:
            keeper.stop()
        await asyncio.gather(*tasks, return_exceptions=True)
    return consumed.value / (time.perf_counter() - started)


async def _measure(admin_url: str, variant: Variant, cfg: argparse.Namespace) -> Measured:
    measured = Measured(variant)
    databases = Databases(admin_url)
    url = plain_url(await databases.create("feature"))
    system = FloorSystem(url, pool_size=cfg.connections)
    try:
        await system.start()
        probe = await asyncpg.connect(url)
        try:
            statements = await _statements_available(probe)
            async with contextlib.AsyncExitStack() as stack:
                if variant.what_if:
                    await stack.enter_async_context(WhatIf(url, ATTEMPTS_NOT_RECORDED))
                keep_up = await variant.prepare(system, cfg)
                if statements:
                    await probe.execute("SELECT pg_stat_statements_reset()")
                measured.rate = await _consume(system, cfg, keep_up)
                if statements:
                    measured.hot = {r["statement"]: r for r in await probe.fetch(HOT)}
                    measured.statements = await probe.fetch(TOP_STATEMENTS)
                measured.plans = await _explained(probe, system)
        finally:
            await probe.close()
    finally:
        await system.stop()
        await databases.drop_all()
    return measured


def render(results: Sequence[Measured]) -> str:
    lines = ["## New features' costs, profiled (`python -m bench.feature_profile`)", ""]
    lines += [
        "| Feature | variant | msg/s | claim ms | claim buffers | claim WAL bytes "
        "| ack ms | ack buffers | ack WAL bytes |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for m in results:
        cells = [m.variant.feature, m.variant.label, f"{m.rate:,.0f}"]
        for key in ("claim", "ack"):
            row = m.hot.get(key)
            cells += (
                ["–"] * 3
                if row is None
                else [f"{row['mean_ms']:.3f}", f"{row['buffers']:.0f}", f"{row['wal']:.0f}"]
            )
        lines.append("| " + " | ".join(cells) + " |")
    for m in results:
        lines += ["", f"### {m.variant.feature}: {m.variant.label}", ""]
        if m.statements:
            lines += [
                "| calls | total ms | mean ms | buffer hits / call | dirtied / call "
                "| WAL bytes / call | statement |",
                "| ---: | ---: | ---: | ---: | ---: | ---: | --- |",
            ]
            lines += [
                f"| {r['calls']:,} | {r['total_ms']} | {r['mean_ms']} | {r['hits_per_call']} "
                f"| {r['dirtied_per_call']} | {r['wal_per_call']} "
                f"| `{r['query'].replace('|', '/')}` |"
                for r in m.statements
            ]
            lines.append("")
        lines += ["One claim and its acknowledgement, every statement:", "", "```"]
        lines += [plan.strip() for plan in m.plans]
        lines += ["```"]
    return "\n".join(lines) + "\n"


async def main_async(cfg: argparse.Namespace) -> str:
    async with contextlib.AsyncExitStack() as stack:
        admin = cfg.database_url or await stack.enter_async_context(_private_server())
        results = []
        for feature in cfg.features:
            for round_ in range(cfg.rounds):
                variants = VARIANTS[feature]
                for variant in variants if round_ % 2 == 0 else reversed(variants):
                    print(f"{feature}: {variant.label} (round {round_ + 1})", file=sys.stderr)
                    results.append(await _measure(admin, variant, cfg))
        return render(results)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.feature_profile", description=__doc__)
    parser.add_argument("--database-url", help="admin URL of a server to use instead")
    parser.add_argument("--features", default=",".join(FEATURES))
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--max-seconds", type=float, default=120.0)
    parser.add_argument("--rounds", type=int, default=1, help="each feature's pair, alternating")
    parser.add_argument("--groups", type=int, default=10_000)
    parser.add_argument("--group-size", type=int, default=10)
    cfg = parser.parse_args(argv)
    cfg.features = [f for f in cfg.features.split(",") if f]
    unknown = [f for f in cfg.features if f not in FEATURES]
    if unknown:
        parser.error(f"unknown features {unknown}; choose from {', '.join(FEATURES)}")
    print(asyncio.run(main_async(cfg)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
