"""The Litestar application of the API role."""

from __future__ import annotations

from collections.abc import Sequence

from litestar import Litestar
from litestar.types import LifespanHook

from retsu.adapters.http.middleware import HttpMetricsMiddleware, RequestIdMiddleware
from retsu.adapters.http.problems import EXCEPTION_HANDLERS, MAX_BODY_BYTES
from retsu.adapters.http.routes.health import DEFAULT_READINESS_TIMEOUT_SECONDS, health_routes
from retsu.adapters.http.routes.messages import message_routes
from retsu.adapters.http.routes.queues import queue_routes
from retsu.adapters.http.services import ApiServices


def create_app(
    services: ApiServices,
    *,
    debug: bool = False,
    on_startup: Sequence[LifespanHook] = (),
    on_shutdown: Sequence[LifespanHook] = (),
    readiness_timeout_seconds: float = DEFAULT_READINESS_TIMEOUT_SECONDS,
) -> Litestar:
    app = Litestar(
        route_handlers=[
            *queue_routes(services),
            *message_routes(services),
            *health_routes(
                services.readiness,
                services.metrics,
                readiness_timeout_seconds=readiness_timeout_seconds,
            ),
        ],
        exception_handlers=EXCEPTION_HANDLERS,
        on_startup=list(on_startup),
        on_shutdown=list(on_shutdown),
        debug=debug,
        # Logging is configured by the entrypoint (retsu.adapters.telemetry); errors are
        # logged by our own 500 handler with the request id.
        logging_config=None,
        openapi_config=None,
        request_max_body_size=MAX_BODY_BYTES,
    )
    # Litestar's own middleware runs only once a route matched. Wrapping the app's
    # ASGI handler (routing and the app-level exception handler included) makes the
    # request id and the HTTP metrics cover 404s, 405s and every error response too.
    app.asgi_handler = RequestIdMiddleware(
        HttpMetricsMiddleware(app.asgi_handler, services.metrics)
    )
    return app
