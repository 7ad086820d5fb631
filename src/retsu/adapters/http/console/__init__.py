"""The operator console: server-rendered pages at ``/console/`` on the API port (SPEC §3.9).

An HTTP adapter like the JSON routes: Jinja templates (Litestar's template support) and
form handlers over the same use cases, a signed session cookie with CSRF tokens
(``session.py``), SVG charts drawn on the server (``charts.py``), and a little JavaScript
of our own for the overview's live refresh (``static/console.js``). See docs/console.md.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from jinja2 import Environment, FileSystemLoader, select_autoescape
from litestar import Router
from litestar.datastructures import CacheControlHeader, ResponseHeader
from litestar.di import Provide
from litestar.file_system import BaseLocalFileSystem
from litestar.handlers import HTTPRouteHandler
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.static_files import create_static_files_router
from litestar.template import TemplateConfig
from litestar.types import ControllerRouterHandler, PathType

from retsu.adapters.http.auth import AuthConfig
from retsu.adapters.http.console.gate import EXCEPTION_HANDLERS, ROOT, context_of, make_gate
from retsu.adapters.http.console.routes import ROUTES
from retsu.adapters.http.console.session import ConsoleSessions
from retsu.adapters.http.console.views import register_filters
from retsu.application.ports import ServerSecrets

__all__ = ["ConsoleConfig", "console_handlers", "console_templates"]

_HERE: Final = Path(__file__).parent
TEMPLATES: Final = _HERE / "templates"
STATIC: Final = _HERE / "static"

# Only our own files, no inline script or style, never in a frame (a console is a page of
# one-click buttons: clickjacking is the threat), forms post only to this origin.
_CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_PAGE_HEADERS: Final = [
    ResponseHeader(name="content-security-policy", value=_CSP),
    ResponseHeader(name="x-frame-options", value="DENY"),
    ResponseHeader(name="x-content-type-options", value="nosniff"),
    ResponseHeader(name="referrer-policy", value="same-origin"),
    # Pages show live state and may show payloads: never cached, never stored.
    ResponseHeader(name="cache-control", value="no-store"),
]


# What the OS says of a name that cannot be a file under STATIC: too long, a file used as a
# folder, a symlink loop, bytes the file system refuses.
_NOT_A_FILE: Final = frozenset({errno.ENAMETOOLONG, errno.ENOTDIR, errno.ELOOP, errno.EINVAL})


class _StaticFileSystem(BaseLocalFileSystem):
    """The static folder, where a name the OS cannot look up is a file that is not there
    (``404``): Litestar turns any OSError but "not found" into a 500, and a NUL byte
    (``/console/static/%00``) raises ValueError before the OS is asked."""

    async def info(self, path: PathType, **kwargs: Any) -> Any:
        try:
            return await super().info(path, **kwargs)
        except ValueError:
            raise FileNotFoundError(errno.ENOENT, "not a file name") from None
        except OSError as error:
            if error.errno in _NOT_A_FILE:
                raise FileNotFoundError(errno.ENOENT, "not a file name") from None
            raise


@dataclass(frozen=True, slots=True)
class ConsoleConfig:
    """What the console needs besides the use cases (built by the entrypoint)."""

    enabled: bool
    secrets: ServerSecrets
    auth: AuthConfig


def console_templates() -> TemplateConfig[JinjaTemplateEngine]:
    environment = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=select_autoescape(default=True, default_for_string=True),
        auto_reload=False,
    )
    register_filters(environment)
    return TemplateConfig(instance=JinjaTemplateEngine.from_environment(environment))


def console_handlers(
    config: ConsoleConfig,
    options_for: Callable[[Sequence[HTTPRouteHandler]], list[HTTPRouteHandler]],
) -> list[ControllerRouterHandler]:
    """The console's router and its static files (nothing when ``console.enabled`` is off).
    ``options_for`` makes the ``OPTIONS`` answers of the app's other paths (app.py)."""
    if not config.enabled:
        return []
    sessions = ConsoleSessions(config.secrets, config.auth)

    class StaticRouter(Router):
        """Litestar's static-files router with our OPTIONS answer (its own omits HEAD)."""

        def __init__(self, *, route_handlers: Sequence[Any], **kwargs: Any) -> None:
            handlers = [h for h in route_handlers if isinstance(h, HTTPRouteHandler)]
            super().__init__(route_handlers=[*options_for(handlers), *route_handlers], **kwargs)

    def provide_sessions() -> ConsoleSessions:
        return sessions

    dependencies: dict[str, Any] = {
        "ctx": Provide(context_of, sync_to_thread=False),
        "console_sessions": Provide(provide_sessions, sync_to_thread=False),
    }
    return [
        Router(
            path=ROOT,
            route_handlers=[*options_for(ROUTES), *ROUTES],
            before_request=make_gate(sessions),
            dependencies=dependencies,
            exception_handlers=EXCEPTION_HANDLERS,
            response_headers=_PAGE_HEADERS,
            include_in_schema=False,
        ),
        create_static_files_router(
            path=ROOT + "/static",
            directories=[STATIC],
            file_system=_StaticFileSystem(),
            name="console-static",
            # Revalidated on every load (ETag): a new release's CSS is never stale.
            cache_control=CacheControlHeader(no_cache=True),
            include_in_schema=False,
            router_class=StaticRouter,
        ),
    ]
