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


class BatchWorker:
    def __init__(
        self,
        name: str,
        run_batch: Callable[[int], Awaitable[int]],
        schedule: BatchSchedule,
        sleeper: Sleeper,
    ) -> None:
        self.name = name
        self._run_batch = run_batch
        self._schedule = schedule
        self._sleeper = sleeper
        self.batches = 0

    async def run(self) -> None:
        """Until asked to stop. A batch in progress always completes; a failure
        propagates (the process exits non-zero and its supervisor restarts it)."""
        while not self._sleeper.stopping:
            removed = await self._run_batch(self._schedule.batch_size)
            self.batches += 1
            if removed:
                log.info("%s removed %d rows", self.name, removed)
            if removed >= self._schedule.batch_size:
                await self._sleeper.sleep(self._schedule.saturated_batch_delay_seconds)
            else:
                await self._sleeper.sleep(self._schedule.interval_seconds)
