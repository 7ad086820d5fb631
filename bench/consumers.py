"""Consumer runner against consumer runner (SPEC §7b): what a user runs, draining a backlog.

Retsu: the real ``retsu-worker`` command, in a process of its own, with a no-op async
handler (``bench.consumer_handlers:noop``), against ONE default ``retsu api``
(``http.workers`` 1, ``database.max_connections`` 10, the shared cache on Redis when one
answers). PgQueuer: what ``pgq run`` runs (bench/pgq_run.py) with one ``QueueManager`` on
one asyncpg connection and the same no-op as its entrypoint. Concurrency 1 is ``--concurrency 1``
against ``--batch-size 1``; concurrency 10 is ``--concurrency 10`` against
``--batch-size 10`` (PgQueuer's batch does not cap its concurrency; a no-op handler never
needs more than one running).

One drain: prefill ``count`` messages (SQL, as the other scenarios do; ANALYZEd), start
the consumer, and time from the handler's first call to the moment the queue is empty in
PostgreSQL (every message acknowledged: a drain is done when the work is recorded, not
when the handlers returned). The handler stamps its first and its ``count``-th call with
``time.monotonic()``, so process start-up and the first connection are outside the timed
window for both; once the last call is stamped the benchmark polls the queue every 2 ms
until it is empty. Then SIGTERM: ``retsu-worker`` must exit 0 (its graceful shutdown).

Rounds alternate the systems and which one goes first, so a machine whose background load
drifts hurts both alike; the figure per system is the median of its rounds, and the
ratio of each round's pair (measured seconds apart) is reported beside it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import psutil  # type: ignore[import-untyped]

from bench.client import Connection, HttpError, encode_request
from bench.common import CpuUse, CpuWindow
from bench.pgqueuer_system import PgQueuerSystem
from bench.retsu_system import RetsuSystem
from bench.scenarios import Config, Result

SCENARIOS = ("consumer-1", "consumer-10")
CONCURRENCY = {"consumer-1": 1, "consumer-10": 10}
ROOT = Path(__file__).resolve().parent.parent
HANDLER = "bench.consumer_handlers:noop"
PGQ_FACTORY = "bench.consumer_handlers:pgqueuer"
STARTUP_SECONDS = 60.0
EMPTY_POLL_SECONDS = 0.002


def _script(name: str, module: str) -> list[str]:
    """The installed console script next to this interpreter (what users run), else
    ``python -m module``."""
    script = Path(sys.executable).with_name(name)
    return [str(script)] if script.exists() else [sys.executable, "-m", module]


def _env(extra: dict[str, str], pythonpath: Sequence[str] = ()) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RETSU_", "BENCH_"))}
    # The client from this checkout when it is not installed (CI installs only the
    # server); a baseline copy given in ``pythonpath`` comes first and wins.
    paths = [*pythonpath, str(ROOT), str(ROOT / "clients" / "python" / "src")]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.update(extra)
    return env


class Contender(Protocol):
    key: str
    name: str

    async def prepare(self, count: int, cfg: Config) -> None: ...

    def command(self, concurrency: int) -> list[str]: ...

    def environment(self, extra: dict[str, str]) -> dict[str, str]: ...

    async def empty(self) -> bool: ...

    async def remaining(self) -> int: ...

    def api_pids(self) -> list[int]: ...

    async def requests(self) -> dict[str, float]: ...


class RetsuWorker:
    """``retsu-worker`` over one default ``retsu api``. With ``source`` (a directory holding a
    ``retsu_client`` package, e.g. a ``git archive`` of an older commit's
    ``clients/python/src``), that copy of the worker runs instead: a before/after baseline
    measured in the same run. With ``fixed_prefetch``, ``--prefetch`` is the concurrency
    (messages held = handlers running, as PgQueuer's batch; no fetching ahead)."""

    def __init__(
        self, system: RetsuSystem, *, source: Path | None = None, fixed_prefetch: bool = False
    ) -> None:
        self.system = system
        self.source = source
        self.fixed_prefetch = fixed_prefetch
        if source is not None:
            self.key, self.name = "retsu-baseline", f"retsu-worker baseline ({source})"
        elif fixed_prefetch:
            self.key, self.name = "retsu-fixed", "retsu-worker --prefetch = concurrency"
        else:
            self.key, self.name = "retsu", "retsu-worker (1 default API process)"

    async def prepare(self, count: int, cfg: Config) -> None:
        await self.system.new_queue()
        await self.system.prefill(count)
        if cfg.analyze:
            await self.system.analyze()

    def command(self, concurrency: int) -> list[str]:
        api = self.system.api
        launcher = (
            _script("retsu-worker", "retsu_client.cli.worker")
            if self.source is None
            else [sys.executable, "-m", "retsu_client.cli.worker"]
        )
        return [
            *launcher,
            HANDLER,
            "--queue",
            str(self.system.queue_id),
            "--concurrency",
            str(concurrency),
            "--url",
            f"http://{api.host}:{api.port}",
            *(["--prefetch", str(concurrency)] if self.fixed_prefetch else []),
        ]

    def environment(self, extra: dict[str, str]) -> dict[str, str]:
        return _env(extra, [str(self.source)] if self.source is not None else [])

    async def empty(self) -> bool:
        sql = self.system._sql
        assert sql is not None
        return not await sql.fetchval(
            "SELECT EXISTS (SELECT 1 FROM queue_message WHERE queue_id = $1)",
            self.system.queue_id,
        )

    async def remaining(self) -> int:
        sql = self.system._sql
        assert sql is not None
        return int(
            await sql.fetchval(
                "SELECT count(*) FROM queue_message WHERE queue_id = $1", self.system.queue_id
            )
        )

    def api_pids(self) -> list[int]:
        return self.system.api_pids()

    async def requests(self) -> dict[str, float]:
        """Requests the API has answered, by kind (from its /metrics)."""
        api = self.system.api
        connection = Connection(api.host, api.port)
        try:
            await connection.open()
            status, body = await connection.request(
                encode_request("GET", "/metrics", f"{api.host}:{api.port}")
            )
        except (OSError, HttpError):
            return {}
        finally:
            connection.close()
        if status != 200:
            return {}
        return requests_by_kind(body.decode(errors="replace"))


def requests_by_kind(metrics: str) -> dict[str, float]:
    """``http_server_requests_total`` summed into dequeue / acknowledge / visibility / other."""
    counts = {"dequeue": 0.0, "acknowledge": 0.0, "visibility": 0.0, "other": 0.0}
    for line in metrics.splitlines():
        if not line.startswith("http_server_requests_total{"):
            continue
        labels, _, value = line.rpartition(" ")
        route = labels.split('route="', 1)[-1].split('"', 1)[0]
        kind = next((k for k in ("dequeue", "acknowledge", "visibility") if k in route), "other")
        counts[kind] += float(value)
    return counts


class PgqRun:
    """``pgq run`` (bench/pgq_run.py) with one QueueManager on one connection."""

    key = "pgqueuer"

    def __init__(self, system: PgQueuerSystem) -> None:
        self.system = system
        self.name = f"{system.name.split(' (')[0]} `pgq run` (1 QueueManager)"

    async def prepare(self, count: int, cfg: Config) -> None:
        await self.system.new_queue()
        await self.system.prefill(count)
        if cfg.analyze:
            await self.system.analyze()

    def command(self, concurrency: int) -> list[str]:
        # `pgq run PGQ_FACTORY --batch-size N`, through bench/pgq_run.py (see there why)
        return [sys.executable, "-m", "bench.pgq_run", PGQ_FACTORY, str(concurrency)]

    def environment(self, extra: dict[str, str]) -> dict[str, str]:
        return _env({**extra, "BENCH_PGQ_DSN": self.system.database_url})

    async def empty(self) -> bool:
        sql = self.system._sql
        assert sql is not None
        table = self.system._tables()[0]
        return not await sql.fetchval(f'SELECT EXISTS (SELECT 1 FROM "{table}")')

    async def remaining(self) -> int:
        sql = self.system._sql
        assert sql is not None
        return int(await sql.fetchval(f'SELECT count(*) FROM "{self.system._tables()[0]}"'))

    def api_pids(self) -> list[int]:
        return []

    async def requests(self) -> dict[str, float]:
        return {}


@dataclass
class Drain:
    """One timed drain."""

    key: str
    messages: int
    seconds: float
    cpu: CpuUse | None
    consumer_cores: float
    requests: dict[str, float] = field(default_factory=dict)
    exit_code: int | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0


class _Process:
    """The consumer under test, in a process of its own, with its output in a file."""

    def __init__(self, command: list[str], env: dict[str, str], key: str) -> None:
        self.stamps = Path(tempfile.mkstemp(prefix="retsu-bench-stamps-")[1])
        self.log_path = Path(tempfile.mkstemp(prefix=f"retsu-bench-{key}-", suffix=".log")[1])
        env = {
            **env,
            "BENCH_CONSUMER_STAMPS": str(self.stamps),
        }
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                command, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT
            )
        self.watched = psutil.Process(self.process.pid)

    def stamped(self) -> list[float]:
        """The handler's stamps so far: its first call, then its last."""
        try:
            return [float(line) for line in self.stamps.read_text().split()]
        except (OSError, ValueError):
            return []

    def exited(self) -> int | None:
        return self.process.poll()

    def cpu_seconds(self) -> float:
        try:
            times = self.watched.cpu_times()
        except psutil.Error:
            return 0.0
        return float(times.user + times.system)

    def tail(self, size: int) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-size:]
        except OSError:
            return ""

    def stop(self, timeout: float = 40) -> int | None:
        """SIGTERM (a graceful stop), then its exit status (None: killed after timeout)."""
        process = self.process
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                return None
        return process.returncode

    def remove_files(self) -> None:
        self.stamps.unlink(missing_ok=True)
        self.log_path.unlink(missing_ok=True)


async def drain_once(
    contender: Contender,
    concurrency: int,
    count: int,
    cfg: Config,
    admin_url: str,
    databases: list[str],
) -> Drain:
    await contender.prepare(count, cfg)
    before = await contender.requests()
    consumer = _Process(
        contender.command(concurrency),
        contender.environment({"BENCH_CONSUMER_COUNT": str(count)}),
        contender.key,
    )
    notes: list[str] = []
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while not (seen := consumer.stamped()):
            if consumer.exited() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"{contender.name} did not start consuming (exit {consumer.exited()}):\n"
                    + consumer.tail(3000)
                )
            await asyncio.sleep(0.005)
        started = seen[0]
        window = CpuWindow(admin_url, databases, contender.api_pids())
        await window.begin()
        consumer_before = consumer.cpu_seconds()
        stop_at = started + cfg.consumer_max_seconds
        while len(consumer.stamped()) < 2 and time.monotonic() < stop_at:
            if consumer.exited() is not None:
                break
            await asyncio.sleep(0.01)
        while not await contender.empty() and time.monotonic() < stop_at:
            if consumer.exited() is not None:
                break
            await asyncio.sleep(EMPTY_POLL_SECONDS)
        finished = time.monotonic()
        cpu = await window.end()
        consumer_cores = (consumer.cpu_seconds() - consumer_before) / max(finished - started, 1e-9)
        left = 0 if await contender.empty() else await contender.remaining()
        if left:
            notes.append(f"drained {count - left:,} of {count:,} before the time limit")
        after = await contender.requests()
    finally:
        exit_code = await asyncio.to_thread(consumer.stop)
        if exit_code != 0:
            notes.append(
                f"exit status {exit_code} after SIGTERM: " + consumer.tail(500).replace("\n", " ")
            )
        consumer.remove_files()
    requests = {kind: after.get(kind, 0.0) - before.get(kind, 0.0) for kind in after}
    # The consumer process is this scenario's load generator (the benchmark only polls).
    cpu = CpuUse(
        seconds=cpu.seconds,
        bench=consumer_cores,
        api=cpu.api,
        postgres=cpu.postgres,
        machine=cpu.machine,
        cores=cpu.cores,
    )
    return Drain(
        contender.key,
        count - left,
        finished - started,
        cpu,
        consumer_cores,
        requests,
        exit_code,
        notes,
    )


async def compare(
    scenario: str,
    contenders: Sequence[Contender],
    cfg: Config,
    admin_url: str,
    databases: list[str],
    log: Callable[[str], None] | None = None,
) -> list[Result]:
    """``cfg.consumer_rounds`` rounds of every contender, in alternating order."""
    concurrency = CONCURRENCY[scenario]
    count = cfg.consumer_single if concurrency == 1 else cfg.consumer_batch
    drains: dict[str, list[Drain]] = {c.key: [] for c in contenders}
    for round_index in range(cfg.consumer_rounds):
        order = list(contenders) if round_index % 2 == 0 else list(reversed(contenders))
        for contender in order:
            drain = await drain_once(contender, concurrency, count, cfg, admin_url, databases)
            drains[contender.key].append(drain)
            if log is not None:
                log(
                    f"  {scenario:<16} {contender.name:<40} {drain.rate:>10,.0f} msg/s"
                    f"  (round {round_index + 1}: {drain.messages:,} in {drain.seconds:.2f} s,"
                    f" consumer {drain.consumer_cores:.2f} cores)"
                )
    reference = drains.get("pgqueuer", [])
    results = []
    for contender in contenders:
        runs = drains[contender.key]
        results.append(_result(scenario, contender, runs, reference, concurrency))
    return results


def _result(
    scenario: str,
    contender: Contender,
    runs: list[Drain],
    reference: list[Drain],
    concurrency: int,
) -> Result:
    median = statistics.median(d.rate for d in runs)
    typical = min(runs, key=lambda d: abs(d.rate - median))  # its CPU figures are reported
    messages = sum(d.messages for d in runs)
    # rate = median: messages over the seconds that make that rate.
    result = Result(
        scenario,
        contender.name,
        contender.key,
        typical.messages,
        typical.messages / median if median else typical.seconds,
        cpu=typical.cpu,
    )
    rates = ", ".join(f"{d.rate:,.0f}" for d in runs)
    result.notes.append(f"median of {len(runs)} rounds ({rates} msg/s)")
    if reference and contender.key != "pgqueuer":
        ratios = [d.rate / r.rate for d, r in zip(runs, reference, strict=False) if r.rate]
        if ratios:
            result.notes.append(
                "per-round ratio to PgQueuer " + " / ".join(f"{x:.2f}" for x in ratios)
            )
            result.extra["round_ratios_min"] = min(ratios)
            result.extra["round_ratios_max"] = max(ratios)
    result.notes.append(
        "consumer process " + "/".join(f"{d.consumer_cores:.2f}" for d in runs) + " cores"
    )
    kinds = {k for d in runs for k in d.requests}
    if kinds and messages:
        per_k = {
            kind: sum(d.requests.get(kind, 0.0) for d in runs) / messages * 1000
            for kind in ("dequeue", "acknowledge", "visibility", "other")
            if kind in kinds
        }
        result.notes.append(
            "requests per 1,000 messages: "
            + ", ".join(f"{kind} {value:.0f}" for kind, value in per_k.items())
        )
    for drain in runs:
        result.notes.extend(drain.notes)
    result.extra["concurrency"] = concurrency
    return result
