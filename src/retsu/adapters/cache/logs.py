"""Logging cache failures without flooding the log or leaking secrets."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Final

from retsu.adapters.telemetry.logging import redact_secrets

_MAX_DETAIL: Final = 200


def describe_error(error: BaseException) -> str:
    """``TypeName: message``, with URL passwords and tokens masked, kept short."""
    text = redact_secrets(str(error)).replace("\n", " ")
    if len(text) > _MAX_DETAIL:
        text = text[: _MAX_DETAIL - 3] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class RateLimitedLog:
    """At most one warning per ``interval_seconds``; the next one says how many were dropped."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        interval_seconds: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._interval = interval_seconds
        self._clock = clock
        self._last: float | None = None
        self._suppressed = 0

    def warning(self, message: str, *args: object) -> bool:
        """Log unless one was logged within the interval. Returns whether it was logged."""
        now = self._clock()
        if self._last is not None and now - self._last < self._interval:
            self._suppressed += 1
            return False
        if self._suppressed:
            message += " (%d similar messages suppressed)"
            args = (*args, self._suppressed)
        self._last = now
        self._suppressed = 0
        self._logger.warning(message, *args)
        return True
