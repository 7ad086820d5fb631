"""`python -m bench.chaos`: the chaos run with accounting (see bench/chaos/__init__.py).

Exit status: 0 when every invariant held, 1 when one failed, 2 when the topology
could not be started (the reason is printed).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import httpx

from bench.chaos import checks
from bench.chaos.load import Apis, Delivery, Ledger, Load
from bench.chaos.report import FaultRecord, ProcessExit, render
from bench.chaos.topology import (
    DATABASE,
    Child,
    PrivatePgBouncer,
    PrivatePostgres,
    PrivateRedis,
    RetsuProcess,
    Topology,
    TopologyError,
    find_postgres_bin,
    replicate,
)

# Room for the longest fault (Redis down 20 s) and its aftermath before the next one.
SECONDS_PER_FAULT = 37.0
FAULTS = ("api-kill", "postgres-restart", "pgbouncer-restart", "redis-stop", "primary-failover")
# Not in the default run: it needs a standby, and no PgBouncer (which points at one server).
OPT_IN_FAULTS = ("primary-failover",)
WORKERS = ("expired-message-cleaner", "dead-letter-message-cleaner", "state-metrics-collector")
# Short worker intervals (the minimum each setting accepts) so a run sees several cycles.
WORKER_SETTINGS = {
    "worker.queue.expired_message_cleaner.processing_interval_seconds": "5",
    "worker.queue.dead_letter_message_cleaner.processing_interval_seconds": "5",
    "worker.queue.state_metrics_collector.collection_interval_seconds": "5",
    "worker.queue.state_metrics_collector.leadership_retry_interval_seconds": "5",
}


def reason(child: Child) -> str:
    """The last ERROR line of a process's log (else its last line), shortened."""
    lines = child.tail(400)
    errors = [line for line in lines if " ERROR " in line or " CRITICAL " in line]
    line = (errors or lines or [""])[-1]
    return line if len(line) <= 240 else line[:237] + "..."


def default_faults(with_pgbouncer: bool) -> tuple[str, ...]:
    return tuple(
        f for f in FAULTS if f not in OPT_IN_FAULTS and (f != "pgbouncer-restart" or with_pgbouncer)
    )


def _faults(value: str) -> tuple[str, ...]:
    items = tuple(v.strip() for v in value.split(",") if v.strip())
    unknown = [v for v in items if v not in FAULTS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown {unknown}; choose from {', '.join(FAULTS)}")
    return items


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.chaos",
        description="Kill, restart and stop the parts of a private Retsu topology under "
        "load, then account for every message. Touches no server it did not start.",
    )
    parser.add_argument(
        "--duration",
        type=float,
        help=f"seconds of load (default: --warmup plus {SECONDS_PER_FAULT:g} s per fault)",
    )
    parser.add_argument(
        "--warmup", type=float, default=10, help="seconds of load before the first fault"
    )
    parser.add_argument(
        "--faults",
        type=_faults,
        help=f"comma-separated, in order, from {', '.join(FAULTS)} (default: api-kill, "
        "postgres-restart, pgbouncer-restart when PgBouncer runs, redis-stop). "
        "primary-failover: a streaming standby runs from the start and Retsu's URL names "
        "both; every process of the primary is SIGKILLed (its machine lost) and the standby "
        "promoted after --failover-delay seconds (runs without PgBouncer)",
    )
    parser.add_argument(
        "--rate", type=float, default=100, help="enqueues per second, all producers (default 100)"
    )
    parser.add_argument("--producers", type=int, default=4, help="producer tasks (default 4)")
    parser.add_argument("--consumers", type=int, default=4, help="consumer tasks (default 4)")
    parser.add_argument("--batch", type=int, default=10, help="max_messages per dequeue")
    parser.add_argument(
        "--visibility-timeout", type=int, default=15, help="the queue's lease, seconds"
    )
    parser.add_argument(
        "--api-down", type=float, default=2, help="seconds a killed API process stays down"
    )
    parser.add_argument(
        "--redis-outage", type=float, default=20, help="seconds Redis stays stopped"
    )
    parser.add_argument(
        "--postgres-stop-mode",
        choices=("fast", "immediate"),
        default="fast",
        help="pg_ctl restart -m MODE (immediate = a crash and WAL recovery)",
    )
    parser.add_argument(
        "--standby",
        choices=("sync", "async"),
        default="sync",
        help="replication to the standby of primary-failover: synchronous (nothing answered "
        "may be lost) or asynchronous (the last commits may be; the report counts them)",
    )
    parser.add_argument(
        "--failover-delay",
        type=float,
        default=2,
        help="seconds between killing the primary and promoting the standby (default 2)",
    )
    parser.add_argument(
        "--pgbouncer",
        choices=("auto", "on", "off"),
        default="auto",
        help="put PgBouncer (transaction mode) between Retsu and PostgreSQL: auto = when "
        "the pgbouncer command is installed (apt-get install pgbouncer)",
    )
    parser.add_argument(
        "--recovery",
        type=float,
        default=5,
        help="seconds after a fault during which client errors are still allowed (default 5)",
    )
    parser.add_argument(
        "--ready-target",
        type=float,
        default=5,
        help="max seconds to /health/ready 200 after PostgreSQL returns (default 5)",
    )
    parser.add_argument(
        "--residue",
        type=int,
        default=60,
        help="messages enqueued after the load, so the stats check sees a backlog (default 60)",
    )
    parser.add_argument(
        "--unprobed",
        type=float,
        default=15,
        help="seconds after the database returns during which one API process and the "
        "workers are not probed, so only the hot path can repair them (default 15)",
    )
    parser.add_argument("--pg-bin", help="directory of initdb and pg_ctl (found if omitted)")
    parser.add_argument("--keep", action="store_true", help="keep the run directory and its logs")
    return parser


class Run:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.root = Path(tempfile.mkdtemp(prefix="retsu-chaos-"))
        self.root.chmod(0o755)  # the postgres user must reach its data directory
        (self.root / "logs").mkdir()
        self.topology: Topology | None = None
        self.exits: list[ProcessExit] = []
        self.faults: list[FaultRecord] = []
        self.ledger = Ledger(visibility_timeout=float(args.visibility_timeout))

    # -- topology -----------------------------------------------------------------------

    @staticmethod
    def wants_pgbouncer(args: argparse.Namespace) -> bool:
        installed = shutil.which("pgbouncer") is not None
        if "primary-failover" in (args.faults or ()):
            return False  # PgBouncer points at one server: the failover runs without it
        return bool(args.pgbouncer == "on" or (args.pgbouncer == "auto" and installed))

    @staticmethod
    def wants_standby(args: argparse.Namespace) -> bool:
        return "primary-failover" in (args.faults or ())

    def use_pgbouncer(self) -> bool:
        if self.args.pgbouncer == "on" and shutil.which("pgbouncer") is None:
            raise TopologyError("--pgbouncer on, but pgbouncer is not installed")
        if self.args.pgbouncer == "on" and self.wants_standby(self.args):
            raise TopologyError(
                "primary-failover runs without PgBouncer (it points at one server; behind "
                "PgBouncer the failover is its job, see docs/operations.md)"
            )
        return self.wants_pgbouncer(self.args)

    async def start(self) -> Topology:
        bin_dir = find_postgres_bin(self.args.pg_bin)
        postgres = PrivatePostgres(self.root, bin_dir)
        await asyncio.to_thread(postgres.init)
        await asyncio.to_thread(postgres.start)
        admin = await asyncpg.connect(postgres.url("postgres"))
        try:
            await admin.execute(f'CREATE DATABASE "{DATABASE}"')
        finally:
            await admin.close()
        standby = None
        if self.wants_standby(self.args):
            standby = PrivatePostgres(self.root, bin_dir, "standby")
            await replicate(postgres, standby, sync=self.args.standby == "sync")
        redis = PrivateRedis(self.root)
        pgbouncer = None
        if self.use_pgbouncer():
            # Room for both API pools, both cleaners, and a margin (docs/scaling.md).
            pgbouncer = PrivatePgBouncer(self.root, postgres, pool_size=40)
        topology = Topology(self.root, postgres, redis, pgbouncer, standby=standby)
        self.topology = topology
        redis.start()
        if pgbouncer is not None:
            pgbouncer.configure()
            pgbouncer.start()
        await asyncio.to_thread(topology.migrate)
        common = {"logging.filter": "info", "logging.format": "pretty"}
        for index in (1, 2):
            topology.add_api(index, common)
        for worker in WORKERS:
            for index in (1, 2) if worker == "state-metrics-collector" else (1,):
                topology.add_worker(worker, index, {**common, **WORKER_SETTINGS})
        for process in topology.retsu_processes:
            process.child.start()
        for process in topology.retsu_processes:
            await asyncio.to_thread(process.wait_ready)
        return topology

    def header(self, topology: Topology) -> list[str]:
        from retsu import __version__

        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=Path(__file__).resolve().parent,
            check=False,
        ).stdout.strip()
        pooler = (
            f"{topology.pgbouncer.version()} (transaction mode) on 127.0.0.1:"
            f"{topology.pgbouncer.port}"
            if topology.pgbouncer is not None
            else "none (database.url straight to PostgreSQL)"
        )
        a = self.args
        standby = (
            f"  Standby:    pg_basebackup of it, {a.standby}hronous streaming replication, "
            f"127.0.0.1:{topology.standby.port}; Retsu's URL names both "
            "(target_session_attrs=read-write)"
            if topology.standby is not None
            else None
        )
        return [
            f"Retsu chaos run, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, retsu {__version__}"
            + (f" at {commit}" if commit else ""),
            f"  PostgreSQL: private cluster, {topology.postgres.version()}, 127.0.0.1:"
            f"{topology.postgres.port} (restart -m {a.postgres_stop_mode})",
            *([standby] if standby else []),
            f"  PgBouncer:  {pooler}",
            f"  Redis:      private redis-server on 127.0.0.1:{topology.redis.port}",
            "  Retsu:      " + ", ".join(f"{p.name} (:{p.port})" for p in topology.retsu_processes),
            f"  Load:       {a.duration:g} s, {a.producers} producers at {a.rate:g} enqueues/s "
            f"in all (Idempotency-Key per number), {a.consumers} consumers (batches of "
            f"{a.batch}, long poll 1 s), visibility timeout {a.visibility_timeout} s",
        ]

    # -- faults ------------------------------------------------------------------------

    async def watch_processes(self, topology: Topology) -> None:
        seen: set[tuple[str, int]] = set()
        while True:
            for process in topology.retsu_processes:
                child = process.child
                code = child.exit_code()
                key = (child.name, child.starts)
                if code is not None and not child.stopped_on_purpose and key not in seen:
                    seen.add(key)
                    self.exits.append(
                        ProcessExit(child.name, self.ledger.now(), code, reason(child))
                    )
            await asyncio.sleep(0.25)

    async def time_to_ready(
        self, processes: Sequence[RetsuProcess], client: httpx.AsyncClient, within: float = 30
    ) -> dict[str, float | None]:
        """Seconds until each process's /health/ready answers 200 (probed every 100 ms)."""
        started = time.monotonic()

        async def one(process: RetsuProcess) -> float | None:
            while time.monotonic() - started < within:
                if not process.child.alive():
                    return None
                with contextlib.suppress(httpx.HTTPError):
                    response = await client.get(process.ready_url, timeout=1)
                    if response.status_code == 200:
                        return time.monotonic() - started
                await asyncio.sleep(0.1)
            return None

        results = await asyncio.gather(*(one(p) for p in processes))
        return {p.name: r for p, r in zip(processes, results, strict=True)}

    async def measure_readiness(
        self, fault: FaultRecord, topology: Topology, client: httpx.AsyncClient
    ) -> None:
        """Time to ready once the database is back, without hiding the hot path.

        A failing /health/ready check makes a process drop its broken pooled connections
        (issue 9), so probing every process at once would repair the hot path and the
        workers from the outside. The last API process is probed every 100 ms from the
        moment the database is back (its time to ready); the other API process and every
        worker are left alone for --unprobed seconds, during which the clients keep
        using that API process and the workers run their cycles; then they are probed.
        """
        probed_at_once = [topology.apis[-1]]
        left_alone = [p for p in topology.retsu_processes if p not in probed_at_once]
        fault.ready_after = await self.time_to_ready(probed_at_once, client)
        assert fault.ended is not None
        fault.unprobed_seconds = self.args.unprobed
        await self._sleep_until(fault.ended + self.args.unprobed)
        fault.ready_after_unprobed = await self.time_to_ready(left_alone, client)

    async def inject(self, name: str, topology: Topology, client: httpx.AsyncClient) -> None:
        fault = FaultRecord(name, self.ledger.now())
        self.faults.append(fault)
        if name == "api-kill":
            victim = topology.apis[0]
            pid = victim.child.pid
            victim.child.stop(timeout=5, sig=signal.SIGKILL)
            await asyncio.sleep(self.args.api_down)
            victim.child.start()
            try:
                await asyncio.to_thread(victim.wait_ready, 60)
                fault.ended = self.ledger.now()
                fault.detail = (
                    f"SIGKILL {victim.name} (pid {pid}), restarted after "
                    f"{self.args.api_down:g} s, ready again"
                )
            except TopologyError as error:
                fault.detail = f"SIGKILL {victim.name}; the restart failed: {error}"
        elif name == "postgres-restart":
            began = time.monotonic()
            await asyncio.to_thread(topology.postgres.restart, self.args.postgres_stop_mode)
            fault.ended = self.ledger.now()
            fault.detail = (
                f"pg_ctl restart -m {self.args.postgres_stop_mode}: accepting connections "
                f"again after {time.monotonic() - began:.2f} s"
            )
            await self.measure_readiness(fault, topology, client)
        elif name == "pgbouncer-restart":
            if topology.pgbouncer is None:
                fault.ended = fault.started
                fault.detail = "skipped: no PgBouncer in this run"
                return
            began = time.monotonic()
            topology.pgbouncer.child.stop(timeout=5, sig=signal.SIGTERM)
            await asyncio.to_thread(topology.pgbouncer.start)
            fault.ended = self.ledger.now()
            fault.detail = (
                f"SIGTERM and start: listening again after {time.monotonic() - began:.2f} s"
            )
            await self.measure_readiness(fault, topology, client)
        elif name == "primary-failover":
            if topology.standby is None:
                fault.ended = fault.started
                fault.detail = "skipped: no standby in this run"
                return
            old, new = topology.postgres, topology.standby
            await asyncio.to_thread(old.kill)
            await asyncio.sleep(self.args.failover_delay)
            began = time.monotonic()
            await asyncio.to_thread(new.promote)
            topology.promoted()
            fault.ended = self.ledger.now()
            fault.detail = (
                f"every process of the primary (127.0.0.1:{old.port}) SIGKILLed, its machine "
                f"lost; {self.args.failover_delay:g} s later pg_ctl promote on the "
                f"{self.args.standby}hronous standby (127.0.0.1:{new.port}): took writes "
                f"after {time.monotonic() - began:.2f} s"
            )
            await self.measure_readiness(fault, topology, client)
        elif name == "redis-stop":
            topology.redis.child.stop(timeout=5)
            await asyncio.sleep(self.args.redis_outage)
            await asyncio.to_thread(topology.redis.start)
            fault.ended = self.ledger.now()
            fault.detail = f"redis-server stopped for {self.args.redis_outage:g} s, then started"

    # -- the run ------------------------------------------------------------------------

    async def run(self) -> int:
        a = self.args
        try:
            topology = await self.start()
        except (TopologyError, OSError, asyncpg.PostgresError) as error:
            print(f"chaos: the topology did not start: {error}", file=sys.stderr)
            return 2
        faults = a.faults or default_faults(topology.pgbouncer is not None)
        header = self.header(topology)
        print("\n".join(header), flush=True)
        bases = [f"http://127.0.0.1:{api.port}" for api in topology.apis]
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=32)
        async with httpx.AsyncClient(timeout=10, limits=limits) as client:
            queue_name = f"chaos-{uuid.uuid4().hex[:8]}"
            created = await client.post(
                f"{bases[1]}/v1/queues",
                json={
                    "name": queue_name,
                    "visibility_timeout_seconds": a.visibility_timeout,
                    "max_delivery_attempts": 100,
                },
            )
            created.raise_for_status()
            queue_id = created.json()["id"]
            self.ledger = Ledger(visibility_timeout=float(a.visibility_timeout))
            load = Load(
                client,
                Apis(bases),
                queue_id,
                self.ledger,
                a.producers,
                a.rate,
                a.consumers,
                a.batch,
            )
            watcher = asyncio.create_task(self.watch_processes(topology))
            producers = [asyncio.create_task(load.produce()) for _ in range(a.producers)]
            consumers = [asyncio.create_task(load.consume(i)) for i in range(a.consumers)]

            spacing = (a.duration - a.warmup) / max(len(faults), 1)
            for index, name in enumerate(faults):
                await self._sleep_until(a.warmup + index * spacing)
                print(f"  {self.ledger.now():6.1f} s  fault: {name}", flush=True)
                await self.inject(name, topology, client)
            await self._sleep_until(a.duration)
            load_end = self.ledger.now()
            print(f"  {load_end:6.1f} s  load stopped; checking and draining", flush=True)

            load.stop_producing.set()
            await asyncio.gather(*producers)
            load.stop_consuming.set()
            await asyncio.gather(*consumers)

            stats_checks, undelivered, drain_seconds = await self.settle(
                client, load, topology, bases, queue_id, queue_name
            )
            watcher.cancel()

        report, verdict = render(
            header=[],
            ledger=self.ledger,
            faults=self.faults,
            load_end=load_end,
            recovery=a.recovery,
            ready_target=a.ready_target,
            exits=self.exits,
            checks=stats_checks,
            undelivered_stored=undelivered,
            drain_seconds=drain_seconds,
        )
        print()
        print(report)
        (self.root / "report.txt").write_text("\n".join(header) + "\n\n" + report + "\n")
        return 1 if verdict.failures else 0

    async def _sleep_until(self, at: float) -> None:
        await asyncio.sleep(max(0.0, at - self.ledger.now()))

    async def settle(
        self,
        client: httpx.AsyncClient,
        load: Load,
        topology: Topology,
        bases: list[str],
        queue_id: str,
        queue_name: str,
    ) -> tuple[list[checks.StatsCheck], int, float | None]:
        """With the load stopped: compare stats with count(*) on a backlog with every
        state in it, then drain, and compare again on the empty queue."""
        url = topology.postgres.url()
        collectors = {
            p.name: f"http://127.0.0.1:{p.port}/metrics"
            for p in topology.workers
            if p.role == "worker:state-metrics-collector"
        }
        collector_wait = 40.0
        # A backlog with every state in it, so no count is trivially zero: numbered
        # messages left ready, a few of them held in flight, and delayed probes.
        residue = [next(load.numbers) for _ in range(self.args.residue)]
        load.stop_producing.clear()
        await asyncio.gather(*(load.enqueue_until_acknowledged(n) for n in residue))
        load.stop_producing.set()
        for i in range(3):
            with contextlib.suppress(httpx.HTTPError):
                await client.post(
                    f"{bases[0]}/v1/queues/{queue_id}/messages",
                    json={"payload": f"probe-{i}", "priority": "LOW", "delay_seconds": 3600},
                )
        held: list[Delivery] = []
        with contextlib.suppress(httpx.HTTPError):
            requested = time.monotonic()
            response = await client.post(
                f"{bases[0]}/v1/queues/{queue_id}/messages/dequeue",
                json={"max_messages": 5, "visibility_timeout_seconds": 300},
            )
            if response.status_code == 200:
                for item in response.json()["messages"]:
                    delivery = load.delivery(item, requested, time.monotonic())
                    self.ledger.delivered(delivery)
                    held.append(delivery)
        found = [
            await checks.check_stats(
                "after the faults, backlog with ready, in-flight and delayed messages",
                client,
                url,
                bases[1],
                queue_id,
                queue_name,
                collectors,
                time.monotonic(),
                collector_wait,
            )
        ]
        if held:
            await load.acknowledge(held, {d.message_id: d for d in held})

        # Drain: consume until every acknowledged enqueue was delivered and acknowledged.
        began = time.monotonic()
        deadline = began + self.args.visibility_timeout + 90
        load.stop_consuming.clear()
        drainers = [asyncio.create_task(load.consume(i)) for i in range(self.args.consumers)]
        drain_seconds: float | None = None
        while time.monotonic() < deadline:
            missing = set(self.ledger.acknowledged_enqueues) - self.ledger.delivered_numbers()
            if not missing and await self.numbered_left(url, queue_id) == 0:
                drain_seconds = time.monotonic() - began
                break
            await asyncio.sleep(0.5)
        load.stop_consuming.set()
        await asyncio.gather(*drainers)
        # Only the delayed probes are left: purge removes them (an operator action).
        with contextlib.suppress(httpx.HTTPError):
            await client.post(f"{bases[0]}/v1/queues/{queue_id}/purge")
        found.append(
            await checks.check_stats(
                "after the drain (empty queue)",
                client,
                url,
                bases[1],
                queue_id,
                queue_name,
                collectors,
                time.monotonic(),
                collector_wait,
            )
        )
        undelivered = await self.still_stored(url, queue_id, self.ledger.lost())
        return found, undelivered, drain_seconds

    async def numbered_left(self, url: str, queue_id: str) -> int:
        """Numbered messages still stored (the delayed probes aside)."""
        connection = await asyncpg.connect(url)
        try:
            value = await connection.fetchval(
                "SELECT count(*) FROM queue_message WHERE queue_id = $1 AND payload LIKE 'chaos:%'",
                queue_id,
            )
        finally:
            await connection.close()
        return int(value)

    async def still_stored(self, url: str, queue_id: str, numbers: list[int]) -> int:
        """Of the acknowledged enqueues never delivered, how many are still in the table."""
        if not numbers:
            return 0
        connection = await asyncpg.connect(url)
        try:
            payloads = [f"chaos:{n}" for n in numbers]
            value = await connection.fetchval(
                "SELECT count(*) FROM queue_message WHERE queue_id = $1 AND payload = ANY($2)",
                queue_id,
                payloads,
            )
        finally:
            await connection.close()
        return int(value)

    def close(self) -> None:
        if self.topology is not None:
            self.topology.stop_all()
        if self.args.keep:
            print(f"\nlogs and data kept in {self.root}")
        else:
            shutil.rmtree(self.root, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    faults = args.faults or default_faults(Run.wants_pgbouncer(args))
    if args.duration is None:
        args.duration = args.warmup + SECONDS_PER_FAULT * len(faults)
    if args.duration <= args.warmup:
        raise SystemExit("chaos: --duration must be longer than --warmup")
    spacing = (args.duration - args.warmup) / max(len(faults), 1)
    if "redis-stop" in faults and spacing < args.redis_outage + 10:
        raise SystemExit(
            f"chaos: {len(faults)} faults in {args.duration - args.warmup:g} s leave "
            f"{spacing:.0f} s each; the Redis outage needs {args.redis_outage + 10:g}: "
            "raise --duration"
        )
    run = Run(args)
    # `timeout`, a CI runner or kill: stop the topology as Ctrl-C would.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        return asyncio.run(run.run())
    except KeyboardInterrupt:
        return 130
    finally:
        run.close()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
