"""Who is calling: the Caller (actor + request id) that operator commands carry.

With auth enabled the actor is the authenticated token's name, stored in the ASGI
scope by the auth layer; otherwise it is ``anonymous``.
"""

from __future__ import annotations

from typing import Any

from litestar import Request

from retsu.adapters.http.middleware import request_id_of
from retsu.domain.audit import ANONYMOUS, Caller

ACTOR_SCOPE_KEY = "retsu.actor"


def caller_of(request: Request[Any, Any, Any]) -> Caller:
    """Injected as the ``caller`` dependency of operator routes."""
    scope = request.scope
    actor = str(scope.get(ACTOR_SCOPE_KEY, ANONYMOUS))
    return Caller(actor=actor, request_id=request_id_of(scope))
