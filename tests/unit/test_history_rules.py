"""Queue history windows and buckets (SPEC §3.8, ``domain.history``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from retsu.domain.history import MAX_POINTS, bucket_of, bucket_seconds, window_start

_MIDNIGHT = datetime(2026, 11, 30, tzinfo=UTC)


@pytest.mark.parametrize("minutes", [1, 7, 60, 90, 1440, 4321, 10080])
@pytest.mark.parametrize("offset", [0.0, 0.5, 1.0, 7.25, 100.0, 239.999])
def test_a_window_touches_at_most_360_buckets_and_loses_at_most_its_oldest_one(
    minutes: int, offset: float
) -> None:
    width = bucket_seconds(minutes, 15)
    now = _MIDNIGHT + timedelta(seconds=offset)
    full = now - timedelta(minutes=minutes)

    since = window_start(now, minutes, width)

    assert bucket_of(now, width) - bucket_of(since, width) + 1 <= MAX_POINTS
    # (A window that ends exactly on a boundary opens a new bucket there, so it may lose a
    # whole oldest bucket rather than a partial one.)
    assert full <= since <= full + timedelta(seconds=width)
    if since != full:  # only ever moved to the start of the next bucket
        assert bucket_of(since, width) == bucket_of(full, width) + 1
        assert (since - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds() % width == 0
