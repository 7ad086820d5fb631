"""Pagination: each list's keyset position, and pages.

A list is read a page at a time after the position where the previous page ended (never
an offset): each list's position is a small value with ``seal()`` (the plain values that
identify it) and ``read()`` (those values back, checked in full: anything of the wrong
shape or type is ``invalid_cursor``). How positions travel — signed, opaque cursors — is
the HTTP adapter's business (``adapters/http/cursors.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar
from uuid import UUID

from retsu.domain.errors import InvalidInput
from retsu.domain.ranges import IntRange

T = TypeVar("T")
P = TypeVar("P")

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


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
class Page(Generic[T, P]):
    """One page of a list: its items, and the position the next page starts after (None
    when this was the last page)."""

    items: list[T]
    next: P | None


@dataclass(frozen=True, slots=True)
class Found(Generic[T, P]):
    """What storage found for one page of a searched list: the items with their positions,
    in the list's order, and — when a scan budget ended the walk before enough were found
    (a filter no index serves) — the position to go on after."""

    items: list[tuple[T, P]]
    resume_after: P | None = None
