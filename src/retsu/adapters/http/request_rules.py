"""The contract's request rules that Litestar's typed parsing does not express by itself.

Handlers declare what they take (``data: MessageBody``, ``queue_id: QueueId``,
``limit: Limit``); Litestar extracts and converts it and ``problems.py`` turns its
validation failures into the contract's codes. Three rules need a small piece of our own,
mostly because msgspec's lax conversion (used by Litestar for parameters and, after a
first decode to builtins, for bodies) is more forgiving than the contract:

* ``JsonRequest.json`` decodes a body **strictly** into the handler's Struct (Litestar
  decodes to builtins, then converts leniently: ``"3"`` would pass as ``3``), after checking
  ``content-type: application/json`` (parameters allowed; else ``415``). Malformed JSON,
  unknown fields, wrong types, missing fields, a non-object, a key repeated in one object
  (``json_keys``): ``400 invalid_json``. ``null`` for an optional field means absent.
  ``JsonRequest.body`` enforces the 1 MiB limit (``413``, announced or streamed). An empty
  body on an optional-body route is "no body" (Litestar never calls ``json()`` then).
* ``check_request_rules`` (the app's ``before_request``): a UUID path or query value must be
  the canonical 36-character form (``uuid.UUID`` and msgspec also take 32 bare hex digits,
  braces or ``urn:uuid:``); a declared query parameter or header given twice is refused
  with its own code rather than silently picking one value. Unknown query parameters are
  ignored, as HTTP clients expect. (Integer query values: ``params.Digits``.)
* ``parameter_code``: the error code of a parameter is ``invalid_<name>`` unless the
  contract names it otherwise.

Ranges are not checked here: the domain does it, with the field's own code. Each rule list
is computed once per handler.
"""

from __future__ import annotations

import re
import types
from collections.abc import Callable
from typing import Any, Final, Union, get_args, get_origin
from uuid import UUID

import msgspec
from litestar import Request
from litestar.enums import ParamType
from litestar.exceptions.http_exceptions import RequestEntityTooLarge
from litestar.handlers import HTTPRouteHandler
from litestar.params import ParameterKwarg
from litestar.types import Empty, Receive, ReceiveMessage

from retsu.adapters.http.json_keys import KeyCheck

__all__ = [
    "MAX_BODY_BYTES",
    "ClientDisconnected",
    "JsonRequest",
    "RequestProblem",
    "StrictBody",
    "check_request_rules",
    "declared_parameters",
    "invalid_json",
    "is_json_media_type",
    "parameter_code",
    "read_body",
    "unsupported_media_type",
]

# The canonical 36-character form only.
UUID_TEXT: Final = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)
_JSON_MEDIA_TYPE: Final = b"application/json"
MAX_BODY_BYTES: Final = 1024 * 1024  # 1 MiB
_MAX_ERROR_LENGTH: Final = 200
# Parameters whose code is not ``invalid_<name>`` (the contract's tables).
_CODES: Final = {"name": "invalid_queue_name"}
# What the router, not the caller, supplies to a handler.
_RESERVED: Final = frozenset({"request", "data", "state", "scope", "headers", "query", "cookies"})


class RequestProblem(Exception):
    """A request refused before any use case runs (shape, media type, path, parameters)."""

    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail


def invalid_json(detail: str) -> RequestProblem:
    return RequestProblem(400, "invalid_json", detail)


def unsupported_media_type() -> RequestProblem:
    return RequestProblem(
        415, "unsupported_media_type", "The request body must be sent as application/json."
    )


def is_json_media_type(content_type: bytes) -> bool:
    return content_type.split(b";", 1)[0].strip().lower() == _JSON_MEDIA_TYPE


def parameter_code(name: str) -> str:
    """The error code of a bad query or header parameter."""
    return _CODES.get(name, "invalid_" + name.lower().replace("-", "_"))


def _short(error: Exception) -> str:
    return _short_text(str(error))


def _short_text(text: str) -> str:
    return text if len(text) <= _MAX_ERROR_LENGTH else text[:_MAX_ERROR_LENGTH] + "…"


# -- the body ------------------------------------------------------------------------

_DECODER_KEY: Final = "retsu.body_decoder"


def _without_none(annotation: Any) -> Any:
    """``DequeueBody | None`` → ``DequeueBody``: a JSON ``null`` body is not "no body"."""
    if get_origin(annotation) in (Union, types.UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        if len(members) == 1:
            return members[0]
    return annotation


class StrictBody:
    """A route's body rules: decoded strictly into ``kind``, a key repeated in one object
    refused; either way ``400 invalid_json`` (``RequestProblem``)."""

    __slots__ = ("_decoder", "_keys")

    def __init__(self, kind: Any) -> None:
        self._decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(kind)
        self._keys = KeyCheck(kind)

    def decode(self, body: bytes) -> Any:
        try:
            value = self._decoder.decode(body)
        except msgspec.ValidationError as error:
            raise invalid_json(
                f"The request body does not fit this route: {_short(error)}."
            ) from None
        except msgspec.DecodeError as error:
            raise invalid_json(f"The request body is not valid JSON: {_short(error)}.") from None
        repeated = self._keys.repeated(body, value)
        if repeated is not None:
            # Which of the two values counts is each parser's guess.
            raise invalid_json(f"The request body repeats the key {_short_text(repeated)!r}.")
        return value


def _body_decoder(handler: HTTPRouteHandler) -> StrictBody:
    decoder: StrictBody | None = handler.opt.get(_DECODER_KEY)
    if decoder is None:
        kind = _without_none(handler.parsed_fn_signature.parameters["data"].annotation)
        decoder = handler.opt[_DECODER_KEY] = StrictBody(kind)
    return decoder


async def read_body(
    receive: Receive, length: bytes | None, arrived: list[ReceiveMessage] | None = None
) -> bytes:
    """A request's whole body from ``receive``, at most ``MAX_BODY_BYTES``: else
    ``RequestEntityTooLarge`` (announced by ``length``, the Content-Length header, or
    streamed); ``ClientDisconnected`` when the client leaves first. ``arrived`` keeps the
    messages as they were received."""
    # A malformed length is the server's to refuse; the stream limit still holds.
    if length is not None and length.isdigit() and int(length) > MAX_BODY_BYTES:
        raise RequestEntityTooLarge
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if arrived is not None:
            arrived.append(message)
        if message["type"] != "http.request":
            raise ClientDisconnected
        chunk: bytes = message.get("body", b"")
        if chunk:
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise RequestEntityTooLarge
            chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


class ClientDisconnected(Exception):
    """The client went away (``http.disconnect``) before its body was read whole, or
    before a dequeue could answer it (``departure.py``)."""


class JsonRequest(Request[Any, Any, Any]):
    """Litestar's request with a bounded, strict JSON body (see the module docstring)."""

    async def body(self) -> bytes:
        """The whole body, at most ``MAX_BODY_BYTES`` (announced or streamed, else ``413``).

        Read straight from the ASGI messages: Litestar's ``stream()`` parses every header
        into a ``Headers`` object just to find Content-Length, which cost the hot routes
        ~6 % of their throughput (measured with stub use cases). A client that disconnects
        meanwhile raises ``ClientDisconnected`` (problems.py: a DEBUG line, status 499).
        """
        if self._body is not Empty:
            return self._body
        length = None
        for name, value in self.scope["headers"]:
            if name == b"content-length":
                length = value
                break
        self._body = await read_body(self.receive, length)
        self.is_connected = False
        return self._body

    async def json(self) -> Any:
        content_type = None
        for name, value in self.scope["headers"]:
            if name == b"content-type":
                content_type = value  # sent twice: the last one counts
        if content_type is None or not is_json_media_type(content_type):
            raise unsupported_media_type()
        decoder = _body_decoder(self.route_handler)
        body = await self.body()  # 413 past request_max_body_size, announced or streamed
        return decoder.decode(body)


# -- parameters ------------------------------------------------------------------------

Rule = Callable[[Request[Any, Any, Any]], None]
_RULES_KEY: Final = "retsu.request_rules"


def _path_uuid(name: str) -> Rule:
    def check(request: Request[Any, Any, Any]) -> None:
        value = request.path_params.get(name)
        if isinstance(value, str) and UUID_TEXT.fullmatch(value) is None:
            raise RequestProblem(400, "invalid_path", f"{name} in the path must be a UUID.")

    return check


def _query(name: str, kind: Any) -> Rule:
    code = parameter_code(name)
    canonical_uuid = kind is UUID

    def check(request: Request[Any, Any, Any]) -> None:
        values = request.query_params.getall(name, [])
        if not values:
            return
        if len(values) > 1:
            raise RequestProblem(400, code, f"{name} may be given only once.")
        if canonical_uuid and UUID_TEXT.fullmatch(values[0]) is None:
            raise RequestProblem(400, code, f"{name} must be a UUID.")

    return check


def _header(name: str) -> Rule:
    raw = name.lower().encode("latin-1")
    code = parameter_code(name)

    def check(request: Request[Any, Any, Any]) -> None:
        count = sum(1 for header, _ in request.scope["headers"] if header == raw)
        if count > 1:
            # Which of the two would count is anybody's guess.
            raise RequestProblem(400, code, f"Send at most one {name} header.")

    return check


def declared_parameters(
    handler: HTTPRouteHandler, path_parameters: set[str], dependencies: set[str]
) -> list[tuple[str, str, Any]]:
    """``(name, location, type)`` of what the caller sends: location is ``path``, ``query``,
    ``header`` (name: the header's) or ``body``; injected dependencies are left out."""
    found: list[tuple[str, str, Any]] = []
    for name, field in handler.parsed_fn_signature.parameters.items():
        if name in dependencies:
            continue
        kind = _without_none(field.annotation)
        kwarg = field.kwarg_definition
        if name == "data":
            found.append((name, "body", kind))
        elif name in _RESERVED:
            continue
        elif name in path_parameters:
            found.append((name, "path", kind))
        elif not isinstance(kwarg, ParameterKwarg):
            found.append((name, "query", kind))
        elif kwarg.param_type is ParamType.QUERY:
            found.append((kwarg.name or name, "query", kind))
        elif kwarg.param_type is ParamType.HEADER:
            found.append((kwarg.name or name, "header", kind))
    return found


def _rules(handler: HTTPRouteHandler, path_parameters: set[str]) -> list[Rule]:
    rules: list[Rule] = []
    for name, location, kind in declared_parameters(
        handler, path_parameters, set(handler.resolve_dependencies())
    ):
        if location == "path" and kind is UUID:
            rules.append(_path_uuid(name))
        elif location == "header":
            rules.append(_header(name))
        elif location == "query":
            rules.append(_query(name, kind))
    # Headers a handler reads itself (documented with ``request_headers=``): refused when
    # repeated, before the body is parsed.
    rules.extend(_header(header.name) for header in handler.opt.get("request_headers", ()))
    return rules


async def check_request_rules(request: Request[Any, Any, Any]) -> None:
    """The app's ``before_request``: runs after routing, before any parameter is parsed."""
    handler = request.route_handler
    rules: list[Rule] | None = handler.opt.get(_RULES_KEY)
    if rules is None:
        rules = handler.opt[_RULES_KEY] = _rules(handler, set(request.path_params))
    for rule in rules:
        rule(request)
