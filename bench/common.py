"""What the systems share: databases of their own, payloads, SQL prefill, monitors."""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import asyncpg
import psutil  # type: ignore[import-untyped]

from retsu.adapters.postgres.counters import count_stored
from retsu.adapters.postgres.tables import MessageState

PAYLOAD_BYTES = 512
# Retsu's priorities and their stored values; the mix is HIGH, MEDIUM, LOW in turn.
PRIORITY_VALUES = (3, 2, 1)
DEFAULT_TTL_SECONDS = 604800  # a queue's default message lifetime (7 days)
DELAYED_STATE = int(MessageState.DELAYED)  # inside its first delay (migration 0005)
READY_STATE = int(MessageState.READY)
WAITING_STATE = int(MessageState.WAITING)  # behind its group's head (migration 0009)


def payload(size: int = PAYLOAD_BYTES) -> str:
    """A fixed ASCII payload of exactly ``size`` bytes."""
    unit = "retsu-benchmark-payload/"
    return (unit * (size // len(unit) + 1))[:size]


class OpError(Exception):
    """An operation answered something other than success (counted, not fatal)."""


def plain_url(url: str) -> str:
    """asyncpg wants postgresql:// without a driver suffix."""
    for prefix in ("postgresql+asyncpg://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql://" + url[len(prefix) :]
    return url


def url_for(admin_url: str, database: str) -> str:
    parts = urlsplit(plain_url(admin_url))
    return parts._replace(path=f"/{database}").geturl()


class ScenarioPool:
    """An asyncpg pool of ``size`` connections that is open only while its system runs a
    scenario (``ready`` before, ``rest`` after; both outside the measured window).

    Every system of a run is started at the beginning and the scenarios take turns, so
    pools opened at start all stay open: with the five systems of the default run
    (Retsu's two API processes, the SQL floor, the SQL interface, the minimal floor and
    PgQueuer, 20 connections each at the defaults) that passed PostgreSQL's default 100
    connections ("sorry, too many clients already"). Open only while used, the run
    needs Retsu's own connections plus one system's pool at a time."""

    def __init__(self, url: str, size: int, **options: object) -> None:
        self._url = url
        self._size = size
        self._options = options
        self._pool: asyncpg.Pool | None = None

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise RuntimeError("the pool is at rest: ready() first")
        return self._pool

    async def ready(self) -> asyncpg.Pool:
        if self._pool is None:
            self._pool = await asyncpg.create_pool(
                self._url, min_size=self._size, max_size=self._size, **self._options
            )
        return self._pool

    async def rest(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()


@dataclass
class Databases:
    """Creates databases of the benchmark's own and drops every one of them at the end.

    Names carry the pid and a random suffix, so a run never touches other data.
    """

    admin_url: str
    run_id: str = field(default_factory=lambda: f"{os.getpid()}_{uuid.uuid4().hex[:8]}")
    created: list[str] = field(default_factory=list)

    async def create(self, label: str) -> str:
        name = f"retsu_bench_{self.run_id}_{label}"
        admin = await asyncpg.connect(plain_url(self.admin_url))
        try:
            await admin.execute(f'CREATE DATABASE "{name}"')
        finally:
            await admin.close()
        self.created.append(name)
        return url_for(self.admin_url, name)

    async def drop_all(self) -> None:
        if not self.created:
            return
        admin = await asyncpg.connect(plain_url(self.admin_url))
        try:
            while self.created:
                name = self.created.pop()
                await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()

    def names(self) -> list[str]:
        return list(self.created)


# A UUIDv7-shaped id for generate_series row ``i`` (millisecond time prefix, version 7,
# RFC 4122 variant), as Retsu's own id generator makes them, so the primary key sees the
# same locality.
_UUID7_OF_I = """(lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
            || '7' || substr(md5(i::text || random()::text), 1, 3)
            || substr('89ab', 1 + floor(random() * 4)::int, 1)
            || substr(md5(random()::text || i::text), 1, 15))::uuid"""

# Rows exactly as Retsu's enqueue statement writes them (READY, never delivered,
# enqueued now, lifetime from the TTL, deliverable now), in one INSERT ... SELECT.
# Ids are UUIDv7-shaped (``_UUID7_OF_I``).
RETSU_PREFILL = f"""
WITH stored AS (
    INSERT INTO queue_message
        (id, queue_id, payload, priority, state, enqueued_at, expires_at, available_after,
         delivery_attempts)
    SELECT {_UUID7_OF_I},
           $1, $2, (ARRAY[3, 2, 1])[1 + i % 3]::smallint, 1, now(),
           now() + make_interval(secs => $3), now(), 0
    FROM generate_series(1, $4::integer) AS i
    ORDER BY i
    RETURNING queue_id, id, priority, state
), {count_stored("stored")}
SELECT count(*) FROM stored
"""


async def retsu_prefill(
    connection: asyncpg.Connection, queue_id: uuid.UUID, count: int, body: str
) -> None:
    await connection.execute(RETSU_PREFILL, queue_id, body, float(DEFAULT_TTL_SECONDS), count)


# Messages inside their first delay, as Retsu's enqueue writes them with a delay: DELAYED,
# HIGH priority (so they sit at the head of the queue's delivery order), deliverable only
# after ``$5`` seconds.
RETSU_PREFILL_DELAYED = f"""
WITH stored AS (
    INSERT INTO queue_message
        (id, queue_id, payload, priority, state, enqueued_at, expires_at, available_after,
         delivery_attempts)
    SELECT {_UUID7_OF_I},
           $1, $2, 3::smallint, {DELAYED_STATE}, now(),
           now() + make_interval(secs => $3), now() + make_interval(secs => $5), 0
    FROM generate_series(1, $4::integer) AS i
    ORDER BY i
    RETURNING queue_id, id, priority, state
), {count_stored("stored")}
SELECT count(*) FROM stored
"""


async def retsu_prefill_delayed(
    connection: asyncpg.Connection, queue_id: uuid.UUID, count: int, body: str, seconds: int
) -> None:
    await connection.execute(
        RETSU_PREFILL_DELAYED, queue_id, body, float(DEFAULT_TTL_SECONDS), count, float(seconds)
    )


# Grouped messages as Retsu's enqueue leaves them (migration 0009), in one statement:
# ``$5`` groups (``group-0`` …), row ``i`` in group ``(i - 1) % $5``, so each group's
# messages are spread over the whole backlog in enqueue order. Each group's first message is
# its head: READY with its wait key (its own enqueue order, the group never having been
# delivered); the others WAITING (no wait key), counted as ready. One ``queue_group`` row per
# group (pending 1, the rest waiting, head_key the head's wait key); the rollup counts every
# message as ready and enqueued and each group once on the counter row
# ``retsu_group_apply`` uses for it (priority 2, shard from md5 of the key). Enqueue orders
# are drawn here, in row order, so the heads' wait keys are known in the same statement.
# The integration test compares the result with retsu_enqueue's for the same messages.
RETSU_PREFILL_GROUPED = f"""
WITH numbered AS (
    SELECT i, nextval('queue_message_enqueue_order_seq') AS o, {_UUID7_OF_I} AS id,
           i <= $5::integer AS head, 'group-' || ((i - 1) % $5::integer) AS group_key
    FROM generate_series(1, $4::integer) AS i
    ORDER BY i
), stored AS (
    INSERT INTO queue_message
        (enqueue_order, id, queue_id, payload, priority, state, enqueued_at, expires_at,
         available_after, delivery_attempts, group_key, wait_key)
    OVERRIDING SYSTEM VALUE
    SELECT n.o, n.id, $1, $2, (ARRAY[3, 2, 1])[1 + n.i % 3]::smallint,
           CASE WHEN n.head THEN {READY_STATE} ELSE {WAITING_STATE} END, now(),
           now() + make_interval(secs => $3), now(), 0, n.group_key,
           CASE WHEN n.head THEN n.o END
    FROM numbered AS n
    ORDER BY n.i
    RETURNING queue_id, id, priority, state, group_key, wait_key
), lanes AS (
    INSERT INTO queue_group (queue_id, group_key, pending, waiting, head_key)
    SELECT $1, s.group_key, count(*) FILTER (WHERE s.state = {READY_STATE}),
           count(*) FILTER (WHERE s.state = {WAITING_STATE}), max(s.wait_key)
    FROM stored AS s
    GROUP BY s.group_key
    ORDER BY s.group_key
    RETURNING group_key
), deltas AS (
    SELECT s.priority, retsu_shard(s.id) AS shard, 1 AS messages, 0 AS groups
    FROM stored AS s
    UNION ALL
    SELECT 2::smallint, (get_byte(decode(md5(l.group_key), 'hex'), 0) & 31)::smallint, 0, 1
    FROM lanes AS l
), counted AS (
    INSERT INTO queue_state_rollup AS c (queue_id, priority, shard, ready, enqueued, groups)
    SELECT $1, d.priority, d.shard, sum(d.messages), sum(d.messages), sum(d.groups)
    FROM deltas AS d
    GROUP BY 2, 3
    ORDER BY 2, 3
    ON CONFLICT (queue_id, priority, shard) DO UPDATE
    SET ready = c.ready + excluded.ready, enqueued = c.enqueued + excluded.enqueued,
        groups = c.groups + excluded.groups
    RETURNING 1
)
SELECT (SELECT count(*) FROM stored), (SELECT count(*) FROM lanes), (SELECT count(*) FROM counted)
"""


async def retsu_prefill_grouped(
    connection: asyncpg.Connection, queue_id: uuid.UUID, count: int, groups: int, body: str
) -> None:
    """``count`` messages in ``groups`` groups of an empty queue (``RETSU_PREFILL_GROUPED``).
    One statement: the groups' rows cannot be continued by a second batch without Retsu's
    own lane bookkeeping, so the whole backlog goes in at once (100,000 rows: seconds)."""
    await connection.execute(
        RETSU_PREFILL_GROUPED, queue_id, body, float(DEFAULT_TTL_SECONDS), count, groups
    )


async def retsu_reset(connection: asyncpg.Connection) -> None:
    """Remove every message and its counts, and vacuum the table."""
    await connection.execute("DELETE FROM queue_message")
    await connection.execute("DELETE FROM queue_state_rollup")
    await connection.execute("VACUUM queue_message")


# -- a held xmin horizon (SPEC §10) ---------------------------------------------

HELD_HORIZON_APPLICATION = "bench-held-horizon"


class HeldHorizon:
    """A transaction held open in a system's own database for a whole scenario:
    ``BEGIN; SELECT txid_current();`` on a connection of its own (application_name
    ``bench-held-horizon``), rolled back at the end. It has an xid, so until it ends vacuum
    can remove no row version of that database deleted or updated after it began: every
    claimed and acknowledged message stays behind as a dead row. (Since PostgreSQL 14 a
    transaction holds back only its own database's cleanup, so other databases of the
    server are not slowed down.)"""

    def __init__(self, database_url: str) -> None:
        self._url = plain_url(database_url)
        self._connection: asyncpg.Connection | None = None
        self.xid: int | None = None
        self.pid: int | None = None

    async def __aenter__(self) -> HeldHorizon:
        self._connection = await asyncpg.connect(
            self._url, server_settings={"application_name": HELD_HORIZON_APPLICATION}
        )
        self.pid = self._connection.get_server_pid()
        await self._connection.execute("BEGIN")
        self.xid = int(await self._connection.fetchval("SELECT txid_current()"))
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._connection is not None:
            try:
                await self._connection.execute("ROLLBACK")
            finally:
                await self._connection.close()


# PostgreSQL's backends publish their table statistics at most once a second.
STATISTICS_DELAY_SECONDS = 1.2


async def dead_rows(database_url: str) -> int:
    """Dead row versions in every table of a system's database (pg_stat_user_tables), read
    once the backends have published their latest statistics."""
    await asyncio.sleep(STATISTICS_DELAY_SECONDS)
    connection = await asyncpg.connect(plain_url(database_url))
    try:
        total = await connection.fetchval(
            "SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables"
        )
    finally:
        await connection.close()
    return int(total)


# -- monitors -----------------------------------------------------------------


class RssSampler:
    """Samples the resident set size of some processes every ``interval`` seconds."""

    def __init__(self, interval: float = 0.1) -> None:
        self.interval = interval
        self.peaks: dict[int, int] = {}
        self.labels: dict[int, str] = {}
        self._processes: dict[int, psutil.Process] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def watch(self, pid: int, label: str) -> None:
        with self._lock:
            try:
                self._processes[pid] = psutil.Process(pid)
            except psutil.NoSuchProcess:
                return
            self.labels[pid] = label
            self.peaks.setdefault(pid, 0)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            with self._lock:
                processes = list(self._processes.items())
            for pid, process in processes:
                try:
                    rss = process.memory_info().rss
                except psutil.Error:
                    continue
                if rss > self.peaks.get(pid, 0):
                    self.peaks[pid] = rss


@dataclass
class CpuSnapshot:
    wall: float
    bench: float
    api: dict[int, float]
    backends: dict[int, float]
    machine_busy: float
    machine_total: float


def _process_cpu(pids: Iterable[int]) -> dict[int, float]:
    times: dict[int, float] = {}
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        times[pid] = t.user + t.system
    return times


def _self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def backend_pids(connection: asyncpg.Connection, databases: list[str]) -> list[int]:
    rows = await connection.fetch(
        "SELECT pid FROM pg_stat_activity WHERE datname = ANY($1::text[]) AND pid <> "
        "pg_backend_pid()",
        databases,
    )
    return [int(row["pid"]) for row in rows]


def cpu_snapshot(api_pids: Iterable[int], backend: Iterable[int]) -> CpuSnapshot:
    machine = psutil.cpu_times()
    total = sum(machine)
    idle = machine.idle + getattr(machine, "iowait", 0.0)
    return CpuSnapshot(
        wall=time.perf_counter(),
        bench=_self_cpu(),
        api=_process_cpu(api_pids),
        backends=_process_cpu(backend),
        machine_busy=total - idle,
        machine_total=total,
    )


@dataclass
class CpuUse:
    """Cores in use on average over a window (1.0 = one core fully busy)."""

    seconds: float
    bench: float
    api: float
    postgres: float
    machine: float  # every process on the machine, ours and everyone else's
    cores: int

    @property
    def other(self) -> float:
        return max(0.0, self.machine - self.bench - self.api - self.postgres)

    @property
    def bench_share(self) -> float:
        """The load generator's share of the CPU used by the system under test plus it."""
        used = self.bench + self.api + self.postgres
        return self.bench / used if used > 0 else 0.0


def cpu_use(start: CpuSnapshot, end: CpuSnapshot) -> CpuUse:
    seconds = max(end.wall - start.wall, 1e-9)
    api = sum(t - start.api.get(pid, 0.0) for pid, t in end.api.items())
    postgres = sum(t - start.backends.get(pid, 0.0) for pid, t in end.backends.items())
    total = max(end.machine_total - start.machine_total, 1e-9)
    cores = psutil.cpu_count() or 1
    machine = (end.machine_busy - start.machine_busy) / total * cores
    return CpuUse(
        seconds=seconds,
        bench=(end.bench - start.bench) / seconds,
        api=api / seconds,
        postgres=postgres / seconds,
        machine=machine,
        cores=cores,
    )


class CpuWindow:
    """CPU use of the bench process, the API processes and our PostgreSQL backends."""

    def __init__(self, admin_url: str, databases: list[str], api_pids: list[int]) -> None:
        self._admin_url = admin_url
        self._databases = databases
        self._api_pids = api_pids
        self._start: CpuSnapshot | None = None

    async def _backends(self) -> list[int]:
        connection = await asyncpg.connect(plain_url(self._admin_url))
        try:
            return await backend_pids(connection, self._databases)
        finally:
            await connection.close()

    async def begin(self) -> list[int]:
        backends = await self._backends()
        self._start = cpu_snapshot(self._api_pids, backends)
        return backends

    async def end(self) -> CpuUse:
        assert self._start is not None
        # Backends are listed after the snapshot's wall clock would drift; list first.
        pids = await self._backends()
        return cpu_use(self._start, cpu_snapshot(self._api_pids, pids))


class AutovacuumWatch:
    """Which of our databases had an autovacuum worker during a window, and for about how
    long: the PostgreSQL processes' titles (``postgres: … autovacuum worker <database>``)
    read every ``interval`` seconds from /proc — no database connection, since a full run
    uses nearly all of the server's. It says whether a window's tail met the vacuum of the
    churn an earlier scenario left behind."""

    def __init__(self, databases: list[str], interval: float = 0.5) -> None:
        self._databases = {
            name: label for name, label in ((d, d.rsplit("_", 1)[-1]) for d in databases)
        }
        self._interval = interval
        self._task: asyncio.Task[None] | None = None
        self.seconds: dict[str, float] = {}

    def begin(self, backend_pids: Iterable[int]) -> None:
        self.seconds = {}
        postmaster = None
        for pid in backend_pids:
            try:
                postmaster = psutil.Process(pid).parent()
            except psutil.Error:
                continue
            if postmaster is not None:
                break
        if postmaster is not None:
            self._task = asyncio.create_task(self._sample(postmaster))

    async def end(self) -> dict[str, float]:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        return dict(self.seconds)

    async def _sample(self, postmaster: psutil.Process) -> None:
        while True:
            try:
                children = postmaster.children()
            except psutil.Error:
                return
            for child in children:
                try:
                    title = " ".join(child.cmdline())
                except psutil.Error:
                    continue
                if "autovacuum worker" not in title:
                    continue
                database = title.split()[-1]
                if database in self._databases:
                    what = f"a worker in {self._databases[database]}'s database"
                    self.seconds[what] = self.seconds.get(what, 0.0) + self._interval
            await asyncio.sleep(self._interval)


@dataclass(frozen=True)
class Checkpoints:
    """PostgreSQL's checkpointer counters (``pg_stat_bgwriter``, PostgreSQL ≤ 16): a
    window's difference says whether a checkpoint started or synced while it was timed.
    A checkpoint's sync phase stalls every committing backend on this VM's disk, and a
    new checkpoint makes the next change of every page write a whole page to the WAL."""

    started: int = 0
    write_ms: float = 0.0
    sync_ms: float = 0.0
    buffers: int = 0

    @classmethod
    async def read(cls, admin_url: str) -> Checkpoints | None:
        connection = await asyncpg.connect(plain_url(admin_url))
        try:
            row = await connection.fetchrow(
                "SELECT checkpoints_timed + checkpoints_req AS started, "
                "checkpoint_write_time AS write_ms, checkpoint_sync_time AS sync_ms, "
                "buffers_checkpoint AS buffers FROM pg_stat_bgwriter"
            )
        except asyncpg.PostgresError:
            return None  # PostgreSQL 17 moved them (pg_stat_checkpointer): no note
        finally:
            await connection.close()
        return cls(int(row["started"]), row["write_ms"], row["sync_ms"], int(row["buffers"]))

    def since(self, earlier: Checkpoints) -> Checkpoints:
        return Checkpoints(
            self.started - earlier.started,
            self.write_ms - earlier.write_ms,
            self.sync_ms - earlier.sync_ms,
            self.buffers - earlier.buffers,
        )


def checkpoint_note(during: Checkpoints | None) -> str | None:
    """A window's checkpoint work as a report note, or None when there was none."""
    if during is None or (during.started == 0 and during.buffers == 0 and during.sync_ms == 0):
        return None
    return (
        f"checkpoints during the window: {during.started} started, {during.buffers:,} "
        f"buffers written, sync {during.sync_ms:,.0f} ms"
    )


def autovacuum_note(seconds: dict[str, float]) -> str | None:
    """The window's autovacuum work as a report note, or None when there was none."""
    if not seconds:
        return None
    parts = ", ".join(
        f"{what} ~{spent:.1f} s" for what, spent in sorted(seconds.items(), key=lambda i: -i[1])
    )
    return f"autovacuum during the window: {parts}"


async def sleep_until(deadline: float) -> None:
    delay = deadline - time.perf_counter()
    if delay > 0:
        await asyncio.sleep(delay)
