"""The chaos run's own servers and Retsu processes, all children of this script.

Nothing here connects to a server the script did not start: PostgreSQL is a private
cluster (initdb into the run directory, a free port, trust auth on 127.0.0.1 only),
Redis and PgBouncer are private processes on free ports. As root, PostgreSQL and
PgBouncer run as the ``postgres`` user (both refuse to run as root).
"""

from __future__ import annotations

import asyncio
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import httpx

RETSU = [sys.executable, "-m", "retsu.entrypoints.cli"]
DATABASE = "retsu_chaos"


class TopologyError(Exception):
    """A part of the topology did not start; the message says which and why."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), 0.5):
            return True
    except OSError:
        return False


def _as_postgres(argv: Sequence[str]) -> list[str]:
    """PostgreSQL and PgBouncer refuse to run as root: drop to the postgres user."""
    if os.geteuid() != 0:
        return list(argv)
    runuser = shutil.which("runuser")
    if runuser is None:
        raise TopologyError("running as root needs `runuser` to start PostgreSQL as postgres")
    return [runuser, "-u", "postgres", "--", *argv]


def _give_to_postgres(path: Path) -> None:
    if os.geteuid() == 0:
        shutil.chown(path, "postgres", "postgres")


def find_postgres_bin(explicit: str | None) -> Path:
    """The directory holding initdb and pg_ctl: --pg-bin, pg_config, or Debian's layout."""
    candidates: list[str] = []
    if explicit:
        candidates.append(explicit)
    pg_config = shutil.which("pg_config")
    if pg_config:
        done = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
        candidates.append(done.stdout.strip())
    candidates.extend(sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True))
    for candidate in candidates:
        if candidate and (Path(candidate) / "initdb").exists():
            return Path(candidate)
    raise TopologyError("initdb not found (pass --pg-bin /usr/lib/postgresql/15/bin)")


@dataclass
class Child:
    """A long-running process of the topology, its output in a log file."""

    name: str
    argv: list[str]
    log_path: Path
    env: Mapping[str, str] | None = None
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    # Set when the script stops the process on purpose, so an exit is not a failure.
    stopped_on_purpose: bool = False

    def start(self) -> None:
        log = self.log_path.open("ab")
        log.write(f"--- start #{self.starts + 1}: {' '.join(self.argv)}\n".encode())
        log.flush()
        self.process = subprocess.Popen(
            self.argv,
            env=dict(self.env) if self.env is not None else None,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C in the terminal reaches the script only
        )
        log.close()
        self.starts += 1
        self.stopped_on_purpose = False

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def exit_code(self) -> int | None:
        return self.process.poll() if self.process is not None else None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def send(self, sig: int) -> None:
        if self.alive():
            assert self.process is not None
            self.process.send_signal(sig)

    def stop(self, timeout: float = 15, sig: int = signal.SIGTERM) -> int | None:
        self.stopped_on_purpose = True
        if self.process is None:
            return None
        self.send(sig)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

    def tail(self, lines: int = 3) -> list[str]:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return []
        return [line for line in text.splitlines() if line.strip()][-lines:]


class PrivatePostgres:
    """A PostgreSQL cluster of the run's own, restartable at will; or a streaming standby
    of another (``base_backup``), which can be promoted when its primary is killed."""

    def __init__(self, root: Path, bin_dir: Path, name: str = "postgres") -> None:
        self.bin_dir = bin_dir
        self.root = root / name
        self.data = self.root / "data"
        self.sockets = self.root / "sockets"
        self.log_path = self.root / "server.log"
        self.port = free_port()
        self._shared_memory_id: str | None = None

    def url(self, database: str = DATABASE) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            _as_postgres(argv), capture_output=True, text=True, timeout=timeout, check=False
        )

    def _directories(self) -> None:
        self.root.mkdir(parents=True)
        self.sockets.mkdir()
        for path in (self.root, self.sockets):
            _give_to_postgres(path)

    def init(self) -> None:
        self._directories()
        done = self._run(
            str(self.bin_dir / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--no-sync",
        )
        if done.returncode != 0:
            raise TopologyError(f"initdb failed: {done.stderr.strip()[-500:]}")

    def base_backup(self, primary: PrivatePostgres) -> None:
        """Become a streaming standby of ``primary`` (running): pg_basebackup with -R writes
        standby.signal and the primary_conninfo; ``start()`` then starts it streaming."""
        self._directories()
        done = self._run(
            str(self.bin_dir / "pg_basebackup"),
            "-D",
            str(self.data),
            "-h",
            "127.0.0.1",
            "-p",
            str(primary.port),
            "-U",
            "postgres",
            "-X",
            "stream",
            "-c",
            "fast",
            "-R",
            "--no-sync",
        )
        if done.returncode != 0:
            raise TopologyError(f"pg_basebackup failed: {done.stderr.strip()[-500:]}")

    def start(self) -> None:
        self._ctl("start")

    def restart(self, mode: str = "fast") -> None:
        """Stop (fast: disconnect every session, checkpoint) and start again; returns
        once the server accepts connections again (pg_ctl -w)."""
        self._ctl("restart", "-m", mode)

    def stop(self) -> None:
        self._ctl("stop", "-m", "fast", check=False)

    def kill(self) -> int:
        """SIGKILL the postmaster and, in the same instant, every process of the cluster
        (pg_ctl starts the postmaster in a process group of its own), as when its machine
        is lost: no shutdown, no checkpoint, not one more byte of WAL written or sent to a
        standby. (A SIGKILL of the postmaster alone lets its backends, WAL writer and WAL
        sender finish what they were doing first.) Returns the postmaster's pid."""
        lines = (self.data / "postmaster.pid").read_text().splitlines()
        pid = int(lines[0])
        # The small System V segment every postmaster keeps ("key id" on line 7): nobody
        # removes it after a SIGKILL; forget_shared_memory() does, at the end.
        if len(lines) > 6 and len(lines[6].split()) == 2:
            self._shared_memory_id = lines[6].split()[1]
        os.killpg(pid, signal.SIGKILL)
        return pid

    def forget_shared_memory(self) -> None:
        if self._shared_memory_id is not None and shutil.which("ipcrm"):
            subprocess.run(["ipcrm", "-m", self._shared_memory_id], capture_output=True)
            self._shared_memory_id = None

    def promote(self) -> None:
        """pg_ctl promote: returns once the standby has left recovery and takes writes."""
        done = self._run(str(self.bin_dir / "pg_ctl"), "promote", "-w", "-D", str(self.data))
        if done.returncode != 0:
            raise TopologyError(f"pg_ctl promote failed: {(done.stderr or done.stdout)[-500:]}")

    def _ctl(self, action: str, *extra: str, check: bool = True) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 "
            f"-c unix_socket_directories={self.sockets} -c max_connections=300 "
            "-c shared_buffers=128MB"
        )
        done = self._run(
            str(self.bin_dir / "pg_ctl"),
            action,
            "-D",
            str(self.data),
            "-l",
            str(self.log_path),
            "-w",
            "-t",
            "60",
            "-o",
            options,
            *extra,
        )
        if check and done.returncode != 0:
            raise TopologyError(f"pg_ctl {action} failed: {(done.stderr or done.stdout)[-500:]}")

    def version(self) -> str:
        done = subprocess.run(
            [str(self.bin_dir / "postgres"), "--version"], capture_output=True, text=True
        )
        return done.stdout.strip()


async def replicate(primary: PrivatePostgres, standby: PrivatePostgres, *, sync: bool) -> None:
    """Make ``standby`` (fresh) a streaming standby of ``primary`` (running), wait until it
    streams, and with ``sync`` make every commit on the primary wait for it
    (``synchronous_standby_names``). Set on the primary only after the base backup, so the
    promoted standby does not inherit it and wait for a standby it does not have."""
    await asyncio.to_thread(standby.base_backup, primary)
    await asyncio.to_thread(standby.start)
    admin = await asyncpg.connect(primary.url("postgres"))
    try:
        if sync:
            await admin.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
            await admin.execute("SELECT pg_reload_conf()")
        wanted = "sync" if sync else "async"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            state = await admin.fetchval(
                "SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming'"
            )
            if state == wanted:
                return
            await asyncio.sleep(0.05)
        raise TopologyError(f"the standby was not streaming ({wanted}) after 30 s")
    finally:
        await admin.close()


def failover_url(nodes: Sequence[PrivatePostgres], database: str) -> str:
    """The libpq URL naming every node (SPEC §10): whichever takes writes is used."""
    hosts = ",".join(f"127.0.0.1:{node.port}" for node in nodes)
    return f"postgresql://postgres@{hosts}/{database}?target_session_attrs=read-write"


class PrivateRedis:
    def __init__(self, root: Path) -> None:
        self.port = free_port()
        self.child = Child(
            "redis",
            [
                shutil.which("redis-server") or "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            root / "logs" / "redis.log",
        )

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        if shutil.which("redis-server") is None:
            raise TopologyError("redis-server not found (apt-get install redis-server)")
        self.child.start()
        _wait_for_port(self.port, self.child, 10)


class PrivatePgBouncer:
    """Debian's pgbouncer in transaction pooling mode in front of the private cluster."""

    def __init__(self, root: Path, postgres: PrivatePostgres, pool_size: int) -> None:
        self.port = free_port()
        self.dir = root / "pgbouncer"
        self.postgres = postgres
        self.pool_size = pool_size
        self.child = Child(
            "pgbouncer",
            _as_postgres(
                [shutil.which("pgbouncer") or "pgbouncer", str(self.dir / "pgbouncer.ini")]
            ),
            root / "logs" / "pgbouncer.log",
        )

    def url(self, database: str = DATABASE) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def configure(self) -> None:
        self.dir.mkdir()
        (self.dir / "userlist.txt").write_text('"postgres" ""\n')
        (self.dir / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host=127.0.0.1 port={self.postgres.port}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {self.dir / 'userlist.txt'}\n"
            "pool_mode = transaction\n"
            "max_client_conn = 1000\n"
            f"default_pool_size = {self.pool_size}\n"
            # After a failed server login (PostgreSQL restarting) PgBouncer refuses
            # clients for this long before it tries again; its default, 15 s, was
            # measured to keep Retsu answering 503 for 13 s after PostgreSQL was back.
            "server_login_retry = 1\n"
            "admin_users = postgres\n"
        )
        for path in (self.dir, self.dir / "userlist.txt", self.dir / "pgbouncer.ini"):
            _give_to_postgres(path)

    def start(self) -> None:
        self.child.start()
        _wait_for_port(self.port, self.child, 10)

    def version(self) -> str:
        done = subprocess.run(
            [shutil.which("pgbouncer") or "pgbouncer", "--version"], capture_output=True, text=True
        )
        return done.stdout.splitlines()[0] if done.stdout else "pgbouncer"


def _wait_for_port(port: int, child: Child, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not child.alive():
            raise TopologyError(f"{child.name} exited at start: {' | '.join(child.tail())}")
        if port_open(port):
            return
        time.sleep(0.05)
    raise TopologyError(f"{child.name} not listening on {port} after {timeout:g} s")


def retsu_env(settings: Mapping[str, str]) -> dict[str, str]:
    """This environment minus any RETSU_ variable, plus the given settings (dotted paths)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RETSU_")}
    for path, value in settings.items():
        env["RETSU_" + path.upper().replace(".", "__")] = value
    return env


@dataclass
class RetsuProcess:
    """One `retsu` role and the port its /health/ready answers on."""

    child: Child
    port: int
    role: str  # api, worker:<name>

    @property
    def name(self) -> str:
        return self.child.name

    @property
    def ready_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/health/ready"

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.child.alive():
                raise TopologyError(
                    f"{self.name} exited at start ({self.child.exit_code()}): "
                    + " | ".join(self.child.tail())
                )
            try:
                if httpx.get(self.ready_url, timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise TopologyError(f"{self.name} not ready after {timeout:g} s")


@dataclass
class Topology:
    root: Path
    postgres: PrivatePostgres  # the primary (after a failover: the promoted standby)
    redis: PrivateRedis
    pgbouncer: PrivatePgBouncer | None
    apis: list[RetsuProcess] = field(default_factory=list)
    workers: list[RetsuProcess] = field(default_factory=list)
    # A streaming standby, for the primary-failover fault; Retsu's URLs then name both.
    standby: PrivatePostgres | None = None
    lost: list[PrivatePostgres] = field(default_factory=list)  # primaries killed

    @property
    def direct_url(self) -> str:
        """Retsu's URL straight to PostgreSQL: both hosts, libpq style, when there is a
        standby (the same URL before and after a failover), else the one server."""
        if self.standby is None and not self.lost:
            return self.postgres.url()
        nodes = [*self.lost, self.postgres, *([self.standby] if self.standby else [])]
        return failover_url(nodes, DATABASE)

    @property
    def pooled_url(self) -> str:
        """What `database.url` points at: PgBouncer when there is one, else PostgreSQL."""
        return self.pgbouncer.url() if self.pgbouncer is not None else self.direct_url

    def promoted(self) -> None:
        """The standby was promoted: it is the primary now, the old one is lost."""
        assert self.standby is not None
        self.lost.append(self.postgres)
        self.postgres, self.standby = self.standby, None

    @property
    def retsu_processes(self) -> list[RetsuProcess]:
        return [*self.apis, *self.workers]

    def children(self) -> list[Child]:
        found = [p.child for p in self.retsu_processes]
        if self.pgbouncer is not None:
            found.append(self.pgbouncer.child)
        found.append(self.redis.child)
        return found

    def migrate(self) -> None:
        done = subprocess.run(
            [*RETSU, "migrate"],
            env=retsu_env({"database.url": self.direct_url, "logging.filter": "warn"}),
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        (self.root / "logs" / "migrate.log").write_text(done.stdout + done.stderr)
        if done.returncode != 0:
            raise TopologyError(f"retsu migrate exited {done.returncode}: {done.stderr[-500:]}")

    def add_api(self, index: int, settings: Mapping[str, str]) -> RetsuProcess:
        port = free_port()
        env = retsu_env(
            {
                "database.url": self.pooled_url,
                # What needs a session (LISTEN) goes straight to PostgreSQL (SPEC §10).
                "database.session_url": self.direct_url,
                "cache.distributed.url": self.redis.url,
                "http.port": str(port),
                **settings,
            }
        )
        child = Child(f"api-{index}", [*RETSU, "api"], self.root / "logs" / f"api-{index}.log", env)
        process = RetsuProcess(child, port, "api")
        self.apis.append(process)
        return process

    def add_worker(self, worker: str, index: int, settings: Mapping[str, str]) -> RetsuProcess:
        port = free_port()
        # The collector needs a session for its advisory lock: the direct URL. The
        # cleaners run plain transactions: the pooler.
        url = self.direct_url if worker == "state-metrics-collector" else self.pooled_url
        env = retsu_env(
            {
                "database.url": url,
                "database.session_url": self.direct_url,
                "cache.distributed.url": self.redis.url,
                "worker.management.port": str(port),
                **settings,
            }
        )
        name = f"{worker}-{index}"
        child = Child(
            name,
            [*RETSU, "worker", "run", "queue", worker],
            self.root / "logs" / f"{name}.log",
            env,
        )
        process = RetsuProcess(child, port, f"worker:{worker}")
        self.workers.append(process)
        return process

    def stop_all(self) -> None:
        for process in reversed(self.retsu_processes):
            process.child.stop()
        if self.pgbouncer is not None:
            self.pgbouncer.child.stop(timeout=5, sig=signal.SIGTERM)
        self.redis.child.stop(timeout=5)
        for server in (self.postgres, self.standby, *self.lost):
            if server is not None:
                server.stop()  # a no-op for a killed one
                server.forget_shared_memory()
