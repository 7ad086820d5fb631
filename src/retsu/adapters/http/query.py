"""Reading query parameters with the contract's error codes.

Each parameter may appear at most once; a repeated one is refused with the
parameter's own code rather than silently picking one of the values. Unknown
parameters are ignored, as HTTP clients expect. Ranges are the domain's business.
"""

from __future__ import annotations

import re
from typing import Any
from uuid import UUID

from litestar import Request

from retsu.adapters.http.body import UUID_TEXT
from retsu.adapters.http.problems import RequestProblem

_DIGITS = re.compile(r"[0-9]{1,9}")


def query_text(request: Request[Any, Any, Any], name: str, code: str) -> str | None:
    """The parameter's single value, None when absent; repeated → 400 ``code``."""
    values = request.query_params.getall(name, [])
    if not values:
        return None
    if len(values) > 1:
        raise RequestProblem(400, code, f"{name} may be given only once.")
    return str(values[0])


def query_int(request: Request[Any, Any, Any], name: str, code: str, default: int) -> int:
    """A non-negative decimal integer (its range is checked by the domain)."""
    text = query_text(request, name, code)
    if text is None:
        return default
    if _DIGITS.fullmatch(text) is None:
        raise RequestProblem(400, code, f"{name} must be an integer.")
    return int(text)


def query_uuid(request: Request[Any, Any, Any], name: str, code: str) -> UUID | None:
    text = query_text(request, name, code)
    if text is None:
        return None
    if UUID_TEXT.fullmatch(text) is None:
        raise RequestProblem(400, code, f"{name} must be a UUID.")
    return UUID(text)
