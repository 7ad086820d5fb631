"""Consumer sightings, coalesced in memory and written at most every 5 s (SPEC §3.7).

A dequeue that names its consumer costs a dictionary update here, never a database
write: each API process keeps one entry per (queue, consumer) it saw since its last
write — the first and last moment seen, the messages handed over — and ``flush`` writes
them all in one statement (``ConsumerStore.record_consumers``). ``run`` flushes every
``flush_interval_seconds``; the API flushes once more on a graceful shutdown.

A flush that fails (the database is down) puts its entries back, merged with whatever
was seen meanwhile, so nothing is lost and the next flush retries. The number of
entries is bounded: a new consumer beyond ``max_entries`` is not kept (counted as
dropped, a metric and a warning); consumers already held keep being updated.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from retsu.application.ports import Clock, ConsumerEvents, ConsumerStore
from retsu.domain.consumer import CONSUMER_FLUSH_INTERVAL_SECONDS, ConsumerSighting

log = logging.getLogger("retsu.api.consumers")

DEFAULT_MAX_ENTRIES = 10_000
SUCCESS, FAILURE = "success", "failure"


@dataclass(slots=True)
class _Seen:
    first: datetime
    last: datetime
    deliveries: int

    def merge(self, other: _Seen) -> None:
        self.first = min(self.first, other.first)
        self.last = max(self.last, other.last)
        self.deliveries += other.deliveries


class _NoEvents:
    def consumer_sightings_dropped(self, count: int = 1) -> None:
        return None

    def consumer_flush_finished(self, outcome: str, entries: int) -> None:
        return None


class ConsumerTracker:
    def __init__(
        self,
        store: ConsumerStore,
        clock: Clock,
        events: ConsumerEvents | None = None,
        *,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        flush_interval_seconds: float = CONSUMER_FLUSH_INTERVAL_SECONDS,
    ) -> None:
        self._store = store
        self._clock = clock
        self._events: ConsumerEvents = events if events is not None else _NoEvents()
        self._max_entries = max_entries
        self._interval = flush_interval_seconds
        self._pending: dict[tuple[UUID, str], _Seen] = {}
        self._task: asyncio.Task[None] | None = None
        self._flushing = asyncio.Lock()
        self.dropped = 0

    @property
    def pending(self) -> int:
        return len(self._pending)

    def seen(self, queue_id: UUID, name: str, deliveries: int = 0) -> None:
        """The consumer ``name`` asked ``queue_id`` for messages now and got ``deliveries``."""
        now = self._clock.now()
        entry = self._pending.get((queue_id, name))
        if entry is not None:
            entry.last = max(entry.last, now)
            entry.deliveries += deliveries
            return
        if len(self._pending) >= self._max_entries:
            self.dropped += 1
            self._events.consumer_sightings_dropped()
            if self.dropped == 1 or self.dropped % 1000 == 0:
                log.warning(
                    "consumer tracker full (%d entries): %d sightings of new consumers "
                    "dropped so far",
                    self._max_entries,
                    self.dropped,
                )
            return
        self._pending[(queue_id, name)] = _Seen(now, now, deliveries)

    async def flush(self) -> int:
        """Write every pending entry in one statement; how many. On failure the entries
        are kept for the next flush and the error is raised."""
        async with self._flushing:
            taken, self._pending = self._pending, {}
            if not taken:
                return 0
            sightings = [
                ConsumerSighting(queue_id, name, seen.first, seen.last, seen.deliveries)
                for (queue_id, name), seen in taken.items()
            ]
            try:
                await self._store.record_consumers(sightings)
            except BaseException:
                # Put them back under what was seen meanwhile: taken entries were
                # admitted already, so they may take the table over its bound until the
                # next flush (at most twice the bound).
                for key, seen in taken.items():
                    newer = self._pending.get(key)
                    if newer is not None:
                        seen.merge(newer)
                    self._pending[key] = seen
                self._events.consumer_flush_finished(FAILURE, len(taken))
                raise
            self._events.consumer_flush_finished(SUCCESS, len(taken))
            return len(taken)

    async def run(self) -> None:
        """Flush every interval until cancelled; a failed flush is logged and retried."""
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self.flush()
            except Exception as error:
                log.warning(
                    "writing %d consumer sightings failed (%s); retrying in %g s",
                    len(self._pending),
                    error,
                    self._interval,
                )

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.run())

    async def stop(self) -> None:
        """Stop the timer and write what is left (graceful shutdown)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        try:
            await self.flush()
        except Exception as error:
            log.warning("last write of consumer sightings failed on shutdown: %s", error)
