"""Reading request bodies and path ids, with the contract's exact error codes.

Bodies are read from raw bytes and decoded with msgspec Structs that forbid
unknown fields; Litestar's ``data`` injection is not used so that every failure
maps to one code:

* no ``content-type: application/json`` (parameters allowed) → 415 unsupported_media_type
* more than 1 MiB (announced by Content-Length, or actually streamed) → 413 payload_too_large
* malformed JSON, unknown field, wrong type, missing field, non-object → 400 invalid_json

Range checks are not done here: the domain raises ``InvalidInput`` with the
field's own code.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar
from uuid import UUID

import msgspec
from litestar import Request

from retsu.adapters.http.problems import MAX_BODY_BYTES, RequestProblem, invalid_json

__all__ = ["MAX_BODY_BYTES", "parse_path_id", "read_json", "read_optional_json"]

T = TypeVar("T")

_JSON_MEDIA_TYPE = b"application/json"
_MAX_ERROR_LENGTH = 200
# The canonical 36-character form only (uuid.UUID alone also takes braces and urn:uuid:).
UUID_TEXT = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)


def _too_large() -> RequestProblem:
    return RequestProblem(
        413,
        "payload_too_large",
        f"The request body is larger than the limit of {MAX_BODY_BYTES} bytes (1 MiB).",
    )


def _unsupported_media_type() -> RequestProblem:
    return RequestProblem(
        415, "unsupported_media_type", "The request body must be sent as application/json."
    )


def _body_headers(scope: Any) -> tuple[bytes | None, bytes | None]:
    """(content-type, content-length) as sent, without building a headers object."""
    content_type = content_length = None
    for name, value in scope["headers"]:
        if name == b"content-type":
            content_type = value
        elif name == b"content-length":
            content_length = value
    return content_type, content_length


def _is_json(content_type: bytes) -> bool:
    return content_type.split(b";", 1)[0].strip().lower() == _JSON_MEDIA_TYPE


def _check_announced_length(content_length: bytes | None) -> None:
    if content_length is not None:
        try:
            announced = int(content_length)
        except ValueError:
            return  # the server rejects a malformed length; the stream limit still applies
        if announced > MAX_BODY_BYTES:
            raise _too_large()


async def _read(request: Request[Any, Any, Any]) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        if chunk:
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise _too_large()
            chunks.append(chunk)
    if len(chunks) == 1:
        return chunks[0]
    return b"".join(chunks)


def _decode(body: bytes, decoder: msgspec.json.Decoder[T]) -> T:
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as error:
        raise invalid_json(f"The request body does not fit this route: {_short(error)}.") from None
    except msgspec.DecodeError as error:
        raise invalid_json(f"The request body is not valid JSON: {_short(error)}.") from None


def _short(error: Exception) -> str:
    text = str(error)
    return text if len(text) <= _MAX_ERROR_LENGTH else text[:_MAX_ERROR_LENGTH] + "…"


async def read_json(request: Request[Any, Any, Any], decoder: msgspec.json.Decoder[T]) -> T:
    """Decode a required JSON body."""
    content_type, content_length = _body_headers(request.scope)
    if content_type is None or not _is_json(content_type):
        raise _unsupported_media_type()
    _check_announced_length(content_length)
    return _decode(await _read(request), decoder)


async def read_optional_json(
    request: Request[Any, Any, Any], decoder: msgspec.json.Decoder[T]
) -> T | None:
    """Decode an optional JSON body: None when there is no body (or an empty one)."""
    content_type, content_length = _body_headers(request.scope)
    if content_length == b"0":
        return None
    _check_announced_length(content_length)
    body = await _read(request)
    if not body:
        return None
    if content_type is None or not _is_json(content_type):
        raise _unsupported_media_type()
    return _decode(body, decoder)


def parse_path_id(value: str, name: str) -> UUID:
    """A UUID path segment, or 400 invalid_path."""
    if len(value) != 36 or UUID_TEXT.fullmatch(value) is None:
        raise RequestProblem(400, "invalid_path", f"{name} in the path must be a UUID.")
    return UUID(value)
