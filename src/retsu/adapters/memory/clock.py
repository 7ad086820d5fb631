"""A clock that moves only when told: time for the memory adapter in tests and in the
client's testing helper (visibility timeouts, delays and lifetimes pass without sleeping)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta


class ManualClock:
    """Implements Clock. Thread-safe: the client's testing helper serves the application on
    an event loop of its own while the test moves the clock from its thread."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> datetime:
        with self._lock:
            self._now += timedelta(seconds=seconds)
            return self._now

    def set(self, when: datetime) -> None:
        if when.tzinfo is None:
            raise ValueError("the clock keeps timezone-aware times")
        with self._lock:
            self._now = when
