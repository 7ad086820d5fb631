"""The worker roles: one named worker plus its management server.

SIGTERM/SIGINT: the worker stops taking new work, finishes the batch in progress
(within worker.shutdown_timeout_seconds), the management server stops, exit 0.
A database that cannot be reached at start-up exits 1 with a one-line reason; once
running, workers ride out a database restart themselves (a cleaner retries its batch
at the next interval, a collector that lost its lock session competes again). Any
other worker failure (for example a collector refresh failing on a live session)
exits 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Protocol

from retsu.adapters.system import StopAwareSleeper
from retsu.entrypoints import serving
from retsu.entrypoints.containers import WorkerContainer
from retsu.entrypoints.database import StartupError, ensure_database_ready, session_url
from retsu.entrypoints.settings import Settings

log = logging.getLogger("retsu.worker")


class Worker(Protocol):
    async def run(self) -> None: ...


async def run_worker(
    settings: Settings, module: str, name: str, container: WorkerContainer | None = None
) -> int:
    if name == "state-metrics-collector":
        # The leadership lock belongs to a session.
        session_url(settings.database, "the state-metrics collector (advisory lock)")
    container = container or WorkerContainer(settings=settings, role=f"worker:{name}")
    sleeper = container.sleeper()

    def stop() -> None:
        log.info("stopping %s: finishing the current batch", name)
        sleeper.stop()

    # Before any waiting, so a SIGTERM during start-up is a clean stop too.
    serving.on_stop_signal(stop)
    engine = container.storage.engine()
    try:
        await ensure_database_ready(
            engine, timeout_seconds=settings.database.acquire_timeout_seconds
        )
        if sleeper.stopping:
            return 0
        worker: Worker = container.workers()[name]
        management = serving.Server(
            serving.config(
                container.management_app(),
                host=settings.worker.management.bind_address,
                port=settings.worker.management.port,
                shutdown_timeout_seconds=settings.worker.shutdown_timeout_seconds,
            )
        )
        address = settings.worker.management.bind_address, settings.worker.management.port
        server_task = asyncio.create_task(management.serve(sockets=[serving.bind(*address)]))
        while not management.started:
            if server_task.done():
                raise StartupError(
                    "cannot start the management server on "
                    f"{settings.worker.management.bind_address}:{settings.worker.management.port}"
                )
            await asyncio.sleep(0.01)
        log.info("worker %s/%s running", module, name)
        worker_task = asyncio.create_task(worker.run())
        code = await _wait_for_worker(
            worker_task, sleeper, settings.worker.shutdown_timeout_seconds
        )
        management.stop()
        with contextlib.suppress(Exception):
            await server_task
        return code
    finally:
        await engine.dispose()
        sessions = container.storage.session_database().engine
        if sessions is not engine:  # the collector's own pool on database.session_url
            await sessions.dispose()
        # Flush buffered spans (bounded by telemetry.traces.timeout_seconds).
        await asyncio.to_thread(container.core.tracing().shutdown)


async def _wait_for_worker(
    task: asyncio.Task[None], sleeper: StopAwareSleeper, shutdown_timeout_seconds: float
) -> int:
    stop_requested = asyncio.create_task(sleeper.wait_stopped())
    try:
        await asyncio.wait({task, stop_requested}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            # Asked to stop: give the batch in progress its time, then give up on it.
            done, _ = await asyncio.wait({task}, timeout=shutdown_timeout_seconds)
            if not done:
                log.error(
                    "worker did not finish within %s s; abandoning it", shutdown_timeout_seconds
                )
                task.cancel()
                return 1
        error = task.exception()
        if error is not None:
            log.error("worker failed: %s", error, exc_info=error)
            return 1
        return 0
    finally:
        stop_requested.cancel()
