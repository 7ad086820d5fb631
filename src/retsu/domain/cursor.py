"""Pagination cursors: opaque, tamper-evident, validated in full when opened.

A cursor is ``base64url(payload || mac)`` without padding, where ``payload`` is a
compact JSON array ``[version, kind, scope, *position]`` and ``mac`` the first 16
bytes of HMAC-SHA256(key, payload). The key is shared by every API process (made
once by ``retsu migrate``), so a cursor from one process opens on any other.

* ``kind`` names the list (queues, dead letters, audit log), so a cursor of one list
  is never taken for another's;
* ``scope`` binds the cursor to what was listed (the queue, the filters), so a
  cursor is never replayed against another queue or filter to give a wrong page;
* ``position`` is the keyset of the last item of the page (never an offset).

Anything that does not decode, does not verify, or holds the wrong shape or types
is ``InvalidInput(code="invalid_cursor")`` — never a crash, never a wrong page.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar
from uuid import UUID

from retsu.domain.errors import InvalidInput
from retsu.domain.ranges import IntRange

T = TypeVar("T")

CURSOR_VERSION = 1
MAX_CURSOR_LENGTH = 1024
_MAC_BYTES = 16
_BASE64URL = re.compile(r"[A-Za-z0-9_-]+")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


class CursorKind:
    QUEUES = "q"
    DEAD_LETTERS = "d"
    AUDIT_LOG = "a"


def invalid_cursor() -> InvalidInput:
    return InvalidInput(
        "cursor is not a cursor this server issued for this list; start again without one.",
        code="invalid_cursor",
    )


def to_micros(moment: datetime) -> int:
    """A timezone-aware moment as whole microseconds since the epoch (exact)."""
    return (moment - _EPOCH) // _MICROSECOND


def from_micros(micros: int) -> datetime:
    try:
        return _EPOCH + micros * _MICROSECOND
    except OverflowError:
        raise invalid_cursor() from None


def _mac(key: bytes, payload: bytes) -> bytes:
    return hmac.new(key, payload, hashlib.sha256).digest()[:_MAC_BYTES]


def seal_cursor(key: bytes, kind: str, scope: list[Any], position: list[Any]) -> str:
    payload = json.dumps(
        [CURSOR_VERSION, kind, scope, *position], separators=(",", ":"), ensure_ascii=True
    ).encode("ascii")
    return base64.urlsafe_b64encode(payload + _mac(key, payload)).rstrip(b"=").decode("ascii")


def open_cursor(key: bytes, kind: str, scope: list[Any], token: str) -> list[Any]:
    """The position sealed in ``token``, after checking signature, version, kind and scope.

    The caller still checks the position's own shape (see the ``*_position`` readers).
    """
    if (
        not isinstance(token, str)
        or not 0 < len(token) <= MAX_CURSOR_LENGTH
        or _BASE64URL.fullmatch(token) is None
        or len(token) % 4 == 1  # no base64 text has this length
    ):
        raise invalid_cursor()
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except (binascii.Error, ValueError):
        raise invalid_cursor() from None
    # Only the canonical spelling: unused low bits of the last character must be zero,
    # so one cursor has exactly one token.
    if base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii") != token:
        raise invalid_cursor()
    payload, mac = raw[:-_MAC_BYTES], raw[-_MAC_BYTES:]
    if len(raw) <= _MAC_BYTES or not hmac.compare_digest(mac, _mac(key, payload)):
        raise invalid_cursor()
    try:
        content = json.loads(payload.decode("ascii"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise invalid_cursor() from None
    if (
        not isinstance(content, list)
        or len(content) < 3
        or content[0] != CURSOR_VERSION
        or type(content[0]) is not int
        or content[1] != kind
        or content[2] != scope
    ):
        raise invalid_cursor()
    return content[3:]


def _is_int(value: Any) -> bool:
    return type(value) is int


# -- the position of each list --------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueuePosition:
    """Queues are listed by name in byte order; the last name seen."""

    name: str

    def seal(self) -> list[Any]:
        return [self.name]

    @classmethod
    def read(cls, position: list[Any]) -> QueuePosition:
        if len(position) != 1 or type(position[0]) is not str:
            raise invalid_cursor()
        return cls(position[0])


@dataclass(frozen=True, slots=True)
class DeadLetterPosition:
    """Dead letters are listed newest first: (dead_lettered_at, enqueue_order) descending."""

    dead_lettered_at: datetime
    enqueue_order: int

    def seal(self) -> list[Any]:
        return [to_micros(self.dead_lettered_at), self.enqueue_order]

    @classmethod
    def read(cls, position: list[Any]) -> DeadLetterPosition:
        if len(position) != 2 or not all(_is_int(v) for v in position):
            raise invalid_cursor()
        return cls(from_micros(position[0]), position[1])


@dataclass(frozen=True, slots=True)
class AuditPosition:
    """Audit rows are listed newest first: (at, id) descending."""

    at: datetime
    id: UUID

    def seal(self) -> list[Any]:
        return [to_micros(self.at), str(self.id)]

    @classmethod
    def read(cls, position: list[Any]) -> AuditPosition:
        if len(position) != 2 or not _is_int(position[0]) or type(position[1]) is not str:
            raise invalid_cursor()
        try:
            record_id = UUID(position[1])
        except ValueError:
            raise invalid_cursor() from None
        return cls(from_micros(position[0]), record_id)


# -- pages ------------------------------------------------------------------------

LIST_LIMIT = IntRange("limit", 1, 100, "invalid_limit")
DEFAULT_LIST_LIMIT = 50


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    items: list[T]
    next_cursor: str | None
