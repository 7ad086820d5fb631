"""The Litestar application of the API role.

The use cases reach the handlers through Litestar's dependency injection: ``services``
maps each service's name to its provider (a zero-argument callable; the container builds
the map, ``entrypoints/containers.py``), and a handler asks for one by naming a parameter
after it with its type (``messages: MessageService``). Each is built once, on first use,
and cached (``use_cache``). A JSON route needs one service (a list route also the
``cursors``), so Litestar resolves a hot route's single dependency inline, with no task
group (measured: a task group per request halved single-enqueue throughput when
handlers took two use cases each).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from litestar import Litestar, Response, route
from litestar.di import Provide
from litestar.handlers import HTTPRouteHandler
from litestar.types import LifespanHook

from retsu.adapters.http.auth import (
    SCOPES_OPT,
    AuthConfig,
    AuthMiddleware,
    ScopeRefused,
    app_route_resolver,
    check_declared,
    options_scopes,
    refused_scope,
    scope_guard,
)
from retsu.adapters.http.console import ConsoleConfig, console_handlers, console_templates
from retsu.adapters.http.cursors import Cursors
from retsu.adapters.http.hot_routes import HotRoutes
from retsu.adapters.http.middleware import instrument_asgi
from retsu.adapters.http.openapi import (
    StrictStructSchemaPlugin,
    declare_security,
    docs_page,
    documented,
    openapi_config,
)
from retsu.adapters.http.params import TYPE_DECODERS
from retsu.adapters.http.problems import EXCEPTION_HANDLERS, MAX_BODY_BYTES
from retsu.adapters.http.request_rules import JsonRequest, check_request_rules
from retsu.adapters.http.routes import (
    audit,
    browsing,
    consumers,
    dead_letters,
    history,
    messages,
    queues,
    schedules,
)
from retsu.adapters.http.routes.health import DEFAULT_READINESS_TIMEOUT_SECONDS, health_routes
from retsu.adapters.telemetry.metrics import Metrics

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

# Every API route handler; a new route module adds its ROUTES here.
API_ROUTES: Sequence[HTTPRouteHandler] = (
    *queues.ROUTES,
    *messages.ROUTES,
    *browsing.ROUTES,
    *dead_letters.ROUTES,
    *audit.ROUTES,
    *consumers.ROUTES,
    *history.ROUTES,
    *schedules.ROUTES,
)


def _provide(provider: Callable[[], object]) -> Provide:
    def use_case() -> Any:
        return provider()

    return Provide(use_case, use_cache=True, sync_to_thread=False)


def options_handlers(handlers: Iterable[HTTPRouteHandler]) -> list[HTTPRouteHandler]:
    """One ``OPTIONS`` handler per path, answering ``204`` with every method of the path.

    Litestar makes its own when a route is first registered and does not update its
    ``allow`` when more handlers join the same path later (``/v1/queues/{queue_id}`` would
    answer ``GET, OPTIONS`` while a 405 there lists PATCH and DELETE too).
    """
    methods: dict[str, set[str]] = defaultdict(lambda: {"OPTIONS"})
    scopes: dict[str, list[frozenset[str] | None]] = defaultdict(list)
    for handler in handlers:
        for path in handler.paths:
            methods[path].update(handler.http_methods)
            scopes[path].append(handler.opt.get(SCOPES_OPT))
    return [
        _options(path, allowed, options_scopes(scopes[path]))
        for path, allowed in sorted(methods.items())
    ]


def _options(path: str, allowed: set[str], scopes: frozenset[str] | None) -> HTTPRouteHandler:
    headers = {"allow": ", ".join(sorted(allowed))}

    def answer() -> Response[None]:
        return Response(None, status_code=204, headers=headers)

    opt = {} if scopes is None else {SCOPES_OPT: scopes}
    return route(
        path, http_method="OPTIONS", include_in_schema=False, sync_to_thread=False, opt=opt
    )(answer)


def create_app(
    services: Mapping[str, Callable[[], object]],
    *,
    cursors: Cursors,
    readiness: Callable[[], Awaitable[None]],
    metrics: Metrics,
    debug: bool = False,
    on_startup: Sequence[LifespanHook] = (),
    on_shutdown: Sequence[LifespanHook] = (),
    readiness_timeout_seconds: float = DEFAULT_READINESS_TIMEOUT_SECONDS,
    auth: AuthConfig | None = None,
    tracer: Tracer | None = None,
    console: ConsoleConfig | None = None,
) -> Litestar:
    """``services``: name → provider of each service the handlers take; ``cursors``: the
    pagination cursors' codec; ``tracer``: the process's tracer when
    ``telemetry.traces.enabled``, else None; ``console``: the operator console's
    configuration (none: no console)."""
    dependencies: dict[str, Provide] = {name: _provide(p) for name, p in services.items()}
    dependencies["cursors"] = Provide(lambda: cursors, use_cache=True, sync_to_thread=False)
    check_declared(API_ROUTES)
    auth_enabled = auth is not None and auth.enabled
    handlers = [
        *documented(API_ROUTES, dependencies),
        *documented(
            health_routes(readiness, metrics, readiness_timeout_seconds=readiness_timeout_seconds)
        ),
        docs_page,
    ]
    bearer = auth is not None and auth.enabled
    # The operator console (adapters/http/console): its own router, pages and errors.
    console_routes = console_handlers(console, options_handlers) if console is not None else []
    exception_handlers = {**EXCEPTION_HANDLERS, ScopeRefused: refused_scope}
    app = Litestar(
        # Ours first: Litestar adds its own OPTIONS to a path that has none yet.
        route_handlers=[*options_handlers(handlers), *handlers, *console_routes],
        template_config=console_templates() if console_routes else None,
        dependencies=dependencies,
        request_class=JsonRequest,
        type_decoders=TYPE_DECODERS,
        before_request=check_request_rules,
        exception_handlers=exception_handlers,
        # Each route's declared scopes against the token's (adapters/http/auth.py).
        guards=[scope_guard] if auth_enabled else [],
        on_startup=list(on_startup),
        on_shutdown=list(on_shutdown),
        debug=debug,
        # Logging is configured by the entrypoint (retsu.adapters.telemetry); errors are
        # logged by our own 500 handler with the request id.
        logging_config=None,
        openapi_config=openapi_config(bearer=bearer),
        plugins=[StrictStructSchemaPlugin()],
        request_max_body_size=MAX_BODY_BYTES,
    )
    declare_security(app, bearer=bearer)
    # The hot message routes of the common shape, in front of Litestar's router
    # (hot_routes.py); everything else, and every refusal, is Litestar's.
    if "messages" in services:
        app.asgi_handler = HotRoutes(app.asgi_handler, services["messages"], exception_handlers)
    # Bearer-token auth (adapters/http/auth.py) sits inside the request-id and metrics
    # layers, so a 401/403 carries x-request-id and is counted. Not installed when off.
    if auth is not None and auth_enabled:
        app.asgi_handler = AuthMiddleware(app.asgi_handler, auth, app_route_resolver(app))
    # Litestar's own middleware runs only once a route matched. Wrapping the app's
    # ASGI handler (routing and the app-level exception handler included) makes the
    # request id, the request's span and the HTTP metrics cover 404s, 405s and every
    # error response too.
    app.asgi_handler = instrument_asgi(app.asgi_handler, metrics, tracer)
    return app
