"""The loop every cleaner runs: batches back to back while they come back full,
then a rest of one interval.

A batch that fails because the database cannot be reached (or stayed too busy to give
its locks) is logged and tried again after one interval: a cleaner rides out a
database restart within its normal rhythm (SPEC §5). Any other failure is a bug and
ends the process non-zero."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from retsu.application.ports import Sleeper
from retsu.domain.errors import Unavailable

log = logging.getLogger("retsu.worker")


@dataclass(frozen=True, slots=True)
class BatchSchedule:
    batch_size: int
    interval_seconds: float
    saturated_batch_delay_seconds: float

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if self.interval_seconds < 0 or self.saturated_batch_delay_seconds < 0:
            raise ValueError("delays cannot be negative")


@dataclass(frozen=True, slots=True)
class BatchResult:
    """What one batch did: rows removed, and whether any of its bounded statements
    came back full (more work is probably waiting, so the next batch follows at once)."""

    removed: int
    full: bool

    @classmethod
    def of(cls, removed: int, batch_size: int) -> BatchResult:
        return cls(removed=removed, full=removed >= batch_size)


class BatchWorker:
    def __init__(
        self,
        name: str,
        run_batch: Callable[[int], Awaitable[BatchResult]],
        schedule: BatchSchedule,
        sleeper: Sleeper,
    ) -> None:
        self.name = name
        self._run_batch = run_batch
        self._schedule = schedule
        self._sleeper = sleeper
        self.batches = 0
        self.removed = 0
        self.failed_batches = 0

    async def run(self) -> None:
        """Until asked to stop. A batch in progress always completes (the stop request
        is only looked at between batches), then the loop exits without resting. A batch
        the database could not serve waits one interval and runs again; any other
        failure propagates: the process exits non-zero and its supervisor restarts it."""
        while not self._sleeper.stopping:
            try:
                result = await self._run_batch(self._schedule.batch_size)
            except Unavailable as error:
                self.failed_batches += 1
                log.warning(
                    "%s: batch failed (%s: %s); trying again in %g s",
                    self.name,
                    type(error).__name__,
                    error.detail,
                    self._schedule.interval_seconds,
                )
                await self._sleeper.sleep(self._schedule.interval_seconds)
                continue
            self.batches += 1
            self.removed += result.removed
            if result.removed:
                log.info("%s removed %d rows", self.name, result.removed)
            if self._sleeper.stopping:
                break
            if result.full:
                await self._sleeper.sleep(self._schedule.saturated_batch_delay_seconds)
            else:
                await self._sleeper.sleep(self._schedule.interval_seconds)
