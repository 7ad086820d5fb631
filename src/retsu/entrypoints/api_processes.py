"""`http.workers` > 1: several API processes on one port, managed by uvicorn's own
multi-process supervisor (``uvicorn.supervisors.Multiprocess``).

The parent binds the port (a port another server listens on fails here, with one line and
exit 1), checks the database once, then uvicorn's supervisor spawns the API processes,
each running the same ``run_api`` as a single-process `retsu api` on the shared socket. The
supervisor restarts a process that dies or stops answering its health pings, forwards
SIGTERM/SIGINT (each process then finishes in-flight requests and answers waiting long
polls empty), supports SIGHUP (rolling restart) and SIGTTIN/SIGTTOU (one process more or
less). A supervisor that dies without stopping them (SIGKILL, the OOM killer) takes its
API processes with it (``_exit_with_parent``): they would otherwise hold the port.
Metrics are aggregated across processes by prometheus-client's multiprocess mode
(PROMETHEUS_MULTIPROC_DIR, set by the caller). It replaced a home-made fork supervisor that
measured no faster (docs/performance.md, "API processes").
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import socket
import sys
import threading
import time
from typing import Any

import uvicorn
from uvicorn.supervisors import multiprocess

from retsu.entrypoints.settings import Settings

# Each spawned API process imports this module before it can answer the supervisor's
# pings; ``serving`` and ``database`` pull in SQLAlchemy and Alembic (1.1 s of CPU), so
# they are imported where used, after the ping thread runs.

# uvicorn's supervisor stops (rather than restarting the process forever) on this exit code.
STARTUP_FAILURE = 3
HEALTHCHECK_SECONDS = 20
# How often an API process checks that its supervisor is still its parent.
PARENT_CHECK_SECONDS = 1.0
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class _ApiProcess(multiprocess.Process):
    """One API process: Retsu's ``run_api`` on the inherited socket, answering the
    supervisor's health pings from a thread (ready once the server has started)."""

    settings: Settings

    def __init__(self, config: uvicorn.Config, sockets: list[socket.socket]) -> None:
        self.settings = _settings_for_children
        self.supervisor = os.getpid()  # __init__ runs in the supervisor
        super().__init__(config, sockets)  # self goes to the spawned process by pickle

    def pong(self) -> None:
        self.child_conn.recv()
        self.child_conn.send(self.listening.is_set())

    def target(self, sockets: list[socket.socket] | None = None) -> None:
        # Stopped before it serves (a replacement process still starting when the supervisor
        # shuts down): nothing is in flight yet, so leave at once, successfully. Once the
        # server runs, run_api's own handlers take over and stop it gracefully.
        signal.signal(signal.SIGTERM, _exit_at_once)
        signal.signal(signal.SIGINT, _exit_at_once)
        _exit_with_parent(self.supervisor)
        # Answer the supervisor's pings before the heavy imports below: on a loaded machine
        # they take seconds, and an unanswered ping gets a starting process killed.
        self.listening = threading.Event()
        threading.Thread(target=self.always_pong, daemon=True).start()
        from retsu.entrypoints.lean import refuse_unused_imports

        refuse_unused_imports()  # a spawned process begins afresh (lean.py)
        from retsu import __version__
        from retsu.adapters.telemetry.logging import configure_logging
        from retsu.entrypoints.api import run_api
        from retsu.entrypoints.database import StartupError
        from retsu.entrypoints.loop import run

        settings = self.settings
        configure_logging(
            filter=settings.logging.filter,
            format=settings.logging.format,
            role="api",
            environment=settings.environment,
            version=__version__,
        )
        try:
            code = run(run_api(settings, sockets=sockets, on_listening=self.listening.set))
        except StartupError as error:
            print(f"retsu: {error}", file=sys.stderr)
            code = STARTUP_FAILURE
        raise SystemExit(code)


def _exit_at_once(signum: int, frame: object) -> None:
    raise SystemExit(0)


def _exit_with_parent(supervisor: int) -> None:
    """SIGTERM this process (a graceful stop, as the supervisor's own) once ``supervisor``
    is no longer its parent, as gunicorn's workers do.

    Linux sends it at the parent's death (PR_SET_PDEATHSIG); a thread checks the parent
    every second too, for other systems and for a death before the prctl call.
    """
    if sys.platform == "linux":
        # prctl(2) has no stdlib binding; python-prctl needs libcap's headers to build and
        # was last released in 2020.
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
            print(f"retsu: prctl: {os.strerror(ctypes.get_errno())}", file=sys.stderr)

    def watch() -> None:
        while os.getppid() == supervisor:
            time.sleep(PARENT_CHECK_SECONDS)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


class _Supervisor(multiprocess.Multiprocess):
    def keep_subprocess_alive(self) -> None:
        before = {process.pid for process in self.processes}
        super().keep_subprocess_alive()
        for pid in before - {process.pid for process in self.processes}:
            _forget_metrics_of(pid)


def _forget_metrics_of(pid: int | None) -> None:
    """A dead process's live gauges (active requests) must not linger in the sum."""
    if pid is not None and os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess as metrics

        metrics.mark_process_dead(pid)  # type: ignore[no-untyped-call]


# Read by _ApiProcess.__init__: uvicorn's supervisor builds its processes as
# ``Process(config, sockets)``, looked up by name in its module (the one hook it offers).
_settings_for_children: Any = None


def run_api_processes(settings: Settings, count: int) -> int:
    global _settings_for_children
    from retsu.adapters.postgres.engine import create_engine
    from retsu.entrypoints import serving
    from retsu.entrypoints.database import ensure_database_ready, session_url

    async def check() -> None:
        assert settings.database.url is not None
        engine = create_engine(
            settings.database.url,
            max_connections=1,
            transaction_pooler=settings.database.transaction_pooler,
        )
        try:
            await ensure_database_ready(
                engine, timeout_seconds=settings.database.acquire_timeout_seconds
            )
        finally:
            await engine.dispose()

    # What each API process would refuse (configuration: exit 2) is refused here, once.
    session_url(settings.database, "long polling (LISTEN)")
    # One listening socket, shared by the processes: a port in use fails here, before the
    # database check and any process start.
    sock = serving.bind(settings.http.bind_address, settings.http.port)
    asyncio.run(check())
    _settings_for_children = settings
    multiprocess.Process = _ApiProcess  # type: ignore[misc]
    # A process is declared hung (killed, replaced) when it leaves a ping unanswered this
    # long; uvicorn's 5 s default was reached by processes still importing on a busy host.
    config = uvicorn.Config(
        "retsu", workers=count, log_config=None, timeout_worker_healthcheck=HEALTHCHECK_SECONDS
    )
    supervisor = _Supervisor(config, sockets=[sock])
    supervisor.run()
    sock.close()
    codes = [process.exitcode for process in supervisor.processes]
    if STARTUP_FAILURE in codes:
        return 1
    # A process the supervisor's SIGTERM reached while still starting (before its own
    # handlers are installed: a replacement being spawned) dies of the signal with nothing
    # in flight; once serving, run_api handles SIGTERM and exits 0. Both are a clean stop.
    return 0 if all(code in (0, -signal.SIGTERM) for code in codes) else 1
