"""When and how long to wait before sending a request again (SPEC §9).

Hand-written on purpose: SPEC §9 allows the client no dependency beyond httpx and msgspec,
so tenacity/stamina are out, and httpx's own transport retries cover connect errors only.

What is retried:

* a request that provably never reached the server (connect error, connect or pool
  timeout), and a refusal that says nothing was done (``429``; ``503 busy``) — always;
* a failure after the request may have reached the server (the connection dropped, a read
  timeout, ``502``/``503``/``504``) — only when repeating the call cannot do anything twice
  (reads, acknowledge, visibility changes, dequeue, pause/resume, updates, and an enqueue
  that carries an ``Idempotency-Key``).

Waits grow exponentially with full jitter (``uniform(0, min(cap, base * 2**n))``), never
shorter than the server's ``Retry-After``, within ``max_attempts`` and an overall
``deadline`` per call.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx
import msgspec

__all__ = ["RetryPolicy", "parse_retry_after"]

# Statuses that are worth a second try; 429 and 503 busy mean the server did nothing.
RETRY_STATUSES = frozenset({429, 502, 503, 504})
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


class RetryPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """How a call is retried. ``RetryPolicy(max_attempts=1)`` (or ``RetryPolicy.none()``)
    disables retries."""

    max_attempts: int = 5
    """Attempts in all, the first included."""
    base_delay: float = 0.1
    """Seconds; the n-th retry waits up to ``base_delay * 2**(n-1)``."""
    max_delay: float = 5.0
    """Cap of one wait (a server's ``Retry-After`` may ask for longer, up to the deadline)."""
    deadline: float = 30.0
    """Seconds from the first attempt after which no retry is started."""

    @classmethod
    def none(cls) -> RetryPolicy:
        return cls(max_attempts=1)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.base_delay < 0 or self.max_delay < 0 or self.deadline < 0:
            raise ValueError("delays and deadline must not be negative")

    def schedule(self, clock: Callable[[], float] = time.monotonic) -> RetrySchedule:
        return RetrySchedule(self, clock)


class RetrySchedule:
    """The retry state of one call: counts attempts, keeps the deadline."""

    def __init__(self, policy: RetryPolicy, clock: Callable[[], float]) -> None:
        self._policy = policy
        self._clock = clock
        self._started = clock()
        self.attempt = 1

    def next_delay(self, retry_after: float | None = None) -> float | None:
        """Seconds to wait before the next attempt, or None to give up."""
        policy = self._policy
        if self.attempt >= policy.max_attempts:
            return None
        ceiling = min(policy.max_delay, policy.base_delay * 2 ** (self.attempt - 1))
        delay = random.uniform(0, ceiling)
        if retry_after is not None:
            delay = max(delay, retry_after)
        if self._clock() - self._started + delay > policy.deadline:
            return None
        self.attempt += 1
        return delay


def retry_exception(error: httpx.TransportError, repeatable: bool) -> bool:
    """Whether a transport failure may be retried."""
    if isinstance(error, _NOT_SENT):
        return True
    if isinstance(error, (httpx.UnsupportedProtocol, httpx.ProxyError, httpx.LocalProtocolError)):
        return False
    return repeatable


def retry_status(status: int, code: str | None, repeatable: bool) -> bool:
    """Whether an error answer may be retried."""
    if status == 429 or (status == 503 and code == "busy"):
        return True
    return status in RETRY_STATUSES and repeatable


def parse_retry_after(value: str | None, now: Callable[[], datetime] | None = None) -> float | None:
    """``Retry-After`` as seconds from now: delta-seconds or an HTTP date (RFC 9110)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    current = now() if now is not None else datetime.now(UTC)
    return max(0.0, (when - current).total_seconds())
