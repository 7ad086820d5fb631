"""Use case: claim the next deliverable message(s) of a queue, waiting for one if asked.

Long polling (``wait_seconds`` > 0): the poll registers with the message signals
*before* its first claim, so a signal that arrives between an empty claim and the
wait is kept (no lost wakeup). Then it loops: claim; if nothing, wait until the
queue is signalled, the next scheduled moment a message may become deliverable (a
delay or a lease ending, reported by the empty claim), at most ``RECHECK_SECONDS``
(the safety net that keeps the poll correct when a signal is lost), or the end of
the wait — and claim again. An idle waiter therefore costs about one claim query a
second and holds no database connection between claims. A paused queue waits the
same way without claiming. On shutdown the signals close: every waiting poll
answers empty at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from uuid import UUID

from retsu.application.ports import MessageRepository, MessageSignals, QueueDetails, QueueEvents
from retsu.domain.dequeue import DequeueOptions
from retsu.domain.message import DEAD_LETTER_BATCH_SIZE, DeliveredMessage, DequeueResult
from retsu.domain.queue import Queue

# The longest a waiting poll goes without asking the database (the "about one query
# per second per idle waiter" budget, and the bound on latency when a signal is lost).
RECHECK_SECONDS = 1.0
# The shortest wait between two claims of one poll, so a poll never spins.
MIN_WAIT_SECONDS = 0.01
# Queue details (paused, settings) are re-read when a signal arrives (a pause or a
# resume signals the queue), every loop while the queue is paused, and at least this
# often otherwise: a pause whose signal was lost is noticed within this time.
DETAILS_REFRESH_SECONDS = 10.0
# After a signal that the queue itself changed (a resume), the queue may still look
# paused for a moment: the shared cache is written just after the database commit that
# sent the signal. Look again after this long, then twice as long…, up to the re-check.
PAUSED_AFTER_RESUME_RECHECK_SECONDS = 0.01


@dataclass(frozen=True, slots=True)
class DequeueCommand:
    queue_id: UUID
    options: DequeueOptions = field(default_factory=DequeueOptions)


class _SleepingWatch:
    """A watch that is never signalled: waiting is plain sleeping (no signals wired)."""

    def __enter__(self) -> _SleepingWatch:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None

    @property
    def queue_changed(self) -> bool:
        return False

    async def wait(self, seconds: float) -> bool:
        await asyncio.sleep(seconds)
        return False


class _NoSignals:
    """MessageSignals for callers that wire none: long polls re-check every second."""

    closed = False

    def watch(self, queue_id: UUID) -> _SleepingWatch:
        return _SleepingWatch()

    def close(self) -> None:
        return None


class Dequeue:
    def __init__(
        self,
        messages: MessageRepository,
        details: QueueDetails,
        events: QueueEvents,
        *,
        signals: MessageSignals | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._messages = messages
        self._details = details
        self._events = events
        self._signals: MessageSignals = signals if signals is not None else _NoSignals()
        self._monotonic = monotonic

    async def __call__(self, cmd: DequeueCommand) -> list[DeliveredMessage]:
        if cmd.options.wait_seconds <= 0 or self._signals.closed:
            queue = await self._details.details_of(cmd.queue_id)
            if queue.paused:
                return []
            return (await self._claim(queue, cmd.options)).messages
        return await self._long_poll(cmd.queue_id, cmd.options)

    async def _long_poll(self, queue_id: UUID, options: DequeueOptions) -> list[DeliveredMessage]:
        deadline = self._monotonic() + options.wait_seconds
        # Registered before the first look at the queue: a signal from now on is kept.
        with self._signals.watch(queue_id) as watch:
            queue = await self._details.details_of(queue_id)
            details_read_at = self._monotonic()
            paused_recheck: float | None = None  # after a resume signal, while still "paused"
            while True:
                next_available_in: float | None = None
                if not queue.paused:
                    result = await self._claim(queue, options)
                    if result.messages:
                        return result.messages
                    next_available_in = result.next_available_in_seconds
                now = self._monotonic()
                remaining = deadline - now
                if remaining <= 0 or self._signals.closed:
                    return []
                timeout = min(remaining, RECHECK_SECONDS)
                if next_available_in is not None:
                    timeout = min(timeout, max(next_available_in, MIN_WAIT_SECONDS))
                if paused_recheck is not None:
                    timeout = min(timeout, paused_recheck)
                signalled = await watch.wait(timeout)
                if self._signals.closed:
                    return []  # shutdown: answer empty at once, no further claim
                now = self._monotonic()
                if signalled or queue.paused or now - details_read_at >= DETAILS_REFRESH_SECONDS:
                    queue = await self._details.details_of(queue_id)
                    details_read_at = now
                if not queue.paused:
                    paused_recheck = None
                elif signalled and watch.queue_changed:
                    paused_recheck = PAUSED_AFTER_RESUME_RECHECK_SECONDS
                elif paused_recheck is not None:
                    paused_recheck *= 2
                    if paused_recheck >= RECHECK_SECONDS:
                        paused_recheck = None

    async def _claim(self, queue: Queue, options: DequeueOptions) -> DequeueResult:
        result = await self._messages.dequeue(
            queue.id,
            limit=options.limit,
            visibility_timeout_seconds=(
                options.visibility_timeout_seconds or queue.settings.visibility_timeout_seconds
            ),
            max_delivery_attempts=queue.settings.max_delivery_attempts,
            dead_letter_batch_size=DEAD_LETTER_BATCH_SIZE,
        )
        if result.dead_lettered:
            self._events.dead_lettered(queue.name, result.dead_lettered)
        return result
