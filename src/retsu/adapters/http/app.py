"""The Litestar application of the API role."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from litestar import Litestar
from litestar.types import LifespanHook

from retsu.adapters.http.auth import AuthConfig, AuthMiddleware, app_route_resolver
from retsu.adapters.http.middleware import instrument_asgi
from retsu.adapters.http.openapi import openapi_routes
from retsu.adapters.http.problems import EXCEPTION_HANDLERS, MAX_BODY_BYTES
from retsu.adapters.http.routes.audit import audit_routes
from retsu.adapters.http.routes.dead_letters import dead_letter_routes
from retsu.adapters.http.routes.health import DEFAULT_READINESS_TIMEOUT_SECONDS, health_routes
from retsu.adapters.http.routes.messages import message_routes
from retsu.adapters.http.routes.queues import queue_routes
from retsu.adapters.http.services import ApiServices

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer


def create_app(
    services: ApiServices,
    *,
    debug: bool = False,
    on_startup: Sequence[LifespanHook] = (),
    on_shutdown: Sequence[LifespanHook] = (),
    readiness_timeout_seconds: float = DEFAULT_READINESS_TIMEOUT_SECONDS,
    auth: AuthConfig | None = None,
    tracer: Tracer | None = None,
) -> Litestar:
    """``tracer``: the process's tracer when ``telemetry.traces.enabled``, else None."""
    app = Litestar(
        route_handlers=[
            *queue_routes(services),
            *message_routes(services),
            *dead_letter_routes(services),
            *audit_routes(services),
            *health_routes(
                services.readiness,
                services.metrics,
                readiness_timeout_seconds=readiness_timeout_seconds,
            ),
            # GET /openapi.json, open like health (adapters/http/openapi.py).
            *openapi_routes(),
        ],
        exception_handlers=EXCEPTION_HANDLERS,
        on_startup=list(on_startup),
        on_shutdown=list(on_shutdown),
        debug=debug,
        # Logging is configured by the entrypoint (retsu.adapters.telemetry); errors are
        # logged by our own 500 handler with the request id.
        logging_config=None,
        # Litestar's generator cannot see raw-read bodies; openapi.py builds the document.
        openapi_config=None,
        request_max_body_size=MAX_BODY_BYTES,
    )
    # Bearer-token auth (adapters/http/auth.py) sits inside the request-id and metrics
    # layers, so a 401/403 carries x-request-id and is counted. Not installed when off.
    if auth is not None and auth.enabled:
        app.asgi_handler = AuthMiddleware(app.asgi_handler, auth, app_route_resolver(app))
    # Litestar's own middleware runs only once a route matched. Wrapping the app's
    # ASGI handler (routing and the app-level exception handler included) makes the
    # request id, the request's span and the HTTP metrics cover 404s, 405s and every
    # error response too.
    app.asgi_handler = instrument_asgi(app.asgi_handler, services.metrics, tracer)
    return app
