"""What every console request goes through before its handler: the session, sign-in,
CSRF and the read-only rule; and how a refusal or an error is shown (an HTML page).

The gate is the console router's ``before_request`` hook: it runs after routing and before
any dependency or parameter is resolved, so a refused request reaches no use case.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Final, cast
from urllib.parse import quote

from litestar import Request, Response
from litestar.datastructures import Cookie
from litestar.exceptions import HTTPException, ValidationException
from litestar.response import Redirect, Template
from litestar.types import ExceptionHandlersMap

from retsu.adapters.http.caller import ACTOR_SCOPE_KEY
from retsu.adapters.http.console.session import (
    COOKIE_NAME,
    CSRF_FIELD,
    SESSION_IDLE_SECONDS,
    ConsoleSessions,
    Operator,
    Session,
)
from retsu.adapters.http.middleware import request_id_of
from retsu.adapters.http.problems import status_of
from retsu.adapters.http.request_rules import RequestProblem, check_request_rules
from retsu.domain.errors import RetsuError, Unavailable

logger = logging.getLogger("retsu.adapters.http.console")

ROOT: Final = "/console"
# A handler's opt key: reachable without a signed-in session (the sign-in page itself).
PUBLIC: Final = "console_public"
_STATE_KEY: Final = "console"


@dataclass(slots=True)
class ConsoleContext:
    """One request's view of the console session, handed to every template as ``ctx``."""

    session: Session
    operator: Operator | None
    csrf: str
    https: bool
    # A new cookie value to send (a fresh anonymous session), else None.
    new_cookie: str | None = None
    cookies: list[Cookie] = field(default_factory=list)

    @property
    def can_change(self) -> bool:
        return self.operator is not None and self.operator.can_change

    @property
    def read_only(self) -> bool:
        return self.operator is not None and not self.operator.can_change

    @property
    def refusal(self) -> str:
        """Why a change button is disabled (its tooltip and the page's banner)."""
        name = self.operator.name if self.operator else "this session"
        return f"Token “{name}” has the read scope: it may look at everything but change nothing."

    def session_cookie(self, value: str) -> Cookie:
        return Cookie(
            key=COOKIE_NAME,
            value=value,
            path=ROOT,
            max_age=SESSION_IDLE_SECONDS,
            httponly=True,
            samesite="strict",
            secure=self.https,
        )

    def response_cookies(self) -> list[Cookie]:
        cookies = list(self.cookies)
        if self.new_cookie is not None:
            cookies.append(self.session_cookie(self.new_cookie))
        return cookies


def context_of(request: Request[Any, Any, Any]) -> ConsoleContext:
    """The ``ctx`` dependency of the console's handlers (set by the gate)."""
    return cast(ConsoleContext, request.state[_STATE_KEY])


def page(
    ctx: ConsoleContext | None, template: str, *, status: int = 200, **context: Any
) -> Template:
    return Template(
        template_name=template,
        context={"ctx": ctx, **context},
        status_code=status,
        cookies=ctx.response_cookies() if ctx is not None else None,
    )


def see_other(ctx: ConsoleContext, path: str) -> Redirect:
    """Post/redirect/get: a form's answer is a 303 to the page that shows the result."""
    return Redirect(path=path, status_code=303, cookies=ctx.response_cookies())


def safe_next(target: object) -> str:
    """Where to go after signing in: a console path only (never another site)."""
    if (
        isinstance(target, str)
        and target.startswith(ROOT + "/")
        and "//" not in target
        and "\\" not in target
        and all(" " < char < "\x7f" for char in target)
    ):
        return target
    return ROOT + "/"


def refused(ctx: ConsoleContext | None, status: int, title: str, detail: str) -> Template:
    return page(ctx, "error.html", status=status, title=title, detail=detail, code=None)


def make_gate(
    sessions: ConsoleSessions,
) -> Callable[[Request[Any, Any, Any]], Awaitable[Response[Any] | None]]:
    async def gate(request: Request[Any, Any, Any]) -> Response[Any] | None:
        if request.method == "OPTIONS":  # the allow list only (app.options_handlers)
            return None
        # The API's own parameter rules (canonical UUIDs in the path, single values).
        await check_request_rules(request)
        session = await sessions.read(request.cookies.get(COOKIE_NAME))
        ctx = ConsoleContext(
            session=session or sessions.anonymous(),
            operator=sessions.operator(session),
            csrf="",
            https=request.scope.get("scheme") == "https",
        )
        if session is None or session.stale:
            # None, tampered or expired: a fresh anonymous one. In use: its idle clock
            # starts again (a new cookie, same session).
            ctx.new_cookie = await sessions.dump(ctx.session)
        ctx.csrf = await sessions.csrf_token(ctx.session)
        request.state[_STATE_KEY] = ctx
        public = bool(request.route_handler.opt.get(PUBLIC))
        operator = ctx.operator

        if request.method == "POST":
            form = await request.form()
            # The token must match the session the *cookie* carries: a fresh session made
            # just now (no cookie, or a bad one) can never pass.
            if not await sessions.csrf_ok(session, form.get(CSRF_FIELD)):
                return refused(
                    ctx,
                    403,
                    "This form could not be verified",
                    "It carried no valid CSRF token for your session (it may have expired, "
                    "or the form came from another site). Nothing was changed; reload the "
                    "page and try again.",
                )
        if operator is None:
            if public:
                return None
            if request.method == "GET":
                target = request.url.path
                if request.url.query:
                    target += "?" + request.url.query
                return see_other(ctx, f"{ROOT}/sign-in?next={quote(safe_next(target), safe='')}")
            return refused(
                ctx, 401, "Sign in first", "Your session has ended. Nothing was changed."
            )
        if not public and not sessions.may_view(operator):
            return refused(
                ctx,
                403,
                "Not for this token",
                f"Token “{operator.name}” has neither the admin nor the read scope.",
            )
        if request.method == "POST" and not public and not operator.can_change:
            return refused(ctx, 403, "Read only", ctx.refusal + " Nothing was changed.")
        # The audit actor of whatever this request does (caller_of reads it).
        cast(MutableMapping[str, Any], request.scope)[ACTOR_SCOPE_KEY] = operator.name
        return None

    return gate


# -- errors as pages ----------------------------------------------------------------------


def _ctx_or_none(request: Request[Any, Any, Any]) -> ConsoleContext | None:
    try:
        return context_of(request)
    except (KeyError, AttributeError):
        return None


def _domain_error(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    assert isinstance(exc, RetsuError)
    status = status_of(type(exc))
    if status == 500:
        return _unexpected(request, exc)
    response = page(
        _ctx_or_none(request),
        "error.html",
        status=status,
        title=_TITLES.get(status, "Error"),
        detail=exc.detail,
        code=exc.code,
    )
    if isinstance(exc, Unavailable):
        response.headers["retry-after"] = str(exc.retry_after_seconds)
    return response


def _request_problem(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    assert isinstance(exc, RequestProblem)
    return page(
        _ctx_or_none(request),
        "error.html",
        status=exc.status,
        title=_TITLES.get(exc.status, "Error"),
        detail=exc.detail,
        code=exc.code,
    )


def _validation(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    assert isinstance(exc, ValidationException)
    return page(
        _ctx_or_none(request),
        "error.html",
        status=400,
        title="Bad request",
        detail="A value in the address is not valid here.",
        code="bad_request",
    )


def _http_exception(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    assert isinstance(exc, HTTPException)
    if exc.status_code >= 500:
        return _unexpected(request, exc)
    return page(
        _ctx_or_none(request),
        "error.html",
        status=exc.status_code,
        title=_TITLES.get(exc.status_code, "Error"),
        detail=str(exc.detail),
        code=None,
    )


def _unexpected(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    request_id = request_id_of(request.scope)
    logger.error(
        "Unexpected error answering %s %s (request id %s)",
        request.scope.get("method", "?"),
        request.scope.get("path_template") or request.scope.get("path"),
        request_id,
        exc_info=exc,
        extra={"request_id": request_id},
    )
    return page(
        _ctx_or_none(request),
        "error.html",
        status=500,
        title="Something went wrong",
        detail=f"An unexpected error occurred; quote request id {request_id} when reporting it.",
        code="internal_error",
    )


_TITLES: Final = {
    400: "Not accepted",
    401: "Sign in first",
    403: "Not allowed",
    404: "Not found",
    405: "Not allowed",
    409: "Conflict",
    413: "Too large",
    503: "Unavailable",
}

EXCEPTION_HANDLERS: ExceptionHandlersMap = {
    RetsuError: _domain_error,
    RequestProblem: _request_problem,
    ValidationException: _validation,
    HTTPException: _http_exception,
    Exception: _unexpected,
}

CSRF_FIELD_NAME: Final = CSRF_FIELD
