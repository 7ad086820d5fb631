"""A small circuit breaker for the shared cache (SPEC §4).

Closed: the cache is used. After a failure it opens: callers skip the cache
entirely (no per-request timeout) until a reconnect attempt is due, the first
``first_retry_seconds`` (1 s) after the failure, then backing off by doubling to
at most ``max_retry_seconds`` (5 s). One caller at a time gets the attempt
(``try_probe``); its success closes the breaker, its failure schedules the next
attempt. Time comes from an injectable monotonic clock, so tests move time by
hand instead of sleeping.
"""

from __future__ import annotations

import time
from collections.abc import Callable

DEFAULT_FIRST_RETRY_SECONDS = 1.0
DEFAULT_MAX_RETRY_SECONDS = 5.0


class CircuitBreaker:
    def __init__(
        self,
        *,
        first_retry_seconds: float = DEFAULT_FIRST_RETRY_SECONDS,
        max_retry_seconds: float = DEFAULT_MAX_RETRY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 < first_retry_seconds <= max_retry_seconds:
            raise ValueError("need 0 < first_retry_seconds <= max_retry_seconds")
        self._first = first_retry_seconds
        self._max = max_retry_seconds
        self._clock = clock
        self._open = False
        self._probing = False
        self._delay = first_retry_seconds
        self._next_attempt = 0.0

    @property
    def closed(self) -> bool:
        """True while the protected resource may be used."""
        return not self._open

    @property
    def next_attempt_in(self) -> float | None:
        """Seconds until the next reconnect attempt is due (0 when due now); None when closed."""
        if not self._open:
            return None
        return max(0.0, self._next_attempt - self._clock())

    @property
    def retry_delay(self) -> float:
        """The wait before the next attempt after the current one (for logs and tests)."""
        return self._delay

    def try_probe(self) -> bool:
        """True for exactly one caller once a reconnect attempt is due.

        That caller must report ``record_success`` or ``record_failure``. If it never
        does, the attempt counts as failed once the next one is due.
        """
        if not self._open:
            return False
        now = self._clock()
        if now < self._next_attempt:
            return False
        if self._probing:  # the previous attempt never reported back
            self._delay = min(self._delay * 2, self._max)
        self._probing = True
        self._next_attempt = now + self._delay
        return True

    def record_success(self) -> bool:
        """A successful use or attempt. Returns True when this closed the breaker.

        While open, only the reconnect attempt's success closes it: a straggler that
        started before the failure proves nothing about now.
        """
        if not self._open:
            return False
        if not self._probing:
            return False
        self._open = False
        self._probing = False
        self._delay = self._first
        return True

    def record_failure(self) -> bool:
        """A failed use or attempt. Returns True when this opened the breaker."""
        now = self._clock()
        if not self._open:
            self._open = True
            self._probing = False
            self._delay = self._first
            self._next_attempt = now + self._delay
            return True
        if self._probing:  # the reconnect attempt failed: back off
            self._probing = False
            self._delay = min(self._delay * 2, self._max)
            self._next_attempt = now + self._delay
        # else: a request that started before the breaker opened; the schedule stands.
        return False
