"""`http.workers` > 1: several API processes sharing one port (SO_REUSEPORT).

The parent binds the port, checks the database once (so a bad URL is still one
line and exit 1), then forks the API processes; each builds its own container,
pool and event loop after the fork. Metrics are aggregated across processes by
prometheus-client's multiprocess mode (PROMETHEUS_MULTIPROC_DIR, set by the
caller before prometheus_client is imported). The parent forwards SIGTERM/SIGINT,
waits for every process to finish gracefully, restarts a process that dies on its
own, and exits 0 after a clean shutdown.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import multiprocessing
import os
import signal
import socket
import time
from multiprocessing.process import BaseProcess

from retsu.entrypoints.settings import Settings

log = logging.getLogger("retsu.api")

RESTART_DELAY_SECONDS = 1.0


def bind_socket(host: str, port: int, *, listen: bool = True) -> socket.socket:
    """A socket in the port's SO_REUSEPORT group. Each API process listens on its own,
    so the kernel spreads new connections evenly over the processes (one shared
    listening socket lets whichever process wakes first accept a whole burst).
    IPPROTO_TCP matters: asyncio sets TCP_NODELAY only on sockets that say so, and
    without it small responses wait ~40 ms for Nagle and delayed ACKs."""
    family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    if listen:
        sock.listen(2048)
    return sock


def _child(settings: Settings) -> None:
    from retsu.entrypoints.api import run_api
    from retsu.entrypoints.loop import run

    # The parent's signal dispositions are inherited; the child's own loop installs
    # its handlers in run_api.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    sock = bind_socket(settings.http.bind_address, settings.http.port)
    raise SystemExit(run(run_api(settings, sockets=[sock])))


def _forget_metrics_of(process: BaseProcess) -> None:
    """A dead process's live gauges (active requests) must not linger in the sum."""
    if process.pid is not None and os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(process.pid)  # type: ignore[no-untyped-call]


def run_api_processes(settings: Settings, count: int) -> int:
    from retsu.adapters.postgres.engine import create_engine
    from retsu.entrypoints.database import ensure_database_ready

    async def check() -> None:
        assert settings.database.url is not None
        engine = create_engine(settings.database.url, max_connections=1)
        try:
            await ensure_database_ready(
                engine, timeout_seconds=settings.database.acquire_timeout_seconds
            )
        finally:
            await engine.dispose()

    asyncio.run(check())
    # Held (bound, not listening) for the supervisor's whole life: the port stays
    # ours while a process restarts, and a port in use fails here, before any fork.
    sock = bind_socket(settings.http.bind_address, settings.http.port, listen=False)
    context = multiprocessing.get_context("fork")
    stopping = False

    def request_stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        for process in processes:
            if process.pid is not None and process.is_alive():
                os.kill(process.pid, signal.SIGTERM)

    def start() -> BaseProcess:
        process = context.Process(target=_child, args=(settings,), daemon=False)
        process.start()
        return process

    processes: list[BaseProcess] = []
    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    processes.extend(start() for _ in range(count))
    log.info(
        "API listening with %d processes",
        count,
        extra={"bind_address": settings.http.bind_address, "port": settings.http.port},
    )
    while True:
        alive = [p for p in processes if p.is_alive()]
        if stopping and not alive:
            break
        for index, process in enumerate(processes):
            if not process.is_alive() and not stopping:
                log.error(
                    "API process %s exited with %s; restarting it", process.pid, process.exitcode
                )
                _forget_metrics_of(process)
                time.sleep(RESTART_DELAY_SECONDS)
                processes[index] = start()
        time.sleep(0.1)
    sock.close()
    codes = [p.exitcode for p in processes]
    return 0 if all(code == 0 for code in codes) else 1
