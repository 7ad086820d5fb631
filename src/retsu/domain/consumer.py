"""Consumers of a queue (SPEC §3.7): who names itself on dequeue, and how recently.

A consumer is a name sent in ``Retsu-Consumer`` on a dequeue, remembered per queue:
first and last time seen (every dequeue request, empty ones and long polls included) and
how many messages it was handed. ``health`` is a function of the last sighting and now:
``healthy`` within 30 s, ``stale`` within 5 min, ``offline`` beyond. The health filter of
the list is a pair of time bounds, so the storage can apply it and pagination stays exact.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from retsu.domain.errors import InvalidInput
from retsu.domain.pagination import from_micros, invalid_cursor, to_micros

CONSUMER_NAME_MAX_LENGTH = 128
_CONSUMER_NAME = re.compile(r"[!-~]{1,128}")

HEALTHY_SECONDS = 30
STALE_SECONDS = 300
# Entries not seen for this long are removed by the expired-message cleaner.
CONSUMER_RETENTION_SECONDS = 24 * 3600
# Each API process writes what it saw at most this often (no write per dequeue).
CONSUMER_FLUSH_INTERVAL_SECONDS = 5.0

# The cursor kind of the consumer list (the others are in ``cursor.CursorKind``).


def parse_consumer_name(value: str) -> str:
    """1–128 visible ASCII characters, else ``invalid_consumer``."""
    if _CONSUMER_NAME.fullmatch(value) is None:
        raise InvalidInput(
            f"Retsu-Consumer must be 1 to {CONSUMER_NAME_MAX_LENGTH} visible ASCII characters.",
            code="invalid_consumer",
        )
    return value


class ConsumerHealth(enum.StrEnum):
    HEALTHY = "healthy"
    STALE = "stale"
    OFFLINE = "offline"

    @classmethod
    def parse(cls, value: str) -> ConsumerHealth:
        try:
            return cls(value)
        except ValueError:
            raise InvalidInput(
                "health must be one of healthy, stale, offline.", code="invalid_health"
            ) from None

    @classmethod
    def of(cls, last_seen_at: datetime, now: datetime) -> ConsumerHealth:
        age = (now - last_seen_at).total_seconds()
        if age <= HEALTHY_SECONDS:
            return cls.HEALTHY
        if age <= STALE_SECONDS:
            return cls.STALE
        return cls.OFFLINE


@dataclass(frozen=True, slots=True)
class SeenBetween:
    """``last_seen_at`` bounds of a health at a moment: ``since`` ≤ last_seen_at, and
    last_seen_at < ``before``; None is unbounded."""

    since: datetime | None = None
    before: datetime | None = None

    @classmethod
    def of(cls, health: ConsumerHealth | None, now: datetime) -> SeenBetween:
        healthy_since = now - timedelta(seconds=HEALTHY_SECONDS)
        stale_since = now - timedelta(seconds=STALE_SECONDS)
        if health is ConsumerHealth.HEALTHY:
            return cls(since=healthy_since)
        if health is ConsumerHealth.STALE:
            return cls(since=stale_since, before=healthy_since)
        if health is ConsumerHealth.OFFLINE:
            return cls(before=stale_since)
        return cls()

    def holds(self, moment: datetime) -> bool:
        return (self.since is None or moment >= self.since) and (
            self.before is None or moment < self.before
        )


@dataclass(frozen=True, slots=True)
class ConsumerSighting:
    """What one API process saw of one consumer since its last write (coalesced)."""

    queue_id: UUID
    name: str
    first_seen_at: datetime
    last_seen_at: datetime
    deliveries: int


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    queue_id: UUID
    queue_name: str
    name: str
    first_seen_at: datetime
    last_seen_at: datetime
    deliveries: int

    @property
    def position(self) -> ConsumerPosition:
        return ConsumerPosition(self.last_seen_at, self.queue_id, self.name)


@dataclass(frozen=True, slots=True)
class ConsumerPosition:
    """Consumers are listed most recently seen first: last_seen_at descending, then
    (queue_id, name) ascending."""

    last_seen_at: datetime
    queue_id: UUID
    name: str

    def seal(self) -> list[Any]:
        return [to_micros(self.last_seen_at), str(self.queue_id), self.name]

    @classmethod
    def read(cls, position: list[Any]) -> ConsumerPosition:
        if (
            len(position) != 3
            or type(position[0]) is not int
            or type(position[1]) is not str
            or type(position[2]) is not str
        ):
            raise invalid_cursor()
        try:
            queue_id = UUID(position[1])
        except ValueError:
            raise invalid_cursor() from None
        return cls(from_micros(position[0]), queue_id, position[2])

    def sort_key(self) -> tuple[int, str, str]:
        """The list order as one ascending key (for the memory twin)."""
        return (-to_micros(self.last_seen_at), str(self.queue_id), self.name)
