"""The loop every cleaner runs: batches back to back while they come back full,
then a rest of one interval."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from retsu.application.ports import Sleeper

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

    async def run(self) -> None:
        """Until asked to stop. A batch in progress always completes (the stop request
        is only looked at between batches), then the loop exits without resting. A
        failure propagates: the process exits non-zero and its supervisor restarts it."""
        while not self._sleeper.stopping:
            result = await self._run_batch(self._schedule.batch_size)
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
