"""Health and metrics: ``/health/live``, ``/health/ready``, ``/metrics``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from litestar import Response, get
from litestar.handlers import HTTPRouteHandler

from retsu.adapters.http.dto import StatusOut
from retsu.adapters.http.problems import problem_response
from retsu.adapters.telemetry.metrics import Metrics

logger = logging.getLogger("retsu.adapters.http")

DEFAULT_READINESS_TIMEOUT_SECONDS = 2.0
_OK = StatusOut(status="ok")


def health_routes(
    readiness: Callable[[], Awaitable[None]],
    metrics: Metrics,
    *,
    readiness_timeout_seconds: float = DEFAULT_READINESS_TIMEOUT_SECONDS,
) -> list[HTTPRouteHandler]:
    """Served by the API and by every worker's management server."""

    @get("/health/live", summary="Liveness", tags=["health"], response_description="Up.")
    async def live() -> StatusOut:
        return _OK

    @get(
        "/health/ready",
        summary="Readiness",
        tags=["health"],
        response_description="Ready to serve (PostgreSQL answers).",
        errors=("not_ready",),
    )
    async def ready() -> Response[StatusOut]:
        try:
            async with asyncio.timeout(readiness_timeout_seconds):
                await readiness()
        except Exception as error:
            if isinstance(error, TimeoutError):
                reason = f"no answer within {readiness_timeout_seconds:g} s"
                logger.warning("Readiness check failed: %s", reason)
            else:
                reason = type(error).__name__
                logger.warning("Readiness check failed: %s: %s", reason, error)
            not_ready: Response[Any] = problem_response(
                503, "not_ready", f"The service is not ready ({reason})."
            )
            return not_ready
        return Response(_OK)

    @get(
        "/metrics",
        summary="Prometheus metrics",
        tags=["health"],
        media_type="text/plain",
        response_description="Prometheus text exposition format.",
    )
    async def metrics_text() -> Response[bytes]:
        body, content_type = metrics.render()
        return Response(content=body, headers={"content-type": content_type})

    return [live, ready, metrics_text]
