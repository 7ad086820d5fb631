"""What the caches report about themselves (SPEC §7), as a small port.

The caches take this Protocol, not the telemetry ``Metrics`` class, so they stay
testable on their own; ``retsu.adapters.telemetry.metrics.Metrics`` implements it.
"""

from __future__ import annotations

from typing import Final, Protocol

QUEUE_NAMES: Final = "queue_names"
QUEUE_DETAILS: Final = "queue_details"

LOAD_SUCCESS: Final = "success"
LOAD_NOT_FOUND: Final = "not_found"
LOAD_ERROR: Final = "error"


class CacheMetrics(Protocol):
    def cache_request(self, cache_name: str, *, hit: bool) -> None:
        """One lookup: ``cache_requests_total{cache_name, outcome="hit|miss"}``."""
        ...

    def cache_loaded(self, cache_name: str, outcome: str, duration_seconds: float) -> None:
        """One load after a miss: ``cache_load_duration_seconds{cache_name, outcome}``,
        ``outcome`` being ``success``, ``not_found`` or ``error``."""
        ...


class NoCacheMetrics:
    """Records nothing (tests, tools)."""

    def cache_request(self, cache_name: str, *, hit: bool) -> None:
        return None

    def cache_loaded(self, cache_name: str, outcome: str, duration_seconds: float) -> None:
        return None


NO_CACHE_METRICS: Final = NoCacheMetrics()
