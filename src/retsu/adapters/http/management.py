"""The management server of a worker: /health/live, /health/ready, /metrics only."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from litestar import Litestar

from retsu.adapters.http.middleware import HttpMetricsMiddleware, RequestIdMiddleware
from retsu.adapters.http.problems import EXCEPTION_HANDLERS
from retsu.adapters.http.routes.health import health_routes
from retsu.adapters.telemetry.metrics import Metrics


def create_management_app(readiness: Callable[[], Awaitable[None]], metrics: Metrics) -> Litestar:
    app = Litestar(
        route_handlers=health_routes(readiness, metrics),
        exception_handlers=EXCEPTION_HANDLERS,
        logging_config=None,
        openapi_config=None,
    )
    app.asgi_handler = RequestIdMiddleware(HttpMetricsMiddleware(app.asgi_handler, metrics))
    return app
