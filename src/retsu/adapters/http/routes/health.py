"""Health and metrics: ``/health/live``, ``/health/ready``, ``/metrics``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from litestar import Response, get
from litestar.handlers import HTTPRouteHandler

from retsu.adapters.http.dto import StatusOut, json_response
from retsu.adapters.http.problems import problem_response
from retsu.adapters.telemetry.metrics import Metrics

logger = logging.getLogger("retsu.adapters.http")

DEFAULT_READINESS_TIMEOUT_SECONDS = 2.0


def health_routes(
    readiness: Callable[[], Awaitable[None]],
    metrics: Metrics,
    *,
    readiness_timeout_seconds: float = DEFAULT_READINESS_TIMEOUT_SECONDS,
) -> list[HTTPRouteHandler]:
    """Served by the API and by every worker's management server."""

    @get("/health/live")
    async def live() -> Response[bytes]:
        return json_response(StatusOut(status="ok"))

    @get("/health/ready")
    async def ready() -> Response[bytes]:
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
            return problem_response(503, "not_ready", f"The service is not ready ({reason}).")
        return json_response(StatusOut(status="ok"))

    @get("/metrics")
    async def metrics_text() -> Response[bytes]:
        body, content_type = metrics.render()
        return Response(content=body, headers={"content-type": content_type})

    return [live, ready, metrics_text]
