"""The scheduler worker (SPEC §3.12, §5): enqueues each due time of every schedule.

It asks storage to run one due schedule at a time (``ScheduleRunner.run_due_schedule``:
the claim, the enqueue and the schedule's advance in one transaction, so each due time is
enqueued exactly once however many schedulers run and whenever one dies). While runs come
back it asks again at once; when nothing is due it sleeps until the earliest due time, at
most ``IDLE_SECONDS`` (a schedule created or resumed meanwhile is seen within that), at
least ``MIN_WAIT_SECONDS`` (a due schedule another scheduler is running is not spun on).

It rides out a database restart as the cleaners do: a run the database cannot serve is
logged (the first failure as a warning, then quietly until it succeeds again) and tried
again after ``RETRY_SECONDS``. Any other failure is a bug and ends the process non-zero.
Asked to stop, it finishes the run in progress (one short transaction) and returns.
"""

from __future__ import annotations

import logging

from retsu.application.ports import QueueEvents, ScheduleEvents, ScheduleRunner, Sleeper
from retsu.domain.errors import Unavailable
from retsu.domain.schedule import ScheduleRun

log = logging.getLogger("retsu.worker.scheduler")

# The longest the scheduler goes without asking storage (about one query a second per idle
# scheduler): the bound on how late it notices a schedule made or resumed meanwhile.
IDLE_SECONDS = 1.0
# The shortest sleep when a due time is near (or due, but held by another scheduler).
MIN_WAIT_SECONDS = 0.01
# How long after a run the database could not serve it tries again.
RETRY_SECONDS = 1.0


class Scheduler:
    name = "scheduler"

    def __init__(
        self,
        runner: ScheduleRunner,
        events: ScheduleEvents,
        queue_events: QueueEvents,
        sleeper: Sleeper,
        *,
        idle_seconds: float = IDLE_SECONDS,
        retry_seconds: float = RETRY_SECONDS,
    ) -> None:
        self._runner = runner
        self._events = events
        self._queue_events = queue_events
        self._sleeper = sleeper
        self._idle_seconds = idle_seconds
        self._retry_seconds = retry_seconds
        self.runs = 0
        self.failed_runs = 0
        self._failing = False

    async def run(self) -> None:
        """Until asked to stop."""
        while not self._sleeper.stopping:
            try:
                due = await self._runner.run_due_schedule()
            except Unavailable as error:
                self.failed_runs += 1
                level = logging.DEBUG if self._failing else logging.WARNING
                log.log(
                    level,
                    "scheduler: run failed (%s: %s); trying again every %g s",
                    type(error).__name__,
                    error.detail,
                    self._retry_seconds,
                )
                self._failing = True
                await self._sleeper.sleep(self._retry_seconds)
                continue
            if self._failing:
                log.warning("scheduler: the database answers again; running due schedules")
                self._failing = False
            if due.run is not None:
                self._record(due.run)
                continue  # more may be due: ask again at once
            wait = self._idle_seconds
            if due.next_due_in_seconds is not None:
                wait = min(wait, max(due.next_due_in_seconds, MIN_WAIT_SECONDS))
            await self._sleeper.sleep(wait)

    def _record(self, run: ScheduleRun) -> None:
        self.runs += 1
        outcome = "enqueued" if run.enqueued else "duplicate"
        self._events.schedule_ran(run.queue_name, outcome, run.lag_seconds)
        if run.enqueued:
            self._queue_events.enqueued(run.queue_name, run.priority)
        if run.missed:
            self._events.schedule_missed(run.queue_name, run.missed)
            log.warning(
                "schedule %s of queue %s: %d due time(s) passed while no scheduler ran; "
                "enqueued the one due at %s late, skipped the rest",
                run.schedule_id,
                run.queue_name,
                run.missed,
                run.due_at.isoformat(),
            )
        elif run.lag_seconds > self._idle_seconds * 5:
            log.info(
                "schedule %s of queue %s: due at %s, enqueued %.1f s late",
                run.schedule_id,
                run.queue_name,
                run.due_at.isoformat(),
                run.lag_seconds,
            )
        if not run.enqueued:
            log.error(
                "schedule %s of queue %s: the message of due time %s was stored already; "
                "nothing enqueued twice",
                run.schedule_id,
                run.queue_name,
                run.due_at.isoformat(),
            )
