"""The API role: serve the queue HTTP routes, health and metrics."""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
from collections.abc import Callable, Sequence

from retsu.adapters.system import StopAwareSleeper
from retsu.entrypoints import serving
from retsu.entrypoints.containers import ApiContainer
from retsu.entrypoints.database import ensure_database_ready, session_url
from retsu.entrypoints.settings import Settings
from retsu.entrypoints.worker import Worker

log = logging.getLogger("retsu.api")


def request_limits(settings: Settings) -> serving.RequestLimits:
    http = settings.http
    return serving.RequestLimits(
        max_header_bytes=http.max_header_bytes,
        max_headers=http.max_headers,
        header_timeout_seconds=http.header_timeout_seconds,
        body_timeout_seconds=http.body_timeout_seconds,
        keep_alive_timeout_seconds=http.keep_alive_timeout_seconds,
    )


async def run_api(
    settings: Settings,
    container: ApiContainer | None = None,
    *,
    workers: Sequence[Worker] = (),
    workers_sleeper: StopAwareSleeper | None = None,
    sockets: Sequence[socket.socket] | None = None,
    on_listening: Callable[[], None] | None = None,
) -> int:
    """Serve until SIGTERM/SIGINT. ``workers`` run beside the server (`retsu dev`);
    ``on_listening`` is called once the server accepts requests."""
    # Long polling's LISTEN connection needs a session (refused behind a transaction
    # pooler without database.session_url).
    session_url(settings.database, "long polling (LISTEN)")
    container = container or ApiContainer(settings=settings)
    engine = container.storage.engine()
    if sockets is None:  # before any database work: a port in use fails at once
        sockets = [serving.bind(settings.http.bind_address, settings.http.port)]
    try:
        await ensure_database_ready(
            engine, timeout_seconds=settings.database.acquire_timeout_seconds
        )
        server = serving.Server(
            serving.config(
                container.app(),
                host=settings.http.bind_address,
                port=settings.http.port,
                shutdown_timeout_seconds=settings.worker.shutdown_timeout_seconds,
                limits=request_limits(settings),
            ),
            on_started=on_listening,
        )

        signals = container.storage.message_signals()

        def stop() -> None:
            log.info("stopping: finishing in-flight requests")
            # Long polls first: every waiting poll answers empty at once, so uvicorn's
            # graceful shutdown does not wait out their wait_seconds.
            signals.close()
            if workers_sleeper is not None:
                workers_sleeper.stop()
            server.stop()

        serving.on_stop_signal(stop)
        background = [asyncio.create_task(worker.run()) for worker in workers]
        log.info(
            "API listening",
            extra={"bind_address": settings.http.bind_address, "port": settings.http.port},
        )
        # Everything made so far (imports, the app, the container) lives as long as the
        # process. Frozen, it is no longer walked by every full collection, each of which
        # otherwise stopped the event loop for 77–101 ms under load (docs/performance.md).
        gc.collect()
        gc.freeze()
        try:
            await server.serve(sockets=list(sockets))
        finally:
            if workers_sleeper is not None:
                workers_sleeper.stop()
            results = await asyncio.gather(*background, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                log.error("background worker failed: %s", result, exc_info=result)
        return 0 if server.started else 1
    finally:
        # The shared cache's Redis connections (a no-op when it is disabled).
        await container.lookups.close()
        await engine.dispose()
        # Flush buffered spans (bounded by telemetry.traces.timeout_seconds).
        await asyncio.to_thread(container.core.tracing().shutdown)
