"""Bearer-token authentication and scope checks for the ``/v1`` routes (SPEC §3.5).

A pure-ASGI middleware placed around the whole Litestar app (inside the request-id and
HTTP-metrics layers, so a ``401``/``403`` still carries ``x-request-id`` and is counted).

* Only paths under ``/v1`` are guarded; ``/health/*``, ``/metrics`` and everything else
  stay open. The path is normalised exactly like Litestar's router does it (repeated
  slashes collapsed, a trailing slash dropped), so ``//v1//queues/`` cannot slip past.
* ``authorization: Bearer <secret>`` is required. A missing header, another scheme, a
  malformed or unknown token is ``401 unauthorized`` with a ``www-authenticate: Bearer``
  challenge; this also holds for a ``/v1`` path that matches no route (an anonymous caller
  learns nothing about which routes exist).
* The presented secret is hashed (SHA-256) and compared with ``hmac.compare_digest`` to the
  digest of *every* configured token, without stopping at a match: the time taken does not
  depend on which token matched, nor on the secrets' lengths.
* Each ``/v1`` route declares the scopes it accepts (``scopes=`` in its decorator, kept in
  the handler's ``opt``): ``CONSUMER_READ`` (the two queue reads, so a consumer can resolve
  a name), ``CONSUMER`` (the message lifecycle), ``OPERATOR_READ`` (every other look) or
  ``ADMIN_ONLY`` (every change an operator makes). ``admin`` is in every set; ``read`` only
  in the looks. The app refuses to start if a ``/v1`` route declares none
  (``check_declared``). After routing, ``scope_guard`` compares the route's set with the
  token's scopes: none in common is ``403 forbidden`` (so a path or method that matches no
  route still answers ``404``/``405``, as without auth). A path's ``OPTIONS`` accepts every
  scope its routes accept except ``read`` (``options_scopes``).
* The matched token's ``name`` is stored in the scope under ``ACTOR_SCOPE_KEY``: it is the
  audit actor ``caller_of`` returns.

Secrets are never logged, never echoed in a response, and never kept in a repr.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
from collections.abc import Callable, Iterable, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Final, cast

import msgspec
from litestar import Litestar, Request, Response
from litestar.connection import ASGIConnection
from litestar.enums import ScopeType
from litestar.exceptions import HTTPException
from litestar.handlers import BaseRouteHandler, HTTPRouteHandler
from litestar.types import ASGIApp, Method, Receive, Scope, Send

from retsu.adapters.http.caller import ACTOR_SCOPE_KEY
from retsu.adapters.http.problems import PROBLEM_MEDIA_TYPE, Problem

__all__ = [
    "ADMIN",
    "ADMIN_ONLY",
    "CONSUMER",
    "CONSUMER_READ",
    "MESSAGES",
    "OPERATOR_READ",
    "READ",
    "SCOPES",
    "SCOPES_OPT",
    "SCOPES_SCOPE_KEY",
    "ApiToken",
    "AuthConfig",
    "AuthMiddleware",
    "Principal",
    "RouteResolver",
    "ScopeRefused",
    "TokenTable",
    "app_route_resolver",
    "check_declared",
    "guarded",
    "options_scopes",
    "path_components",
    "refused_scope",
    "scope_guard",
]

logger = logging.getLogger("retsu.adapters.http.auth")

MESSAGES: Final = "messages"
READ: Final = "read"
ADMIN: Final = "admin"
SCOPES: Final = frozenset({MESSAGES, READ, ADMIN})

# The authenticated token's scopes, for anything downstream that wants them.
SCOPES_SCOPE_KEY: Final = "retsu.scopes"

# Where a route handler keeps its accepted scopes (``scopes=`` in the route decorator).
SCOPES_OPT: Final = "scopes"

REALM: Final = "retsu"
# The four sets a route may declare.
ADMIN_ONLY: Final = frozenset({ADMIN})
CONSUMER_READ: Final = frozenset({MESSAGES, READ, ADMIN})
CONSUMER: Final = frozenset({MESSAGES, ADMIN})
OPERATOR_READ: Final = frozenset({READ, ADMIN})


# --- configuration ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ApiToken:
    """One configured token. ``name`` is the audit actor; ``secret`` never shows in a repr."""

    name: str
    secret: str = field(repr=False)
    scopes: frozenset[str]


@dataclass(frozen=True, slots=True)
class AuthConfig:
    """What the HTTP adapter needs to know about auth (built from settings by the
    entrypoint; this module does not import the settings)."""

    enabled: bool = False
    tokens: tuple[ApiToken, ...] = ()


# --- the scope rule ---------------------------------------------------------------------


def path_components(path: str, root_path: str = "") -> list[str]:
    """The non-empty segments of ``path`` as Litestar's router sees them: the router strips
    ``root_path``, collapses repeated slashes and ignores a trailing slash."""
    if root_path:
        path = path.split(root_path, maxsplit=1)[-1]
    return [segment for segment in path.split("/") if segment]


def guarded(components: list[str]) -> bool:
    """Whether a path (as components) is under ``/v1``."""
    return bool(components) and components[0] == "v1"


def options_scopes(declared: Iterable[frozenset[str] | None]) -> frozenset[str] | None:
    """What a path's ``OPTIONS`` accepts: every scope its routes accept but ``read`` (which
    is only ever for looking), or None when the path is open."""
    accepted = [s for s in declared if s is not None]
    if not accepted:
        return None
    return frozenset().union(*accepted) - {READ} | {ADMIN}


def check_declared(handlers: Iterable[HTTPRouteHandler]) -> None:
    """Every ``/v1`` route must say which scopes it accepts: a route that forgot would be
    open to every token (or to none), so the app refuses to start instead."""
    for handler in handlers:
        for path in handler.paths:
            if guarded(path_components(path)) and SCOPES_OPT not in handler.opt:
                raise RuntimeError(f"route {path} declares no scopes (scopes=...)")


class ScopeRefused(Exception):
    """The token has none of the scopes the matched route accepts (answered 403)."""

    def __init__(self, accepted: frozenset[str]) -> None:
        super().__init__("insufficient scope")
        self.accepted = accepted


def scope_guard(connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler) -> None:
    """Litestar guard of every route: the token's scopes against the route's declared ones.
    Installed only when auth is enabled (the middleware put the token's scopes in the
    scope); open routes declare none and pass."""
    accepted: frozenset[str] | None = handler.opt.get(SCOPES_OPT)
    if accepted is None:
        return
    held: frozenset[str] = connection.scope.get(SCOPES_SCOPE_KEY, frozenset())  # type: ignore[assignment]
    if accepted.isdisjoint(held):
        raise ScopeRefused(accepted)


# --- route resolution (only when a request is refused) ----------------------------------

# (method, path) → the matched route's template, or None when no route matches.
RouteResolver = Callable[[str, str], str | None]


def app_route_resolver(app: Litestar) -> RouteResolver:
    """Resolve a request with the app's own router (the same trie, the same cache)."""
    router = app.asgi_router

    def resolve(method: str, path: str) -> str | None:
        try:
            return router.handle_routing(path="/" + path, method=cast("Method", method))[4]
        except HTTPException:  # NotFound, MethodNotAllowed: no such route
            return None

    return resolve


# --- responses --------------------------------------------------------------------------

_encoder = msgspec.json.Encoder()


@dataclass(frozen=True, slots=True)
class _Refusal:
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes


def _refusal(status: int, code: str, detail: str, challenge: str) -> _Refusal:
    title = "Unauthorized" if status == 401 else "Forbidden"
    body = _encoder.encode(
        Problem(type="about:blank", title=title, status=status, detail=detail, code=code)
    )
    headers = [
        (b"content-type", PROBLEM_MEDIA_TYPE.encode("ascii")),
        (b"content-length", str(len(body)).encode("ascii")),
        (b"www-authenticate", challenge.encode("ascii")),
        (b"cache-control", b"no-store"),
    ]
    return _Refusal(status, headers, body)


_CHALLENGE: Final = f'Bearer realm="{REALM}"'

MISSING: Final = _refusal(
    401,
    "unauthorized",
    "This route needs an 'authorization: Bearer <token>' header.",
    _CHALLENGE,
)
WRONG_SCHEME: Final = _refusal(
    401,
    "unauthorized",
    "The authorization header must use the Bearer scheme.",
    _CHALLENGE,
)
MALFORMED: Final = _refusal(
    401,
    "unauthorized",
    "The bearer token is empty or malformed.",
    f'{_CHALLENGE}, error="invalid_request"',
)
UNKNOWN: Final = _refusal(
    401,
    "unauthorized",
    "The bearer token is not valid.",
    f'{_CHALLENGE}, error="invalid_token"',
)


def forbidden(accepted: frozenset[str]) -> _Refusal:
    names = sorted(accepted)
    return _refusal(
        403,
        "forbidden",
        f"This route needs a token with the scope {' or '.join(names)}.",
        f'{_CHALLENGE}, error="insufficient_scope", scope="{" ".join(names)}"',
    )


def refusal_response(refusal: _Refusal) -> Response[bytes]:
    """A refusal as a Litestar response (the guard's 403 goes through the app's exception
    handlers; the middleware sends its 401 itself)."""
    headers = {name.decode("ascii"): value.decode("ascii") for name, value in refusal.headers}
    headers.pop("content-length")
    return Response(
        refusal.body,
        status_code=refusal.status,
        headers=headers,
        media_type=PROBLEM_MEDIA_TYPE,
    )


def refused_scope(request: Request[Any, Any, Any], error: ScopeRefused) -> Response[bytes]:
    """The exception handler of ``ScopeRefused``: ``403 forbidden`` naming the scopes."""
    return refusal_response(forbidden(error.accepted))


# --- the middleware ---------------------------------------------------------------------

_AUTHORIZATION: Final = b"authorization"
_BEARER: Final = b"bearer"


# RFC 6750 allows a narrower alphabet; configured secrets may use any visible ASCII character.
_CREDENTIAL: Final = re.compile(rb"[\x21-\x7e]+")

Principal = tuple[str, frozenset[str]]  # (token name, scopes)


class TokenTable:
    """The configured tokens as digests (the secrets themselves are not kept): the one
    constant-time check shared by the API's bearer auth and the console's sign-in."""

    def __init__(self, tokens: Iterable[ApiToken]) -> None:
        self._tokens: tuple[tuple[bytes, Principal], ...] = tuple(
            (hashlib.sha256(t.secret.encode("utf-8")).digest(), (t.name, t.scopes)) for t in tokens
        )

    def __bool__(self) -> bool:
        return bool(self._tokens)

    def match(self, secret: bytes) -> Principal | None:
        """The token whose secret this is, comparing against every token (no early exit):
        fixed-size digests, so neither the secrets' lengths nor the matching position show
        in the time taken."""
        digest = hashlib.sha256(secret).digest()
        found: Principal | None = None
        for expected, principal in self._tokens:
            if hmac.compare_digest(digest, expected):
                found = principal
        return found


class AuthMiddleware:
    """Guards ``/v1`` (see the module docstring). Installed only when auth is enabled."""

    def __init__(
        self,
        app: ASGIApp,
        config: AuthConfig,
        resolve_route: RouteResolver | None = None,
    ) -> None:
        self.app = app
        self._tokens = TokenTable(config.tokens)
        self._resolve_route = resolve_route
        if not self._tokens:
            logger.warning("auth is enabled but no token is configured: every /v1 request gets 401")

    def _authenticate(self, scope: Scope) -> _Refusal | Principal:
        value: bytes | None = None
        for name, header in scope["headers"]:
            if name == _AUTHORIZATION:
                if value is not None:
                    return MALFORMED  # two credentials: ambiguous
                value = header
        if value is None:
            return MISSING
        scheme, _, credentials = value.strip().partition(b" ")
        if scheme.lower() != _BEARER:
            return WRONG_SCHEME
        credentials = credentials.strip(b" ")
        if _CREDENTIAL.fullmatch(credentials) is None:
            return MALFORMED
        principal = self._tokens.match(credentials)
        return UNKNOWN if principal is None else principal

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Litestar answers lifespan events itself: only http and websocket scopes get here.
        components = path_components(scope["path"], scope.get("root_path", ""))
        if not guarded(components):
            await self.app(scope, receive, send)
            return
        method: str = scope["method"] if scope["type"] == ScopeType.HTTP else "GET"
        outcome = self._authenticate(scope)
        if isinstance(outcome, _Refusal):
            await self._refuse(scope, send, outcome, components, method)
            return
        name, scopes = outcome
        # Which scopes the route accepts is the route's own declaration, checked after
        # routing by ``scope_guard``.
        state = cast("MutableMapping[str, Any]", scope)
        state[ACTOR_SCOPE_KEY] = name
        state[SCOPES_SCOPE_KEY] = scopes
        await self.app(scope, receive, send)

    def _template(self, method: str, components: list[str]) -> str | None:
        if self._resolve_route is None:
            return "/" + "/".join(components)  # no router: assume the route exists
        return self._resolve_route(method, "/".join(components))

    async def _refuse(
        self,
        scope: Scope,
        send: Send,
        refusal: _Refusal,
        components: list[str],
        method: str,
    ) -> None:
        if scope["type"] != ScopeType.HTTP:
            # A websocket under /v1: refuse the handshake (the server answers 403).
            await send({"type": "websocket.close", "code": 1008, "reason": ""})
            return
        # Label the metrics with the route template when the path matches a route.
        template = self._template(method, components) if self._resolve_route else None
        if template is not None:
            cast("MutableMapping[str, Any]", scope)["path_template"] = template
        await send(
            {
                "type": "http.response.start",
                "status": refusal.status,
                "headers": list(refusal.headers),
            }
        )
        await send({"type": "http.response.body", "body": refusal.body, "more_body": False})
