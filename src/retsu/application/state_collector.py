"""The state-metrics collector: one leader at a time reads queue state on a timer.

Standbys try for leadership every retry interval and never wait on a lock. The
leader refreshes at once, then every collection interval, through the session
that holds leadership. A failed refresh ends the process (raised to the runner):
a stale leader must not keep exporting gauges while another takes over.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from retsu.application.ports import Clock, LeaderSession, Leadership, Sleeper, StateSnapshots
from retsu.domain.state import StateSnapshot

log = logging.getLogger("retsu.worker.state_metrics_collector")

SUCCESS = "success"
FAILURE = "failure"


@dataclass(frozen=True, slots=True)
class CollectorSchedule:
    collection_interval_seconds: float
    leadership_retry_interval_seconds: float


class StateMetricsCollector:
    name = "state-metrics-collector"

    def __init__(
        self,
        leadership: Leadership,
        snapshots: StateSnapshots,
        clock: Clock,
        sleeper: Sleeper,
        schedule: CollectorSchedule,
    ) -> None:
        self._leadership = leadership
        self._snapshots = snapshots
        self._clock = clock
        self._sleeper = sleeper
        self._schedule = schedule
        self.is_leader = False
        self.refreshes = 0

    async def run(self) -> None:
        while not self._sleeper.stopping:
            session = await self._leadership.try_acquire()
            if session is None:
                log.debug("standby: leadership is held elsewhere")
                await self._sleeper.sleep(self._schedule.leadership_retry_interval_seconds)
                continue
            try:
                await self._lead(session)
            finally:
                self.is_leader = False
                await session.release()

    async def _lead(self, session: LeaderSession) -> None:
        self.is_leader = True
        log.warning("queue state metrics collector leadership acquired")
        self._snapshots.leadership_acquired()
        while not self._sleeper.stopping:
            await self.refresh(session)
            await self._sleeper.sleep(self._schedule.collection_interval_seconds)

    async def refresh(self, session: LeaderSession) -> None:
        started = time.perf_counter()
        try:
            state = await session.read_state()
        except Exception:
            self._snapshots.collection_finished(FAILURE, time.perf_counter() - started)
            log.exception("queue state refresh failed; exiting so a standby can take over")
            raise
        self._snapshots.publish(StateSnapshot(taken_at=self._clock.now(), priorities=tuple(state)))
        self._snapshots.collection_finished(SUCCESS, time.perf_counter() - started)
        self.refreshes += 1
