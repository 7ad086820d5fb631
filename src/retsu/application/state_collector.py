"""The state-metrics collector: one leader at a time reads queue state on a timer.

Standbys try for leadership every retry interval and never wait on a lock. The
leader refreshes at once, then every collection interval, through the session
that holds leadership; each refresh reads every queue's state, stores one history
snapshot per queue (SPEC §3.8) and publishes the state as gauges.
SPEC §5 tells apart how a refresh can fail:

* the leader's session is gone (``LeadershipLost``: killed, the database restarted):
  leadership ended with it. The collector stops exporting state, keeps running, and
  competes again at its retry interval — like a standby.
* it failed on a live session (a query error, no answer within the refresh timeout; the
  history write included):
  the process exits non-zero (raised to the runner), so a stale leader never keeps
  exporting gauges while another takes over.

With a ``DatabaseHealthReader`` the leader also reads the database's health after each
refresh (SPEC §10) and publishes it beside the state. That read is advisory: one that fails
is logged and exports nothing until the next one succeeds; it never ends leadership.
Each holder is dated no later than when this leader first saw it hold the same xid (a
replication slot or a standby's feedback has no start in storage at all;
``domain.database_health.since_first_seen``).

Competing while the database cannot be reached (``DatabaseUnavailable``) is logged and
tried again at the retry interval. A database error at start-up is the runner's: it
checks the database before the collector starts and exits non-zero.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import datetime

from retsu.application.ports import (
    Clock,
    DatabaseHealthReader,
    LeaderSession,
    Leadership,
    LeadershipLost,
    Sleeper,
    StateSnapshots,
)
from retsu.domain.database_health import HolderKey, since_first_seen
from retsu.domain.errors import DatabaseUnavailable
from retsu.domain.state import StateSnapshot

log = logging.getLogger("retsu.worker.state_metrics_collector")

SUCCESS = "success"
FAILURE = "failure"


@dataclass(frozen=True, slots=True)
class CollectorSchedule:
    collection_interval_seconds: float
    leadership_retry_interval_seconds: float
    # A refresh that has not answered by then counts as failed (a leader cut off from
    # the database must not hang on, exporting an ever older snapshot). Defaults to
    # the collection interval: a refresh must end before the next one is due.
    refresh_timeout_seconds: float | None = None

    @property
    def refresh_timeout(self) -> float:
        if self.refresh_timeout_seconds is not None:
            return self.refresh_timeout_seconds
        return self.collection_interval_seconds


class StateMetricsCollector:
    name = "state-metrics-collector"

    def __init__(
        self,
        leadership: Leadership,
        snapshots: StateSnapshots,
        clock: Clock,
        sleeper: Sleeper,
        schedule: CollectorSchedule,
        database_health: DatabaseHealthReader | None = None,
    ) -> None:
        self._leadership = leadership
        self._snapshots = snapshots
        self._clock = clock
        self._sleeper = sleeper
        self._schedule = schedule
        self._database_health = database_health
        # When each horizon holder was first seen holding its xid (this leadership only).
        self._first_seen: dict[HolderKey, datetime] = {}
        self.is_leader = False
        self.refreshes = 0
        self.leaderships_lost = 0

    async def run(self) -> None:
        retry = self._schedule.leadership_retry_interval_seconds
        while not self._sleeper.stopping:
            try:
                session = await self._leadership.try_acquire()
            except DatabaseUnavailable as error:
                log.warning(
                    "cannot compete for leadership (%s); trying again in %g s", error, retry
                )
                await self._sleeper.sleep(retry)
                continue
            if session is None:
                log.debug("standby: leadership is held elsewhere")
                await self._sleeper.sleep(retry)
                continue
            try:
                await self._lead(session)
            except LeadershipLost as lost:
                self.leaderships_lost += 1
                log.warning(
                    "queue state metrics collector leadership lost (%s); competing again in %g s",
                    lost,
                    retry,
                )
            else:
                continue
            finally:
                self.is_leader = False
                self._first_seen = {}
                self._snapshots.leadership_released()
                await self._release(session)
            await self._sleeper.sleep(retry)

    async def _lead(self, session: LeaderSession) -> None:
        self.is_leader = True
        log.warning("queue state metrics collector leadership acquired")
        self._snapshots.leadership_acquired()
        while not self._sleeper.stopping:
            await self.refresh(session)
            if self._sleeper.stopping:
                break
            await self._sleeper.sleep(self._schedule.collection_interval_seconds)

    @staticmethod
    async def _release(session: LeaderSession) -> None:
        # Closing a session that already died can fail too; that must neither hide
        # the refresh error that ended leadership nor turn a clean stop into a crash.
        try:
            await session.release()
        except Exception:
            log.warning("closing the leader's database session failed", exc_info=True)
        else:
            log.warning("queue state metrics collector leadership released")

    async def refresh(self, session: LeaderSession) -> None:
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self._schedule.refresh_timeout):
                state = await session.read_state()
                # SPEC §3.8: the leader also stores one history snapshot per queue.
                await session.record_history(state)
        except LeadershipLost:
            self._snapshots.collection_finished(FAILURE, time.perf_counter() - started)
            raise
        except Exception:
            self._snapshots.collection_finished(FAILURE, time.perf_counter() - started)
            log.exception("queue state refresh failed; exiting so a standby can take over")
            raise
        self._snapshots.publish(StateSnapshot(taken_at=self._clock.now(), priorities=tuple(state)))
        self._snapshots.collection_finished(SUCCESS, time.perf_counter() - started)
        self.refreshes += 1
        await self._read_database_health()

    async def _read_database_health(self) -> None:
        if self._database_health is None:
            return
        try:
            async with asyncio.timeout(self._schedule.refresh_timeout):
                health = await self._database_health.read_database_health()
        except Exception:
            log.warning("reading the database health failed", exc_info=True)
            self._snapshots.publish_database_health(None)
            return
        health, self._first_seen = since_first_seen(health, self._first_seen)
        self._snapshots.publish_database_health(health)
