"""Serving an ASGI app with uvicorn while Retsu owns the process signals.

uvicorn normally captures SIGTERM/SIGINT itself and re-raises them after it
stops, which would kill the process with the signal instead of exiting 0. Retsu
installs its own handlers instead, so a role can first stop taking new work (and
answer waiting long polls), then stop the server, then exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Generator

import uvicorn

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield  # signals are handled by on_stop_signal()

    def stop(self) -> None:
        self.should_exit = True


def on_stop_signal(callback: Callable[[], None]) -> None:
    """Call ``callback`` (once per signal) on SIGTERM or SIGINT."""
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, callback)


def config(
    app: object,
    *,
    host: str,
    port: int,
    shutdown_timeout_seconds: float,
) -> uvicorn.Config:
    return uvicorn.Config(
        app,  # type: ignore[arg-type]
        host=host,
        port=port,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        log_config=None,
        access_log=False,
        server_header=False,
        timeout_graceful_shutdown=max(1, round(shutdown_timeout_seconds)),
    )
