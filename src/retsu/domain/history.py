"""Queue history (SPEC §3.8): depth and throughput over time.

The state-metrics collector's leader stores one snapshot per queue at each collection:
the depth (ready, in flight, delayed, dead letters) and how many messages were enqueued,
delivered, acknowledged, dead-lettered and expired since the previous snapshot. Those
interval counts are differences of cumulative counters kept by the statements that made
the changes (in the same transaction), so the sum over every snapshot equals what
happened, across collector restarts and leader changes alike.

A response covers 1–10080 minutes. Snapshots come every collection interval (15 s by
default: 40,320 a week), so they are summed into buckets of ``interval_seconds`` (at least
the collection interval, and wide enough for at most ``MAX_POINTS`` buckets): a point
holds the sum of its snapshots' counts and the depth of its latest snapshot, at that
snapshot's time. Buckets are aligned to the Unix epoch; a bucket without a snapshot has no
point.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from retsu.domain.ranges import IntRange

HISTORY_MINUTES = IntRange("minutes", 1, 10080, "invalid_minutes")
DEFAULT_HISTORY_MINUTES = 60
HISTORY_RETENTION_SECONDS = 7 * 24 * 3600
# The most points one response holds.
MAX_POINTS = 360

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Throughput:
    """Counts of what happened to a queue's messages (cumulative, or over an interval)."""

    enqueued: int = 0
    delivered: int = 0
    acknowledged: int = 0
    dead_lettered: int = 0
    expired: int = 0

    def __sub__(self, other: Throughput) -> Throughput:
        return Throughput(
            enqueued=self.enqueued - other.enqueued,
            delivered=self.delivered - other.delivered,
            acknowledged=self.acknowledged - other.acknowledged,
            dead_lettered=self.dead_lettered - other.dead_lettered,
            expired=self.expired - other.expired,
        )

    def __add__(self, other: Throughput) -> Throughput:
        return Throughput(
            enqueued=self.enqueued + other.enqueued,
            delivered=self.delivered + other.delivered,
            acknowledged=self.acknowledged + other.acknowledged,
            dead_lettered=self.dead_lettered + other.dead_lettered,
            expired=self.expired + other.expired,
        )


@dataclass(frozen=True, slots=True)
class HistoryPoint:
    at: datetime
    ready: int
    in_flight: int
    delayed: int
    dead_letters: int
    counts: Throughput


@dataclass(frozen=True, slots=True)
class History:
    interval_seconds: int
    points: list[HistoryPoint]
    # The window the points were read from, by the reader's clock (None: not said). A
    # chart spans it, whatever the clock of the process drawing it.
    since: datetime | None = None
    until: datetime | None = None


def bucket_seconds(minutes: int, collection_interval_seconds: float) -> int:
    """The width of a point: at least one collection interval, and wide enough that
    ``minutes`` fit in ``MAX_POINTS`` buckets."""
    return max(math.ceil(collection_interval_seconds), math.ceil(minutes * 60 / MAX_POINTS), 1)


def bucket_of(moment: datetime, width_seconds: int) -> int:
    """The epoch-aligned bucket a moment falls in."""
    return math.floor((moment - _EPOCH).total_seconds() / width_seconds)


def window_start(now: datetime, minutes: int, width_seconds: int) -> datetime:
    """Where a ``minutes`` window ending ``now`` starts. A window of 360 widths that is not
    aligned to the epoch touches 361 buckets (so does one that ends exactly on a bucket
    boundary); then its oldest bucket is left out, so a response never holds more than
    ``MAX_POINTS`` points."""
    since = now - timedelta(minutes=minutes)
    first = bucket_of(since, width_seconds)
    if bucket_of(now, width_seconds) - first + 1 > MAX_POINTS:
        return _EPOCH + timedelta(seconds=(first + 1) * width_seconds)
    return since


def downsample(snapshots: Iterable[HistoryPoint], width_seconds: int) -> list[HistoryPoint]:
    """Snapshots (oldest first) summed into buckets: counts added, the depth and time of
    each bucket's latest snapshot kept. The PostgreSQL adapter does the same in SQL."""
    points: list[HistoryPoint] = []
    current: int | None = None
    for snapshot in snapshots:
        bucket = bucket_of(snapshot.at, width_seconds)
        if points and bucket == current:
            previous = points[-1]
            points[-1] = HistoryPoint(
                at=snapshot.at,
                ready=snapshot.ready,
                in_flight=snapshot.in_flight,
                delayed=snapshot.delayed,
                dead_letters=snapshot.dead_letters,
                counts=previous.counts + snapshot.counts,
            )
        else:
            points.append(snapshot)
            current = bucket
    return points
