"""`python -m bench.held_horizon`: where the time of a claim goes while a transaction holds
back the xmin horizon (SPEC §10, docs/performance.md).

For each system (Retsu's SQL floor, the minimal floor), first without and then with a
transaction held open in its database (``BEGIN; SELECT txid_current();``), on a fresh
database: keep a ~1,000 message backlog, dequeue + ack one at a time on a few connections
until ``--messages`` are consumed, and report

* the throughput of each slice of ``--slice`` messages (how it degrades as dead rows pile up);
* at the end, still holding: the plan of one real claim and one acknowledgement with
  ``EXPLAIN (ANALYZE, BUFFERS)`` of every statement they run, the nested ones inside
  Retsu's PL/pgSQL functions included (``auto_explain``), the statements by total time
  (``pg_stat_statements``, nested ones tracked), and the dead rows and sizes of the tables
  and indexes.

Without ``--database-url`` it starts a private PostgreSQL cluster of its own (initdb into a
temporary directory, as ``bench.chaos`` does) with ``pg_stat_statements`` preloaded, so no
shared server's settings or statistics are touched; with one, ``pg_stat_statements`` is
used only if that server already loads it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

from bench.client import LatencyRecorder
from bench.common import Databases, HeldHorizon, plain_url
from bench.floor import FloorSystem
from bench.minimal_system import ACKNOWLEDGE, CLAIM, MinimalSystem
from bench.scenarios import BacklogKeeper, Counter, _steady_worker

SYSTEMS = ("floor", "minimal")

AUTO_EXPLAIN = (
    "LOAD 'auto_explain'",
    "SET auto_explain.log_min_duration = 0",
    "SET auto_explain.log_analyze = on",
    "SET auto_explain.log_buffers = on",
    "SET auto_explain.log_timing = on",
    "SET auto_explain.log_nested_statements = on",
    "SET auto_explain.log_level = notice",
    "SET client_min_messages = notice",
)

TOP_STATEMENTS = """
SELECT calls, round(total_exec_time::numeric, 1) AS total_ms,
       round((total_exec_time / greatest(calls, 1))::numeric, 3) AS mean_ms,
       round(shared_blks_hit::numeric / greatest(calls, 1), 1) AS hits_per_call,
       round(shared_blks_dirtied::numeric / greatest(calls, 1), 2) AS dirtied_per_call,
       round(wal_bytes / greatest(calls, 1), 0) AS wal_per_call,
       left(regexp_replace(query, '\\s+', ' ', 'g'), 110) AS query
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
ORDER BY total_exec_time DESC
LIMIT 8
"""

TABLES = """
SELECT c.relname, c.relkind::text AS relkind, pg_relation_size(c.oid) AS bytes,
       s.n_live_tup, s.n_dead_tup
FROM pg_class AS c
JOIN pg_namespace AS n ON n.oid = c.relnamespace AND n.nspname = current_schema()
LEFT JOIN pg_stat_user_tables AS s ON s.relid = c.oid
WHERE c.relkind IN ('r', 'i') AND pg_relation_size(c.oid) > 8192 * 2
ORDER BY pg_relation_size(c.oid) DESC
LIMIT 12
"""


@dataclass
class Phase:
    system: str
    held: bool
    slices: list[tuple[int, float]] = field(default_factory=list)  # (consumed, msg/s)
    total_rate: float = 0.0
    plans: list[str] = field(default_factory=list)
    statements: list[asyncpg.Record] = field(default_factory=list)
    tables: list[asyncpg.Record] = field(default_factory=list)


def _system(key: str, url: str, pool_size: int) -> Any:
    if key == "floor":
        return FloorSystem(url, pool_size=pool_size)
    return MinimalSystem(url, pool_size=pool_size)


async def _consume(system: Any, cfg: argparse.Namespace, phase: Phase) -> None:
    consumed = Counter()
    keeper = BacklogKeeper(system.prefill, consumed, 1_000, 500)
    await keeper.fill()
    await system.analyze()
    ops = await system.open_ops(cfg.connections)
    stop = asyncio.Event()
    latency = LatencyRecorder()
    keeping = asyncio.create_task(keeper.run())
    workers = [asyncio.create_task(_steady_worker(o, stop, latency, consumed)) for o in ops]
    started = last_time = time.perf_counter()
    last_count = 0
    deadline = started + cfg.max_seconds
    try:
        while consumed.value < cfg.messages and time.perf_counter() < deadline:
            await asyncio.sleep(0.05)
            if consumed.value - last_count >= cfg.slice:
                now = time.perf_counter()
                phase.slices.append(
                    (consumed.value, (consumed.value - last_count) / (now - last_time))
                )
                last_time, last_count = now, consumed.value
    finally:
        stop.set()
        keeper.stop()
        await asyncio.gather(*workers, keeping, return_exceptions=True)
        for o in ops:
            o.close()
    phase.total_rate = consumed.value / (time.perf_counter() - started)


async def _explained(connection: asyncpg.Connection, system: Any) -> list[str]:
    """One real claim and its acknowledgement, every statement's plan (auto_explain)."""
    plans: list[str] = []

    def collect(_: Any, message: Any) -> None:
        # "duration: … plan:", the query text, then the plan: keep the first and the last.
        lines = str(message.message).splitlines()
        start = next((i for i, line in enumerate(lines) if "(cost=" in line), len(lines))
        if "typeinfo_tree" not in str(message.message):  # asyncpg's own type lookup
            plans.append("\n".join([lines[0], *lines[start:]]))

    for statement in AUTO_EXPLAIN:
        await connection.execute(statement)
    connection.add_log_listener(collect)
    try:
        if isinstance(system, FloorSystem):
            s = system.statements
            rows = await connection.fetch(
                s.dequeue.sql,
                *s.dequeue.args(
                    queue_id=system.queue_id,
                    limit=1,
                    visibility_timeout=system.visibility_timeout,
                    elapsed_batch=s.dead_letter_batch_size,
                    reason=s.dead_letter_reason,
                    consumer=None,
                ),
            )
            claimed = [r for r in rows if r["id"] is not None]
            await connection.execute(
                s.acknowledge.sql,
                *s.acknowledge.args(
                    queue_id=system.queue_id,
                    ids=[r["id"] for r in claimed],
                    handles=[r["receipt_handle"] for r in claimed],
                    results=None,
                ),
            )
        else:
            rows = await connection.fetch(CLAIM, 1)
            await connection.execute(
                ACKNOWLEDGE,
                [r["priority"] for r in rows],
                [r["id"] for r in rows],
                [r["lease_until"] for r in rows],
            )
        await asyncio.sleep(0.1)  # the notices arrive with the answers; let them land
    finally:
        connection.remove_log_listener(collect)
    return plans


# --what-if no-lease-scans: the claim without its two scans of ended leases, i.e. what a
# per-queue "no lease ends before" watermark (docs/performance.md) costs while no lease has
# ended: the best case of that rewrite. Only in the run's own database, and not Retsu's
# semantics (an ended lease is never found): an estimate for the claim's rewrite.
_LEASE_SCAN = re.compile(r"(m\.state = 2\s+AND m\.available_after <= now\(\))")
_NO_LEASE_SCAN = r"\1 AND false"


async def _skip_lease_scans(connection: asyncpg.Connection) -> None:
    definition = await connection.fetchval("SELECT pg_get_functiondef('retsu_dequeue'::regproc)")
    changed, count = _LEASE_SCAN.subn(_NO_LEASE_SCAN, definition)
    if count != 2:
        raise RuntimeError(f"expected the claim's two lease scans, found {count}")
    await connection.execute(changed)


async def _phase(admin_url: str, key: str, held: bool, cfg: argparse.Namespace) -> Phase:
    phase = Phase(key, held)
    databases = Databases(admin_url)
    url = plain_url(await databases.create(f"horizon_{key}"))
    system = _system(key, url, cfg.connections)
    try:
        await system.start()
        await system.new_queue()
        probe = await asyncpg.connect(url)
        try:
            if cfg.what_if == "no-lease-scans" and key == "floor":
                await _skip_lease_scans(probe)
                phase.system = "floor without its lease scans (what-if)"
            statements = await _statements_available(probe)
            async with contextlib.AsyncExitStack() as stack:
                if held:
                    await stack.enter_async_context(HeldHorizon(url))
                if statements:
                    await probe.execute("SELECT pg_stat_statements_reset()")
                await _consume(system, cfg, phase)
                if statements:
                    phase.statements = await probe.fetch(TOP_STATEMENTS)
                phase.plans = await _explained(probe, system)
                await asyncio.sleep(1.2)  # backends publish table statistics once a second
                phase.tables = await probe.fetch(TABLES)
        finally:
            await probe.close()
    finally:
        await system.stop()
        await databases.drop_all()
    return phase


async def _statements_available(connection: asyncpg.Connection) -> bool:
    loaded = await connection.fetchval("SHOW shared_preload_libraries")
    if "pg_stat_statements" not in loaded:
        return False
    await connection.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    await connection.execute("SET pg_stat_statements.track = 'all'")
    return True


def _private_root() -> Path:
    root = Path(tempfile.mkdtemp(prefix="retsu-horizon-"))
    root.chmod(0o755)  # the postgres user must reach its data directory
    return root


def _preload_statements(server: Any) -> None:
    with (server.data / "postgresql.auto.conf").open("a") as conf:
        conf.write(
            "shared_preload_libraries = 'pg_stat_statements'\npg_stat_statements.track = 'all'\n"
        )


@contextlib.asynccontextmanager
async def _private_server() -> AsyncIterator[str]:
    from bench.chaos.topology import PrivatePostgres, find_postgres_bin

    root = await asyncio.to_thread(_private_root)
    server = PrivatePostgres(root, find_postgres_bin(None), "horizon")
    try:
        await asyncio.to_thread(server.init)
        await asyncio.to_thread(_preload_statements, server)
        await asyncio.to_thread(server.start)
        yield server.url("postgres")
    finally:
        await asyncio.to_thread(server.stop)
        shutil.rmtree(root, ignore_errors=True)


def render(phases: Sequence[Phase]) -> str:
    lines = ["## Held horizon profile (`python -m bench.held_horizon`)", ""]
    lines += ["| System | horizon | msg/s overall | msg/s by slice (consumed so far) |"]
    lines += ["| --- | --- | ---: | --- |"]
    for p in phases:
        slices = ", ".join(f"{rate:,.0f} ({count:,})" for count, rate in p.slices)
        lines.append(
            f"| {p.system} | {'held' if p.held else 'none'} | {p.total_rate:,.0f} | {slices} |"
        )
    for p in phases:
        lines += ["", f"### {p.system}, horizon {'held' if p.held else 'not held'}", ""]
        if p.statements:
            lines += [
                "| calls | total ms | mean ms | buffer hits / call | dirtied / call "
                "| WAL bytes / call | statement |"
            ]
            lines += ["| ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
            lines += [
                f"| {r['calls']:,} | {r['total_ms']} | {r['mean_ms']} | {r['hits_per_call']} "
                f"| {r['dirtied_per_call']} | {r['wal_per_call']} "
                f"| `{r['query'].replace('|', '/')}` |"
                for r in p.statements
            ]
            lines.append("")
        lines += [
            "| relation | kind | size | live rows | dead rows |",
            "| --- | --- | ---: | ---: | ---: |",
        ]
        lines += [
            f"| {r['relname']} | {'index' if r['relkind'] == 'i' else 'table'} "
            f"| {r['bytes'] / 1024:,.0f} kB | {r['n_live_tup'] or '–'} | {r['n_dead_tup'] or '–'} |"
            for r in p.tables
        ]
        lines += ["", "One claim and its acknowledgement, every statement:", "", "```"]
        lines += [plan.strip() for plan in p.plans]
        lines += ["```"]
    return "\n".join(lines) + "\n"


async def main_async(cfg: argparse.Namespace) -> str:
    async with contextlib.AsyncExitStack() as stack:
        admin = cfg.database_url or await stack.enter_async_context(_private_server())
        phases = []
        for key in cfg.systems:
            for held in [h == "held" for h in cfg.horizons.split(",")]:
                print(f"{key}, horizon {'held' if held else 'not held'}", file=sys.stderr)
                phases.append(await _phase(admin, key, held, cfg))
        return render(phases)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.held_horizon", description=__doc__)
    parser.add_argument("--database-url", help="admin URL of a server to use instead")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--slice", type=int, default=2_500)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--max-seconds", type=float, default=120.0)
    parser.add_argument(
        "--what-if",
        choices=("no-lease-scans",),
        help="no-lease-scans: the floor's claim without its two scans of ended leases (the "
        "best case of a lease watermark; changes the claim in the run's own database only)",
    )
    parser.add_argument("--horizons", default="none,held", help="none, held or both")
    cfg = parser.parse_args(argv)
    cfg.systems = [s for s in cfg.systems.split(",") if s]
    print(asyncio.run(main_async(cfg)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
